"""KL-Cov (Cui et al. 2025, arXiv 2505.22617) against a hand-written reference."""

from __future__ import annotations

import math

import pytest
import torch

from pgrl_helpers.config import TrainConfig
from pgrl_helpers.covariance import kl_cov_tokens, token_covariance
from pgrl_helpers.losses import compute_per_token_loss
from pgrl_helpers.masking import aggregate_loss
from pgrl_helpers.training import run_policy_gradient


def random_batch(seed, shape=(3, 4, 5)):
    g = torch.Generator().manual_seed(seed)
    log_probs = (-3 * torch.rand(shape, generator=g, dtype=torch.float64)).requires_grad_()
    old = log_probs.detach() + 0.3 * torch.randn(shape, generator=g, dtype=torch.float64)
    deltas = torch.randn(shape[:2], generator=g, dtype=torch.float64)
    lengths = torch.randint(1, shape[2] + 1, shape[:2], generator=g)
    mask = torch.arange(shape[2]) < lengths[..., None]
    return log_probs, old, deltas, mask


def reference_loss(log_probs, old, deltas, mask, ratio_k, coef):
    """Token by token in plain Python: -r A on every real token, + coef |log pi - log pi_old|
    on the max(1, floor(k N)) real tokens with the largest (log pi - mean)(A - mean)."""
    batch, trial, pos = log_probs.shape
    real = [
        (b, i, t) for b in range(batch) for i in range(trial) for t in range(pos) if mask[b, i, t]
    ]
    lp = {x: log_probs[x].item() for x in real}
    mean_lp = sum(lp.values()) / len(real)
    mean_a = sum(deltas[b, i].item() for b, i, _ in real) / len(real)
    cov = {x: (lp[x] - mean_lp) * (deltas[x[0], x[1]].item() - mean_a) for x in real}
    count = max(1, math.floor(ratio_k * len(real)))
    chosen = set(sorted(real, key=lambda x: -cov[x])[:count])  # sorted() is stable
    total = 0
    for x in real:
        term = -torch.exp(log_probs[x] - old[x]) * deltas[x[0], x[1]]
        if x in chosen:
            term = term + coef * (log_probs[x] - old[x]).abs()
        total = total + term
    return total / len(real), chosen


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("ratio_k, coef", [(0.002, 1.0), (0.2, 0.5), (1.0, 2.0)])
def test_value_and_gradient_match_the_reference(seed, ratio_k, coef):
    log_probs, old, deltas, mask = random_batch(seed)
    per_token = compute_per_token_loss(log_probs, deltas, "kl_cov", old, mask=mask,
                                       kl_cov_ratio=ratio_k, kl_cov_coef=coef)  # fmt: skip
    ours = aggregate_loss(per_token, mask.double(), "token_mean")
    expected, chosen = reference_loss(log_probs, old, deltas, mask, ratio_k, coef)
    assert abs(ours.item() - expected.item()) < 1e-12
    (g_ours,) = torch.autograd.grad(ours, log_probs)
    (g_ref,) = torch.autograd.grad(expected, log_probs)
    torch.testing.assert_close(g_ours, g_ref, rtol=0, atol=1e-12)
    picked = kl_cov_tokens(log_probs, deltas, ratio_k, mask)
    assert set(map(tuple, picked.nonzero().tolist())) == chosen
    assert not (picked & ~mask).any(), "padding is never chosen"


def test_covariance_ignores_padding_and_is_centred_over_real_tokens():
    log_probs, _, deltas, mask = random_batch(3)
    cov = token_covariance(log_probs, deltas, mask)
    assert torch.isinf(cov[~mask]).all() and torch.isfinite(cov[mask]).all()
    # changing a padded log-prob changes nothing
    other = log_probs.detach().clone()
    other[~mask] = 123.0
    torch.testing.assert_close(token_covariance(other, deltas, mask)[mask], cov[mask])
    # sum over real tokens of (x - mean)(y - mean) = sum x y - N mean_x mean_y
    a = deltas[:, :, None].expand(mask.shape)[mask]
    lp = log_probs.detach()[mask]
    assert abs(cov[mask].sum() - ((lp * a).sum() - len(lp) * lp.mean() * a.mean())) < 1e-10


