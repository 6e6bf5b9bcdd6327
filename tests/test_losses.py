"""compute_loss: gradient identities at ratio 1, clipping, overflow safety, bad input; and
each mode's function in ``LOSS_FUNCTIONS`` against its paper's formula, by hand and by
autograd, with its metrics."""

from __future__ import annotations

import math
import re

import pytest
import torch

from pgrl_helpers._validate import MAX_LOG_RATIO
from pgrl_helpers.losses import (
    FREEZE_MESSAGE,
    LOSS_FUNCTIONS,
    LOSS_MODES,
    LossOptions,
    clip_fraction,
    clip_mask,
    clipped_loss,
    compute_loss,
    compute_per_token_loss,
    compute_ratio,
    per_token_loss_and_metrics,
    sequence_log_ratio,
)
from pgrl_helpers.masking import aggregate_loss

#: Other test files whose tests also pin pgrl_helpers/losses.py (tests/mutation.py).
MUTATION_ALSO = ("test_covariance.py", "test_objective.py", "test_config.py")


def make_batch(seed=0, batch=3, trial=4, pos=5):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, trial, pos, requires_grad=True, generator=g)
    deltas = torch.randn(batch, trial, generator=g)
    return logits, deltas


def log_probs_of(logits):
    return torch.nn.functional.logsigmoid(logits)  # any differentiable log-prob in (-inf, 0)


def grad_of(loss, x):
    (g,) = torch.autograd.grad(loss, x)
    return g


def test_all_modes_share_the_naive_gradient_at_ratio_one():
    logits, deltas = make_batch()
    log_probs = log_probs_of(logits)
    old = log_probs.detach()
    naive = grad_of(compute_loss(log_probs, deltas, "naive"), logits)
    for mode in ("unclipped", "clipped"):
        g = grad_of(compute_loss(log_probs_of(logits), deltas, mode, old), logits)
        torch.testing.assert_close(g, naive, rtol=1e-6, atol=1e-7)


def test_clipped_equals_unclipped_inside_the_trust_region():
    logits, deltas = make_batch(1)
    log_probs = log_probs_of(logits)
    noise = torch.randn(log_probs.shape, generator=torch.Generator().manual_seed(0))
    old = (log_probs + (0.05 * noise).clamp(-0.15, 0.15)).detach()  # ratios in [0.86, 1.17]
    assert (compute_ratio(log_probs, old) - 1).abs().max() < 0.2
    a = compute_per_token_loss(log_probs, deltas, "clipped", old, epsilon=0.2)
    b = compute_per_token_loss(log_probs, deltas, "unclipped", old)
    torch.testing.assert_close(a, b)
    assert clip_fraction(log_probs, old, deltas, 0.2) == 0.0


def test_clipped_gradient_is_zero_exactly_where_the_sign_of_delta_selects_the_clip():
    # one response per sign of delta, three tokens: ratio far above, inside, far below the range
    old = torch.zeros(1, 2, 3)
    log_ratio = torch.tensor([[[0.5, 0.0, -0.5], [0.5, 0.0, -0.5]]], requires_grad=True)
    deltas = torch.tensor([[1.0, -1.0]])
    loss = compute_per_token_loss(log_ratio + old, deltas, "clipped", old, epsilon=0.2).sum()
    g = grad_of(loss, log_ratio)
    # delta > 0: clipped (zero grad) when ratio > 1 + eps; active otherwise
    assert g[0, 0, 0] == 0 and g[0, 0, 1] != 0 and g[0, 0, 2] != 0
    # delta < 0: clipped when ratio < 1 - eps; active otherwise
    assert g[0, 1, 2] == 0 and g[0, 1, 1] != 0 and g[0, 1, 0] != 0
    frac = clip_fraction(log_ratio + old, old, deltas, 0.2)
    assert frac == pytest.approx(2 / 6)


def test_huge_log_ratio_differences_stay_finite():
    logits, deltas = make_batch(2)
    old = torch.full_like(logits, -1e4).detach()
    for mode in LOSS_MODES:
        loss = compute_loss(logits * 1e4, deltas, mode, old)
        g = grad_of(loss, logits)
        assert torch.isfinite(loss) and torch.isfinite(g).all(), mode


def test_naive_hand_value():
    log_probs = torch.log(torch.tensor([[[0.5, 0.25]]]))
    deltas = torch.tensor([[2.0]])
    expected = -(2 * (torch.log(torch.tensor(0.5)) + torch.log(torch.tensor(0.25)))) / 2
    torch.testing.assert_close(compute_loss(log_probs, deltas, "naive"), expected)


def test_freeze_pitfall_is_named():
    logits, deltas = make_batch(3)
    log_probs = log_probs_of(logits)
    with pytest.raises(ValueError, match="freeze pitfall"):
        compute_loss(log_probs, deltas, "clipped", old_log_probs=log_probs)
    # the demonstration switch: loss runs, gradient is exactly zero (ratio == 1 identically)
    loss = compute_loss(log_probs, deltas, "unclipped", old_log_probs=log_probs, check_frozen=False)
    assert torch.all(grad_of(loss, logits) == 0)
    assert "torch.no_grad()" in FREEZE_MESSAGE


