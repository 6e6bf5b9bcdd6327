"""Kill tests for pgrl_helpers.tool_task: error messages and edge cases the main tests leave open."""

from __future__ import annotations

import re

import pytest
import torch

from pgrl_helpers.tool_task import (
    GREEDY_PRICE_SEED,
    ToolCompareTask,
    ToolUsePolicy,
    compare_tool,
    hidden_prices,
    run_tool_episodes,
    tool_mask,
)

V = 5
EOS = V


def _policy(**kwargs):
    return ToolUsePolicy(V, d_model=8, num_layers=1, num_heads=2, seed=0, **kwargs)


def test_compare_tool_edge_cases():
    prices = torch.tensor([[0, 1, 2, 3, 4]] * 4)
    x = torch.tensor([2, 2, EOS, 1])
    y = torch.tensor([2, EOS, 3, 4])
    assert compare_tool(x, y, prices, EOS).tolist() == [[2, 2], [EOS, EOS], [EOS, EOS], [4, 1]]
    assert compare_tool(x.int(), y.int(), prices, EOS).dtype == torch.int64
    message = "x, y must be [n] and prices [n, 5], got [4], [3], [4, 5]"
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        compare_tool(x, y[:3], prices, EOS)
    with pytest.raises(ValueError, match=re.escape("got [1, 4], [1, 4], [4, 5]")):
        compare_tool(x[None], y[None], prices, EOS)
    with pytest.raises(ValueError, match="^x, y must be"):
        compare_tool(x, y, prices[:3], EOS)


def test_hidden_prices_shape_and_independence():
    prices = hidden_prices(3, 7, torch.Generator().manual_seed(0))
    assert prices.shape == (3, 7) and prices.dtype == torch.int64
    assert (prices.sort(dim=-1).values == torch.arange(7)).all()


def test_tool_mask_default_is_masked():
    assert tool_mask((1, 2)).tolist() == tool_mask((1, 2), True).tolist()
    assert tool_mask((1, 2)).dtype == torch.float32
    assert tool_mask((2, 1))[..., 2:4].eq(0).all() and tool_mask((2, 1))[..., 5].eq(0).all()


def test_task_errors_and_defaults():
    task = ToolCompareTask(V)
    assert task.prompt_length == 2 and task.vocab_size == V and task.eos_token == EOS
    assert task.name == "tool_compare"
    with pytest.raises(ValueError, match="^task 'tool_compare' has prompts of length 2, got 3$"):
        ToolCompareTask(V, 3)
    with pytest.raises(ValueError, match="^vocab_size must be >= 2 for a comparison, got 1$"):
        ToolCompareTask(1)
    ToolCompareTask(2)  # the smallest
    prompts = torch.tensor([[1, 3]])
    good = torch.zeros(1, 2, 6, dtype=torch.long)
    bad_batch = "responses must be [batch=1, trial, 6], got [2, 2, 6]"
    with pytest.raises(ValueError, match="^" + re.escape(bad_batch) + "$"):
        task.reward(prompts, torch.zeros(2, 2, 6, dtype=torch.long))
    with pytest.raises(ValueError, match=re.escape("got [2, 6]")):
        task.exact(prompts, good[0])
    slots = "responses must have 6 slots (call x 2, tool x 2, answer, grader), got [1, 2, 5]"
    with pytest.raises(ValueError, match="^" + re.escape(slots) + "$"):
        task.called_with_prompt(prompts, good[..., :5])
    assert task.reward(prompts, good).dtype == torch.float32


def test_called_with_prompt_needs_both_items():
    task = ToolCompareTask(V)
    prompts = torch.tensor([[1, 3]])
    responses = torch.tensor([[[1, 1, 0, 0, 0, 0], [3, 3, 0, 0, 0, 0], [3, 1, 0, 0, 0, 0]]])
    assert task.called_with_prompt(prompts, responses).tolist() == [[False, False, True]]