def test_on_policy_kl_cov_is_reinforce():
    log_probs, _, deltas, mask = random_batch(4)
    kl_cov = compute_per_token_loss(log_probs, deltas, "kl_cov", log_probs.detach(), mask=mask,
                                    kl_cov_ratio=0.5)  # fmt: skip
    naive = compute_per_token_loss(log_probs, deltas, "naive")
    g1 = torch.autograd.grad(aggregate_loss(kl_cov, mask.double(), "token_mean"), log_probs)[0]
    g2 = torch.autograd.grad(aggregate_loss(naive, mask.double(), "token_mean"), log_probs)[0]
    torch.testing.assert_close(g1, g2, rtol=0, atol=1e-12)


def test_a_planted_bug_choosing_the_lowest_covariance_is_caught():
    log_probs, old, deltas, mask = random_batch(5)
    per_token = compute_per_token_loss(
        log_probs, -deltas, "kl_cov", old, mask=mask, kl_cov_ratio=0.2
    )  # the sign flip reverses the ranking
    ours = aggregate_loss(per_token, mask.double(), "token_mean")
    expected, _ = reference_loss(log_probs, old, -deltas, mask, 0.2, 1.0)
    assert abs(ours.item() - expected.item()) < 1e-12
    wrong = compute_per_token_loss(log_probs, deltas, "kl_cov", old, mask=mask, kl_cov_ratio=0.2)
    assert abs(aggregate_loss(wrong, mask.double(), "token_mean").item() - expected.item()) > 1e-6


def test_bad_inputs_raise_naming_the_argument():
    log_probs, old, deltas, mask = random_batch(6)
    for bad in (0, -0.1, 1.5, float("nan"), True):
        with pytest.raises(ValueError, match="kl_cov_ratio"):
            compute_per_token_loss(log_probs, deltas, "kl_cov", old, mask=mask, kl_cov_ratio=bad)
    for bad in (-1.0, float("inf"), False):
        with pytest.raises(ValueError, match="kl_cov_coef"):
            compute_per_token_loss(log_probs, deltas, "kl_cov", old, mask=mask, kl_cov_coef=bad)
    with pytest.raises(ValueError, match="needs old_log_probs"):
        compute_per_token_loss(log_probs, deltas, "kl_cov", None, mask=mask)
    with pytest.raises(ValueError, match="importance_sampling_level 'token'"):
        compute_per_token_loss(log_probs, deltas, "kl_cov", old, mask=mask,
                               importance_sampling_level="sequence")  # fmt: skip
    with pytest.raises(ValueError, match="mask selects no tokens"):
        token_covariance(log_probs, deltas, torch.zeros_like(mask))
    with pytest.raises(ValueError, match="kl_cov_ratio"):
        TrainConfig(loss_mode="kl_cov", kl_cov_ratio=0).validate()
    with pytest.raises(ValueError, match="kl_cov_coef"):
        TrainConfig(loss_mode="kl_cov", kl_cov_coef=-1).validate()
    with pytest.raises(ValueError, match="policy_objective 'token'"):
        TrainConfig(loss_mode="kl_cov", policy_objective="sequence").validate()


def test_the_loop_runs_kl_cov():
    config = TrainConfig(
        model="autoregressive", task="sort_dedup", prompt_source="random", embedding_dim=8,
        num_heads=2, num_layers=1, num_epochs=2, num_steps_per_epoch=2, prompts_per_epoch=8,
        num_responses=4, reward_fn="dedup_position_reward", num_eval_prompts=16, eval_every=2,
        loss_mode="kl_cov", kl_cov_ratio=0.1,
    )  # fmt: skip
    steps = run_policy_gradient(config).steps()
    assert len(steps) == 4 and all(math.isfinite(s["loss"]) for s in steps)


def test_the_trl_bridge_refuses_kl_cov_naming_it():
    from pgrl_helpers import trl_config

    config = TrainConfig(loss_mode="kl_cov", num_responses=4, prompt_source="random")
    with pytest.raises(ValueError, match="loss_mode 'kl_cov' .KL-Cov"):
        trl_config.grpo_config_kwargs(config)
