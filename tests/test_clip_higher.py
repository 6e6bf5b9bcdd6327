"""Clip-higher (DAPO): a separate upper clip edge ``epsilon_high`` on the clipped loss."""

from __future__ import annotations

import pytest
import torch

from pgrl_helpers.losses import clip_fraction, compute_loss, compute_per_token_loss

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
