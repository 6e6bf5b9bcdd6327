"""Exact KL studies: estimator statistics, the KL-regularised optimum, the placement gradients."""

import pytest
import torch

from pgrl_helpers.kl_exact import (
    estimator_stats,
    kl_placement_gradients,
    kl_regularized_objective,
    kl_regularized_optimum,
)


def test_estimator_stats_k1_k3_unbiased_k2_biased_far_away():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(10, generator=g)
    stats = estimator_stats(logits, logits + 3 * torch.randn(10, generator=g), 50_000)
    for name in ("k1", "k3"):
        assert abs(stats[name]["exact_mean"] - stats["kl"]) < 1e-4 * max(1, stats["kl"])
        assert abs(stats[name]["mc_mean"] - stats["kl"]) < 5 * stats[name]["mc_se"]
    assert stats["k2"]["exact_mean"] - stats["kl"] > 0.1 * stats["kl"]
    with pytest.raises(ValueError, match="num_samples"):
        estimator_stats(logits, logits, 1)
    with pytest.raises(ValueError, match="1-D"):
        estimator_stats(logits[None], logits[None], 10)


@pytest.mark.parametrize("beta", [0.1, 1.0, 5.0])
def test_optimum_beats_every_perturbation_and_reaches_beta_log_z(beta):
    g = torch.Generator().manual_seed(1)
    ref = torch.randn(6, generator=g, dtype=torch.float64)
    rewards = torch.randn(6, generator=g, dtype=torch.float64)
    log_opt = kl_regularized_optimum(ref, rewards, beta)
    best = kl_regularized_objective(log_opt, ref, rewards, beta)
    log_z = torch.logsumexp(torch.log_softmax(ref, -1) + rewards / beta, -1)
    assert abs(best - beta * log_z) < 1e-10
    for _ in range(50):
        other = log_opt + 0.3 * torch.randn(6, generator=g, dtype=torch.float64)
        assert kl_regularized_objective(other, ref, rewards, beta) < best
    with pytest.raises(ValueError, match="beta"):
        kl_regularized_objective(ref, ref, rewards, 0.0)


def test_placement_gradients():
    g = torch.Generator().manual_seed(3)
    theta = torch.randn(6, generator=g, dtype=torch.float64)
    ref = theta + 1.5 * torch.randn(6, generator=g, dtype=torch.float64)
    old = theta - 0.3 * torch.randn(6, generator=g, dtype=torch.float64)
    # First inner step, samples from pi_theta itself.
    grads = kl_placement_gradients(theta, ref)
    reverse, forward = grads["grad KL(pi||pi_ref)"], grads["grad KL(pi_ref||pi)"]
    assert (reverse - forward).abs().max() > 0.1
    for name in ("k1 fixed at rollout", "k1 fixed at rollout x ratio", "k1 at pi_theta"):
        torch.testing.assert_close(grads[name], reverse)
    torch.testing.assert_close(grads["k1 at pi_theta x ratio"], reverse)
    torch.testing.assert_close(grads["k2 in the loss"], reverse)
    torch.testing.assert_close(grads["k3 in the loss"], forward)
    torch.testing.assert_close(grads["k3 x ratio (bias-corrected)"], reverse)
    assert grads["k1 in the loss"].abs().max() < 1e-12
    # Later inner steps: every row samples from pi_old != pi_theta. Only the rows that carry
    # the ratio still follow grad KL(pi||pi_ref); plain k3 in the loss follows neither KL.
    moved = kl_placement_gradients(theta, ref, old_logits=old)
    torch.testing.assert_close(moved["grad KL(pi||pi_ref)"], reverse)
    torch.testing.assert_close(moved["k1 at pi_theta x ratio"], reverse)
    torch.testing.assert_close(moved["k3 x ratio (bias-corrected)"], reverse)
    for name in (
        "k3 in the loss",
        "k2 in the loss",
        "k1 at pi_theta",
        "k1 fixed at rollout",
        "k1 fixed at rollout x ratio",
    ):
        assert (moved[name] - reverse).abs().max() > 0.01, name
    assert (moved["k3 in the loss"] - forward).abs().max() > 0.01
    # Written out independently: plain k3 in the loss has expected gradient
    # sum_y pi_old(y) (1 - pi_ref / pi_theta)(y) grad log pi_theta(y).
    p_old = torch.softmax(old, -1)
    p, p_ref = torch.softmax(theta, -1), torch.softmax(ref, -1)
    jac = torch.diag(p) - p[:, None] * p[None, :]  # d pi / d theta, rows y
    grad_log = jac / p[:, None]  # d log pi(y) / d theta
    expected = (p_old * (1 - p_ref / p))[:, None] * grad_log
    torch.testing.assert_close(moved["k3 in the loss"], expected.sum(0))


def test_k1_fixed_at_rollout_is_pi_olds_k1_written_out():
    """Review r5 (notebook 05, major): the "k1 in the reward" row re-evaluated k1 at pi_theta,
    which made it "k2 in the loss". PPO-RLHF fixes k1 = log pi_old - log pi_ref at rollout.
    Written out with grad log pi(y) = e_y - pi (softmax), independently of the helper:
    no ratio:   sum_y pi_old(y) k1_old(y) (e_y - pi);
    with ratio: sum_y pi_theta(y) k1_old(y) (e_y - pi);
    k1 at pi_theta (no ratio) equals k2 in the loss at every theta."""
    g = torch.Generator().manual_seed(3)
    theta = torch.randn(6, generator=g, dtype=torch.float64)
    ref = theta + 1.5 * torch.randn(6, generator=g, dtype=torch.float64)
    old = theta - 0.3 * torch.randn(6, generator=g, dtype=torch.float64)
    moved = kl_placement_gradients(theta, ref, old_logits=old)
    p, p_old = torch.softmax(theta, -1), torch.softmax(old, -1)
    k1_old = torch.log_softmax(old, -1) - torch.log_softmax(ref, -1)
    grad_log = torch.eye(6, dtype=torch.float64) - p[None, :]  # row y: d log pi(y) / d theta
    torch.testing.assert_close(
        moved["k1 fixed at rollout"], ((p_old * k1_old)[:, None] * grad_log).sum(0)
    )
    torch.testing.assert_close(
        moved["k1 fixed at rollout x ratio"], ((p * k1_old)[:, None] * grad_log).sum(0)
    )
    torch.testing.assert_close(moved["k1 at pi_theta"], moved["k2 in the loss"])
    # the fixed and the re-evaluated k1 are different placements once pi_old != pi_theta
    assert (moved["k1 fixed at rollout"] - moved["k1 at pi_theta"]).abs().max() > 0.01
