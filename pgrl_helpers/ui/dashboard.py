"""The training dashboard for JupyterLab, built on plain functions.

* ``summarize_history(history)`` and ``format_runs_table(histories)``: one row per run
  (final mean reward, held-out exact-sort, ...), as a dict and as plain text;
* ``format_diagnosis(history)``: ``diagnose()``'s findings as HTML (the dashboard's findings
  panel);
* ``make_dashboard(...)``: a preset list (``PRESETS``), ipywidgets controls for the
  ``TrainConfig`` fields that matter, a Train and a Stop button, a progress bar and the live
  plot (``figures.plot_histories``). Only settings that can run are offered, and a setting
  that would train nothing (``TrainConfig.validate``: G = 1 with a group baseline) is refused
  with a message. It trains by calling ``training.run_policy_gradient`` with a callback (there
  is no second training loop): the callback moves the progress bar, redraws the plot and
  returns "stop" when the Stop button was pressed. After each run it shows ``diagnose()``'s
  findings for it.

(The plot and the PNG it is shown as are in ``figures.py``; notebook 10's γ/λ widget is in
``gae_widget.py``.)

A notebook can call the plain functions without any widget, which is how the same
comparison is checked deterministically; tests drive the dashboard's widgets (they are
attributes) with ``synchronous=True`` so a click trains in the calling thread.

Taught in notebook 07.
"""

from __future__ import annotations

import dataclasses
import html
import threading
from collections.abc import Sequence

import torch

from .._validate import check_number
from ..advantages import DELTA_MODES
from ..config import PROMPT_SOURCES, TrainConfig
from ..diagnose import diagnose
from ..history import History
from ..losses import LOSS_MODES
from ..registry import MODELS
from ..sort_task import REWARD_FNS
from ..training import run_policy_gradient
from . import missing_extra
from .figures import check_history, figure_png, plot_histories, png_output, run_label

try:
    import ipywidgets as widgets
except ModuleNotFoundError as error:  # the pip extra `widgets`
    raise missing_extra(error) from error

#: Settings the dashboard applies per model choice (the transformer needs a wider model).
#: Only models that train on the dashboard's task (sorting) are offered: the
#: autoregressive policy needs the variable-length task 'sort_dedup' (notebook 08).
MODEL_DEFAULTS: dict[str, dict] = {
    "lecture": {"embedding_dim": 10},
    "transformer": {"embedding_dim": 32, "num_layers": 2, "num_heads": 4},
}
DASHBOARD_MODELS = tuple(m for m in MODELS if m in MODEL_DEFAULTS)

#: The dashboard's presets: name -> (base config, init scale of the lecture model's
#: embedding). Notebook 07 explains each: the lecture's stuck run (section 1), the same
#: toy policy with a high-entropy start and a reward that points at the goal (section 3),
#: and the transformer that sorts prompts it never trained on (section 4).
PRESETS: dict[str, tuple[TrainConfig, float]] = {
    # notebook 07 section 4's setting (length 5, values 0-9, 200 + 200 held-out multisets) on
    # its seed 1, for 200 epochs: held-out exact-sort climbs from 0 to above 90%. It lives in
    # recipes.RECIPES, so TrainConfig.preset("generalizing_transformer") runs it without widgets
    "generalizing transformer": (TrainConfig.preset("generalizing_transformer"), 1.0),
    "lecture (stuck)": (TrainConfig(num_epochs=30), 1.0),
    "lecture fixed (init + reward)": (
        TrainConfig(
            num_epochs=30,
            reward_fn="sort_distance_reward",
            deltas_mode="centered_rewards",
            loss_mode="clipped",
            learning_rate=1e-2,
        ),
        0.3,
    ),
}
#: The preset a new dashboard starts from: a student sees learning within seconds.
DEFAULT_PRESET = "generalizing transformer"
CUSTOM = "custom (the base config)"
#: The controls' label width and the width of a wide control.
STYLE = {"description_width": "110px"}
WIDE = "330px"


# --------------------------------------------------------------------------------------
# Plain functions: usable without any widget
# --------------------------------------------------------------------------------------


