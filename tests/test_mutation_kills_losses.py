"""losses: the cases mutation testing found unchecked (tests/MUTATION.md).

Modes compared outside the trust region, defaults, clip_fraction at its edges and for
zero / small deltas, the ratio clamp on both sides, and error messages that name the
argument. Any finite epsilon > 0 is allowed (>= 1: no lower clip).
"""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import pytest
import torch

from pgrl_helpers._validate import MAX_LOG_RATIO
from pgrl_helpers.losses import (
    LossOptions,
    clip_fraction,
    clip_mask,
    compute_loss,
    compute_per_token_loss,
    compute_ratio,
    per_token_loss_and_metrics,
    sequence_log_ratio,
)
from pgrl_helpers.masking import high_entropy_mask
from pgrl_helpers.registry import POLICY_OBJECTIVES, sequence_level_objective, token_level_objective

# ratios exactly representable in float32 (exp(log r) == r), including the clip edges for
# epsilon 0.5 (0.5 and 1.5) and for epsilon_high 0.25 (1.25)
RATIOS = torch.tensor([0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0])


def ratio_batch(deltas=(1.0, -1.0, 0.0)):
    """log_probs with the ratios above for each delta; old_log_probs = 0."""
    trial = len(deltas)
    log_probs = RATIOS.log().reshape(1, 1, -1).repeat(1, trial, 1).requires_grad_(True)
    return log_probs, torch.zeros(1, trial, len(RATIOS)), torch.tensor([list(deltas)])


def test_unclipped_differs_from_clipped_outside_the_trust_region():
    log_probs, old, deltas = ratio_batch((1.0, -1.0))
    unclipped = compute_per_token_loss(log_probs, deltas, "unclipped", old)
    clipped = compute_per_token_loss(log_probs, deltas, "clipped", old, epsilon=0.2)
    torch.testing.assert_close(unclipped[0, 0], -RATIOS)  # -ratio * delta, nothing clipped
    torch.testing.assert_close(unclipped[0, 1], RATIOS)
    assert not torch.equal(unclipped, clipped)
    # clipped, delta = +1: -min(r, clip(r, 0.8, 1.2)); delta = -1: -min(-r, -clip(r))
    torch.testing.assert_close(clipped[0, 0], -torch.tensor([0.25, 0.5, 0.75, 1.0, 1.2, 1.2, 1.2]))
    torch.testing.assert_close(clipped[0, 1], torch.tensor([0.8, 0.8, 0.8, 1.0, 1.25, 1.5, 2.0]))
    assert compute_loss(log_probs, deltas, "unclipped", old).item() == pytest.approx(0.0, abs=1e-6)


def test_naive_ignores_old_log_probs():
    log_probs, old, deltas = ratio_batch((2.0,))
    naive = compute_per_token_loss(log_probs, deltas, "naive", old + 5.0)
    torch.testing.assert_close(naive, -2.0 * log_probs)


def test_default_epsilon_is_0_2():
    log_probs, old, deltas = ratio_batch((1.0, -1.0))
    default = compute_per_token_loss(log_probs, deltas, "clipped", old)
    torch.testing.assert_close(
        default, compute_per_token_loss(log_probs, deltas, "clipped", old, epsilon=0.2)
    )
    assert default[0, 0, -1].item() == pytest.approx(-1.2)  # ratio 2, delta 1: clipped at 1.2
    assert compute_loss(log_probs, deltas, "clipped", old).item() == pytest.approx(
        default.mean().item()
    )


def test_the_freeze_guard_is_on_by_default():
    log_probs, _, deltas = ratio_batch((1.0,))
    for mode in ("unclipped", "clipped"):
        with pytest.raises(ValueError, match="^old_log_probs requires grad"):
            compute_per_token_loss(log_probs, deltas, mode, log_probs)
    # naive never reads old_log_probs, so there is nothing to guard
    compute_per_token_loss(log_probs, deltas, "naive", log_probs)


def test_clip_fraction_is_the_fraction_of_tokens_with_zero_clipped_gradient():
    # exact edges: ratio == 1 + epsilon (or 1 - epsilon) is NOT clipped (gradient flows)
    log_probs, old, deltas = ratio_batch((1.0, -1.0, 0.0, 0.5, -0.5))
    for epsilon, epsilon_high in ((0.5, None), (0.5, 0.25), (0.25, 0.5)):
        loss = compute_per_token_loss(
            log_probs, deltas, "clipped", old, epsilon=epsilon, epsilon_high=epsilon_high
        )
        (grad,) = torch.autograd.grad(loss.sum(), log_probs)
        cut = (grad == 0) & (deltas[:, :, None] != 0)
        expected = cut.float().mean().item()
        assert expected > 0
        assert clip_fraction(log_probs, old, deltas, epsilon, epsilon_high) == pytest.approx(
            expected
        )
    # epsilon 0.5: ratios 0.25 (delta < 0) and 2.0 (delta > 0) are cut, in 4 of 5 rows
    assert clip_fraction(log_probs, old, deltas, 0.5) == pytest.approx(4 / 35)