def test_bad_inputs():
    logits, deltas = make_batch(4)
    log_probs = log_probs_of(logits)
    with pytest.raises(ValueError, match="unknown loss mode 'ppo'.*naive, unclipped, clipped"):
        compute_loss(log_probs, deltas, "ppo")
    with pytest.raises(ValueError, match="needs old_log_probs"):
        compute_loss(log_probs, deltas, "clipped")
    with pytest.raises(ValueError, match=r"deltas \[3, 3\], log_probs \[3, 4, 5\]"):
        compute_loss(log_probs, deltas[:, :3], "naive")
    with pytest.raises(ValueError, match=r"same shape.*\[3, 4, 5\] and \[3, 4, 4\]"):
        compute_loss(log_probs, deltas, "unclipped", log_probs.detach()[..., :4])
    with pytest.raises(ValueError, match=r"batch, trial, pos"):
        compute_loss(log_probs[0], deltas, "naive")
    for bad_epsilon in (0, -0.1, float("inf"), float("nan"), True):
        with pytest.raises(ValueError, match=rf"^epsilon must be .*, got {bad_epsilon!r}$"):
            compute_loss(log_probs, deltas, "clipped", log_probs.detach(), epsilon=bad_epsilon)
    bad = deltas.clone()
    bad[0, 0] = float("inf")
    with pytest.raises(ValueError, match="deltas contains 1 non-finite"):
        compute_loss(log_probs, bad, "naive")


def test_epsilon_at_least_one_switches_the_lower_clip_off():
    """With epsilon >= 1 the lower edge 1 - epsilon <= 0 never binds (ratios are positive):
    negative-delta tokens with tiny ratios keep their gradient; positive ones still clip."""
    torch.manual_seed(3)
    old = torch.randn(2, 3, 4) - 1.0
    log_probs = (old - 3.0).requires_grad_(True)  # ratio e^-3 ~ 0.05: far below 1 - 0.2
    deltas = torch.tensor([[-1.0, -0.5, 2.0], [-2.0, 1.0, -0.1]])
    for epsilon, expect_low_grad in ((0.2, False), (1.0, True), (1.5, True)):
        loss = compute_per_token_loss(log_probs, deltas, "clipped", old, epsilon=epsilon)
        (grad,) = torch.autograd.grad(loss.sum(), log_probs)
        negative = (deltas < 0)[:, :, None].expand_as(grad)
        assert bool((grad[negative] != 0).all()) == expect_low_grad, epsilon
        unclipped = compute_per_token_loss(log_probs, deltas, "unclipped", old)
        if expect_low_grad:  # nothing clips (ratio < 1 + eps for the positive tokens too)
            torch.testing.assert_close(loss, unclipped)


def test_clip_mask_marks_low_and_high_and_matches_zero_gradient():
    torch.manual_seed(4)
    old = torch.randn(3, 4, 5)
    log_probs = (old + 0.6 * torch.randn(3, 4, 5)).requires_grad_(True)
    deltas = torch.randn(3, 4)
    loss = compute_per_token_loss(log_probs, deltas, "clipped", old, epsilon=0.2, epsilon_high=0.3)
    mask = clip_mask(log_probs, old, deltas, 0.2, 0.3)
    ratio = (log_probs - old).exp().detach()
    d = deltas[:, :, None].expand_as(ratio)
    assert torch.equal(mask == 1, (d > 0) & (ratio > 1.3))
    assert torch.equal(mask == -1, (d < 0) & (ratio < 0.8))
    assert (mask == 1).any() and (mask == -1).any() and (mask == 0).any()
    (grad,) = torch.autograd.grad(loss.sum(), log_probs)
    assert torch.equal(grad == 0, mask != 0)  # clipped exactly where the gradient is cut
    assert clip_fraction(log_probs.detach(), old, deltas, 0.2, 0.3) == pytest.approx(
        (mask != 0).float().mean().item()
    )
    assert mask.dtype == torch.int8
    with pytest.raises(TypeError, match="return_clip_mask"):  # gone: call clip_mask instead
        compute_per_token_loss(log_probs, deltas, "clipped", old, return_clip_mask=True)


# ---- one function per loss mode: LOSS_FUNCTIONS ---------------------------------------------

EPS_L, EPS_H, C, TAU_POS, TAU_NEG = 0.2, 0.28, 3.0, 1.0, 1.05
GRID_RATIOS = (0.5, 0.79, 0.81, 1.0, 1.2, 1.27, 1.29, 2.0, 2.9, 3.1, 5.0)
GRID_DELTAS = (1.0, -1.0, 0.5, -2.0, 0.0)
OPTIONS = LossOptions(EPS_L, EPS_H, C, TAU_POS, TAU_NEG, kl_cov_ratio=1.0, kl_cov_coef=0.7)


