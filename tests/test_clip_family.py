"""The clip family's weights (pgrl_helpers.clip_family, notebook 11): each closed form against
autograd, at its edges, and the figure drawn from them.
"""

from __future__ import annotations

import math
import re

import pytest
from matplotlib.figure import Figure

from pgrl_helpers import clip_family as cf


def test_clip_family_formulas_match_autograd_and_a_wrong_one_does_not():
    from pgrl_helpers import clip_family

    points = [0.3, 0.79, 0.81, 1.0, 1.0001, 1.19, 1.21, 1.29, 1.99, 2.01, 2.9, 3.1, 5.0]
    for name in clip_family.CLIP_FAMILY:
        for sign in (1, -1):
            for r in points:
                formula = clip_family.weight_formula(name, r, sign)
                assert clip_family.autograd_weight(name, r, sign) == pytest.approx(formula)
    # planted bug: PPO-clip without the zero beyond the clip is caught at r = 1.5, A > 0
    assert clip_family.autograd_weight("PPO-clip", 1.5, 1) != pytest.approx(1.5)


# --- mutants ---
# The cases mutation testing found unchecked (tests/MUTATION.md).
#
# Each closed form at its edges (the clip bounds belong to the kept side, the dual-clip bound
# c too), SAPO's weight 1 at r = 1 and its two temperatures, autograd against the formulas on a
# grid, and the figure: one curve per family member per panel, drawn from the formulas, with
# labelled axes and titles.


@pytest.mark.parametrize(
    "name, ratio, sign, weight",
    [
        ("PPO-clip", 1.2, 1, 1.2),  # r == 1 + eps: still the unclipped branch
        ("PPO-clip", 1.2000001, 1, 0.0),
        ("PPO-clip", 0.8, -1, 0.8),  # r == 1 - eps
        ("PPO-clip", 0.7999999, -1, 0.0),
        ("PPO-clip", 0.5, 1, 0.5),
        ("PPO-clip", 5.0, -1, 5.0),
        ("clip-higher", 1.28, 1, 1.28),
        ("clip-higher", 1.2800001, 1, 0.0),
        ("clip-higher", 0.8, -1, 0.8),
        ("clip-higher", 0.79, -1, 0.0),
        ("dual-clip", 3.0, -1, 3.0),  # r == c: the bound c A does not bind yet
        ("dual-clip", 3.0001, -1, 0.0),
        ("dual-clip", 3.5, 1, 0.0),
        ("dual-clip", 1.1, 1, 1.1),
        ("CISPO", 5.0, 1, 2.0),  # capped at 1 + eps_high = 2
        ("CISPO", 0.01, -1, 0.01),  # no lower clip (eps = 1)
        ("CISPO", 1.5, -1, 1.5),
        ("GSPO", 1.0004, 1, 1.0004),
        ("GSPO", 1.00041, 1, 0.0),
        ("GSPO", 0.9997, -1, 0.9997),
        ("GSPO", 0.99969, -1, 0.0),
        ("SAPO", 1.0, 1, 1.0),
        ("SAPO", 1.0, -1, 1.0),
    ],
)  # fmt: skip
def test_weight_formula_at_the_edges(name, ratio, sign, weight):
    assert cf.weight_formula(name, ratio, sign) == pytest.approx(weight, abs=1e-12)


def test_sapo_uses_tau_pos_for_a_gain_and_tau_neg_for_a_loss():
    for sign, tau in ((1, 1.0), (-1, 1.05)):
        sig = 1 / (1 + math.exp(-tau * 1.0))  # r = 2
        assert cf.weight_formula("SAPO", 2.0, sign) == pytest.approx(4 * sig * (1 - sig) * 2.0)
    assert cf.weight_formula("SAPO", 2.0, 1) != pytest.approx(cf.weight_formula("SAPO", 2.0, -1))


def test_autograd_agrees_with_every_formula_on_a_grid():
    ratios = [0.05, 0.5, 0.75, 0.85, 0.99, 1.0, 1.0002, 1.1, 1.25, 1.5, 1.9, 2.5, 3.5, 8.0]
    for name in cf.CLIP_FAMILY:
        for sign in (1, -1):
            for r in ratios:
                got = cf.autograd_weight(name, r, sign)
                assert got == pytest.approx(cf.weight_formula(name, r, sign), abs=1e-9), (
                    name,
                    r,
                    sign,
                )


