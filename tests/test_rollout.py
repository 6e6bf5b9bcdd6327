"""Batch filters (pgrl_helpers.rollout): DAPO's dynamic sampling drops exactly the tied groups,
the overlong penalty (DAPO eq. 13, TRL's) and overlong shaping / filtering.
"""

from __future__ import annotations

import pytest
import torch

from pgrl_helpers.advantages import compute_deltas
from pgrl_helpers.config import TrainConfig
from pgrl_helpers.losses import compute_per_token_loss
from pgrl_helpers.masking import aggregate_loss
from pgrl_helpers.models import LectureModel
from pgrl_helpers.registry import BATCH_FILTERS
from pgrl_helpers.rollout import (
    Rollout,
    dynamic_sampling,
    overlong_filtering,
    overlong_penalty,
    overlong_shaping,
    tied_groups,
)


def lecture_rollout(seed=0, batch_size=6, group=4):
    policy = LectureModel(5, 6, 3, 3, seed=seed)
    prompts = torch.randint(0, 5, (batch_size, 3), generator=torch.Generator().manual_seed(seed))
    responses, mask = policy.sample(prompts, group, torch.Generator().manual_seed(seed + 1))
    g = torch.Generator().manual_seed(seed + 2)
    rewards = torch.randint(0, 3, (batch_size, group), generator=g).float()
    rewards[1] = 1.0  # two groups tie
    rewards[4] = 0.0
    return policy, Rollout(prompts, responses, mask, rewards)


@pytest.mark.parametrize("deltas_mode", ["centered_rewards", "normalized_rewards"])
def test_dynamic_sampling_drops_exactly_the_tied_groups(deltas_mode):
    policy, rollout = lecture_rollout()
    tied = tied_groups(rollout.rewards)
    assert tied.tolist() == [r.unique().numel() == 1 for r in rollout.rewards]
    assert tied.sum() == 2
    kept = dynamic_sampling(rollout)
    torch.testing.assert_close(kept.prompts, rollout.prompts[~tied])
    torch.testing.assert_close(kept.responses, rollout.responses[~tied])
    assert not tied_groups(kept.rewards).any()

    def loss_grad(r):
        deltas = compute_deltas(r.rewards, deltas_mode)
        per_token = compute_per_token_loss(
            policy.log_probs(r.prompts, r.responses), deltas, "naive"
        )
        loss = aggregate_loss(per_token, r.mask, "sequence_mean", num_sequences=24)
        grads = torch.autograd.grad(loss, list(policy.parameters()))
        return torch.cat([x.flatten() for x in grads])

    # with the same normaliser (the full batch's 24 responses) the gradient is unchanged
    full, filtered = loss_grad(rollout), loss_grad(kept)
    torch.testing.assert_close(filtered, full, atol=1e-7, rtol=1e-5)
    assert full.abs().max() > 0


def test_dynamic_sampling_keeps_an_all_tied_batch():
    _, rollout = lecture_rollout()
    rollout.rewards[:] = 0.5
    assert dynamic_sampling(rollout) is rollout


def test_overlong_penalty_is_dapo_eq_13_and_trls():
    lengths = torch.arange(0, 12)
    got = overlong_penalty(lengths, max_length=10, buffer=4)
    expected = [0.0 if y <= 6 else (-1.0 if y > 10 else (6 - y) / 4) for y in range(12)]
    assert got.tolist() == pytest.approx(expected)
    rewards = pytest.importorskip("trl.rewards")
    trl = rewards.get_soft_overlong_punishment(max_completion_len=10, soft_punish_cache=4)
    assert trl([[1] * y for y in range(1, 11)]) == pytest.approx(expected[1:11])
    with pytest.raises(ValueError, match="buffer"):
        overlong_penalty(lengths, 10, 11)
    with pytest.raises(ValueError, match="factor"):
        overlong_penalty(lengths, 10, 2, factor=-1)


def dedup_rollout():
    eos = 5  # vocab_size 5: EOS is token 5
    responses = torch.tensor(
        [[[0, 1, 5, 5, 5], [0, 1, 2, 3, 4], [2, 2, 2, 2, 5]], [[1, 5, 5, 5, 5], [3, 3, 3, 3, 3],
         [4, 5, 5, 5, 5]]]
    )  # fmt: skip
    mask = ((responses == eos).long().cumsum(-1) - (responses == eos).long() == 0).float()
    rewards = torch.tensor([[1.0, 0.2, 0.5], [0.0, 0.3, 0.1]])
    prompts = torch.zeros((2, 3), dtype=torch.long)
    return Rollout(prompts, responses, mask, rewards)


def test_overlong_shaping_and_filtering_on_the_dedup_task():
    config = TrainConfig(model="autoregressive", task="sort_dedup", prompt_source="random",
                         overlong_buffer=2, batch_filter="dapo")  # fmt: skip
    assert config.response_length == 5
    rollout = dedup_rollout()
    shaped = overlong_shaping(rollout, config)
    # lengths 3, 5, 5 / 2, 5, 2; the buffer starts above 5 - 2 = 3 tokens
    penalty = torch.tensor([[0.0, -1.0, -1.0], [0.0, -1.0, 0.0]])
    torch.testing.assert_close(shaped.rewards, rollout.rewards + penalty)
    filtered = overlong_filtering(rollout, config)
    truncated = torch.tensor([[False, True, False], [False, True, False]])
    assert (filtered.mask.sum(-1) == 0).eq(truncated).all()
    torch.testing.assert_close(filtered.mask[~truncated], rollout.mask[~truncated])
    torch.testing.assert_close(filtered.rewards, rollout.rewards)
    assert BATCH_FILTERS["dapo"](rollout, config).rewards.shape == (2, 3)
