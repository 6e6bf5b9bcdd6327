"""Rewards, prompts and compute_reward: hand cases, vectorised == per-example, bad input."""

from __future__ import annotations

import functools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pgrl_helpers.sort_task import (
    LECTURE_PROMPTS,
    SortTask,
    compute_reward,
    exact_sort,
    lecture_prompts,
    make_prompts,
    max_reward,
    sort_distance_reward,
    sort_distance_reward_batch,
    sort_inclusion_ordering_reward,
    sort_inclusion_ordering_reward_batch,
    sorted_responses,
)

LECTURE_PROMPT = [3, 1, 0, 2]
# (response, sort_distance_reward, sort_inclusion_ordering_reward), worked out by hand:
LECTURE_CASES = [
    ([0, 1, 2, 3], 4.0, 7.0),  # perfect: 4 matches; 4 included + 3 ordered pairs
    ([7, 2, 2, 5], 1.0, 3.0),  # only pos 2 matches; only "2" included; 2<=2, 2<=5
    ([0, 3, 1, 2], 1.0, 6.0),  # only pos 0 matches; all 4 included; 0<=3, 1<=2
]


@pytest.mark.parametrize("response, distance, inclusion_ordering", LECTURE_CASES)
def test_lecture_examples(response, distance, inclusion_ordering):
    assert sort_distance_reward(LECTURE_PROMPT, response) == distance
    assert sort_inclusion_ordering_reward(LECTURE_PROMPT, response) == inclusion_ordering


def test_lecture_examples_vectorised():
    prompts = torch.tensor([LECTURE_PROMPT])
    responses = torch.tensor([[case[0] for case in LECTURE_CASES]])
    assert sort_distance_reward_batch(prompts, responses).tolist() == [
        [c[1] for c in LECTURE_CASES]
    ]
    assert sort_inclusion_ordering_reward_batch(prompts, responses).tolist() == [
        [c[2] for c in LECTURE_CASES]
    ]


def test_reward_hacking_loophole():
    # ascending junk that shares little with the prompt still collects every ordering point
    prompt = [3, 1, 0, 2]
    junk, near_miss = [0, 0, 0, 0], [0, 2, 1, 3]
    assert sort_inclusion_ordering_reward(prompt, junk) == 4.0  # 1 included + 3 ordered
    assert sort_inclusion_ordering_reward(prompt, near_miss) == 6.0
    assert sort_inclusion_ordering_reward(prompt, [0, 1, 2, 2]) == 6.0  # drops the 3, still 6
    assert sort_distance_reward(prompt, [0, 1, 2, 2]) == 3.0


@settings(max_examples=60, deadline=None)
@given(
    batch=st.integers(1, 4),
    trial=st.integers(1, 5),
    length=st.integers(1, 6),
    vocab=st.integers(1, 8),
    seed=st.integers(0, 10_000),
)
def test_vectorised_equals_per_example(batch, trial, length, vocab, seed):
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(0, vocab, (batch, length), generator=g)
    responses = torch.randint(0, vocab, (batch, trial, length), generator=g)
    for per_example, batched in (
        (sort_distance_reward, sort_distance_reward_batch),
        (sort_inclusion_ordering_reward, sort_inclusion_ordering_reward_batch),
    ):
        slow = compute_reward(prompts, responses, per_example)
        fast = compute_reward(prompts, responses, batched)
        assert slow.shape == (batch, trial)
        assert torch.equal(slow, fast)
        assert torch.equal(fast, compute_reward(prompts, responses, per_example.__name__))


def test_max_reward_is_reached_by_the_sorted_answer():
    prompts = make_prompts(16, 5, 10, generator=0)
    truth = sorted_responses(prompts)[:, None, :]
    for name in ("sort_distance_reward", "sort_inclusion_ordering_reward"):
        rewards = compute_reward(prompts, truth, name)
        assert torch.all(rewards == max_reward(name, 5))
    assert exact_sort(prompts, truth).all()
    assert not exact_sort(prompts, truth.flip(-1) + 10).any()