def summarize_history(history: History) -> dict:
    """One run in numbers: the last epoch's mean reward, the last held-out evaluation, ...

    Returns {'run', 'epochs', 'steps', 'final_mean_reward', 'validation_exact_sort',
    'train_exact_sort', 'stop_reason'}; values are None where the run has no record.

    Taught in notebook 07.
    """
    check_history(history)
    steps = [r for r in history if r["kind"] == "step"]
    evals = [r for r in history if r["kind"] == "eval"]
    return {
        "run": run_label(history.config, getattr(history, "init_scale", 1.0)),
        "epochs": evals[-1]["epoch"] if evals else 0,
        "steps": len(steps),
        "final_mean_reward": steps[-1]["mean_reward"] if steps else None,
        "validation_exact_sort": evals[-1]["validation_exact_sort"] if evals else None,
        "train_exact_sort": evals[-1]["train_exact_sort"] if evals else None,
        "stop_reason": history.stop_reason,
    }


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_runs_table(histories: Sequence[History]) -> str:
    """Plain-text table, one line per run (as ``summarize_history`` measures it).

    Taught in notebook 07.
    """
    rows = [summarize_history(h) for h in histories]
    width = max([len("run")] + [len(r["run"]) for r in rows])
    lines = [
        f"{'run':<{width}} {'epochs':>6} {'mean reward':>11} {'held-out sort':>13} "
        f"{'train sort':>10}"
    ]
    for r in rows:
        lines.append(
            f"{r['run']:<{width}} {r['epochs']:>6} {_fmt(r['final_mean_reward'], '.2f'):>11} "
            f"{_fmt(r['validation_exact_sort'], '.1%'):>13} {_fmt(r['train_exact_sort'], '.0%'):>10}"
        )
    return "\n".join(lines)


def format_diagnosis(history: History, title: str = "diagnose()") -> str:
    """``diagnose(history)``'s findings as HTML: one item per finding, warnings in red."""
    check_history(history)
    try:
        findings = diagnose(history)
    except ValueError as err:  # e.g. a run stopped before its first step
        return f"<b>{html.escape(title)}</b>: cannot diagnose: {html.escape(str(err))}"
    if not findings:
        return f"<b>{html.escape(title)}</b>: no findings: the run looks healthy."
    items = []
    for f in findings:
        color = "#b00020" if f.severity == "warning" else "#555555"
        items.append(
            f'<li><span style="color:{color}"><b>{f.name}</b> ({f.severity})</span>: '
            f"{html.escape(f.symptom)}<br>evidence: {html.escape(f.detail)}<br>"
            f"try: {html.escape(f.fixes)}</li>"
        )
    return f"<b>{html.escape(title)}</b>:<ul>{''.join(items)}</ul>"


# --------------------------------------------------------------------------------------
# The dashboard
# --------------------------------------------------------------------------------------


@dataclasses.dataclass
class DashboardRun:
    """One run started from the dashboard: the exact config and its history."""

    config: TrainConfig
    history: History | None = None
    error: str | None = None
    init_scale: float = 1.0