def by_hand(mode, r, a):
    """(loss, d loss / d log pi) of one token with ratio r and delta a, from the paper's formula
    in plain Python (the derivative in closed form: d r / d log pi = r)."""
    lp = math.log(r)  # old log-prob 0
    clip = min(max(r, 1 - EPS_L), 1 + EPS_H)
    if mode == "naive":  # REINFORCE
        return -lp * a, -a
    if mode == "unclipped":  # PPO's L^CPI
        return -r * a, -r * a
    if mode in ("clipped", "dual_clip"):  # PPO eq. 7: the smaller of the two terms
        value, grad = (r * a, -r * a) if r * a <= clip * a else (clip * a, 0.0)
        if mode == "dual_clip" and a < 0 and C * a > value:  # Ye et al.: bounded below by c A
            value, grad = C * a, 0.0
        return -value, grad
    if mode == "cispo":  # MiniMax-M1 eq. 4-5: sg(clip(r)) A log pi
        return -clip * a * lp, -clip * a
    if mode == "sapo":  # SAPO: (4 / tau) sigmoid(tau (r - 1)) A
        tau = TAU_POS if a > 0 else TAU_NEG
        sig = 1 / (1 + math.exp(-tau * (r - 1)))
        return -(4 / tau) * sig * a, -4 * sig * (1 - sig) * r * a
    # kl_cov with kl_cov_ratio 1: every token gets coef |log pi - log pi_old|
    return -r * a + 0.7 * abs(lp), -r * a + 0.7 * math.copysign(1.0, lp) * (lp != 0)


def grid():
    """log_probs float64[1, deltas, ratios] (old = 0), delta float64[1, deltas, 1]."""
    lp = torch.tensor(GRID_RATIOS, dtype=torch.float64).log().expand(1, len(GRID_DELTAS), -1)
    delta = torch.tensor(GRID_DELTAS, dtype=torch.float64).reshape(1, -1, 1)
    return lp.clone().requires_grad_(True), torch.zeros_like(lp), delta


def run_mode(fn, mask=None, options=OPTIONS):
    """(loss, d loss.sum() / d log pi, metrics) of a mode function on the grid."""
    log_probs, old, delta = grid()
    ratio = compute_ratio(log_probs, old)
    loss, metrics = fn(log_probs, old, delta, ratio, mask, options)
    (grad,) = torch.autograd.grad(loss.expand(log_probs.shape).sum(), log_probs)
    return loss.expand(log_probs.shape), grad, metrics


def test_the_table_lists_every_mode_once_with_one_signature():
    assert LOSS_MODES == tuple(LOSS_FUNCTIONS)
    assert LOSS_MODES == ("naive", "unclipped", "clipped", "dual_clip", "cispo", "sapo", "kl_cov")
    assert [fn.__name__ for fn in LOSS_FUNCTIONS.values()] == [f"{m}_loss" for m in LOSS_MODES]
    import inspect

    for fn in LOSS_FUNCTIONS.values():
        params = list(inspect.signature(fn).parameters)
        assert params == ["log_probs", "old_log_probs", "delta", "ratio", "mask", "options"]


@pytest.mark.parametrize("mode", LOSS_MODES)
def test_each_mode_is_its_papers_formula_in_value_and_gradient(mode):
    loss, grad, _ = run_mode(LOSS_FUNCTIONS[mode])
    assert loss.shape == (1, len(GRID_DELTAS), len(GRID_RATIOS)) and loss.dtype == torch.float64
    for j, a in enumerate(GRID_DELTAS):
        for k, r in enumerate(GRID_RATIOS):
            value, dvalue = by_hand(mode, r, a)
            assert loss[0, j, k].item() == pytest.approx(value, abs=1e-12), (r, a)
            assert grad[0, j, k].item() == pytest.approx(dvalue, abs=1e-12), (r, a)


def cut_by_autograd(grad, delta):
    """bool: the tokens with delta != 0 whose gradient is exactly 0 (a clip cut it)."""
    return (grad == 0) & (delta != 0).expand_as(grad)


@pytest.mark.parametrize("mode", ["clipped", "dual_clip"])
def test_clip_fraction_counts_exactly_the_tokens_whose_gradient_a_clip_cuts(mode):
    loss, grad, metrics = run_mode(LOSS_FUNCTIONS[mode])
    _, _, delta = grid()
    cut = cut_by_autograd(grad, delta)
    assert set(metrics) == {"clip_fraction"}
    assert metrics["clip_fraction"] == pytest.approx(cut.float().mean().item(), abs=1e-15)
    # by hand: clipped cuts A > 0, r in (1.28, ..) and A < 0, r < 0.8; dual-clip also A < 0, r > 3
    high = sum(r > 1 + EPS_H for r in GRID_RATIOS) * 2  # two positive deltas
    low = sum(r < 1 - EPS_L for r in GRID_RATIOS) * 2  # two negative deltas
    dual = sum(r > C for r in GRID_RATIOS) * 2 if mode == "dual_clip" else 0
    assert metrics["clip_fraction"] == pytest.approx((high + low + dual) / loss.numel(), rel=1e-6)
    if mode == "clipped":  # the same number as the public clip_fraction
        log_probs, old, _ = grid()
        deltas = torch.tensor([GRID_DELTAS], dtype=torch.float64)
        assert metrics["clip_fraction"] == clip_fraction(log_probs, old, deltas, EPS_L, EPS_H)


def test_a_planted_wrong_clip_fraction_is_caught():
    """The loop's old clip_fraction counted every ratio outside the range, whatever the sign
    of delta (and for every mode): it is not the fraction of cut gradients."""

    def wrong(log_probs, old_log_probs, delta, ratio, mask, options):
        loss, _ = clipped_loss(log_probs, old_log_probs, delta, ratio, mask, options)
        outside = (ratio > 1 + options.upper) | (ratio < 1 - options.epsilon)
        return loss, {"clip_fraction": outside.expand(log_probs.shape).double().mean().item()}

    _, grad, metrics = run_mode(wrong)
    truth = cut_by_autograd(grad, grid()[2]).float().mean().item()
    assert metrics["clip_fraction"] != pytest.approx(truth)


