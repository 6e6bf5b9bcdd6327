"""Notebook 11's clip-family widget, driven through its controls."""

from __future__ import annotations

import ipywidgets
import pytest

from pgrl_helpers.clip_family import CLIP_FAMILY, autograd_weight, clip_settings, weight_formula
from pgrl_helpers.ui.clip_widget import ClipFamilyWidget

RATIOS = [0.3, 0.75, 0.85, 0.95, 1.0, 1.05, 1.15, 1.25, 1.35, 1.6, 2.2, 3.5]


def test_controls_and_the_first_drawing():
    w = ClipFamilyWidget(RATIOS)
    assert isinstance(w, ipywidgets.VBox)
    assert isinstance(w.methods, ipywidgets.SelectMultiple)
    assert isinstance(w.sign, ipywidgets.ToggleButtons)
    assert set(w.curves) == set(CLIP_FAMILY) and w.redraw_count == 1
    assert len(w.plot.outputs) == 1 and "image/png" in w.plot.outputs[0]["data"]


@pytest.mark.parametrize("sign", [1, -1])
@pytest.mark.parametrize("eps_low, eps_high", [(0.1, 0.5), (0.3, 0.3), (0.05, 1.2)])
def test_changing_a_control_redraws_curves_that_match_autograd(sign, eps_low, eps_high):
    w = ClipFamilyWidget(RATIOS)
    w.methods.value = ("PPO-clip", "clip-higher", "dual-clip", "CISPO", "SAPO")
    w.epsilon_low.value = eps_low
    w.epsilon_high.value = eps_high
    w.sign.value = sign
    assert w.redraw_count >= 4
    assert set(w.curves) == {"PPO-clip", "clip-higher", "dual-clip", "CISPO", "SAPO"}
    for name, weights in w.curves.items():
        eps, high = w.settings(name)
        for r, weight in zip(RATIOS, weights):
            assert weight == pytest.approx(autograd_weight(name, r, sign, eps, high), abs=1e-12)
    # the chosen edges are really used: clip-higher keeps w = r up to 1 + eps_high for A > 0
    inside = [r for r in RATIOS if 1 < r <= 1 + eps_high]
    outside = [r for r in RATIOS if r > 1 + eps_high]
    if sign > 0:
        curve = dict(zip(RATIOS, w.curves["clip-higher"]))
        assert all(curve[r] == r for r in inside) and all(curve[r] == 0 for r in outside)
        ppo = dict(zip(RATIOS, w.curves["PPO-clip"]))  # symmetric: epsilon_low on both sides
        assert all(ppo[r] == 0 for r in RATIOS if r > 1 + eps_low)
    else:
        curve = dict(zip(RATIOS, w.curves["clip-higher"]))
        assert all(curve[r] == 0 for r in RATIOS if r < 1 - eps_low)


def test_no_method_chosen_gives_a_message_not_an_error():
    w = ClipFamilyWidget(RATIOS)
    w.methods.value = ()
    assert w.curves == {} and "at least one" in w.message.value
    w.methods.value = ("GSPO",)
    assert w.message.value == "" and list(w.curves) == ["GSPO"]


def test_clip_settings_and_formula_check_their_arguments():
    assert clip_settings("PPO-clip", 0.1, 0.9) == (0.1, 0.1)
    assert clip_settings("clip-higher") == (0.2, 0.28)
    with pytest.raises(ValueError, match="unknown curve 'PPO'"):
        weight_formula("PPO", 1.0, 1)
    with pytest.raises(ValueError, match="epsilon_high must be a positive number"):
        clip_settings("CISPO", 0.2, -1.0)