def test_policy_errors_and_greedy_seed():
    with pytest.raises(TypeError, match="^mask_tool_tokens must be True or False, got 1$"):
        _policy(mask_tool_tokens=1)
    policy = _policy()
    assert policy.mask_tool_tokens is True and policy.max_response_length == 6
    assert policy.prompt_length == 2
    bug = _policy(mask_tool_tokens=False)
    _, mask = bug.sample(torch.tensor([[1, 2]]), 2, torch.Generator().manual_seed(0))
    assert mask.eq(1).all()
    prompts = torch.tensor([[1, 2], [4, 0]])
    greedy = policy.greedy(prompts)
    expected = run_tool_episodes(
        policy, prompts, 1, torch.Generator().manual_seed(GREEDY_PRICE_SEED), greedy=True
    )
    assert torch.equal(greedy, expected) and GREEDY_PRICE_SEED == 0
    policy.train()
    policy.sample(prompts, 1, torch.Generator().manual_seed(0))
    assert policy.training  # the sampler restores the mode
    policy.eval()
    policy.sample(prompts, 1, torch.Generator().manual_seed(0))
    assert not policy.training


def test_greedy_takes_the_argmax_and_sampling_differs():
    policy = _policy()
    prompts = torch.tensor([[1, 2]])
    generator = torch.Generator().manual_seed(4)
    greedy = run_tool_episodes(policy, prompts, 30, generator, greedy=True)
    assert (greedy[0, :, 0] == greedy[0, 0, 0]).all()  # slot 0 sees only the prompt
    with torch.no_grad():
        from pgrl_helpers.autoregressive import _with_separator

        first = policy(_with_separator(policy, prompts))[:, -1].argmax(-1)
    assert greedy[0, 0, 0] == first[0]
    sampled = run_tool_episodes(policy, prompts, 30, torch.Generator().manual_seed(4))
    assert len(set(sampled[0, :, 0].tolist())) > 1


def test_run_tool_episodes_errors():
    policy = _policy()
    prompts = torch.tensor([[1, 2]])
    with pytest.raises(ValueError, match="^num_samples must be a positive int, got 0$"):
        run_tool_episodes(policy, prompts, 0)
    policy.max_response_length = 5
    with pytest.raises(ValueError, match="^the model must have max_response_length 6, got 5$"):
        run_tool_episodes(policy, prompts, 1)


def test_compare_tool_with_the_last_item():
    prices = torch.tensor([[4, 3, 2, 1, 0], [0, 1, 2, 3, 4]])
    x, y = torch.tensor([4, 3]), torch.tensor([3, 4])
    # item 4 is the cheapest in row 0 and the dearest in row 1
    assert compare_tool(x, y, prices, EOS).tolist() == [[3, 4], [4, 3]]


def test_task_checks_its_sizes_first():
    with pytest.raises(ValueError, match="^vocab_size must be a positive int, got 0$"):
        ToolCompareTask(0)
    with pytest.raises(ValueError, match="^prompt_length must be a positive int, got 0$"):
        ToolCompareTask(V, 0)
    keys = ToolCompareTask(V).num_keys()
    assert keys == 15 and isinstance(keys, int)


def test_policy_defaults_and_seed_are_the_autoregressive_policys():
    from pgrl_helpers.autoregressive import AutoregressiveSortPolicy

    ours = ToolUsePolicy(V, seed=3)
    base = AutoregressiveSortPolicy(V, 2, 6, seed=3)
    assert ours.d_model == base.d_model and len(ours.blocks) == len(base.blocks)
    assert ours.blocks[0].num_heads == base.blocks[0].num_heads
    for a, b in zip(ours.parameters(), base.parameters(), strict=True):
        assert torch.equal(a, b)


def test_sample_is_run_tool_episodes_with_the_generator():
    policy = _policy()
    prompts = torch.tensor([[1, 2], [0, 4]])
    responses, _ = policy.sample(prompts, 40, torch.Generator().manual_seed(5))
    expected = run_tool_episodes(policy, prompts, 40, torch.Generator().manual_seed(5))
    assert torch.equal(responses, expected)


def test_sampling_follows_the_policys_softmax_per_row():
    policy = _policy()
    with torch.no_grad():
        policy.unembed.bias[3] += 8.0  # token 3 very likely at every slot
    responses = run_tool_episodes(
        policy, torch.tensor([[1, 2]]), 300, torch.Generator().manual_seed(0)
    )
    assert (responses[0, :, 0] == 3).float().mean() > 0.8