def test_clip_fraction_ignores_zero_deltas_and_handles_small_ones():
    log_probs, old, _ = ratio_batch()
    assert clip_fraction(log_probs, old, torch.zeros(1, 3), 0.2) == 0.0  # every group tied
    small = torch.tensor([[0.5, -0.5, 0.25]])
    # delta 0.5 / 0.25 (> 0): ratios 1.25, 1.5, 2.0 above 1.2; delta -0.5: 0.25, 0.5, 0.75 below 0.8
    assert clip_fraction(log_probs, old, small, 0.2) == pytest.approx(9 / 21)


def test_clip_fraction_default_epsilon_is_0_2():
    log_probs, old, deltas = ratio_batch()
    assert clip_fraction(log_probs, old, deltas) == clip_fraction(log_probs, old, deltas, 0.2)
    assert clip_fraction(log_probs, old, deltas) == pytest.approx(6 / 21)


def test_clip_fraction_rejects_bad_inputs_by_name():
    log_probs, old, deltas = ratio_batch()
    with pytest.raises(
        ValueError, match=r"^deltas must be \[batch, trial\] or \[batch, trial, pos\]"
    ):
        clip_fraction(log_probs, old, deltas[0])
    with pytest.raises(ValueError, match="^log_probs and mask must have the same shape"):
        clip_fraction(log_probs, old, deltas, mask=torch.ones(1, 3, 2))
    with pytest.raises(ValueError, match="^clip_fraction: the mask selects no tokens$"):
        clip_fraction(log_probs, old, deltas, mask=torch.zeros(1, 3, len(RATIOS)))
    with pytest.raises(ValueError, match="^log_probs and old_log_probs must have the same shape"):
        clip_fraction(log_probs, old[..., :2], deltas)


def test_ratio_is_clamped_on_both_sides():
    log_probs = torch.tensor([[[-100.0, 0.0, 100.0]]], requires_grad=True)
    ratio = compute_ratio(log_probs, torch.zeros(1, 1, 3))
    expected = torch.exp(torch.tensor([-MAX_LOG_RATIO, 0.0, MAX_LOG_RATIO]))
    torch.testing.assert_close(ratio[0, 0], expected)
    (grad,) = torch.autograd.grad(ratio.sum(), log_probs)
    assert grad[0, 0].tolist() == [0.0, 1.0, 0.0]  # beyond the clamp the gradient is 0
    assert compute_ratio(log_probs, torch.zeros(1, 1, 3), max_log_ratio=1.0)[0, 0, 0].item() == (
        pytest.approx(torch.exp(torch.tensor(-1.0)).item())
    )
    with pytest.raises(ValueError, match="^log_probs and old_log_probs must have the same shape"):
        compute_ratio(log_probs, torch.zeros(1, 1, 2))


def test_epsilon_must_be_positive():
    log_probs, old, deltas = ratio_batch()
    for bad in (0.0, -0.2):
        with pytest.raises(ValueError, match="epsilon"):
            compute_per_token_loss(log_probs, deltas, "clipped", old, epsilon=bad)


def test_error_messages_name_the_argument():
    log_probs, old, deltas = ratio_batch()
    with pytest.raises(ValueError, match=r"^log_probs must have shape \[batch, trial, pos\] \("):
        compute_loss(log_probs[0], deltas, "naive")
    with pytest.raises(
        ValueError, match=r"^deltas must be \[batch, trial\] or \[batch, trial, pos\]"
    ):
        compute_loss(log_probs, deltas[0], "naive")
    bad = log_probs.detach().clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="^log_probs contains 1 non-finite"):
        compute_loss(bad, deltas, "naive")
    with pytest.raises(ValueError, match="^old_log_probs contains 1 non-finite"):
        compute_loss(log_probs, deltas, "clipped", bad)
    with pytest.raises(
        ValueError,
        match=r"^loss mode 'unclipped' needs old_log_probs \(the frozen log-probs of the "
        r"policy that sampled the responses\)$",
    ):
        compute_loss(log_probs, deltas, "unclipped")
    with pytest.raises(ValueError, match="^log_probs and old_log_probs must have the same shape"):
        compute_loss(log_probs, deltas, "clipped", old[..., :2])


