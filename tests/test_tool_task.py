"""The multi-turn tool task (pgrl_helpers.tool_task) and its wiring into the loop."""

from __future__ import annotations

import pytest
import torch

from pgrl_helpers.config import TrainConfig
from pgrl_helpers.gae import compute_gae, outcome_token_rewards
from pgrl_helpers.losses import compute_per_token_loss
from pgrl_helpers.masking import aggregate_loss
from pgrl_helpers.tool_task import (
    ANSWER_SLOT,
    GRADER_SLOT,
    RESPONSE_LENGTH,
    ToolCompareTask,
    ToolUsePolicy,
    compare_tool,
    hidden_prices,
    run_tool_episodes,
    tool_mask,
)

V = 5
EOS = V


def _config(**overrides) -> TrainConfig:
    base = dict(
        model="autoregressive",
        task="tool_compare",
        prompt_source="random",
        prompt_length=2,
        vocab_size=V,
        embedding_dim=8,
        num_layers=1,
        num_heads=2,
        prompts_per_epoch=4,
        num_responses=3,
        num_epochs=2,
        num_steps_per_epoch=2,
        loss_mode="clipped",
        eval_every=1,
        num_eval_prompts=3,
    )
    return TrainConfig(**(base | overrides))


def test_compare_tool_by_hand():
    prices = torch.tensor([[4, 3, 2, 1, 0], [0, 1, 2, 3, 4], [0, 1, 2, 3, 4]])
    x, y = torch.tensor([0, 0, EOS]), torch.tensor([3, 3, 1])
    # item 0 is dearer in row 0, item 3 in row 1; row 2 calls with EOS: the error reply
    assert compare_tool(x, y, prices, EOS).tolist() == [[0, 3], [3, 0], [EOS, EOS]]
    assert compare_tool(y, x, prices, EOS)[:2].tolist() == [[0, 3], [3, 0]]
    with pytest.raises(ValueError, match="must be \\[n\\] and prices"):
        compare_tool(x, y, prices[:, :3], EOS)


def test_hidden_prices_are_permutations_drawn_with_the_generator():
    a = hidden_prices(50, V, torch.Generator().manual_seed(1))
    b = hidden_prices(50, V, torch.Generator().manual_seed(1))
    assert torch.equal(a, b)
    assert (a.sort(dim=-1).values == torch.arange(V)).all()
    assert len({tuple(r) for r in a.tolist()}) > 10  # fresh prices per episode


def test_tool_mask_and_the_planted_bug():
    assert tool_mask((1, 1)).tolist() == [[[1.0, 1.0, 0.0, 0.0, 1.0, 0.0]]]
    assert tool_mask((2, 3), mask_tool_tokens=False).eq(1).all()


def test_task_reward_exact_key_and_calls():
    task = ToolCompareTask(V)
    prompts = torch.tensor([[1, 3], [2, 2]])
    responses = torch.tensor(
        [
            [[1, 3, 3, 1, 3, 3], [3, 1, 1, 3, 3, 1], [0, 3, 3, 0, 1, 3]],
            [[2, 2, 2, 2, 2, 2], [EOS, 2, EOS, EOS, 0, 2], [2, 0, 2, 0, 2, 2]],
        ]
    )
    assert task.reward(prompts, responses).tolist() == [[1.0, 0.0, 0.0], [1.0, 0.0, 1.0]]
    assert task.called_with_prompt(prompts, responses).tolist() == [
        [True, True, False],
        [True, False, False],
    ]
    assert task.prompt_key(torch.tensor([[1, 3], [3, 1], [2, 2]])).tolist() == [8, 8, 12]
    assert task.num_keys() == V * (V + 1) // 2
    with pytest.raises(ValueError, match="6 slots"):
        task.reward(prompts, responses[..., :5])
    with pytest.raises(ValueError, match="length 2"):
        ToolCompareTask(V, prompt_length=3)


