"""The four disagreements with verl / OpenRLHF / SkyRL / slime, and masks with holes.

Each test here failed on the code before the fix: REINFORCE++-baseline whitened per
response, k1 / k2 were capped at |log ratio| = 20, ``compute_gae`` returned float32 for
float64 inputs, and ``aggregate_loss`` on an empty mask blamed ``normalize_constant``.
The reference numbers are the frameworks' outputs quoted in shared/reviews/peers.md.
"""

from __future__ import annotations

import math

import pytest
import torch

from pgrl_helpers.advantages import DELTA_MODES, compute_deltas
from pgrl_helpers.gae import compute_gae, last_token_mask, outcome_token_rewards, whiten
from pgrl_helpers.kl import kl_estimate, kl_k1, kl_k2, kl_k3, kl_per_response
from pgrl_helpers.losses import compute_per_token_loss
from pgrl_helpers.masking import LOSS_AGGREGATIONS, aggregate_loss, masked_mean


def _mask(lengths, pos):
    lengths = torch.as_tensor(lengths)
    return (torch.arange(pos) < lengths[..., None]).float()


# ---- 1. REINFORCE++-baseline whitens over tokens -------------------------------------------


def test_reinforce_pp_baseline_matches_verl_and_openrlhf_on_unequal_lengths():
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    mask = _mask([[4, 1], [1, 1]], 4)
    got = compute_deltas(rewards, "reinforce_pp_baseline", mask=mask)
    verl = torch.tensor([[0.586, -1.464], [-1.464, 0.586]])  # sample std over 7 tokens
    torch.testing.assert_close(got, verl, atol=1e-3, rtol=0)
    openrlhf = torch.tensor([[0.632, -1.581], [-1.581, 0.632]])  # population std
    tokens = 7
    torch.testing.assert_close(got * math.sqrt(tokens / (tokens - 1)), openrlhf, atol=1e-3, rtol=0)
    # the per-response whitening (no mask) gives +-0.866 whatever the lengths
    per_response = compute_deltas(rewards, "reinforce_pp_baseline")
    torch.testing.assert_close(per_response.abs(), torch.full((2, 2), 0.866), atol=1e-3, rtol=0)


def test_reinforce_pp_baseline_by_hand_over_tokens():
    rewards = torch.tensor([[2.0, 0.0, 1.0], [5.0, 5.0, 2.0]])
    mask = _mask([[3, 1, 2], [2, 2, 1]], 3)
    centered = rewards - rewards.mean(dim=-1, keepdim=True)
    tokens = torch.cat(
        [c.repeat(int(n)) for c, n in zip(centered.flatten(), mask.sum(-1).flatten())]
    )
    expected = (centered - tokens.mean()) / (tokens.std() + 1e-6)
    torch.testing.assert_close(
        compute_deltas(rewards, "reinforce_pp_baseline", mask=mask), expected
    )


def test_reinforce_pp_baseline_equal_lengths_equals_the_per_response_whitening():
    torch.manual_seed(0)
    rewards = torch.rand(4, 5)
    plain = compute_deltas(rewards, "reinforce_pp_baseline")
    # one token per response: identical
    torch.testing.assert_close(
        compute_deltas(rewards, "reinforce_pp_baseline", mask=torch.ones(4, 5, 1)), plain
    )
    # L tokens each: the token mean is 0 as well; only Bessel's correction differs
    n, length = rewards.numel(), 6
    got = compute_deltas(rewards, "reinforce_pp_baseline", mask=torch.ones(4, 5, length))
    factor = math.sqrt((n * length - 1) / (length * (n - 1)))
    torch.testing.assert_close(got, plain * factor)


def test_reinforce_pp_baseline_masks_with_holes_count_only_policy_tokens():
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    holes = torch.tensor([[[1, 0, 0, 1, 1, 1], [1, 0, 0, 0, 0, 0]], [[1, 0, 0, 0, 0, 0]] * 2])
    prefix = _mask([[4, 1], [1, 1]], 6)
    torch.testing.assert_close(
        compute_deltas(rewards, "reinforce_pp_baseline", mask=holes.float()),
        compute_deltas(rewards, "reinforce_pp_baseline", mask=prefix),
    )