def test_the_figure_draws_every_formula_in_both_panels():
    ratios = [0.5, 1.0, 1.25, 2.5, 4.0]
    axes = Figure().subplots(1, 2)  # no pyplot: no backend, no global state
    cf.plot_clip_family(ratios, axes)
    for ax, sign, title in zip(axes, (1, -1), ("A > 0", "A < 0")):
        lines = [line for line in ax.get_lines() if line.get_label() in cf.CLIP_FAMILY]
        assert [line.get_label() for line in lines] == list(cf.CLIP_FAMILY)
        for line in lines:
            assert list(line.get_xdata()) == ratios
            expected = [cf.weight_formula(line.get_label(), r, sign) for r in ratios]
            assert list(line.get_ydata()) == expected
        # every curve has its own look (style, width, opacity, colour)
        looks = {
            (ln.get_linestyle(), ln.get_linewidth(), ln.get_alpha(), ln.get_color()) for ln in lines
        }
        assert len(looks) == len(lines)
        assert ax.get_title() == title
        assert ax.get_xlabel() == "ratio r = pi / pi_old (GSPO: sequence ratio s)"
        assert ax.get_ylabel() == "gradient weight w(r) (naive = 1)"
        marker = [ln for ln in ax.get_lines() if ln not in lines]
        assert len(marker) == 1 and list(marker[0].get_xdata()) == [1.0, 1.0]
        assert marker[0].get_color() == "grey" and marker[0].get_linewidth() == 0.5
    legend = axes[0].get_legend()
    assert legend is not None and axes[1].get_legend() is None
    assert [t.get_text() for t in legend.get_texts()] == list(cf.CLIP_FAMILY)
    assert legend.get_texts()[0].get_fontsize() == 8


def test_the_figure_styles():
    """PPO-clip is a wide translucent band under clip-higher's dashes (they coincide for
    A < 0); dual-clip dotted; GSPO dash-dotted."""
    axes = Figure().subplots(1, 2)  # no pyplot: no backend, no global state
    cf.plot_clip_family([1.0, 2.0], axes)
    looks = [
        (ln.get_linestyle(), ln.get_linewidth(), ln.get_alpha())
        for ln in axes[1].get_lines()[: len(cf.CLIP_FAMILY)]
    ]
    assert looks == [
        ("-", 6, 0.35), ("--", 2.5, 0.9), (":", 3, 1.0), ("-", 1.5, 1.0), ("-", 1.5, 1.0),
        ("-.", 2, 1.0),
    ]  # fmt: skip


# ---- clip_settings: the curves' clip edges and the overrides (the clip widget's sliders) -------


def test_clip_settings_defaults_and_overrides():
    assert cf.clip_settings("clip-higher") == (0.2, 0.28)
    assert cf.clip_settings("clip-higher", 0.1, 0.5) == (0.1, 0.5)
    assert cf.clip_settings("clip-higher", epsilon=0.1) == (0.1, 0.28)
    assert cf.clip_settings("clip-higher", epsilon_high=0.5) == (0.2, 0.5)
    assert cf.clip_settings("PPO-clip", 0.3, 0.9) == (0.3, 0.3)  # symmetric: epsilon both sides
    assert cf.clip_settings("GSPO") == (3e-4, 4e-4)


@pytest.mark.parametrize("fn", [cf.weight_formula, cf.autograd_weight])
def test_both_weights_read_the_overrides(fn):
    # A > 0, r = 1.35: cut at the default 1 + 0.28, kept at 1 + 0.4
    assert fn("clip-higher", 1.35, 1) == 0.0
    assert fn("clip-higher", 1.35, 1, epsilon_high=0.4) == pytest.approx(1.35)
    # A < 0, r = 0.75: cut at the default 1 - 0.2, kept at 1 - 0.3; epsilon_high is not epsilon
    assert fn("clip-higher", 0.75, -1) == 0.0
    assert fn("clip-higher", 0.75, -1, epsilon=0.3) == pytest.approx(0.75)
    assert fn("clip-higher", 0.75, -1, epsilon_high=0.4) == 0.0


@pytest.mark.parametrize("fn", [cf.clip_settings, cf.weight_formula, cf.autograd_weight])
def test_an_unknown_curve_is_named(fn):
    args = ("PPO",) if fn is cf.clip_settings else ("PPO", 1.0, 1)
    valid = re.escape(", ".join(cf.CLIP_FAMILY))
    with pytest.raises(ValueError, match=rf"^unknown curve 'PPO'.*{valid}"):
        fn(*args)


@pytest.mark.parametrize("what", ["epsilon", "epsilon_high"])
@pytest.mark.parametrize("bad", [0, -0.1, True, "0.2"])
def test_a_bad_clip_edge_is_named(what, bad):
    with pytest.raises(ValueError, match=rf"^{what} .*positive.*{re.escape(repr(bad))}"):
        cf.clip_settings("CISPO", **{what: bad})
    cf.clip_settings("CISPO", **{what: 1e-9})  # just above 0 is fine
    assert math.inf in cf.clip_settings("CISPO", **{what: math.inf})  # no clip on that side