def test_clip_mask_signs_default_epsilon_and_the_loss_passes_epsilon_high():
    log_probs, old, deltas = ratio_batch()
    default = clip_mask(log_probs, old, deltas)
    assert torch.equal(default, clip_mask(log_probs, old, deltas, 0.2))
    assert default.dtype == torch.int8
    # delta +1: 1.25, 1.5, 2.0 clipped high; delta -1: 0.25, 0.5, 0.75 clipped low; delta 0: none
    assert default[0].tolist() == [[0, 0, 0, 0, 1, 1, 1], [-1, -1, -1, 0, 0, 0, 0], [0] * 7]
    mask = clip_mask(log_probs, old, deltas, 0.2, 0.3)
    assert mask[0, 0].tolist() == [0, 0, 0, 0, 0, 1, 1]  # 1.25 < 1.3: not clipped
    _, metrics = per_token_loss_and_metrics(
        log_probs, deltas, "clipped", old, LossOptions(0.2, 0.3)
    )
    assert metrics["clip_fraction"] == pytest.approx((mask != 0).float().mean().item())
    assert metrics["clip_fraction"] == pytest.approx(5 / 21)  # 1.5, 2.0 high; 0.25 .. 0.75 low


def test_token_level_objective_picks_old_log_probs_by_config():
    log_probs, old, deltas = ratio_batch((1.0, -1.0))
    rollout = SimpleNamespace(old_log_probs=old, deltas=deltas, mask=None)

    def config(**kw):
        base = dict(
            loss_mode="clipped", detach_old_log_probs=True, epsilon=0.3, epsilon_high=0.4,
            importance_sampling_level="token", dual_clip_c=3.0, sapo_temperature_pos=1.0,
            sapo_temperature_neg=1.05, kl_cov_ratio=0.002, kl_cov_coef=1.0,
        )  # fmt: skip
        return SimpleNamespace(**{**base, **kw})

    got, metrics = token_level_objective(log_probs, rollout, config())
    torch.testing.assert_close(
        got, compute_per_token_loss(log_probs, deltas, "clipped", old, 0.3, epsilon_high=0.4)
    )
    assert not torch.equal(got, compute_per_token_loss(log_probs, deltas, "clipped", old))
    # ratios 1.5, 2.0 (delta +1) above 1.4; 0.25, 0.5 (delta -1) below 0.7: 4 of 14 tokens cut
    assert metrics == {"clip_fraction": pytest.approx(4 / 14)}
    # the freeze guard stays on when the config says the old log-probs are detached
    attached = SimpleNamespace(
        old_log_probs=old.clone().requires_grad_(True), deltas=deltas, mask=None
    )
    with pytest.raises(ValueError, match="^old_log_probs requires grad"):
        token_level_objective(log_probs, attached, config())
    naive, metrics = token_level_objective(log_probs, rollout, config(loss_mode="naive"))
    torch.testing.assert_close(naive, compute_per_token_loss(log_probs, deltas, "naive"))
    assert metrics == {}
    # the freeze pitfall on purpose: old = log_probs (attached), ratio 1, loss = -delta,
    # nothing clipped
    frozen, metrics = token_level_objective(log_probs, rollout, config(detach_old_log_probs=False))
    torch.testing.assert_close(frozen, -deltas[:, :, None].expand_as(frozen))
    assert metrics == {"clip_fraction": 0.0}


# ---- the 2025 objectives: dual-clip, CISPO, SAPO, GSPO's sequence ratio -----------------


def one_token(ratio: float, delta: float, **options):
    """(loss, -d loss / d log pi) of one token with that ratio (float64), old = 0."""
    log_probs = torch.full((1, 1, 1), math.log(ratio), dtype=torch.float64, requires_grad=True)
    old = torch.zeros(1, 1, 1, dtype=torch.float64)
    deltas = torch.full((1, 1), delta, dtype=torch.float64)
    mode = options.pop("mode")
    loss = compute_per_token_loss(log_probs, deltas, mode, old, **options)
    (grad,) = torch.autograd.grad(loss.sum(), log_probs)
    return loss.item(), -grad.item()


