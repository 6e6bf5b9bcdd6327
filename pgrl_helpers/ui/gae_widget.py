"""Notebook 10's γ/λ widget: sliders on a short PPO run (``advantage_estimator="gae"``).

* ``gae_curves(history)``: per epoch, mean reward, the critic's value loss and the variance of
  the raw GAE advantages (before whitening);
* ``plot_gae_runs(histories, axes=None)``: those three curves, one line per run;
* ``make_gae_widget(config)``: γ and λ sliders and a Run button; a click trains in the
  calling thread and redraws the plot (a PNG set directly, nothing printed into an Output).

Taught in notebook 10.
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Sequence

from ..config import TrainConfig
from ..history import History
from ..training import run_policy_gradient
from . import missing_extra
from .figures import check_history, figure_png, png_output

try:
    import ipywidgets as widgets
    from matplotlib.figure import Figure
except ModuleNotFoundError as error:  # the pip extra `widgets`
    raise missing_extra(error) from error

#: The panels of ``plot_gae_runs``: (curve from ``gae_curves``, y label).
GAE_PANELS: tuple[tuple[str, str], ...] = (
    ("mean_reward", "mean reward of sampled responses"),
    ("value_loss", "critic value loss (mean over tokens)"),
    ("advantage_variance", "Var of raw GAE advantages"),
)


def gae_curves(history: History) -> dict[str, list[float]]:
    """Per epoch of a PPO run (``advantage_estimator="gae"``): {'epoch', 'mean_reward',
    'value_loss', 'advantage_variance'} (the last two from the run's ``GAEEstimator``;
    the variance is over the epoch's real tokens, before whitening).

    Taught in notebook 10.
    """
    check_history(history)
    estimator = history.run.advantage_estimator
    if not hasattr(estimator, "advantage_variances"):
        raise ValueError("gae_curves needs a run with advantage_estimator='gae'")
    rewards = [r["mean_reward"] for r in history.steps() if r["inner_step"] == 0]
    return {
        "epoch": list(range(1, len(rewards) + 1)),
        "mean_reward": rewards,
        "value_loss": list(estimator.value_losses),
        "advantage_variance": list(estimator.advantage_variances),
    }


def gae_label(config: TrainConfig) -> str:
    """A run's legend label: its gamma and lambda, e.g. 'γ=1, λ=0.95'.

    Taught in notebook 10.
    """
    return f"γ={config.gamma:g}, λ={config.gae_lambda:g}"


def plot_gae_runs(histories: Sequence[History], axes=None):
    """The three ``GAE_PANELS`` against the epoch, one line per run (the last one bold).

    Taught in notebook 10.
    """
    if axes is None:
        axes = Figure(figsize=(12, 3.2), dpi=80).subplots(1, len(GAE_PANELS))
    if len(axes) != len(GAE_PANELS):
        raise ValueError(f"plot_gae_runs needs {len(GAE_PANELS)} axes, got {len(axes)}")
    for k, history in enumerate(histories):
        curves, last = gae_curves(history), k == len(histories) - 1
        for ax, (key, _) in zip(axes, GAE_PANELS):
            ax.plot(curves["epoch"], curves[key], linewidth=2.2 if last else 1.0,
                    alpha=1.0 if last else 0.55, label=gae_label(history.config))  # fmt: skip
    for ax, (_, ylabel) in zip(axes, GAE_PANELS):
        ax.set_xlabel("epoch")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    if histories:
        axes[0].legend(fontsize=7, loc="best")
    axes[0].figure.tight_layout()
    return axes[0].figure


class GAEWidget(widgets.VBox):
    """Sliders ``gamma`` and ``lam`` and a ``run_button`` for a short PPO run.

    A click trains ``base_config`` (``advantage_estimator="gae"``) with the sliders' γ and
    λ in the calling thread (a few seconds), then redraws ``plot`` (an Output holding one
    PNG, set directly: nothing is printed into it) with every run so far, and writes
    ``table`` (HTML). ``runs`` holds the histories, oldest first.
    """

    def __init__(self, base_config: TrainConfig):
        if not isinstance(base_config, TrainConfig) or base_config.advantage_estimator != "gae":
            raise ValueError("base_config must be a TrainConfig with advantage_estimator='gae'")
        self.base_config = base_config
        self.runs: list[History] = []
        style = {"description_width": "60px"}
        self.gamma = widgets.FloatSlider(value=base_config.gamma, min=0.5, max=1.0, step=0.05,
                                         description="γ", style=style)  # fmt: skip
        self.lam = widgets.FloatSlider(value=base_config.gae_lambda, min=0.0, max=1.0, step=0.05,
                                       description="λ", style=style)  # fmt: skip
        self.run_button = widgets.Button(description="Run PPO", button_style="success")
        self.message = widgets.HTML(value="Set γ and λ and press <b>Run PPO</b>.")
        self.plot = widgets.Output(layout=widgets.Layout(min_height="260px"))
        self.table = widgets.HTML()
        self.run_button.on_click(lambda _: self.run())
        controls = widgets.HBox([self.gamma, self.lam, self.run_button])
        super().__init__([controls, self.message, self.plot, self.table])

    def config_from_widgets(self) -> TrainConfig:
        return dataclasses.replace(
            self.base_config, gamma=round(float(self.gamma.value), 4),
            gae_lambda=round(float(self.lam.value), 4), progress=False,
        )  # fmt: skip

    def run(self) -> History:
        """Train with the sliders' γ and λ; redraw the plot and the table."""
        history = run_policy_gradient(self.config_from_widgets())
        self.runs.append(history)
        png = figure_png(plot_gae_runs(self.runs))
        self.plot.outputs = png_output(png, f"<GAE plot: {len(self.runs)} run(s)>")
        rows = []
        for h in self.runs:
            c = gae_curves(h)
            rows.append(f"{gae_label(h.config)}: mean reward {c['mean_reward'][-1]:+.3f}, "
                        f"value loss {c['value_loss'][-1]:.3f}, mean Var(A) "
                        f"{sum(c['advantage_variance']) / len(c['epoch']):.4f}")  # fmt: skip
        self.table.value = "<pre>" + html.escape("\n".join(rows)) + "</pre>"
        self.message.value = f"Run {len(self.runs)} done ({html.escape(rows[-1])})."
        return history


def make_gae_widget(base_config: TrainConfig, initial_run: bool = True) -> GAEWidget:
    """The γ/λ widget for ``base_config``; ``initial_run`` trains it once at the sliders'
    start values, so the first render (and ``widget.runs[0]``) is that fixed run.

    Taught in notebook 10.
    """
    widget = GAEWidget(base_config)
    if initial_run:
        widget.run()
    return widget
