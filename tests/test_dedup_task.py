"""A dedup response that never emits EOS is scored as wrong.

Before the fix, a policy with no slot left for EOS (pos <= target length) got full reward
for a cut-off response: prompt [2, 0, 1], response [0, 1, 2] without EOS scored 1.0 while
``exact_dedup`` was False.
"""

from __future__ import annotations

import itertools

import torch

from pgrl_helpers.dedup_task import (
    DEDUP_REWARD_FNS,
    dedup_position_reward,
    exact_dedup,
)

EOS = 3


def test_cut_off_response_is_not_rewarded_as_right():
    prompts = torch.tensor([[2, 0, 1]])
    responses = torch.tensor([[[0, 1, 2]]])  # the answer, but no EOS: cut at 3 slots
    assert not exact_dedup(prompts, responses, EOS).item()
    for name, fn in DEDUP_REWARD_FNS.items():
        assert fn(prompts, responses, EOS).item() < 1.0, name
    # missing EOS costs one token: (3 correct - 1 extra) / 3
    assert abs(dedup_position_reward(prompts, responses, EOS).item() - 2 / 3) < 1e-6


def test_reward_is_one_exactly_for_exact_answers_at_every_width():
    """Every response of every width 1 .. 5 over a few prompts: reward 1 <=> exact_dedup."""
    prompts = torch.tensor([[2, 0, 1], [1, 1, 0], [2, 2, 2]])
    tokens = range(EOS + 1)
    for pos in range(1, 6):
        responses = torch.tensor(list(itertools.product(tokens, repeat=pos)))  # [n, pos]
        batch = responses[None].expand(len(prompts), -1, -1)  # [batch, trial, pos]
        exact = exact_dedup(prompts, batch, EOS)
        for name, fn in DEDUP_REWARD_FNS.items():
            rewards = fn(prompts, batch, EOS)
            assert torch.equal(rewards == 1.0, exact), (name, pos)
            assert (rewards <= 1.0).all(), (name, pos)


def test_rule_changes_nothing_when_the_response_has_room_for_eos():
    """With pos >= prompt_length + 1 a cut-off response was already >= 1 token too long."""
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, EOS, (50, 3), generator=g)
    responses = torch.randint(0, EOS + 1, (50, 8, 4), generator=g)  # pos = 4 = length + 1
    no_eos = ~(responses == EOS).any(dim=-1)
    assert no_eos.any()
    rewards = dedup_position_reward(prompts, responses, EOS)
    # the old formula: (matches - max(content - target, 0)) / target, content = 4 here
    targets = [sorted(set(p)) for p in prompts.tolist()]
    for b, target in enumerate(targets):
        for t in range(8):
            if no_eos[b, t]:
                content = responses[b, t].tolist()
                matches = sum(c == x for c, x in zip(content, target))
                old = (matches - (len(content) - len(target))) / len(target)
                assert abs(rewards[b, t].item() - old) < 1e-6