def test_dual_clip_bounds_a_negative_delta_at_c_by_default():
    # A = -1, r = 4 > c = 3: the objective is c A = -3 (loss 3), gradient 0
    assert one_token(4.0, -1.0, mode="dual_clip") == pytest.approx((3.0, 0.0))
    assert one_token(4.0, -1.0, mode="dual_clip", dual_clip_c=5.0) == pytest.approx((4.0, -4.0))
    assert one_token(2.0, -1.0, mode="dual_clip") == pytest.approx((2.0, -2.0))  # r < c
    # A > 0 is never bounded below by c A: PPO-clip's value
    assert one_token(4.0, 1.0, mode="dual_clip") == pytest.approx((-1.2, 0.0))
    assert one_token(4.0, 1.0, mode="clipped") == pytest.approx((-1.2, 0.0))


def test_cispo_clips_the_weight_not_the_gradient():
    loss, weight = one_token(1.5, 2.0, mode="cispo")
    assert loss == pytest.approx(-1.2 * 2.0 * math.log(1.5)) and weight == pytest.approx(2.4)
    loss, weight = one_token(0.5, -1.0, mode="cispo", epsilon=0.2, epsilon_high=0.3)
    assert loss == pytest.approx(0.8 * math.log(0.5)) and weight == pytest.approx(-0.8)
    assert one_token(1.5, 1.0, mode="cispo", epsilon_high=0.3)[1] == pytest.approx(1.3)


def test_sapo_temperatures_by_sign_and_their_defaults():
    for delta, tau in ((1.0, 1.0), (-1.0, 1.05)):
        sig = 1 / (1 + math.exp(-tau * 0.5))  # r = 1.5
        loss, weight = one_token(1.5, delta, mode="sapo")
        assert loss == pytest.approx(-(4 / tau) * sig * delta)
        assert weight == pytest.approx(4 * sig * (1 - sig) * 1.5 * delta)
    loss, _ = one_token(1.5, 1.0, mode="sapo", sapo_temperature_pos=2.0)
    assert loss == pytest.approx(-2 / (1 + math.exp(-1.0)))
    loss, _ = one_token(1.5, -1.0, mode="sapo", sapo_temperature_neg=2.0)
    assert loss == pytest.approx(2 / (1 + math.exp(-1.0)))


def test_every_option_is_checked_whatever_the_mode():
    """LossOptions checks all its fields, as TrainConfig does (a bad option of another mode is
    still a bad setting)."""
    for mode in ("naive", "unclipped", "clipped", "dual_clip", "cispo", "sapo"):
        with pytest.raises(ValueError, match=r"^epsilon must be .*, got -0\.5$"):
            one_token(1.0, 1.0, mode=mode, epsilon=-0.5)
        with pytest.raises(ValueError, match=r"^dual_clip_c must be .*> 1.*, got 0\.5$"):
            one_token(1.0, 1.0, mode=mode, dual_clip_c=0.5)


#: option -> (bound, a value just inside it, its mode): the edge refused, the inside accepted
OPTION_BOUNDS = {
    "epsilon": (0.0, 1e-9, "clipped"),
    "epsilon_high": (0.0, 1e-9, "clipped"),
    "dual_clip_c": (1.0, 1.0001, "dual_clip"),
    "sapo_temperature_pos": (0.0, 1e-4, "sapo"),
    "sapo_temperature_neg": (0.0, 1e-4, "sapo"),
    "kl_cov_ratio": (0.0, 1e-9, "unclipped"),
    "kl_cov_coef": (-1e-9, 0.0, "unclipped"),
}


@pytest.mark.parametrize("option", sorted(OPTION_BOUNDS))
def test_objective_options_are_named_with_their_bound(option):
    """The message names the option and the refused value; the bound is pinned by refusing
    the edge and accepting a value just inside (not by the whole sentence)."""
    bound, inside, mode = OPTION_BOUNDS[option]
    for bad in (bound, bound - 1.0, math.inf, math.nan, True, "3"):
        with pytest.raises(ValueError, match=f"^{option} must be .*, got {re.escape(repr(bad))}$"):
            one_token(1.0, 1.0, mode=mode, **{option: bad})
    one_token(1.0, 1.0, mode=mode, **{option: inside})
    with pytest.raises(ValueError) as refused:
        LossOptions(**{option: bound})
    said = str(refused.value).split(", got ")[0]  # the bound, in the words of check_number
    assert any(words in said for words in BOUND_WORDS[option]), said


#: how a message may state each option's bound
BOUND_WORDS = {
    "epsilon": ("positive", "> 0"),
    "epsilon_high": ("positive", "> 0"),
    "dual_clip_c": ("> 1",),
    "sapo_temperature_pos": ("positive", "> 0"),
    "sapo_temperature_neg": ("positive", "> 0"),
    "kl_cov_ratio": ("(0, 1]", "> 0 and <= 1"),
    "kl_cov_coef": (">= 0",),
}