def test_cispo_reports_the_clipped_weights_and_keeps_every_gradient():
    _, grad, metrics = run_mode(LOSS_FUNCTIONS["cispo"])
    _, _, delta = grid()
    assert set(metrics) == {"weight_clip_fraction"}
    assert not cut_by_autograd(grad, delta).any()  # no gradient is cut: no clip_fraction
    outside = sum(r < 1 - EPS_L or r > 1 + EPS_H for r in GRID_RATIOS)
    assert metrics["weight_clip_fraction"] == pytest.approx(outside / len(GRID_RATIOS), rel=1e-6)
    # the weight |d loss / d log pi| / |A| differs from r exactly on those tokens
    weight = grad[0, :4] / -delta[0, :4]  # the four nonzero deltas
    changed = (weight - torch.tensor(GRID_RATIOS, dtype=torch.float64)).abs() > 1e-12
    assert changed.float().mean().item() == pytest.approx(metrics["weight_clip_fraction"])


@pytest.mark.parametrize("mode", ["naive", "unclipped", "sapo", "kl_cov"])
def test_modes_that_never_clip_report_no_clip_fraction(mode):
    assert run_mode(LOSS_FUNCTIONS[mode])[2] == {}


@pytest.mark.parametrize("mode, key", [("clipped", "clip_fraction"), ("dual_clip", "clip_fraction"),
                                       ("cispo", "weight_clip_fraction")])  # fmt: skip
def test_the_metrics_count_real_tokens_only(mode, key):
    mask = torch.zeros(1, len(GRID_DELTAS), len(GRID_RATIOS), dtype=torch.bool)
    mask[0, :2, -4:] = True  # A = +1 / -1 at r = 2, 2.9, 3.1, 5: all clipped but A < 0, r < c
    expected = {"clipped": 4 / 8, "dual_clip": 6 / 8, "cispo": 1.0}[mode]
    assert run_mode(LOSS_FUNCTIONS[mode], mask)[2][key] == expected
    unmasked = run_mode(LOSS_FUNCTIONS[mode])[2][key]
    assert unmasked != expected


def test_the_entry_points_dispatch_to_the_table_and_check_the_options():
    log_probs, old, delta = grid()
    deltas = delta[..., 0]
    for mode in LOSS_MODES:
        loss, metrics = per_token_loss_and_metrics(log_probs, deltas, mode, old, OPTIONS)
        want, want_metrics = LOSS_FUNCTIONS[mode](
            log_probs, old, delta, compute_ratio(log_probs, old), None, OPTIONS
        )
        assert torch.equal(loss, want.expand(log_probs.shape)) and metrics == want_metrics
    with pytest.raises(TypeError, match="^options must be a LossOptions, got dict$"):
        per_token_loss_and_metrics(log_probs, deltas, "clipped", old, {"epsilon": 0.2})
    default, _ = per_token_loss_and_metrics(log_probs, deltas, "clipped", old)
    assert torch.equal(default, compute_per_token_loss(log_probs, deltas, "clipped", old))


def test_adding_a_mode_is_one_function_and_one_entry(monkeypatch):
    def half_unclipped_loss(log_probs, old_log_probs, delta, ratio, mask, options):
        return -0.5 * ratio * delta, {"half": 0.5}

    monkeypatch.setitem(LOSS_FUNCTIONS, "half_unclipped", half_unclipped_loss)
    log_probs, old, delta = grid()
    loss, metrics = per_token_loss_and_metrics(log_probs, delta[..., 0], "half_unclipped", old)
    unclipped = compute_per_token_loss(log_probs, delta[..., 0], "unclipped", old)
    assert torch.equal(loss, 0.5 * unclipped) and metrics == {"half": 0.5}


# ---- the loop records each objective's own metrics ------------------------------------------


@pytest.mark.parametrize("mode", LOSS_MODES)
def test_the_loop_records_clip_fraction_only_for_the_losses_that_clip(mode):
    from pgrl_helpers.config import TrainConfig
    from pgrl_helpers.diagnose import diagnose
    from pgrl_helpers.training import run_policy_gradient

    config = TrainConfig(
        loss_mode=mode, deltas_mode="normalized_rewards", num_epochs=2, num_steps_per_epoch=3,
        learning_rate=0.05, epsilon=0.05, epsilon_high=0.1, dual_clip_c=1.2, kl_cov_ratio=0.2,
    )  # fmt: skip
    history = run_policy_gradient(config)
    steps = history.steps()
    clips = [s["clip_fraction"] for s in steps]
    if mode in ("clipped", "dual_clip"):
        assert all(0 <= c <= 1 for c in clips) and max(clips) > 0
    else:
        assert clips == [None] * len(steps)
    weights = [s.get("weight_clip_fraction") for s in steps]
    if mode == "cispo":
        assert all(0 <= w <= 1 for w in weights) and max(weights) > 0
    else:
        assert weights == [None] * len(steps)
    assert all(s["inner_step"] == 0 or s["ratio_mean"] != 1.0 for s in steps)  # batches reused
    findings = diagnose(history)  # a None clip_fraction: no crash, and no clip finding
    if clips[0] is None:
        assert not {f.name for f in findings} & {"clip_high", "clip_zero"}