def test_reinforce_pp_baseline_mask_errors():
    rewards = torch.ones(2, 2)
    with pytest.raises(ValueError, match=r"^mask must be \[batch, trial, pos\] matching rewards"):
        compute_deltas(rewards, "reinforce_pp_baseline", mask=torch.ones(2, 3, 4))
    with pytest.raises(ValueError, match="^mask must hold only 0 and 1"):
        compute_deltas(rewards, "reinforce_pp_baseline", mask=torch.full((2, 2, 3), 0.5))
    with pytest.raises(ValueError, match="needs at least 2 masked tokens, got 1"):
        compute_deltas(rewards, "reinforce_pp_baseline", mask=_mask([[1, 0], [0, 0]], 2))
    with pytest.raises(TypeError, match="^mask must be a torch.Tensor or None"):
        compute_deltas(rewards, "reinforce_pp_baseline", mask=[[1.0]])


# ---- 2. k1 and k2 are not capped ------------------------------------------------------------


def test_k1_and_k2_are_exact_and_keep_their_gradient_far_out():
    log_probs = torch.tensor([[[0.0]]], requires_grad=True)
    ref = torch.tensor([[[-25.0]]])
    k1 = kl_k1(log_probs, ref)
    assert k1.item() == 25.0
    (grad,) = torch.autograd.grad(k1.sum(), log_probs)
    assert grad.item() == 1.0
    k2 = kl_k2(log_probs, ref)
    assert k2.item() == 312.5
    (grad,) = torch.autograd.grad(k2.sum(), log_probs)
    assert grad.item() == 25.0
    # k3 exponentiates: it keeps its guard and stays finite even at a log ratio of 1e4
    far = kl_k3(torch.tensor([[[0.0]]]), torch.tensor([[[1e4]]]))
    assert torch.isfinite(far).all()


# ---- 3. dtypes are kept ---------------------------------------------------------------------


def test_float64_in_float64_out():
    torch.manual_seed(1)
    d = torch.float64
    mask = _mask([[3, 2], [1, 3]], 3).to(d)
    rewards = torch.rand(2, 2, dtype=d)
    values = torch.rand(2, 2, 3, dtype=d)
    token_rewards = outcome_token_rewards(rewards, mask)
    assert token_rewards.dtype == d
    adv, ret = compute_gae(token_rewards, values, mask, 0.9, 0.8)
    assert adv.dtype == ret.dtype == d
    assert whiten(adv, mask).dtype == d
    # a float32 mask with float64 values: the values decide
    adv32mask, _ = compute_gae(token_rewards, values, mask.float(), 0.9, 0.8)
    assert adv32mask.dtype == d
    for mode in DELTA_MODES:
        assert compute_deltas(rewards, mode).dtype == d, mode
    assert compute_deltas(rewards, "reinforce_pp_baseline", mask=mask).dtype == d
    log_probs = -torch.rand(2, 2, 3, dtype=d)
    ref = -torch.rand(2, 2, 3, dtype=d)
    for estimator in ("k1", "k2", "k3"):
        assert kl_estimate(log_probs, ref, estimator).dtype == d
        assert kl_per_response(log_probs, ref, estimator, mask).dtype == d
    for mode in ("naive", "clipped", "cispo", "sapo"):
        loss = compute_per_token_loss(log_probs, rewards, mode, old_log_probs=ref)
        assert loss.dtype == d, mode
        for aggregation in LOSS_AGGREGATIONS:
            assert aggregate_loss(loss, mask, aggregation).dtype == d
    assert masked_mean(log_probs, mask).dtype == d


def test_gae_in_float64_is_more_precise_than_float32():
    # 1 + 1e-9 is 1 in float32: a float64 pipeline must keep the difference
    rewards = torch.tensor([[[0.0, 1.0 + 1e-9]]], dtype=torch.float64)
    adv, _ = compute_gae(rewards, torch.zeros_like(rewards), torch.ones(1, 1, 2), 1.0, 1.0)
    assert adv[0, 0, 0].item() == 1.0 + 1e-9