def test_prompts_are_seeded_and_in_range():
    a, b = make_prompts(8, 5, 10, generator=3), make_prompts(8, 5, 10, generator=3)
    assert torch.equal(a, b) and a.shape == (8, 5)
    assert int(a.min()) >= 0 and int(a.max()) <= 9
    assert not torch.equal(a, make_prompts(8, 5, 10, generator=4))
    assert lecture_prompts().tolist() == LECTURE_PROMPTS


def test_bad_inputs_raise_with_clear_messages():
    with pytest.raises(ValueError, match="same length"):
        sort_distance_reward([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="same length"):
        sort_inclusion_ordering_reward([1, 2], [1, 2, 3])
    prompts = torch.tensor([[1, 0, 2]])
    with pytest.raises(ValueError, match=r"length differ.*\[1, 3\].*\[1, 2, 2\]"):
        compute_reward(prompts, torch.zeros(1, 2, 2, dtype=torch.long), "sort_distance_reward")
    with pytest.raises(ValueError, match="batch size"):
        compute_reward(prompts, torch.zeros(2, 2, 3, dtype=torch.long), "sort_distance_reward")
    with pytest.raises(ValueError, match=r"batch, trial, pos"):
        compute_reward(prompts, torch.zeros(1, 3, dtype=torch.long), "sort_distance_reward")
    with pytest.raises(ValueError, match="unknown reward function 'nope'.*sort_distance_reward"):
        compute_reward(prompts, torch.zeros(1, 2, 3, dtype=torch.long), "nope")
    with pytest.raises(TypeError, match="integer token ids"):
        compute_reward(prompts, torch.zeros(1, 2, 3), "sort_distance_reward")
    with pytest.raises(ValueError, match="non-finite"):
        compute_reward(prompts, torch.zeros(1, 2, 3, dtype=torch.long), lambda p, r: float("nan"))
    with pytest.raises(ValueError, match="positive int"):
        make_prompts(0, 3, 5)
    with pytest.raises(ValueError, match="negative ids"):
        compute_reward(prompts, torch.full((1, 2, 3), -1), "sort_inclusion_ordering_reward")


# --- mutants ---
# The cases mutation testing found unchecked (tests/MUTATION.md).
#
# exact_sort on partly-right responses and its output shape, dtypes (int32 token ids,
# float32 rewards whatever the default dtype), empty batches, tensor inputs to the
# per-example rewards, max_reward on functions, make_prompts' checks, and error messages
# that name the offending argument.


PROMPTS = torch.tensor([[2, 0, 1], [1, 1, 0]])


# per prompt: exact, partly right (2 of 3 positions), reversed
RESPONSES = torch.tensor([[[0, 1, 2], [0, 1, 1], [2, 1, 0]], [[0, 1, 1], [0, 1, 0], [1, 1, 0]]])


def test_exact_sort_on_partly_right_responses():
    got = exact_sort(PROMPTS, RESPONSES)
    assert got.shape == (2, 3) and got.dtype == torch.bool
    assert got.tolist() == [[True, False, False], [True, False, False]]
    # one prompt, one trial, position-wise right except the last
    assert exact_sort(torch.tensor([[3, 1, 2]]), torch.tensor([[[1, 2, 2]]])).tolist() == [[False]]


def test_int32_token_ids_are_scored_like_int64():
    for name in ("sort_distance_reward", "sort_inclusion_ordering_reward"):
        wide = compute_reward(PROMPTS, RESPONSES, name)
        narrow = compute_reward(PROMPTS.int(), RESPONSES.int(), name)
        assert narrow.dtype == torch.float32 and torch.equal(narrow, wide)
    assert torch.equal(exact_sort(PROMPTS.int(), RESPONSES.int()), exact_sort(PROMPTS, RESPONSES))
    assert sorted_responses(PROMPTS.int()).dtype == torch.int32


def test_rewards_are_float32_even_with_a_float64_default_dtype():
    def per_example(prompt, response):
        return 0.5

    def vectorised(prompts, responses):
        return torch.ones(responses.shape[:2], dtype=torch.float64) / 3

    vectorised.vectorized = True
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        for reward_fn in (
            "sort_distance_reward",
            "sort_inclusion_ordering_reward",
            per_example,
            vectorised,
        ):
            rewards = compute_reward(PROMPTS, RESPONSES, reward_fn)
            assert rewards.dtype == torch.float32, reward_fn
            assert rewards.shape == (2, 3)
        empty = sort_inclusion_ordering_reward_batch(PROMPTS, RESPONSES[:, :0])
        assert empty.dtype == torch.float32
    finally:
        torch.set_default_dtype(previous)
    assert compute_reward(PROMPTS, RESPONSES, vectorised)[0, 0].item() == pytest.approx(1 / 3)


def test_rewards_by_hand():
    distance = sort_distance_reward_batch(PROMPTS, RESPONSES)
    assert distance.dtype == torch.float32
    assert distance.tolist() == [[3.0, 2.0, 1.0], [3.0, 2.0, 1.0]]
    inclusion_ordering = sort_inclusion_ordering_reward_batch(PROMPTS, RESPONSES)
    assert inclusion_ordering.dtype == torch.float32
    # [0,1,1] for prompt [2,0,1]: 0 and 1 included (2 missing) + 2 ordered pairs = 4
    assert inclusion_ordering.tolist() == [[5.0, 4.0, 3.0], [5.0, 4.0, 4.0]]


def test_empty_trial_axis_gives_an_empty_batch_by_trial_result():
    empty = RESPONSES[:, :0]  # 2 prompts, 0 responses each
    for reward in (sort_distance_reward_batch, sort_inclusion_ordering_reward_batch):
        rewards = reward(PROMPTS, empty)
        assert rewards.shape == (2, 0) and rewards.dtype == torch.float32
    assert exact_sort(PROMPTS, empty).shape == (2, 0)


def test_per_example_rewards_take_1d_tensors_and_name_bad_ones():
    prompt, response = torch.tensor([2, 0, 1]), torch.tensor([0, 1, 1])
    assert sort_distance_reward(prompt, response) == 2.0
    assert sort_inclusion_ordering_reward(prompt, response) == 4.0
    for fn in (sort_distance_reward, sort_inclusion_ordering_reward):
        with pytest.raises(ValueError, match=r"^prompt must be one sequence \(1 dim\).*\[1, 3\]"):
            fn(prompt[None], response)
        with pytest.raises(ValueError, match=r"^response must be one sequence \(1 dim\).*\[1, 3\]"):
            fn(prompt, response[None])
        with pytest.raises(ValueError, match="^prompt and response must have the same length"):
            fn(prompt, response[:2])


def test_max_reward_takes_names_and_functions():
    for fn, best in (
        (sort_distance_reward, 4.0),
        (sort_distance_reward_batch, 4.0),
        (sort_inclusion_ordering_reward, 7.0),
        (sort_inclusion_ordering_reward_batch, 7.0),
    ):
        assert max_reward(fn, 4) == best
        assert max_reward(fn.__name__, 4) == best
    known = r"\['sort_distance_reward', 'sort_inclusion_ordering_reward'\]"
    with pytest.raises(ValueError, match=rf"^max_reward knows only {known}.*'nope'"):
        max_reward("nope", 3)
    # a callable without __name__ (a partial) is refused by name, not with an AttributeError
    with pytest.raises(ValueError, match=rf"^max_reward knows only {known}, got ''"):
        max_reward(functools.partial(sort_distance_reward), 3)


def test_make_prompts_checks_every_size_and_reaches_zero():
    for kwargs, name in (
        ({"batch": 0, "length": 3, "vocab_size": 5}, "batch"),
        ({"batch": 2, "length": 0, "vocab_size": 5}, "length"),
        ({"batch": 2, "length": 3, "vocab_size": 0}, "vocab_size"),
    ):
        with pytest.raises(ValueError, match=rf"^{name} .*positive int.*0"):
            make_prompts(**kwargs)
    prompts = make_prompts(64, 5, 3, generator=0)
    assert set(prompts.unique().tolist()) == {0, 1, 2}
    assert make_prompts(2, 3, 1, generator=0).tolist() == [[0, 0, 0], [0, 0, 0]]
    assert lecture_prompts().dtype == torch.int64


def test_compute_reward_messages_name_the_argument():
    with pytest.raises(TypeError, match="^prompts must be a torch.Tensor, got list"):
        compute_reward(PROMPTS.tolist(), RESPONSES, "sort_distance_reward")
    with pytest.raises(TypeError, match="^responses must be a torch.Tensor, got list"):
        compute_reward(PROMPTS, RESPONSES.tolist(), "sort_distance_reward")
    with pytest.raises(
        ValueError, match=r"^prompts must have shape \[batch, prompt_pos\] \(2 dims\)"
    ):
        compute_reward(PROMPTS[0], RESPONSES, "sort_distance_reward")
    with pytest.raises(
        ValueError, match=r"^responses must have shape \[batch, trial, pos\] \(3 dims\)"
    ):
        compute_reward(PROMPTS, RESPONSES[0], "sort_distance_reward")
    with pytest.raises(TypeError, match="^prompts must hold integer token ids, got dtype"):
        compute_reward(PROMPTS.float(), RESPONSES, "sort_distance_reward")
    with pytest.raises(TypeError, match="^responses must hold integer token ids, got dtype"):
        compute_reward(PROMPTS, RESPONSES.float(), "sort_distance_reward")
    with pytest.raises(
        ValueError,
        match="^unknown reward function 'nope'.*sort_distance_reward, sort_inclusion_ordering_reward",
    ):
        compute_reward(PROMPTS, RESPONSES, "nope")
    with pytest.raises(TypeError, match="^reward_fn must be callable or a name.*int"):
        compute_reward(PROMPTS, RESPONSES, 5)
    with pytest.raises(ValueError, match="^rewards contains 6 non-finite"):
        compute_reward(PROMPTS, RESPONSES, lambda p, r: float("inf"))
    with pytest.raises(
        ValueError,
        match=r"^token ids must be >= 0",
    ):
        compute_reward(PROMPTS, -RESPONSES - 1, "sort_inclusion_ordering_reward")


def test_a_vectorised_reward_of_the_wrong_shape_is_named():
    def flat(prompts, responses):
        return torch.zeros(responses.shape[0])

    flat.vectorized = True
    with pytest.raises(
        ValueError,
        match=r"^vectorised reward returned shape \[2\].*\[batch, trial\] = \[2, 3\]",
    ):
        compute_reward(PROMPTS, RESPONSES, flat)


def test_sorted_responses_names_bad_prompts():
    with pytest.raises(
        ValueError, match=r"^prompts must have shape \[batch, prompt_pos\] \(2 dims\)"
    ):
        sorted_responses(PROMPTS[0])
    with pytest.raises(TypeError, match="^prompts must hold integer token ids"):
        sorted_responses(PROMPTS.float())


def test_sort_task_scores_with_its_reward_and_exact_sort():
    task = SortTask(3, 5)
    assert (task.prompt_length, task.vocab_size, task.fixed_prompts) == (3, 5, None)
    assert task.reward_fn == "sort_distance_reward"
    assert torch.equal(
        task.reward(PROMPTS, RESPONSES), sort_distance_reward_batch(PROMPTS, RESPONSES)
    )
    assert torch.equal(task.exact(PROMPTS, RESPONSES), exact_sort(PROMPTS, RESPONSES))
    other = SortTask(3, 4, "sort_inclusion_ordering_reward", fixed_prompts=PROMPTS)
    assert (other.prompt_length, other.vocab_size) == (3, 4)
    assert other.fixed_prompts is PROMPTS
    assert torch.equal(
        other.reward(PROMPTS, RESPONSES), sort_inclusion_ordering_reward_batch(PROMPTS, RESPONSES)
    )