# --- clip-higher ---
# Clip-higher (DAPO): a separate upper clip edge ``epsilon_high`` on the clipped loss.


RATIOS = torch.tensor([0.7, 0.9, 1.1, 1.25, 1.5])


def batch(delta: float):
    old = torch.zeros(1, 1, 5)
    log_probs = RATIOS.log().reshape(1, 1, 5).clone().requires_grad_(True)
    return log_probs, old, torch.tensor([[delta]])


def test_default_is_the_symmetric_clip():
    log_probs, old, deltas = batch(1.0)
    a = compute_per_token_loss(log_probs, deltas, "clipped", old, epsilon=0.2)
    b = compute_per_token_loss(log_probs, deltas, "clipped", old, epsilon=0.2, epsilon_high=0.2)
    assert torch.equal(a, b)
    assert torch.equal(
        compute_loss(log_probs, deltas, "clipped", old),
        compute_loss(log_probs, deltas, "clipped", old, epsilon_high=None),
    )


def test_upper_edge_moves_only_for_positive_deltas():
    # delta > 0: ratio 1.25 is clipped at 1.2 (eps 0.2) but not at 1.28 (eps_high 0.28)
    log_probs, old, deltas = batch(1.0)
    loss = compute_per_token_loss(log_probs, deltas, "clipped", old, epsilon=0.2, epsilon_high=0.28)
    expected = -torch.tensor([0.7, 0.9, 1.1, 1.25, 1.28])
    torch.testing.assert_close(loss[0, 0], expected)
    (grad,) = torch.autograd.grad(loss.sum(), log_probs)
    assert (grad[0, 0, :4] != 0).all() and grad[0, 0, 4] == 0  # only 1.5 is cut off
    assert clip_fraction(log_probs, old, deltas, 0.2) == pytest.approx(2 / 5)
    assert clip_fraction(log_probs, old, deltas, 0.2, epsilon_high=0.28) == pytest.approx(1 / 5)
    # delta < 0: the lower edge 1 - epsilon is unchanged by epsilon_high
    log_probs, old, deltas = batch(-1.0)
    a = compute_per_token_loss(log_probs, deltas, "clipped", old, epsilon=0.2, epsilon_high=0.28)
    b = compute_per_token_loss(log_probs, deltas, "clipped", old, epsilon=0.2)
    assert torch.equal(a, b)
    torch.testing.assert_close(a[0, 0], torch.tensor([0.8, 0.9, 1.1, 1.25, 1.5]))


def test_clip_fraction_with_a_mask_counts_real_tokens_only():
    log_probs, old, deltas = batch(1.0)
    mask = torch.tensor([[[1.0, 1.0, 1.0, 0.0, 0.0]]])
    assert clip_fraction(log_probs, old, deltas, 0.2, mask=mask) == 0.0
    assert clip_fraction(log_probs, old, -deltas, 0.2, mask=mask) == pytest.approx(1 / 3)


@pytest.mark.parametrize("bad", [0.0, -0.1, float("nan"), float("inf"), True])
def test_bad_epsilon_high_is_named(bad):
    log_probs, old, deltas = batch(1.0)
    with pytest.raises(ValueError, match="epsilon_high"):
        compute_loss(log_probs, deltas, "clipped", old, epsilon_high=bad)


# --- the 2025 objectives against hand-written references ---
# GSPO, CISPO, SAPO, dual-clip: Python loops over responses and tokens, gradients from the
# closed-form derivative (not autograd), plus the identities: on-policy every ratio loss has
# the naive gradient, GSPO with one token per response is GRPO.


EPS, EPS_HIGH = 0.2, 0.28  # C, TAU_POS, TAU_NEG as above: 3.0, 1.0, 1.05


def ragged_batch(seed, shape=(3, 4, 5), spread=0.5):
    """Random log_probs (leaf, grad), old_log_probs, deltas and a ragged mask (>= 1 token)."""
    g = torch.Generator().manual_seed(seed)
    b, t, p = shape
    log_probs = (-torch.rand(shape, generator=g, dtype=torch.float64) * 2).requires_grad_()
    old = log_probs.detach() + spread * torch.randn(shape, generator=g, dtype=torch.float64)
    deltas = torch.randn((b, t), generator=g, dtype=torch.float64)
    lengths = torch.randint(1, p + 1, (b, t), generator=g)
    mask = (torch.arange(p) < lengths[..., None]).to(torch.float64)
    return log_probs, old, deltas, mask


def clip(x, lo, hi):
    return min(max(x, lo), hi)


def reference_token(mode, lp, old, a):
    """(loss, d loss / d lp) of one token, by hand (closed-form derivative)."""
    r = math.exp(lp - old)
    if mode == "cispo":
        w = clip(r, 1 - EPS, 1 + EPS_HIGH)
        return -w * a * lp, -w * a
    if mode == "sapo":
        tau = TAU_POS if a > 0 else TAU_NEG
        sig = 1 / (1 + math.exp(-tau * (r - 1)))
        return -(4 / tau) * sig * a, -4 * sig * (1 - sig) * r * a
    # clipped / dual_clip: which branch is active decides value and gradient
    unclipped, clipped = r * a, clip(r, 1 - EPS, 1 + EPS_HIGH) * a
    value, grad = (unclipped, -r * a) if unclipped <= clipped else (clipped, 0.0)
    if mode == "dual_clip" and a < 0 and C * a > value:
        value, grad = C * a, 0.0
    return -value, grad


