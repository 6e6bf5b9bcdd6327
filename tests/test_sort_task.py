"""Rewards, prompts and compute_reward: hand cases, vectorised == per-example, bad input."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pgrl_helpers.sort_task import (
    LECTURE_PROMPTS,
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
