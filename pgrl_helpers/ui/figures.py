"""The widgets' figures: training curves of several runs, and a figure as a PNG for a widget.

* ``plot_histories(histories, axes=None)``: mean reward, held-out exact-sort and loss
  against the optimizer step, one line per run (earlier runs thin, the last one bold);
* ``run_label(config)``: a run's legend label ('centered_rewards/clipped/lecture G=10 ...');
* ``figure_png(fig)``: a matplotlib figure as PNG bytes (Agg canvas, no pyplot: safe in the
  dashboard's training thread); ``png_output(png)``: those bytes as the one output of an
  ipywidgets ``Output`` (set directly, nothing printed into it);
* ``check_history(history)``: the ``TypeError`` every widget raises for a non-``History``.

The dashboard (``dashboard.py``), notebook 10's γ/λ widget (``gae_widget.py``) and notebook
11's clip-family widget (``clip_widget.py``) draw with these.

Taught in notebook 07.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence

from ..config import TrainConfig
from ..history import History
from . import missing_extra

try:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
except ModuleNotFoundError as error:  # the pip extra `widgets`
    raise missing_extra(error) from error

#: The three panels of ``plot_histories``: (metric, record kind, y label).
PANELS: tuple[tuple[str, str, str], ...] = (
    ("mean_reward", "step", "mean reward of sampled responses"),
    ("validation_exact_sort", "eval", "held-out exact-sort (greedy)"),
    ("loss", "step", "loss (moving dataset!)"),
)


def check_history(history) -> None:
    """Raise TypeError unless ``history`` is a ``History`` (a list with a ``config``)."""
    if not isinstance(history, list) or not hasattr(history, "config"):
        raise TypeError(
            f"expected a History returned by run_policy_gradient, got {type(history).__name__}"
        )


def run_label(config: TrainConfig, init_scale: float = 1.0) -> str:
    """Short description of a run: 'centered_rewards/clipped/lecture G=10 lr=0.001 seed=0'."""
    label = (
        f"{config.deltas_mode}/{config.loss_mode}/{config.model} "
        f"G={config.num_responses} lr={config.learning_rate:g} seed={config.seed}"
    )
    if config.kl_coef:
        label += f" kl={config.kl_coef:g}"
    if init_scale != 1.0:
        label += f" init×{init_scale:g}"
    return label


def _series(history: History, metric: str, kind: str) -> tuple[list[int], list[float]]:
    records = [r for r in history if r["kind"] == kind and r.get(metric) is not None]
    if kind == "step" and metric == "mean_reward":
        records = [r for r in records if r["inner_step"] == 0]  # one value per epoch
    return [r["step"] for r in records], [r[metric] for r in records]


def plot_histories(
    histories: Sequence[History],
    axes=None,
    labels: Sequence[str] | None = None,
    highlight_last: bool = True,
):
    """Plot mean reward, held-out exact-sort and loss vs optimizer step for several runs.

    ``axes``: three matplotlib axes to draw into (e.g. from ``plt.subplots(1, 3)``); if
    None a new ``matplotlib.figure.Figure`` (not registered with pyplot) is created.
    With ``highlight_last`` (the dashboard's view) earlier runs are drawn thin and the
    last run bold; otherwise all runs alike. Returns the figure.

    Taught in notebook 07.
    """
    for h in histories:
        check_history(h)
    if labels is not None and len(labels) != len(histories):
        raise ValueError(f"got {len(labels)} labels for {len(histories)} histories")
    if axes is None:
        fig = Figure(figsize=(12, 3.4), dpi=80)
        axes = fig.subplots(1, len(PANELS))
    if len(axes) != len(PANELS):
        raise ValueError(f"plot_histories needs {len(PANELS)} axes, got {len(axes)}")
    fig = axes[0].figure
    for k, history in enumerate(histories):
        last = k == len(histories) - 1 or not highlight_last
        label = labels[k] if labels is not None else f"run {k + 1}: {run_label(history.config)}"
        for ax, (metric, kind, _) in zip(axes, PANELS):
            xs, ys = _series(history, metric, kind)
            ax.plot(
                xs,
                ys,
                marker="o" if kind == "eval" else None,
                markersize=3,
                linewidth=(2.2 if highlight_last else 1.5) if last else 1.0,
                alpha=1.0 if last else 0.55,
                label=label,
            )
    for ax, (_, _, ylabel) in zip(axes, PANELS):
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0].set_title("Mean reward (watch this)")
    axes[1].set_title("Held-out exact-sort")
    axes[1].set_ylim(-0.03, 1.03)
    axes[2].set_title("Loss (don't trust it)")
    fig.tight_layout()
    if histories:  # below the panels, never over the curves
        handles, names = axes[0].get_legend_handles_labels()
        fig.legend(
            handles,
            names,
            loc="upper center",
            bbox_to_anchor=(0.5, 0.0),
            ncol=1 if len(names) > 3 else len(names),
            fontsize=9,
            frameon=False,
        )
    return fig


def figure_png(fig) -> bytes:
    """Render a matplotlib figure to PNG bytes with the Agg canvas (thread-safe, no pyplot)."""
    buffer = io.BytesIO()
    FigureCanvasAgg(fig)  # the figure's canvas: Agg, no pyplot
    fig.savefig(buffer, format="png", bbox_inches="tight")  # keeps the legend below
    return buffer.getvalue()


def png_output(png: bytes, text: str | None = None) -> tuple[dict]:
    """The ``outputs`` of an ipywidgets ``Output`` that shows the PNG ``png`` (and ``text`` as
    its plain-text form, if given). Set directly (``output.outputs = png_output(png)``), it
    works from a background thread and captures nothing."""
    data = {"image/png": base64.b64encode(png).decode("ascii")}
    if text is not None:
        data["text/plain"] = text
    return ({"output_type": "display_data", "data": data, "metadata": {}},)