# ---- 4. an empty mask names the real problem --------------------------------------------------


@pytest.mark.parametrize("aggregation", LOSS_AGGREGATIONS)
def test_aggregate_loss_on_an_all_zero_mask_says_the_mask_is_empty(aggregation):
    with pytest.raises(ValueError, match=r"^mask selects no token \(it is all zeros\)"):
        aggregate_loss(torch.ones(1, 1, 2), torch.zeros(1, 1, 2), aggregation)


# ---- masks with holes ------------------------------------------------------------------------

#: one response: policy, policy, tool, tool, policy (EOS), padding
HOLES = torch.tensor([[[1.0, 1.0, 0.0, 0.0, 1.0, 0.0]]])


def test_gae_skips_environment_tokens_by_hand():
    values = torch.tensor([[[0.5, 0.2, 9.0, 9.0, 0.4, 7.0]]])
    rewards = outcome_token_rewards(torch.tensor([[1.0]]), HOLES)
    assert rewards.tolist() == [[[0.0, 0.0, 0.0, 0.0, 1.0, 0.0]]]
    adv, ret = compute_gae(rewards, values, HOLES, gamma=0.9, lam=0.8)
    # t=4: 1 - 0.4 = 0.6; t=1: 0.9*0.4 - 0.2 + 0.72*0.6 = 0.592 (t=2, 3 skipped);
    # t=0: 0.9*0.2 - 0.5 + 0.72*0.592 = 0.10624
    torch.testing.assert_close(adv, torch.tensor([[[0.10624, 0.592, 0.0, 0.0, 0.6, 0.0]]]))
    torch.testing.assert_close(ret, torch.tensor([[[0.60624, 0.792, 0.0, 0.0, 1.0, 0.0]]]))


def test_gae_with_holes_equals_gae_on_the_policy_tokens_alone():
    torch.manual_seed(2)
    values = torch.randn(1, 1, 6)
    rewards = torch.randn(1, 1, 6)
    adv, ret = compute_gae(rewards, values, HOLES, gamma=0.7, lam=0.9)
    keep = HOLES[0, 0] > 0
    squeezed = compute_gae(
        rewards[..., keep], values[..., keep], torch.ones(1, 1, int(keep.sum())), 0.7, 0.9
    )
    torch.testing.assert_close(adv[..., keep], squeezed[0])
    torch.testing.assert_close(ret[..., keep], squeezed[1])
    assert (adv[..., ~keep] == 0).all() and (ret[..., ~keep] == 0).all()


def test_last_token_mask_with_holes_and_empty_rows():
    mask = torch.tensor([[[1, 0, 1, 1, 0], [0, 0, 0, 0, 0]], [[0, 1, 0, 0, 1], [1, 1, 1, 1, 1]]])
    expected = [[[0, 0, 0, 1, 0], [0, 0, 0, 0, 0]], [[0, 0, 0, 0, 1], [0, 0, 0, 0, 1]]]
    assert last_token_mask(mask).tolist() == expected


def test_whiten_with_holes_uses_only_policy_tokens():
    adv = torch.tensor([[[1.0, 50.0, 3.0, -7.0]]])
    mask = torch.tensor([[[1.0, 0.0, 1.0, 0.0]]])
    real = torch.tensor([1.0, 3.0])
    expected = (adv - real.mean()) / (real.std() + 1e-8) * mask
    torch.testing.assert_close(whiten(adv, mask), expected)


def test_aggregations_with_holes_by_hand():
    loss = torch.tensor([[[1.0, 2.0, 100.0, 4.0], [5.0, -100.0, 7.0, 0.0]]])
    mask = torch.tensor([[[1.0, 1.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0]]])
    torch.testing.assert_close(aggregate_loss(loss, mask, "token_mean"), torch.tensor(19.0 / 5))
    torch.testing.assert_close(
        aggregate_loss(loss, mask, "sequence_mean"), torch.tensor((7.0 / 3 + 12.0 / 2) / 2)
    )
    torch.testing.assert_close(
        aggregate_loss(loss, mask, "constant_normalizer"), torch.tensor(19.0 / (4 * 2))
    )