def test_the_upper_bound_of_kl_cov_ratio_is_1():
    one_token(1.0, 1.0, mode="unclipped", kl_cov_ratio=1.0)
    with pytest.raises(ValueError, match=r"^kl_cov_ratio must be .*1.*, got 1\.0001$"):
        one_token(1.0, 1.0, mode="unclipped", kl_cov_ratio=1.0001)
    with pytest.raises(ValueError, match=r"^epsilon_high must be .* or None, got 0$"):
        LossOptions(epsilon_high=0)
    assert LossOptions(epsilon_high=None).upper == 0.2 and LossOptions(0.1, 0.3).upper == 0.3


@pytest.mark.parametrize("mode", ["naive", "unclipped", "clipped", "dual_clip", "cispo", "sapo"])
def test_options_of_other_modes_do_not_change_the_loss(mode):
    """Each mode reads only its own options: changing the others changes nothing."""
    gen = torch.Generator().manual_seed(3)
    log_probs = -torch.rand(2, 3, 4, generator=gen, dtype=torch.float64) * 2
    old = log_probs + torch.randn(2, 3, 4, generator=gen, dtype=torch.float64)
    deltas = torch.randn(2, 3, generator=gen, dtype=torch.float64)
    own = {
        "naive": (), "unclipped": (), "sapo": ("sapo_temperature_pos", "sapo_temperature_neg"),
        "clipped": ("epsilon", "epsilon_high"), "cispo": ("epsilon", "epsilon_high"),
        "dual_clip": ("epsilon", "epsilon_high", "dual_clip_c"),
    }[mode]  # fmt: skip
    others = dict(
        epsilon=0.05, epsilon_high=0.9, dual_clip_c=1.5, sapo_temperature_pos=3.0,
        sapo_temperature_neg=0.2, kl_cov_ratio=0.5, kl_cov_coef=3.0,
    )  # fmt: skip
    changed = {k: v for k, v in others.items() if k not in own}
    base = per_token_loss_and_metrics(log_probs, deltas, mode, old)
    moved = per_token_loss_and_metrics(log_probs, deltas, mode, old, LossOptions(**changed))
    assert torch.equal(base[0], moved[0]) and base[1] == moved[1]
    if own:  # ... and its own options do
        mine = LossOptions(**{k: others[k] for k in own})
        assert not torch.equal(
            base[0], per_token_loss_and_metrics(log_probs, deltas, mode, old, mine)[0]
        )


def test_sequence_log_ratio_by_hand_with_and_without_mask():
    log_probs = torch.tensor([[[-1.0, -2.0, -3.0], [-1.0, -1.0, -1.0]]], dtype=torch.float64)
    old = torch.tensor([[[-2.0, -2.5, 9.0], [-1.5, -1.0, -0.5]]], dtype=torch.float64)
    mask = torch.tensor([[[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]])
    got = sequence_log_ratio(log_probs, old, mask)
    assert got.dtype == torch.float64 and got.shape == (1, 2, 1)
    torch.testing.assert_close(got, torch.tensor([[[0.75], [0.0]]], dtype=torch.float64))
    torch.testing.assert_close(sequence_log_ratio(log_probs, old, mask.bool()), got)
    nan_old = old.clone()
    nan_old[0, 0, 2] = math.nan  # padding: selected away, never multiplied by 0
    torch.testing.assert_close(sequence_log_ratio(log_probs, nan_old, mask), got)
    message = "log_probs and old_log_probs must have the same shape, got [1, 2, 3] and [1, 2, 2]"
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        sequence_log_ratio(log_probs, old[..., :2])
    full = sequence_log_ratio(log_probs, old)
    torch.testing.assert_close(full, torch.tensor([[[-3.5], [0.0]]], dtype=torch.float64))


def test_sequence_level_ratio_is_clamped_on_both_sides():
    for sign in (1.0, -1.0):
        log_probs = torch.full((1, 1, 2), sign * 30.0)
        loss = compute_per_token_loss(
            log_probs, torch.ones(1, 1), "unclipped", torch.zeros(1, 1, 2),
            importance_sampling_level="sequence",
        )  # fmt: skip
        # compared in log space: exp(-20) and exp(-30) are both ~0 on a linear scale
        torch.testing.assert_close((-loss).log(), torch.full((1, 1, 2), sign * MAX_LOG_RATIO))


def test_mask_checks_and_messages():
    lp, old = torch.zeros(1, 2, 3), torch.zeros(1, 2, 3)
    deltas = torch.ones(1, 2)
    with pytest.raises(
        ValueError,
        match="^" + re.escape(
            "unknown importance_sampling_level 'group'; valid values are: token, sequence"
        ),
    ):  # fmt: skip
        compute_per_token_loss(lp, deltas, "clipped", old, importance_sampling_level="group")
    with pytest.raises(ValueError, match=r"^log_probs and mask must have the same shape"):
        compute_per_token_loss(lp, deltas, "clipped", old, mask=torch.ones(1, 2, 2))
    with pytest.raises(ValueError, match=r"^mask must hold only 0 and 1 \(or be bool\)$"):
        compute_per_token_loss(lp, deltas, "clipped", old, mask=torch.full((1, 2, 3), 0.5))
    empty_row = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]])
    message = (
        "mask: importance_sampling_level 'sequence' averages each response's log-ratio over "
        "its real tokens, but some response has none (an all-zero mask row)"
    )
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        compute_per_token_loss(
            lp, deltas, "clipped", old, importance_sampling_level="sequence", mask=empty_row
        )
    # the token level does not read the mask's rows: an empty response is fine there
    compute_per_token_loss(lp, deltas, "clipped", old, mask=empty_row)
    compute_per_token_loss(lp, deltas, "clipped", old, mask=empty_row.bool())


