"""The multi-turn tool task (pgrl_helpers.tool_task) and its wiring into the loop."""

from __future__ import annotations

import hashlib
import re

import pytest
import torch

from pgrl_helpers.config import TrainConfig
from pgrl_helpers.gae import compute_gae, outcome_token_rewards
from pgrl_helpers.losses import compute_per_token_loss
from pgrl_helpers.masking import aggregate_loss
from pgrl_helpers.tool_task import (
    ANSWER_SLOT,
    GRADER_SLOT,
    GREEDY_PRICE_SEED,
    RESPONSE_LENGTH,
    TOOL_SLOTS,
    ToolCompareTask,
    ToolUsePolicy,
    compare_tool,
    hidden_prices,
    keyed_prices,
    price_key_seed,
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
    # the bug lets the tool's reply in, never the grader's right answer
    assert tool_mask((1, 1), mask_tool_tokens=False).tolist() == [[[1.0, 1.0, 1.0, 1.0, 1.0, 0.0]]]
    assert tool_mask((2, 3), mask_tool_tokens=False)[..., GRADER_SLOT].eq(0).all()
    assert tool_mask((2, 3), mask_tool_tokens=False)[..., list(TOOL_SLOTS)].eq(1).all()


def _answers(policy, prompts):
    """(grader's answer, policy's answer) per prompt of greedy episodes: int[batch, 2]."""
    return policy.greedy(prompts)[:, 0, [GRADER_SLOT, ANSWER_SLOT]]


def test_greedy_evaluation_scores_a_prompt_not_its_position():
    """Review R3: the grader's answer and the episode of a prompt must not depend on its row in
    the evaluated batch, nor on the other prompts (the old code drew one price order per row
    from one seeded generator: [[0, 1], [2, 3]] -> answers [1, 2], swapped -> [0, 2])."""
    policy = ToolUsePolicy(8, d_model=32, num_layers=1, num_heads=2, seed=0)
    prompts = torch.tensor([[0, 1], [2, 3], [5, 7], [6, 4], [1, 0]])
    together = _answers(policy, prompts)
    swapped = _answers(policy, prompts.flip(0)).flip(0)
    assert torch.equal(together, swapped)
    for i in range(len(prompts)):
        assert torch.equal(_answers(policy, prompts[i : i + 1])[0], together[i])
    # [a, b] and [b, a] are the same question with the same hidden prices
    assert together[0, 0] == together[4, 0]
    # many prompts in many orders: the grader's answer is a function of the set {a, b}
    grid = torch.tensor([[a, b] for a in range(8) for b in range(8)])
    order = torch.randperm(len(grid), generator=torch.Generator().manual_seed(0))
    first, second = _answers(policy, grid), _answers(policy, grid[order])
    assert torch.equal(first[order], second)


def test_keyed_prices_depend_on_the_key_and_the_seed_only():
    prompts = torch.tensor([[1, 3], [2, 2], [3, 1]])
    prices = keyed_prices(prompts, 4, V, seed=7)  # [(batch draw), V]
    assert prices.shape == (12, V) and prices.dtype == torch.int64
    assert (prices.sort(dim=-1).values == torch.arange(V)).all()
    assert torch.equal(prices[:4], prices[8:])  # {1, 3} in either order
    assert not torch.equal(prices[:4], prices[4:8])  # another set, other prices
    assert len({tuple(r) for r in prices[:4].tolist()}) > 1  # fresh prices per draw
    alone = keyed_prices(prompts[1:2], 4, V, seed=7)
    assert torch.equal(alone, prices[4:8])
    assert torch.equal(
        keyed_prices(prompts, 2, V, seed=7).view(3, 2, V), prices.view(3, 4, V)[:, :2]
    )
    assert not torch.equal(keyed_prices(prompts, 4, V, seed=8), prices)
    assert price_key_seed(7, 1, 3) == price_key_seed(7, 3, 1) != price_key_seed(8, 1, 3)
    assert 0 <= price_key_seed(0, 0, 0) < 2**63
    with pytest.raises(ValueError, match="^seed must be an int >= 0"):
        keyed_prices(prompts, 1, V, seed=-1)
    with pytest.raises(ValueError, match="num_draws"):
        keyed_prices(prompts, 0, V, seed=0)


def test_price_seed_makes_evaluation_episodes_independent_of_the_batch():
    policy = _policy()
    prompts = torch.tensor([[0, 4], [3, 1], [2, 2]])
    run = run_tool_episodes(policy, prompts, 5, greedy=True, price_seed=3)
    flipped = run_tool_episodes(policy, prompts.flip(0), 5, greedy=True, price_seed=3).flip(0)
    assert torch.equal(run, flipped)
    prices = keyed_prices(prompts, 5, V, 3)
    flat = run.reshape(15, RESPONSE_LENGTH)
    items = prompts.repeat_interleave(5, dim=0)
    assert torch.equal(
        flat[:, GRADER_SLOT], compare_tool(items[:, 0], items[:, 1], prices, EOS)[:, 0]
    )


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


# --- mutants ---
# Kill tests for pgrl_helpers.tool_task: error messages and edge cases the main tests leave open.


def _policy(**kwargs):
    return ToolUsePolicy(V, d_model=8, num_layers=1, num_heads=2, seed=0, **kwargs)


def test_compare_tool_edge_cases():
    prices = torch.tensor([[0, 1, 2, 3, 4]] * 4)
    x = torch.tensor([2, 2, EOS, 1])
    y = torch.tensor([2, EOS, 3, 4])
    assert compare_tool(x, y, prices, EOS).tolist() == [[2, 2], [EOS, EOS], [EOS, EOS], [4, 1]]
    assert compare_tool(x.int(), y.int(), prices, EOS).dtype == torch.int64
    with pytest.raises(ValueError, match=r"^x, y must be \[n\] and prices \[n, 5\].*\[4\], \[3\]"):
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
    with pytest.raises(ValueError, match="^task 'tool_compare' has prompts of length 2.*3"):
        ToolCompareTask(V, 3)
    with pytest.raises(ValueError, match="^vocab_size must be >= 2.*1"):
        ToolCompareTask(1)
    ToolCompareTask(2)  # the smallest
    prompts = torch.tensor([[1, 3]])
    good = torch.zeros(1, 2, 6, dtype=torch.long)
    with pytest.raises(ValueError, match=r"^responses must be \[batch=1, trial, 6\].*\[2, 2, 6\]"):
        task.reward(prompts, torch.zeros(2, 2, 6, dtype=torch.long))
    with pytest.raises(ValueError, match=re.escape("got [2, 6]")):
        task.exact(prompts, good[0])
    with pytest.raises(ValueError, match=r"^responses must have 6 slots.*\[1, 2, 5\]"):
        task.called_with_prompt(prompts, good[..., :5])
    assert task.reward(prompts, good).dtype == torch.float32


def test_called_with_prompt_needs_both_items():
    task = ToolCompareTask(V)
    prompts = torch.tensor([[1, 3]])
    responses = torch.tensor([[[1, 1, 0, 0, 0, 0], [3, 3, 0, 0, 0, 0], [3, 1, 0, 0, 0, 0]]])
    assert task.called_with_prompt(prompts, responses).tolist() == [[False, False, True]]


def test_policy_errors_and_greedy_seed():
    with pytest.raises(TypeError, match="^mask_tool_tokens must be True or False.*1"):
        _policy(mask_tool_tokens=1)
    policy = _policy()
    assert policy.mask_tool_tokens is True and policy.max_response_length == 6
    assert policy.prompt_length == 2
    bug = _policy(mask_tool_tokens=False)
    _, mask = bug.sample(torch.tensor([[1, 2]]), 2, torch.Generator().manual_seed(0))
    assert torch.equal(mask, tool_mask((1, 2), False))
    prompts = torch.tensor([[1, 2], [4, 0]])
    greedy = policy.greedy(prompts)
    expected = run_tool_episodes(policy, prompts, 1, greedy=True, price_seed=GREEDY_PRICE_SEED)
    assert torch.equal(greedy, expected) and GREEDY_PRICE_SEED == 0
    every_pair = torch.tensor([[a, b] for a in range(V) for b in range(V) if a != b])
    other_seed = run_tool_episodes(policy, every_pair, 1, greedy=True, price_seed=1)
    assert not torch.equal(
        policy.greedy(every_pair)[..., GRADER_SLOT], other_seed[..., GRADER_SLOT]
    )
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
    with pytest.raises(ValueError, match="^num_samples .*positive int.*0"):
        run_tool_episodes(policy, prompts, 0)
    policy.max_response_length = 5
    with pytest.raises(ValueError, match="^the model must have max_response_length 6.*5"):
        run_tool_episodes(policy, prompts, 1)


def test_compare_tool_with_the_last_item():
    prices = torch.tensor([[4, 3, 2, 1, 0], [0, 1, 2, 3, 4]])
    x, y = torch.tensor([4, 3]), torch.tensor([3, 4])
    # item 4 is the cheapest in row 0 and the dearest in row 1
    assert compare_tool(x, y, prices, EOS).tolist() == [[3, 4], [4, 3]]


def test_task_checks_its_sizes_first():
    with pytest.raises(ValueError, match="^vocab_size .*positive int.*0"):
        ToolCompareTask(0)
    with pytest.raises(ValueError, match="^prompt_length .*positive int.*0"):
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


def test_price_key_seed_is_the_first_63_bits_of_blake2b_of_the_set():
    """The documented key: BLAKE2b-64 of "seed:min:max", little-endian, top 63 bits (it must fit
    ``torch.Generator.manual_seed``); the same for {a, b} in either order."""
    digest = hashlib.blake2b(b"3:1:4", digest_size=8).digest()
    expected = int.from_bytes(digest, byteorder="little") // 2
    assert price_key_seed(3, 4, 1) == price_key_seed(3, 1, 4) == expected
    assert 2**61 <= max(price_key_seed(s, 0, 1) for s in range(8)) < 2**63


def test_keyed_prices_of_an_empty_batch_is_an_empty_int64_table():
    prices = keyed_prices(torch.zeros(0, 2, dtype=torch.long), 3, 4, 0)
    assert prices.shape == (0, 4) and prices.dtype == torch.int64
