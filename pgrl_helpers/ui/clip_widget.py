"""A widget for notebook 11's clip-family picture: choose methods, epsilon_low / epsilon_high
and the sign of A, and the gradient-weight curves w(r) (``clip_family``) are redrawn.

``ClipFamilyWidget`` is an ipywidgets VBox whose controls are attributes; every change calls
``redraw``, which recomputes ``curves`` (name -> list of w(r) over ``ratios``, from
``clip_family.weight_formula`` with the chosen clip edges) and replaces the PNG in ``plot``.
Tests drive it by setting the controls' values, as a reader would.

Taught in notebook 11.
"""

from __future__ import annotations

from ..clip_family import CLIP_FAMILY, clip_settings, weight_formula
from . import missing_extra
from .figures import figure_png, png_output

try:
    import ipywidgets as widgets
    from matplotlib.figure import Figure
except ModuleNotFoundError as error:  # the pip extra `widgets`
    raise missing_extra(error) from error


class ClipFamilyWidget(widgets.VBox):
    """Controls: ``methods`` (SelectMultiple of ``CLIP_FAMILY`` names), ``epsilon_low`` and
    ``epsilon_high`` (FloatSliders; PPO-clip uses epsilon_low on both sides, SAPO ignores
    both), ``sign`` (ToggleButtons, A > 0 or A < 0). Output: ``plot`` (an Output holding one
    PNG), ``message`` (HTML), ``curves`` (name -> w(r) at each of ``ratios``).

    Taught in notebook 11.
    """

    def __init__(self, ratios: list[float] | None = None):
        self.ratios = ratios if ratios is not None else [0.01 + i * 0.005 for i in range(799)]
        self.methods = widgets.SelectMultiple(
            options=list(CLIP_FAMILY), value=tuple(CLIP_FAMILY), description="methods", rows=6
        )
        self.epsilon_low = widgets.FloatSlider(
            value=0.2, min=0.01, max=0.99, step=0.01, description="epsilon_low"
        )
        self.epsilon_high = widgets.FloatSlider(
            value=0.28, min=0.01, max=3.0, step=0.01, description="epsilon_high"
        )
        self.sign = widgets.ToggleButtons(options=[("A > 0", 1), ("A < 0", -1)], value=1)
        self.plot = widgets.Output()
        self.message = widgets.HTML()
        self.curves: dict[str, list[float]] = {}
        self.redraw_count = 0
        controls = widgets.VBox([self.epsilon_low, self.epsilon_high, self.sign])
        super().__init__([widgets.HBox([self.methods, controls]), self.message, self.plot])
        for control in (self.methods, self.epsilon_low, self.epsilon_high, self.sign):
            control.observe(self.redraw, names="value")
        self.redraw()

    def settings(self, name: str) -> tuple[float, float]:
        """(epsilon, epsilon_high) the curve ``name`` is drawn with."""
        return clip_settings(name, self.epsilon_low.value, self.epsilon_high.value)

    def redraw(self, change=None) -> None:
        """Recompute ``curves`` for the chosen methods and sign; redraw ``plot``."""
        sign = self.sign.value
        self.curves = {
            name: [weight_formula(name, r, sign, *self.settings(name)) for r in self.ratios]
            for name in self.methods.value
        }
        fig = Figure(figsize=(7, 4))
        ax = fig.subplots()
        for name, weights in self.curves.items():
            ax.plot(self.ratios, weights, lw=2, alpha=0.8, label=name)
        ax.axvline(1.0, color="grey", lw=0.5)
        ax.set_xlabel("ratio r = pi / pi_old (GSPO: sequence ratio s)")
        ax.set_ylabel("gradient weight w(r) (naive = 1)")
        ax.set_title(f"A {'> 0' if sign > 0 else '< 0'}, epsilon_low {self.epsilon_low.value:.2f}, "
                     f"epsilon_high {self.epsilon_high.value:.2f}")  # fmt: skip
        if self.curves:
            ax.legend(fontsize=8)
        self.plot.outputs = png_output(figure_png(fig))
        self.message.value = "" if self.curves else "Choose at least one method."
        self.redraw_count += 1