def test_compute_loss_passes_the_options_and_refuses_a_mask():
    lp = torch.log(torch.tensor([[[4.0, 2.0]]]))
    old, deltas = torch.zeros(1, 1, 2), torch.tensor([[-1.0]])
    got = compute_loss(lp, deltas, "dual_clip", old, dual_clip_c=3.5)
    assert got.item() == pytest.approx((3.5 + 2.0) / 2)
    message = (
        "compute_loss takes the plain mean over every slot; with a mask use "
        "compute_per_token_loss(..., mask=mask) and masking.aggregate_loss"
    )
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        compute_loss(lp, deltas, "clipped", old, mask=torch.ones(1, 1, 2))


def _config(**fields):
    base = dict(
        loss_mode="clipped", detach_old_log_probs=True, epsilon=0.2, epsilon_high=None,
        dual_clip_c=3.0, sapo_temperature_pos=1.0, sapo_temperature_neg=1.05,
        kl_cov_ratio=0.002, kl_cov_coef=1.0,
    )  # fmt: skip
    return SimpleNamespace(**{**base, **fields})


def test_the_loop_objectives_pass_every_config_field():
    gen = torch.Generator().manual_seed(0)
    log_probs = -torch.rand(2, 3, 4, generator=gen, dtype=torch.float64) * 2
    old = log_probs + torch.randn(2, 3, 4, generator=gen, dtype=torch.float64)
    mask = torch.tensor([1.0, 1.0, 1.0, 0.0]).expand(2, 3, 4)
    rollout = SimpleNamespace(old_log_probs=old, deltas=torch.randn(2, 3, generator=gen), mask=mask)
    cases = [
        dict(loss_mode="dual_clip", dual_clip_c=1.5, epsilon=0.1, epsilon_high=0.4),
        dict(loss_mode="sapo", sapo_temperature_pos=3.0, sapo_temperature_neg=0.5),
        dict(loss_mode="cispo", epsilon=0.3, epsilon_high=0.05),
        dict(loss_mode="kl_cov", kl_cov_ratio=0.3, kl_cov_coef=2.0),
    ]
    for fields in cases:
        config = _config(**fields)
        options = {k: v for k, v in fields.items() if k != "loss_mode"}
        for level, objective in POLICY_OBJECTIVES.items():
            if config.loss_mode == "kl_cov" and level == "sequence":
                continue  # refused: KL-Cov penalises single tokens (tests/test_kl_cov.py)
            got, metrics = objective(log_probs, rollout, config)
            want, want_metrics = per_token_loss_and_metrics(
                log_probs, rollout.deltas, config.loss_mode, old,
                LossOptions(importance_sampling_level=level, **options), mask=mask,
            )  # fmt: skip
            torch.testing.assert_close(got, want)
            assert metrics == want_metrics
            assert ("clip_fraction" in metrics) == (config.loss_mode == "dual_clip")
    # the sequence level averages over the mask's real tokens only
    config = _config(loss_mode="unclipped")
    seq, _ = sequence_level_objective(log_probs, rollout, config)
    unmasked = compute_per_token_loss(
        log_probs, rollout.deltas, "unclipped", old, importance_sampling_level="sequence"
    )
    assert not torch.allclose(seq, unmasked)