class TrainingDashboard(widgets.VBox):
    """The dashboard layout (a VBox) whose controls are attributes; see ``make_dashboard``.

    Controls: ``preset`` (sets every control from ``PRESETS``), ``deltas_mode``,
    ``loss_mode``, ``model``, ``prompt_source``, ``reward_fn`` (dropdowns); ``kl_coef``,
    ``epsilon``, ``num_responses`` (G), ``learning_rate``, ``num_epochs``,
    ``num_steps_per_epoch``, ``init_scale`` (sliders; init scale multiplies the lecture
    model's initial embedding); ``seed`` (int box); buttons
    ``train_button``, ``stop_button``, ``clear_button``; output: ``progress``
    (IntProgress), ``message`` (HTML; errors and status), ``plot`` (Output holding the
    PNG), ``table`` (HTML summary of every run), ``findings`` (HTML: ``diagnose()`` of the
    run just trained). ``runs`` lists a ``DashboardRun`` per
    click on Train, in order.
    """

    def __init__(
        self,
        base_config: TrainConfig | None = None,
        synchronous: bool = False,
        redraw_every: int | None = None,
    ):
        if base_config:
            base, init_scale = dataclasses.replace(base_config), 1.0
        else:
            base, init_scale = PRESETS[DEFAULT_PRESET]
        self.base_config = base
        self.synchronous = synchronous
        self.redraw_every = redraw_every
        self.runs: list[DashboardRun] = []
        self.redraw_count = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._preset_configs = dict(PRESETS)
        if base_config:
            self._preset_configs[CUSTOM] = (base, 1.0)
        self._build_choices(base, preset=CUSTOM if base_config else DEFAULT_PRESET)
        self._build_sliders(base, init_scale)
        self._build_outputs(base)
        self._wire()
        super().__init__(self._layout())

    # ---- building the widgets (called once, by __init__) -------------------------------
    def _build_choices(self, base: TrainConfig, preset: str) -> None:
        """The dropdowns: ``preset`` and one per categorical ``TrainConfig`` field."""
        self.deltas_mode = widgets.Dropdown(
            options=DELTA_MODES, value=base.deltas_mode, description="delta mode", style=STYLE
        )
        self.loss_mode = widgets.Dropdown(
            options=LOSS_MODES, value=base.loss_mode, description="loss mode", style=STYLE
        )
        self.preset = widgets.Dropdown(
            options=list(self._preset_configs),
            value=preset,
            description="preset",
            style=STYLE,
            layout=widgets.Layout(width=WIDE),
        )
        models = DASHBOARD_MODELS if base.model in DASHBOARD_MODELS else (base.model,)
        self.model = widgets.Dropdown(
            options=models, value=base.model, description="model", style=STYLE
        )
        self.prompt_source = widgets.Dropdown(
            options=PROMPT_SOURCES, value=base.prompt_source, description="prompts", style=STYLE
        )
        reward_names = tuple(REWARD_FNS)
        self.reward_fn = widgets.Dropdown(
            options=[(n.removeprefix("sort_").removesuffix("_reward"), n) for n in reward_names],
            value=base.reward_fn if base.reward_fn in reward_names else reward_names[0],
            description="reward",
            style=STYLE,
            layout=widgets.Layout(width=WIDE),
        )

    def _build_sliders(self, base: TrainConfig, init_scale: float) -> None:
        """The sliders of the numeric fields, the ``seed`` box and ``init_scale``."""
        wide = widgets.Layout(width=WIDE)
        self.kl_coef = widgets.FloatSlider(
            value=base.kl_coef, min=0.0, max=1.0, step=0.01, description="KL penalty β",
            style=STYLE, layout=wide,
        )  # fmt: skip
        self.epsilon = widgets.FloatSlider(
            value=base.epsilon, min=0.01, max=0.5, step=0.01, description="clip ε",
            style=STYLE, layout=wide,
        )  # fmt: skip
        self.num_responses = widgets.IntSlider(
            value=base.num_responses, min=1, max=64, description="G (group)",
            style=STYLE, layout=wide,
        )  # fmt: skip
        self.learning_rate = widgets.FloatLogSlider(
            value=base.learning_rate, base=10, min=-4, max=-1, step=0.1,
            description="learning rate", readout_format=".1e", style=STYLE, layout=wide,
        )  # fmt: skip
        self.num_epochs = widgets.IntSlider(
            value=base.num_epochs, min=1, max=500, description="epochs",
            style=STYLE, layout=wide,
        )  # fmt: skip
        self.num_steps_per_epoch = widgets.IntSlider(
            value=base.num_steps_per_epoch, min=1, max=20, description="steps/epoch",
            style=STYLE, layout=wide,
        )  # fmt: skip
        self.seed = widgets.BoundedIntText(
            value=base.seed, min=0, max=2**31 - 1, description="seed", style=STYLE
        )
        self.init_scale = widgets.FloatSlider(
            value=init_scale, min=0.05, max=1.0, step=0.05, description="init scale",
            disabled=base.model != "lecture", style=STYLE, layout=wide,
        )  # fmt: skip

    def _build_outputs(self, base: TrainConfig) -> None:
        """The buttons, the progress bar and the message, plot, table and findings panels."""
        self.train_button = widgets.Button(description="Train", button_style="success")
        self.stop_button = widgets.Button(description="Stop", button_style="danger", disabled=True)
        self.clear_button = widgets.Button(description="Clear history")
        self.progress = widgets.IntProgress(value=0, min=0, max=base.num_epochs, description="")
        self.message = widgets.HTML(value="Set the options and press <b>Train</b>.")
        self.plot = widgets.Output(layout=widgets.Layout(min_height="300px"))
        self.table = widgets.HTML()
        self.findings = widgets.HTML()

    def _wire(self) -> None:
        """Buttons call ``train`` / ``stop`` / ``clear``; a preset sets every control; init
        scale is offered for the lecture model only."""
        self.train_button.on_click(lambda _: self.train())
        self.stop_button.on_click(lambda _: self.stop())
        self.clear_button.on_click(lambda _: self.clear())
        self.preset.observe(lambda change: self.apply_preset(change["new"]), names="value")
        self.model.observe(
            lambda change: setattr(self.init_scale, "disabled", change["new"] != "lecture"),
            names="value",
        )

    def _layout(self) -> list[widgets.Widget]:
        """The dashboard's rows, top to bottom: preset, three columns of controls, buttons
        and progress, message, plot, table, findings."""
        columns = widgets.HBox(
            [
                widgets.VBox(
                    [self.deltas_mode, self.loss_mode, self.model, self.prompt_source, self.seed]
                ),
                widgets.VBox(
                    [
                        self.reward_fn,
                        self.kl_coef,
                        self.epsilon,
                        self.num_responses,
                        self.init_scale,
                    ]
                ),
                widgets.VBox([self.learning_rate, self.num_epochs, self.num_steps_per_epoch]),
            ]
        )
        buttons = widgets.HBox(
            [self.train_button, self.stop_button, self.clear_button, self.progress]
        )
        return [self.preset, columns, buttons, self.message, self.plot, self.table, self.findings]

    def apply_preset(self, name: str) -> None:
        """Set every control (and the fields without one) from the preset ``name``."""
        if name not in self._preset_configs:
            raise ValueError(f"unknown preset {name!r}; choose one of {list(self._preset_configs)}")
        config, init_scale = self._preset_configs[name]
        self.base_config = dataclasses.replace(config)
        for field in (
            "deltas_mode", "loss_mode", "model", "prompt_source", "reward_fn", "kl_coef",
            "epsilon", "num_responses", "learning_rate", "num_epochs", "num_steps_per_epoch",
            "seed",
        ):  # fmt: skip
            getattr(self, field).value = getattr(config, field)
        self.init_scale.value = init_scale
        if self.preset.value != name:
            self.preset.value = name

    # ---- reading the controls -------------------------------------------------------
    def config_from_widgets(self) -> TrainConfig:
        """The TrainConfig the controls describe (base config + model defaults + controls)."""
        settings = {}
        if self.model.value != self.base_config.model:
            settings = dict(MODEL_DEFAULTS.get(self.model.value, {}))
        settings.update(
            deltas_mode=self.deltas_mode.value,
            loss_mode=self.loss_mode.value,
            model=self.model.value,
            prompt_source=self.prompt_source.value,
            reward_fn=self.reward_fn.value,
            kl_coef=float(self.kl_coef.value),
            epsilon=float(self.epsilon.value),
            num_responses=int(self.num_responses.value),
            learning_rate=float(self.learning_rate.value),
            num_epochs=int(self.num_epochs.value),
            num_steps_per_epoch=int(self.num_steps_per_epoch.value),
            seed=int(self.seed.value),
            eval_every=max(1, int(self.num_epochs.value) // 20),
            progress=False,
        )
        return dataclasses.replace(self.base_config, **settings)

    @property
    def histories(self) -> list[History]:
        """Histories of the finished (or stopped) runs, oldest first."""
        return [run.history for run in self.runs if run.history is not None]

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # ---- actions ----------------------------------------------------------------------
    def train(self) -> DashboardRun | None:
        """Start a run with the current settings; invalid settings show a message instead."""
        if self.running:
            self._say("A run is already in progress: press Stop first.", error=True)
            return None
        config = self.config_from_widgets()
        try:
            config.validate()  # also refuses G = 1 where every delta is 0
        except (ValueError, TypeError) as err:
            self._say(f"Cannot train with these settings: {html.escape(str(err))}", error=True)
            return None
        scale = float(self.init_scale.value) if config.model == "lecture" else 1.0
        run = DashboardRun(config=config, init_scale=scale)
        self.runs.append(run)
        self._stop.clear()
        self.progress.max = config.num_epochs
        self.progress.value = 0
        self.train_button.disabled = True
        self.stop_button.disabled = False
        self.findings.value = ""
        self._say(f"Training run {len(self.runs)}: {html.escape(run_label(config, scale))} ...")
        if self.synchronous:
            self._run(run)
        else:
            self._thread = threading.Thread(target=self._run, args=(run,), daemon=True)
            self._thread.start()
        return run

    def stop(self) -> None:
        """Ask the running training to stop after the current epoch."""
        self._stop.set()
        if self.running:
            self._say("Stopping after this epoch ...")

    def clear(self) -> None:
        """Forget earlier runs (the plot and the table start empty)."""
        if self.running:
            self._say("Stop the run before clearing the history.", error=True)
            return
        self.runs.clear()
        self.plot.outputs = ()
        self.table.value = ""
        self.findings.value = ""
        self.progress.value = 0
        self._say("History cleared.")

    def wait(self, timeout: float | None = None) -> None:
        """Block until a background run has finished (for scripts and tests)."""
        if self._thread is not None:
            self._thread.join(timeout)

    # ---- internals --------------------------------------------------------------------
    def _say(self, text: str, error: bool = False) -> None:
        color = "#b00020" if error else "inherit"
        self.message.value = f'<span style="color:{color}">{text}</span>'

    def _run(self, run: DashboardRun) -> None:
        every = self.redraw_every or max(1, run.config.num_epochs // 10)

        def callback(epoch: int, history: History):
            run.history = history
            self.progress.value = epoch + 1
            if (epoch + 1) % every == 0:
                self._redraw()
            return "stop" if self._stop.is_set() else None

        try:
            kwargs = {}
            if run.init_scale != 1.0:  # the lecture model with a scaled-down embedding
                model = run.config.build_policy()
                with torch.no_grad():
                    model.embedding.weight.mul_(run.init_scale)
                kwargs["policy"] = model
            run.history = run_policy_gradient(run.config, callback=callback, **kwargs)
            run.history.init_scale = run.init_scale  # shown in the run's label
        except Exception as err:  # shown in the widget; a traceback would be lost in a thread
            run.error = f"{type(err).__name__}: {err}"
            message, error = f"Training failed: {html.escape(run.error)}", True
        else:
            summary = summarize_history(run.history)
            stopped = " (stopped)" if run.history.stop_reason == "callback" else ""
            message, error = (
                f"Run {len(self.runs)} done{stopped}: mean reward "
                f"{_fmt(summary['final_mean_reward'], '.2f')}, held-out exact-sort "
                f"{_fmt(summary['validation_exact_sort'], '.1%')}.",
                False,
            )
        finally:
            self._redraw()
            self.table.value = "<pre>" + html.escape(format_runs_table(self.histories)) + "</pre>"
            if run.history is not None and run.error is None:
                self.findings.value = format_diagnosis(
                    run.history, f"diagnose() of run {len(self.runs)}"
                )
            self.train_button.disabled = False
            self.stop_button.disabled = True
        self._say(message, error=error)  # last, so "done" means plot and table are updated

    def _redraw(self) -> None:
        histories = self.histories
        if not histories:
            return
        labels = [
            f"run {k + 1}: {run_label(r.config, r.init_scale)}"
            for k, r in enumerate(r for r in self.runs if r.history is not None)
        ]
        png = figure_png(plot_histories(histories, labels=labels))
        # Set the Output's outputs directly: works from a background thread, no capture.
        self.plot.outputs = png_output(png, f"<training plot: {len(histories)} run(s)>")
        self.redraw_count += 1


def make_dashboard(
    base_config: TrainConfig | None = None,
    synchronous: bool = False,
    redraw_every: int | None = None,
) -> TrainingDashboard:
    """Build the training dashboard: an ipywidgets VBox to display in a notebook cell.

    ``base_config`` supplies every field without a control; the controls start at its
    values. Without it the dashboard starts from ``PRESETS[DEFAULT_PRESET]`` (a transformer
    whose held-out exact-sort rises within seconds); the preset list switches setups. ``synchronous=True`` trains
    in the calling thread (tests); by default a click on Train starts a background
    thread so that Stop and the rest of the notebook stay responsive. ``redraw_every``:
    epochs between plot updates (default: a tenth of the run).

    Taught in notebook 07.
    """
    if base_config is not None and not isinstance(base_config, TrainConfig):
        raise TypeError(f"base_config must be a TrainConfig, got {type(base_config).__name__}")
    check_number(redraw_every, "redraw_every", 1, low_inclusive=True, integer=True, allow_none=True)
    return TrainingDashboard(base_config, synchronous=synchronous, redraw_every=redraw_every)