def test_episodes_follow_the_protocol():
    policy = ToolUsePolicy(V, d_model=8, num_layers=1, num_heads=2, seed=0)
    prompts = torch.tensor([[0, 4], [3, 1], [2, 2]])
    generator = torch.Generator().manual_seed(5)
    responses = run_tool_episodes(policy, prompts, 7, generator)
    assert responses.shape == (3, 7, RESPONSE_LENGTH)
    # replay the environment with the same generator: prices first, then the policy's draws
    prices = hidden_prices(21, V, torch.Generator().manual_seed(5))
    flat = responses.reshape(21, RESPONSE_LENGTH)
    assert torch.equal(flat[:, 2:4], compare_tool(flat[:, 0], flat[:, 1], prices, EOS))
    items = prompts.repeat_interleave(7, dim=0)
    dearer = compare_tool(items[:, 0], items[:, 1], prices, EOS)[:, 0]
    assert torch.equal(flat[:, GRADER_SLOT], dearer)
    assert (flat[:, ANSWER_SLOT] <= EOS).all()
    again = run_tool_episodes(policy, prompts, 7, torch.Generator().manual_seed(5))
    assert torch.equal(responses, again)
    assert torch.equal(policy.greedy(prompts), policy.greedy(prompts))
    out, mask = policy.sample(prompts, 2, torch.Generator().manual_seed(0))
    assert torch.equal(mask, tool_mask((3, 2)))
    assert policy.log_probs(prompts, out).shape == (3, 2, RESPONSE_LENGTH)


def test_masked_environment_tokens_get_no_gradient_and_the_bug_gives_them_one():
    policy = ToolUsePolicy(V, d_model=8, num_layers=1, num_heads=2, seed=0)
    prompts = torch.tensor([[0, 4], [3, 1]])
    responses, mask = policy.sample(prompts, 4, torch.Generator().manual_seed(0))
    deltas = torch.randn(2, 4)
    for bug in (False, True):
        used = torch.ones_like(mask) if bug else mask
        log_probs = policy.log_probs(prompts, responses).detach().requires_grad_(True)
        loss = aggregate_loss(
            compute_per_token_loss(log_probs, deltas, "naive"), used, "token_mean"
        )
        (grad,) = torch.autograd.grad(loss, log_probs)
        env = grad[..., [2, 3, GRADER_SLOT]]
        assert (env != 0).any() if bug else (env == 0).all()
    # GAE: the environment's slots get advantage 0 and do not change the policy's
    values = torch.randn(2, 4, RESPONSE_LENGTH)
    rewards = outcome_token_rewards(torch.ones(2, 4), mask)
    assert (rewards[..., ANSWER_SLOT] == 1).all() and rewards.sum() == 8
    adv, _ = compute_gae(rewards, values, mask, 1.0, 0.9)
    changed = values.clone()
    changed[..., [2, 3, GRADER_SLOT]] += 5.0
    assert torch.equal(adv, compute_gae(rewards, changed, mask, 1.0, 0.9)[0])
    assert (adv[..., [2, 3, GRADER_SLOT]] == 0).all()


def test_config_validation_for_the_tool_task():
    assert _config().response_length == RESPONSE_LENGTH
    with pytest.raises(TypeError, match="^mask_tool_tokens must be True or False"):
        _config(mask_tool_tokens=1).validate()
    with pytest.raises(ValueError, match="mask_tool_tokens=False .* acts only with task"):
        TrainConfig(mask_tool_tokens=False).validate()
    with pytest.raises(ValueError, match="prompt_length must be 2"):
        _config(prompt_length=3).validate()
    with pytest.raises(ValueError, match="leave max_response_length None"):
        _config(max_response_length=7).validate()
    with pytest.raises(ValueError, match="need model 'autoregressive'"):
        _config(model="transformer").validate()
    with pytest.raises(ValueError, match="trains on prompt_source 'random'"):
        _config(prompt_source="lecture", prompt_length=3).validate()