@pytest.mark.parametrize("mode", ["naive", "unclipped", "clipped", "dual_clip", "cispo", "sapo"])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_per_token_deltas_equal_broadcast_per_response_ones(mode, level):
    gen = torch.Generator().manual_seed(1)
    log_probs = -torch.rand(2, 3, 4, generator=gen, dtype=torch.float64) * 2
    old = log_probs + 0.5 * torch.randn(2, 3, 4, generator=gen, dtype=torch.float64)
    deltas = torch.randn(2, 3, generator=gen, dtype=torch.float64)
    options = dict(importance_sampling_level=level)
    per_response = compute_per_token_loss(log_probs, deltas, mode, old, **options)
    per_token = compute_per_token_loss(
        log_probs, deltas[..., None].expand(2, 3, 4), mode, old, **options
    )
    assert per_token.shape == per_response.shape == (2, 3, 4)
    torch.testing.assert_close(per_token, per_response)


def test_deltas_must_be_a_tensor():
    with pytest.raises(TypeError, match="^deltas must be a torch.Tensor, got list$"):
        compute_per_token_loss(torch.zeros(1, 2, 3), [[1.0, 2.0]], "naive")


# ---- the default-off remedies of the objective ----------------------------------------------


def _remedy_batch():
    gen = torch.Generator().manual_seed(1)
    log_probs = -torch.rand(3, 4, 5, generator=gen, dtype=torch.float64) * 3
    old = log_probs - torch.randn(3, 4, 5, generator=gen, dtype=torch.float64) * 0.3
    mask = torch.arange(5) < torch.tensor([[5, 3, 4, 2], [5, 5, 1, 3], [4, 4, 5, 2]])[..., None]
    deltas = torch.randn(3, 4, generator=gen, dtype=torch.float64) * 2
    responses = torch.randint(0, 5, (3, 4, 5), generator=gen)
    entropy = torch.rand(3, 4, 5, generator=gen, dtype=torch.float64)
    rollout = SimpleNamespace(
        old_log_probs=old, deltas=deltas, mask=mask.double(), responses=responses,
        token_entropy=entropy,
    )  # fmt: skip
    return log_probs, rollout


def test_the_objective_applies_clip_cov_with_its_seeded_pick():
    from pgrl_helpers.covariance import clip_cov_tokens
    from pgrl_helpers.losses import clip_mask
    from pgrl_helpers.registry import token_level_objective

    log_probs, rollout = _remedy_batch()
    config = _config(
        clip_cov_ratio=0.1, clip_cov_lb=-100.0, clip_cov_ub=100.0, seed=2, epsilon_high=0.28
    )
    got, _ = token_level_objective(log_probs, rollout, config)
    plain = compute_per_token_loss(
        log_probs, rollout.deltas, "clipped", old_log_probs=rollout.old_log_probs, epsilon_high=0.28
    )
    clipped = clip_mask(log_probs, rollout.old_log_probs, rollout.deltas, 0.2, 0.28) != 0
    seed = 2 * 1_000_003 + int(rollout.responses.sum()) + rollout.responses.numel()
    chosen = clip_cov_tokens(
        log_probs, rollout.deltas, clipped, 0.1, -100.0, 100.0, rollout.mask,
        torch.Generator().manual_seed(seed),
    )  # fmt: skip
    assert 3 <= chosen.sum() < (rollout.mask > 0).sum() - clipped.sum()
    assert torch.equal(got, torch.where(chosen, torch.zeros_like(plain), plain))
    assert not (chosen & (rollout.mask == 0)).any()


def test_clip_cov_reads_epsilon_high_for_the_already_clipped_tokens():
    from pgrl_helpers.registry import apply_token_remedies

    log_probs = torch.zeros(1, 1, 4, dtype=torch.float64)
    old = torch.log(torch.tensor([[[1 / 1.25, 1 / 1.25, 1.0, 1.0]]], dtype=torch.float64))
    deltas = torch.tensor([[[1.0, 1.0, 1.0, 1.0]]], dtype=torch.float64)
    # ratio 1.25 on tokens 0, 1: clipped with epsilon 0.2, not with epsilon_high 0.28
    rollout = SimpleNamespace(
        old_log_probs=old, deltas=deltas, mask=torch.ones(1, 1, 4),
        responses=torch.zeros(1, 1, 4, dtype=torch.long),
    )  # fmt: skip
    loss = torch.ones(1, 1, 4, dtype=torch.float64)
    for high, zeroed in ((None, 2), (0.28, 4)):
        config = _config(
            clip_cov_ratio=1.0, clip_cov_lb=-1.0, clip_cov_ub=1.0, seed=0, epsilon_high=high
        )
        assert (apply_token_remedies(loss, log_probs, rollout, config) == 0).sum() == zeroed


