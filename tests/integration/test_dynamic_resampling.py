"""DAPO's dynamic sampling that draws more prompts until the batch is full of non-tied groups."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from pgrl_helpers.config import TrainConfig
from pgrl_helpers.rollout import Resampler, dynamic_sampling, tied_groups
from pgrl_helpers.training import run_policy_gradient

#: The lecture policy on the sort task: 4 random prompts per epoch, G = 3.
BASE = TrainConfig(
    prompt_source="random", prompt_length=3, vocab_size=5, prompts_per_epoch=4, num_responses=3,
    num_epochs=3, num_steps_per_epoch=1, eval_every=3, num_eval_prompts=8,
    batch_filter="dynamic_sampling", dynamic_sampling_max_draws=6,
)  # fmt: skip


class FakeTask:
    """Prompts are [i, i, i] for i = 0, 1, 2, ...; prompt i's G rewards tie unless i % 3 == 0."""

    def __init__(self):
        self.next = 0

    def training_prompts(self, n, generator, excluded_keys):
        prompts = torch.arange(self.next, self.next + n)[:, None].expand(n, 3).clone()
        self.next += n
        return prompts

    def prompt_key(self, prompts):
        return prompts[:, 0]

    def reward(self, prompts, responses):
        base = (prompts[:, :1] % 3 == 0).float() * torch.arange(responses.shape[1]).float()
        return base.expand(responses.shape[:2]).clone()


class FakeSource:
    def sample(self, prompts, num_samples, generator):
        shape = (prompts.shape[0], num_samples, 3)
        return torch.zeros(shape, dtype=torch.long), torch.ones(shape)


class FakeHistory:
    def __init__(self, num_responses):
        self.config = TrainConfig(num_responses=num_responses)
        self.heldout_keys = torch.tensor([-1])
        self.recorded = 0

    def record_training_prompts(self, prompts, keys):
        self.recorded += prompts.shape[0]


def test_refill_ends_with_a_full_batch_of_non_tied_groups_in_draw_order():
    task, history, counters = FakeTask(), FakeHistory(3), {"responses_sampled": 0}
    draw = Resampler(task, FakeSource(), history, None, None, counters)
    rollout = draw(4)  # prompts 0..3: only 0 and 3 are not tied
    rollout.resample = draw
    kept = dynamic_sampling(rollout, BASE)
    # prompts 0, 3 | 6 (draw of 4..7) | 9 (8..11): four non-tied groups after 2 extra draws
    assert kept.prompts[:, 0].tolist() == [0, 3, 6, 9]
    assert not tied_groups(kept.rewards).any()
    assert kept.metrics == {"dynamic_sampling_draws": 2, "dynamic_sampling_fill": 1.0}
    assert draw.draws == 3 and history.recorded == 12
    assert counters["responses_sampled"] == 12 * 3  # every sampled response counted


def test_the_cap_on_draws_is_respected_and_logged():
    task, history, counters = FakeTask(), FakeHistory(3), {"responses_sampled": 0}
    draw = Resampler(task, FakeSource(), history, None, None, counters)
    rollout = draw(4)
    rollout.resample = draw
    kept = dynamic_sampling(rollout, replace(BASE, dynamic_sampling_max_draws=1))
    assert kept.prompts[:, 0].tolist() == [0, 3, 6]  # one extra draw only: 3 of 4
    assert kept.metrics == {"dynamic_sampling_draws": 1, "dynamic_sampling_fill": 0.75}


def test_without_draws_the_batch_shrinks_as_before():
    task, history, counters = FakeTask(), FakeHistory(3), {"responses_sampled": 0}
    draw = Resampler(task, FakeSource(), history, None, None, counters)
    rollout = draw(4)
    rollout.resample = draw
    kept = dynamic_sampling(rollout, replace(BASE, dynamic_sampling_max_draws=0))
    assert kept.prompts[:, 0].tolist() == [0, 3] and draw.draws == 1 and kept.metrics == {}


def test_resampling_needs_a_resampler_and_a_dynamic_sampling_filter():
    task, history, counters = FakeTask(), FakeHistory(3), {"responses_sampled": 0}
    rollout = Resampler(task, FakeSource(), history, None, None, counters)(4)
    with pytest.raises(ValueError, match="rollout.resample"):
        dynamic_sampling(rollout, BASE)
    with pytest.raises(ValueError, match="dynamic_sampling_max_draws must be an int >= 0"):
        replace(BASE, dynamic_sampling_max_draws=-1).validate()
    with pytest.raises(ValueError, match="needs batch_filter 'dynamic_sampling' or 'dapo'"):
        replace(BASE, batch_filter="none").validate()
    with pytest.raises(ValueError, match="n .prompts to draw. must be a positive int"):
        Resampler(task, FakeSource(), history, None, None, counters)(0)


