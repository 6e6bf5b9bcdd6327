"""compute_loss: gradient identities at ratio 1, clipping, overflow safety, bad input; and
each mode's function in ``LOSS_FUNCTIONS`` against its paper's formula, by hand and by
autograd, with its metrics."""

import math

import pytest
import torch

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
)


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
    old = (log_probs + 0.05 * torch.randn(log_probs.shape)).detach()  # ratios in ~[0.85, 1.15]
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