def test_the_objective_keeps_only_the_high_entropy_tokens():
    from pgrl_helpers.registry import token_level_objective

    log_probs, rollout = _remedy_batch()
    config = _config(top_entropy_quantile=0.3)
    got, _ = token_level_objective(log_probs, rollout, config)
    plain = compute_per_token_loss(
        log_probs, rollout.deltas, "clipped", old_log_probs=rollout.old_log_probs
    )
    keep = high_entropy_mask(rollout.token_entropy, rollout.mask, 0.3)
    assert 0 < keep.sum() < (rollout.mask > 0).sum()
    assert got.dtype == torch.float64
    assert torch.equal(got, plain * keep)
    # a config without the remedy fields (or with them off) leaves the loss as it is
    assert torch.equal(token_level_objective(log_probs, rollout, _config())[0], plain)
    off = _config(top_entropy_quantile=1.0, clip_cov_ratio=0.0)
    assert torch.equal(token_level_objective(log_probs, rollout, off)[0], plain)


# ---- each mode's metrics at the clip edges (a ratio exactly on an edge is not clipped) ---------


def _edge_metrics(mode, **options):
    """(metrics, tokens with delta != 0 whose gradient is 0, tokens whose weight != ratio)."""
    log_probs, old, deltas = ratio_batch((1.0, -1.0, 0.0, 0.5, -0.5))
    loss, metrics = per_token_loss_and_metrics(log_probs, deltas, mode, old, LossOptions(**options))
    (grad,) = torch.autograd.grad(loss.sum(), log_probs)
    nonzero = (deltas != 0)[:, :, None].expand_as(grad)
    weight = grad / -deltas[:, :, None]  # d(-loss)/d log pi / A
    moved = (weight - RATIOS).abs()[nonzero] > 1e-6
    return metrics, ((grad == 0) & nonzero).float().mean().item(), moved.float().mean().item()


@pytest.mark.parametrize("epsilon, epsilon_high", [(0.5, None), (0.5, 0.25), (0.25, 0.5)])
def test_the_clip_metrics_at_the_edges(epsilon, epsilon_high):
    options = dict(epsilon=epsilon, epsilon_high=epsilon_high)
    metrics, cut, _ = _edge_metrics("clipped", **options)
    assert cut > 0 and metrics == {"clip_fraction": pytest.approx(cut)}
    for c in (2.0, 1.5):  # ratio exactly c: the bound c A does not bind (gradient kept)
        metrics, cut, _ = _edge_metrics("dual_clip", dual_clip_c=c, **options)
        assert metrics == {"clip_fraction": pytest.approx(cut)}
    metrics, _, moved = _edge_metrics("cispo", **options)
    assert moved > 0 and metrics == {"weight_clip_fraction": pytest.approx(moved)}


def test_the_dispatch_contract_naive_gets_no_ratio_and_the_freeze_guard_is_on(monkeypatch):
    from pgrl_helpers.losses import LOSS_FUNCTIONS

    log_probs, old, deltas = ratio_batch((1.0,))
    seen = {}

    def spy(log_probs, old_log_probs, delta, ratio, mask, options):
        seen.update(ratio=ratio, delta=delta, mask=mask)
        return -log_probs * delta, {}

    monkeypatch.setitem(LOSS_FUNCTIONS, "naive", spy)
    per_token_loss_and_metrics(log_probs, deltas, "naive", old, mask=torch.ones(1, 1, 7))
    assert seen["ratio"] is None and seen["delta"].shape == (1, 1, 1)
    assert seen["mask"].dtype == torch.bool and seen["mask"].all()
    with pytest.raises(ValueError, match="^old_log_probs requires grad"):
        per_token_loss_and_metrics(log_probs, deltas, "clipped", log_probs)


def test_an_empty_response_is_refused_at_the_sequence_level_only():
    lp, old, deltas = torch.zeros(1, 2, 3), torch.zeros(1, 2, 3), torch.ones(1, 2)
    full_then_empty = torch.tensor([[[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]])  # every column has one
    with pytest.raises(ValueError, match="^mask: importance_sampling_level 'sequence' averages"):
        compute_per_token_loss(
            lp, deltas, "unclipped", old, importance_sampling_level="sequence", mask=full_then_empty
        )
    with pytest.raises(ValueError, match="^mask: importance_sampling_level 'sequence' averages"):
        sequence_log_ratio(lp, old, full_then_empty)
    compute_per_token_loss(lp, deltas, "unclipped", old, mask=full_then_empty)  # token level