def test_in_the_loop_the_batch_is_full_and_heldout_keys_are_never_drawn():
    # length 3, values 0-4: 35 multisets; 8 + 8 held out (a large share, so a resampler that
    # ignored the held-out keys would draw some of them within a few batches)
    history = run_policy_gradient(BASE)
    steps = history.steps()
    assert all(s["frac_reward_zero_std"] == 0.0 for s in steps)
    assert all(s["dynamic_sampling_fill"] == 1.0 for s in steps), steps
    draws = sum(s["dynamic_sampling_draws"] for s in steps)
    assert draws > 0, "the lecture policy ties some groups at the start: a refill must happen"
    assert history.num_train_prompts == 4 * (3 + draws)
    assert history.train_prompts_with_heldout_key == 0
    assert history.evals()[-1]["responses_sampled"] == 3 * 4 * (3 + draws)
    # the recorded prompts are the training prompts' keys, disjoint from held-out keys
    keys = history.config.build_task().prompt_key(history.run.train_prompts)
    assert not torch.isin(keys, history.heldout_keys).any()


class IgnoresHeldOut:
    """A task whose training_prompts forgets the excluded keys (the planted bug)."""

    def __init__(self, task):
        self.task = task

    def __getattr__(self, name):
        return getattr(self.task, name)

    def training_prompts(self, n, generator, excluded_keys):
        return self.task.training_prompts(n, generator, torch.empty(0, dtype=torch.long))


def test_a_resampler_that_ignored_heldout_keys_would_be_caught(monkeypatch):
    """Planted bug: the resampler draws without excluding held-out keys; the count sees it."""
    original = Resampler.__call__

    def leaky(self, n):
        if not isinstance(self.task, IgnoresHeldOut):
            self.task = IgnoresHeldOut(self.task)
        return original(self, n)

    monkeypatch.setattr(Resampler, "__call__", leaky)
    history = run_policy_gradient(replace(BASE, num_epochs=6, dynamic_sampling_max_draws=20))
    assert history.train_prompts_with_heldout_key > 0


def _flat(module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in module.parameters()])


def test_with_refills_a_stale_sampler_lags_exactly_staleness_epochs(monkeypatch):
    """B4 (code review r4): the refills of dynamic sampling called StaleSource.sample again and
    each call stored a version, so with staleness 2 some batches lagged 1 epoch or 0. Each
    sample call is logged with the trainer's epoch (optimizer steps so far) and the epoch whose
    starting weights the sampler holds: it must be e - 2 (0 early on) for every call."""
    from pgrl_helpers.offpolicy import StaleSource

    k = 2
    config = replace(
        BASE, num_epochs=5, rollout_source="stale", staleness=k, off_policy_correction="tis"
    )
    steps, starts, log = [0], [], []  # optimizer steps; weights at each epoch's start; calls
    real_sample, real_after = StaleSource.sample, StaleSource.after_optimizer_step

    def sample(self, prompts, num_samples, generator):
        epoch = steps[0] // config.num_steps_per_epoch
        if len(starts) == epoch:  # the epoch's first call: the trainer has not stepped yet
            starts.append(_flat(self.policy))
        out = real_sample(self, prompts, num_samples, generator)
        held = _flat(self.sampler)
        log.append((epoch, [e for e, w in enumerate(starts) if torch.equal(w, held)]))
        return out

    def after_optimizer_step(self):
        steps[0] += 1
        real_after(self)

    monkeypatch.setattr(StaleSource, "sample", sample)
    monkeypatch.setattr(StaleSource, "after_optimizer_step", after_optimizer_step)
    history = run_policy_gradient(config)
    calls = [epoch for epoch, _ in log]
    assert len(calls) > len(set(calls)) == config.num_epochs  # refills happened
    assert all(held == [max(0, epoch - k)] for epoch, held in log), log
    assert sum(s["dynamic_sampling_draws"] for s in history.steps()) == len(log) - 5


def test_stale_rollouts_keep_the_dynamic_sampling_metrics():
    """B3 (code review r4): the stale source replaced rollout.metrics, so the refill metrics
    vanished from every step record of a stale run."""
    stale = replace(BASE, rollout_source="stale", staleness=1, off_policy_correction="tis")
    steps = run_policy_gradient(stale).steps()
    assert all(s["dynamic_sampling_fill"] == 1.0 for s in steps)
    assert all(isinstance(s["dynamic_sampling_draws"], int) for s in steps)
    assert all("ess_fraction" in s for s in steps)


def test_the_trl_bridge_refuses_resampling_naming_it():
    from pgrl_helpers.hf import trl_config

    with pytest.raises(ValueError, match="dynamic_sampling_max_draws > 0"):
        trl_config.grpo_config_kwargs(BASE)
