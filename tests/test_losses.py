"""compute_loss: gradient identities at ratio 1, clipping, overflow safety, bad input."""

import pytest
import torch

from pgrl_helpers.losses import (
    FREEZE_MESSAGE,
    LOSS_MODES,
    clip_fraction,
    compute_loss,
    compute_per_token_loss,
    compute_ratio,
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
        with pytest.raises(ValueError, match="epsilon must be a positive finite number"):
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
    loss, mask = compute_per_token_loss(
        log_probs, deltas, "clipped", old, epsilon=0.2, epsilon_high=0.3, return_clip_mask=True
    )
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
    _, none = compute_per_token_loss(log_probs, deltas, "unclipped", old, return_clip_mask=True)
    assert none.dtype == torch.int8 and not none.any()