@pytest.mark.parametrize("mode", ["clipped", "dual_clip", "cispo", "sapo"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_token_modes_match_a_hand_written_reference(mode, seed):
    # wide spread: every branch occurs
    log_probs, old, deltas, mask = ragged_batch(seed, spread=1.0)
    loss = compute_per_token_loss(
        log_probs, deltas, mode, old, EPS, epsilon_high=EPS_HIGH, dual_clip_c=C,
        sapo_temperature_pos=TAU_POS, sapo_temperature_neg=TAU_NEG,
    )  # fmt: skip
    total = aggregate_loss(loss, mask, "token_mean")
    (grad,) = torch.autograd.grad(total, log_probs)
    count = mask.sum().item()
    b, t, p = log_probs.shape
    for i in range(b):
        for j in range(t):
            for k in range(p):
                args = (log_probs[i, j, k].item(), old[i, j, k].item(), deltas[i, j].item())
                value, dvalue = reference_token(mode, *args)
                assert loss[i, j, k].item() == pytest.approx(value, abs=1e-12)
                expected = dvalue / count if mask[i, j, k] else 0.0
                assert grad[i, j, k].item() == pytest.approx(expected, abs=1e-12)


def test_the_batches_exercise_every_branch():
    log_probs, old, deltas, _ = ragged_batch(0, spread=1.0)
    r = (log_probs.detach() - old).exp()
    a = deltas[:, :, None].expand_as(r)
    assert ((r > 1 + EPS_HIGH) & (a > 0)).any() and ((r < 1 - EPS) & (a < 0)).any()
    assert ((r > C) & (a < 0)).any()  # the dual clip binds somewhere


def reference_gspo(log_probs, old, deltas, mask):
    """GSPO eq. 5 by loops: (1/N) sum_i -min(s_i A_i, clip(s_i) A_i), and its gradient."""
    b, t, p = log_probs.shape
    total, grad = 0.0, torch.zeros(log_probs.shape, dtype=torch.float64)
    for i in range(b):
        for j in range(t):
            tokens = [k for k in range(p) if mask[i, j, k]]
            log_s = sum(log_probs[i, j, k].item() - old[i, j, k].item() for k in tokens)
            s = math.exp(log_s / len(tokens))
            a = deltas[i, j].item()
            unclipped, clipped = s * a, clip(s, 1 - EPS, 1 + EPS_HIGH) * a
            total -= min(unclipped, clipped)
            if unclipped <= clipped:  # d s / d lp_k = s / |y| for every real token
                for k in tokens:
                    grad[i, j, k] = -a * s / len(tokens)
    return total / (b * t), grad / (b * t)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_gspo_matches_a_hand_written_reference(seed):
    log_probs, old, deltas, mask = ragged_batch(seed, spread=0.3)
    loss = compute_per_token_loss(
        log_probs, deltas, "clipped", old, EPS, epsilon_high=EPS_HIGH,
        importance_sampling_level="sequence", mask=mask,
    )  # fmt: skip
    value = aggregate_loss(loss, mask, "sequence_mean")
    (grad,) = torch.autograd.grad(value, log_probs)
    ref_value, ref_grad = reference_gspo(log_probs, old, deltas, mask)
    assert value.item() == pytest.approx(ref_value, abs=1e-12)
    torch.testing.assert_close(grad, ref_grad, atol=1e-12, rtol=0)
    s = sequence_log_ratio(log_probs.detach(), old, mask).exp()
    assert ((s > 1 + EPS_HIGH) | (s < 1 - EPS)).any(), "the batch must exercise the clip"


def test_gspo_padding_cannot_leak():
    log_probs, old, deltas, mask = ragged_batch(5)
    poisoned = old.clone()
    poisoned[mask == 0] = float("nan")
    with pytest.raises(ValueError, match="old_log_probs"):  # the finite check comes first
        compute_per_token_loss(log_probs, deltas, "clipped", poisoned, mask=mask,
                               importance_sampling_level="sequence")  # fmt: skip
    far = old.clone()
    far[mask == 0] = 1e3  # a huge value in padding changes nothing
    args = dict(importance_sampling_level="sequence", mask=mask)
    a = compute_per_token_loss(log_probs, deltas, "clipped", old, **args)
    b = compute_per_token_loss(log_probs, deltas, "clipped", far, **args)
    torch.testing.assert_close(a, b)


ON_POLICY_MODES = [
    ("clipped", "token"),  # GRPO
    ("clipped", "sequence"),  # GSPO
    ("cispo", "token"),
    ("cispo", "sequence"),
    ("sapo", "token"),
    ("dual_clip", "token"),
    ("unclipped", "sequence"),
]


@pytest.mark.parametrize("aggregation", ["sequence_mean", "token_mean", "constant_normalizer"])
@pytest.mark.parametrize(("mode", "level"), ON_POLICY_MODES)
def test_on_policy_every_loss_has_the_naive_gradient(mode, level, aggregation):
    log_probs, _, deltas, mask = ragged_batch(7)
    old = log_probs.detach()

    def grad(m, lvl):
        loss = compute_per_token_loss(
            log_probs, deltas, m, None if m == "naive" else old, EPS, epsilon_high=EPS_HIGH,
            importance_sampling_level=lvl, mask=mask,
        )  # fmt: skip
        return torch.autograd.grad(aggregate_loss(loss, mask, aggregation), log_probs)[0]

    naive = grad("naive", "token")
    torch.testing.assert_close(grad(mode, level), naive, atol=1e-12, rtol=0)
    assert naive.abs().max() > 0


def test_a_wrong_sequence_ratio_breaks_the_on_policy_identity():
    # planted bug: the summed (not averaged) log-ratio gives |y| times the naive gradient
    log_probs, _, deltas, mask = ragged_batch(8)
    old = log_probs.detach()
    s = torch.exp(((log_probs - old) * mask).sum(-1, keepdim=True))
    wrong = torch.autograd.grad(
        aggregate_loss((-s * deltas[..., None]).expand_as(mask), mask, "sequence_mean"), log_probs
    )[0]
    naive = torch.autograd.grad(
        aggregate_loss(-log_probs * deltas[..., None], mask, "sequence_mean"), log_probs
    )[0]
    assert (wrong - naive).abs().max() > 1e-3


def test_gspo_with_one_token_per_response_is_grpo():
    log_probs, old, deltas, mask = ragged_batch(9, shape=(4, 6, 1), spread=0.5)
    args = dict(epsilon=EPS, epsilon_high=EPS_HIGH, mask=mask)
    grpo = compute_per_token_loss(log_probs, deltas, "clipped", old, **args)
    gspo = compute_per_token_loss(
        log_probs, deltas, "clipped", old, importance_sampling_level="sequence", **args
    )
    torch.testing.assert_close(gspo, grpo, atol=1e-15, rtol=0)
    g1 = torch.autograd.grad(grpo.sum(), log_probs)[0]
    g2 = torch.autograd.grad(gspo.sum(), log_probs)[0]
    torch.testing.assert_close(g1, g2, atol=1e-15, rtol=0)
    # ... and with longer responses it is not
    log_probs, old, deltas, mask = ragged_batch(9, shape=(4, 6, 5), spread=0.5)
    grpo = compute_per_token_loss(log_probs, deltas, "clipped", old, **{**args, "mask": mask})
    gspo = compute_per_token_loss(
        log_probs, deltas, "clipped", old, importance_sampling_level="sequence", mask=mask
    )
    assert (grpo - gspo)[mask > 0].abs().max() > 1e-3


def test_bad_inputs_raise_naming_the_argument():
    log_probs, old, deltas, mask = ragged_batch(0)
    with pytest.raises(ValueError, match="dual_clip_c"):
        compute_per_token_loss(log_probs, deltas, "dual_clip", old, dual_clip_c=1.0)
    with pytest.raises(ValueError, match="sapo_temperature_neg"):
        compute_per_token_loss(log_probs, deltas, "sapo", old, sapo_temperature_neg=0)
    with pytest.raises(ValueError, match="sapo_temperature_pos"):
        compute_per_token_loss(log_probs, deltas, "sapo", old, sapo_temperature_pos=float("nan"))
    with pytest.raises(ValueError, match="importance_sampling_level"):
        compute_per_token_loss(log_probs, deltas, "clipped", old, importance_sampling_level="seq")
    empty = mask.clone()
    empty[0, 0] = 0
    with pytest.raises(ValueError, match="mask: .*all-zero mask row"):
        compute_per_token_loss(log_probs, deltas, "clipped", old, mask=empty,
                               importance_sampling_level="sequence")  # fmt: skip
    with pytest.raises(ValueError, match="log_probs and mask"):
        compute_per_token_loss(log_probs, deltas, "clipped", old, mask=mask[..., :2])
    with pytest.raises(ValueError, match="mask must hold only 0 and 1"):
        compute_per_token_loss(log_probs, deltas, "clipped", old, mask=mask * 2)
    with pytest.raises(TypeError, match="return_clip_mask"):  # gone: clip_mask(...) instead
        compute_per_token_loss(log_probs, deltas, "cispo", old, return_clip_mask=True)
    with pytest.raises(ValueError, match="epsilon must"):
        compute_per_token_loss(log_probs, deltas, "cispo", old, epsilon=0)
    with pytest.raises(ValueError, match="needs old_log_probs"):
        compute_per_token_loss(log_probs, deltas, "sapo")
    with pytest.raises(ValueError, match="compute_per_token_loss"):
        compute_loss(log_probs, deltas, "clipped", old, mask=mask)
    with pytest.raises(ValueError, match="unknown loss mode 'gspo'"):
        compute_loss(log_probs, deltas, "gspo", old)


# --- KL-Cov ---


def random_batch(seed, shape=(3, 4, 5)):
    g = torch.Generator().manual_seed(seed)
    log_probs = (-3 * torch.rand(shape, generator=g, dtype=torch.float64)).requires_grad_()
    old = log_probs.detach() + 0.3 * torch.randn(shape, generator=g, dtype=torch.float64)
    deltas = torch.randn(shape[:2], generator=g, dtype=torch.float64)
    lengths = torch.randint(1, shape[2] + 1, shape[:2], generator=g)
    mask = torch.arange(shape[2]) < lengths[..., None]
    return log_probs, old, deltas, mask


def test_on_policy_kl_cov_is_reinforce():
    log_probs, _, deltas, mask = random_batch(4)
    kl_cov = compute_per_token_loss(log_probs, deltas, "kl_cov", log_probs.detach(), mask=mask,
                                    kl_cov_ratio=0.5)  # fmt: skip
    naive = compute_per_token_loss(log_probs, deltas, "naive")
    g1 = torch.autograd.grad(aggregate_loss(kl_cov, mask.double(), "token_mean"), log_probs)[0]
    g2 = torch.autograd.grad(aggregate_loss(naive, mask.double(), "token_mean"), log_probs)[0]
    torch.testing.assert_close(g1, g2, rtol=0, atol=1e-12)


# --- mutants ---
# The cases mutation testing found unchecked (tests/MUTATION.md).
#
# Modes compared outside the trust region, defaults, clip_fraction at its edges and for
# zero / small deltas, the ratio clamp on both sides, and error messages that name the
# argument. Any finite epsilon > 0 is allowed (>= 1: no lower clip).


# ratios exactly representable in float32 (exp(log r) == r), including the clip edges for
# epsilon 0.5 (0.5 and 1.5) and for epsilon_high 0.25 (1.25)
RATIOS_WIDE = torch.tensor([0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0])


def ratio_batch(deltas=(1.0, -1.0, 0.0)):
    """log_probs with the ratios above for each delta; old_log_probs = 0."""
    trial = len(deltas)
    log_probs = RATIOS_WIDE.log().reshape(1, 1, -1).repeat(1, trial, 1).requires_grad_(True)
    return log_probs, torch.zeros(1, trial, len(RATIOS_WIDE)), torch.tensor([list(deltas)])


def test_unclipped_differs_from_clipped_outside_the_trust_region():
    log_probs, old, deltas = ratio_batch((1.0, -1.0))
    unclipped = compute_per_token_loss(log_probs, deltas, "unclipped", old)
    clipped = compute_per_token_loss(log_probs, deltas, "clipped", old, epsilon=0.2)
    torch.testing.assert_close(unclipped[0, 0], -RATIOS_WIDE)  # -ratio * delta, nothing clipped
    torch.testing.assert_close(unclipped[0, 1], RATIOS_WIDE)
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
    with pytest.raises(ValueError, match="^clip_fraction: the mask selects no tokens"):
        clip_fraction(log_probs, old, deltas, mask=torch.zeros(1, 3, len(RATIOS_WIDE)))
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
        match=r"^loss mode 'unclipped' needs old_log_probs.*policy that sampled",
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
    with pytest.raises(
        ValueError, match=r"^log_probs and old_log_probs .*same shape.*\[1, 2, 3\] and \[1, 2, 2\]"
    ):
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
        match="^unknown importance_sampling_level 'group'.*token, sequence",
    ):
        compute_per_token_loss(lp, deltas, "clipped", old, importance_sampling_level="group")
    with pytest.raises(ValueError, match=r"^log_probs and mask must have the same shape"):
        compute_per_token_loss(lp, deltas, "clipped", old, mask=torch.ones(1, 2, 2))
    with pytest.raises(ValueError, match=r"^mask must hold only 0 and 1 \(or be bool\)"):
        compute_per_token_loss(lp, deltas, "clipped", old, mask=torch.full((1, 2, 3), 0.5))
    empty_row = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]])
    pattern = r"^mask: importance_sampling_level 'sequence' averages.*an all-zero mask row"
    with pytest.raises(ValueError, match=pattern):
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
    pattern = r"^compute_loss takes the plain mean.*compute_per_token_loss\(\.\.\., mask=mask\)"
    with pytest.raises(ValueError, match=pattern):
        compute_loss(lp, deltas, "clipped", old, mask=torch.ones(1, 1, 2))


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
    with pytest.raises(TypeError, match=r"^deltas must be a torch\.Tensor.*list"):
        compute_per_token_loss(torch.zeros(1, 2, 3), [[1.0, 2.0]], "naive")


# ---- each mode's metrics at the clip edges (a ratio exactly on an edge is not clipped) ---------


def _edge_metrics(mode, **options):
    """(metrics, tokens with delta != 0 whose gradient is 0, tokens whose weight != ratio)."""
    log_probs, old, deltas = ratio_batch((1.0, -1.0, 0.0, 0.5, -0.5))
    loss, metrics = per_token_loss_and_metrics(log_probs, deltas, mode, old, LossOptions(**options))
    (grad,) = torch.autograd.grad(loss.sum(), log_probs)
    nonzero = (deltas != 0)[:, :, None].expand_as(grad)
    weight = grad / -deltas[:, :, None]  # d(-loss)/d log pi / A
    moved = (weight - RATIOS_WIDE).abs()[nonzero] > 1e-6
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


def test_check_loss_fields_names_the_loss_mode_field():
    from types import SimpleNamespace

    from pgrl_helpers.losses import check_loss_fields

    with pytest.raises(ValueError, match="^unknown loss_mode 'ppo'; valid values are: naive, "):
        check_loss_fields(SimpleNamespace(loss_mode="ppo"))
