"""Held out by content: keys, the validation/test split, and the stopping rule."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pgrl_helpers import training
from pgrl_helpers.dedup_task import SortDedupTask
from pgrl_helpers.sort_task import SortTask, lecture_prompts


def multiset(prompt) -> tuple:
    return tuple(sorted(prompt))


def test_sort_key_is_the_multiset():
    task = SortTask(4, 6)
    prompts = torch.tensor([[3, 1, 1, 0], [1, 0, 3, 1], [0, 1, 1, 3], [0, 1, 3, 3]])
    keys = task.prompt_key(prompts).tolist()
    assert keys[0] == keys[1] == keys[2] != keys[3]
    assert task.num_keys() == math.comb(6 + 4 - 1, 4)  # 126 multisets
    # the lecture's fixed prompts keep ordered keys (position-aware LectureModel)
    lecture = SortTask(3, 5, fixed_prompts=lecture_prompts())
    assert lecture.prompt_key(torch.tensor([[1, 0, 2], [0, 1, 2]])).unique().numel() == 2


def test_dedup_key_is_the_set_of_values():
    task = SortDedupTask(3, 5)
    keys = task.prompt_key(torch.tensor([[2, 0, 2], [0, 2, 0], [2, 0, 1], [0, 0, 0]])).tolist()
    assert keys[0] == keys[1] and len({keys[0], keys[2], keys[3]}) == 3
    assert task.num_keys() == 5 + 10 + 10


def brute_force_keys(task) -> int:
    import itertools

    all_prompts = torch.tensor(
        list(itertools.product(range(task.vocab_size), repeat=task.prompt_length))
    )
    return task.prompt_key(all_prompts).unique().numel()


@pytest.mark.parametrize("length,vocab", [(2, 3), (3, 5), (4, 4), (3, 7)])
def test_num_keys_counts_the_distinct_keys(length, vocab):
    for task in (SortTask(length, vocab), SortDedupTask(length, vocab)):
        assert task.num_keys() == brute_force_keys(task)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    length=st.integers(2, 5),
    vocab=st.integers(3, 9),
    dedup=st.booleans(),
)
def test_heldout_keys_never_reach_a_training_batch(seed, length, vocab, dedup):
    task = SortDedupTask(length, vocab) if dedup else SortTask(length, vocab)
    n = max(1, task.num_keys() // 10)
    validation, test = task.heldout_split((n, n), seed)
    val_keys, test_keys = (
        set(task.prompt_key(validation).tolist()),
        set(task.prompt_key(test).tolist()),
    )
    assert len(val_keys) == n == len(test_keys) and not val_keys & test_keys  # disjoint by key
    heldout = torch.tensor(sorted(val_keys | test_keys))
    generator = torch.Generator().manual_seed(seed)
    for _ in range(5):
        batch = task.training_prompts(64, generator, heldout)
        assert not torch.isin(task.prompt_key(batch), heldout).any()
    # same seed, same split
    again = task.heldout_split((n, n), seed)
    assert torch.equal(again[0], validation) and torch.equal(again[1], test)


def test_history_records_the_split_and_that_no_training_prompt_had_a_heldout_key(tiny_config):
    seen = []
    history = training.run_policy_gradient(
        tiny_config("transformer"),
        callback=lambda epoch, h: seen.append(h.run.train_prompts.clone()),
    )
    task = history.config.build_task()
    assert history.train_prompts_with_heldout_key == 0
    assert history.num_train_prompts == 4 * 32
    trained = {multiset(p) for batch in seen for p in batch.tolist()}
    held = {
        multiset(p)
        for p in torch.cat([history.run.validation_prompts, history.run.test_prompts]).tolist()
    }
    assert not trained & held
    assert set(history.heldout_keys.tolist()) == set(
        task.prompt_key(
            torch.cat([history.run.validation_prompts, history.run.test_prompts])
        ).tolist()
    )
    assert all(r["test_exact_sort"] is not None for r in history.evals())


def test_the_counter_would_catch_a_leak(monkeypatch, tiny_config):
    """Planted bug: training prompts that ignore the held-out keys. The counter sees it."""
    from pgrl_helpers.task import PromptTask

    def leaky(self, n, generator, excluded_keys):
        return torch.cat([self.random_prompts(n - 4, generator), leaky.heldout[:4]])

    config = tiny_config("transformer", num_epochs=1)
    leaky.heldout = training.heldout_split(config)[0]
    monkeypatch.setattr(PromptTask, "training_prompts", leaky)
    history = training.run_policy_gradient(config)
    assert history.train_prompts_with_heldout_key >= 4


def test_the_stopping_rule_reads_validation_never_test(monkeypatch, tiny_config):
    real = training.evaluate_greedy

    def fake(policy, prompts, task, scores):
        out = real(policy, prompts, task)
        which = "test" if torch.equal(prompts, fake.test) else "validation"
        return out | {"exact_sort": scores[which]}

    config = tiny_config("transformer", target_validation_exact_sort=0.9)
    fake.test = training.heldout_split(config)[1]
    # a perfect test score must not stop the run ...
    monkeypatch.setattr(
        training, "evaluate_greedy", lambda *a: fake(*a, {"test": 1.0, "validation": 0.0})
    )
    history = training.run_policy_gradient(config)
    assert history.stop_reason == "max_epochs" and len(history.evals()) == 5
    # ... and a perfect validation score stops it at once, whatever the test says
    monkeypatch.setattr(
        training, "evaluate_greedy", lambda *a: fake(*a, {"test": 0.0, "validation": 1.0})
    )
    history = training.run_policy_gradient(config)
    assert history.stop_reason == "target" and len(history.evals()) == 1


def test_large_sets_reuse_their_own_keys_and_stay_disjoint(tiny_config):
    task = SortTask(4, 6)  # 126 multisets: at most 31 keys per held-out set
    validation, test = task.heldout_split((200, 200), seed=3)
    val_keys, test_keys = task.prompt_key(validation), task.prompt_key(test)
    assert len(validation) == len(test) == 200
    assert val_keys.unique().numel() == test_keys.unique().numel() == task.max_heldout_keys() == 31
    assert not set(val_keys.tolist()) & set(test_keys.tolist())
    assert len({tuple(p) for p in validation.tolist()}) == 200  # distinct orderings
    # small sets take one prompt per key, as before
    small, _ = task.heldout_split((20, 20), seed=3)
    assert task.prompt_key(small).unique().numel() == 20
    with pytest.raises(ValueError, match="not enough prompts with the held-out keys"):
        SortTask(2, 3).heldout_split((50, 50), seed=0)
    tiny_config("transformer", num_eval_prompts=200)  # validates


def test_per_epoch_takes_one_value_per_epoch(tiny_config):
    from pgrl_helpers.history import per_epoch

    history = training.run_policy_gradient(tiny_config("transformer", num_steps_per_epoch=3))
    steps = history.steps()
    assert per_epoch(history, "mean_reward") == [s["mean_reward"] for s in steps[::3]]
    assert len(per_epoch(history, "loss")) == 4
    with pytest.raises(ValueError, match="unknown step metric 'reward'"):
        per_epoch(history, "reward")
