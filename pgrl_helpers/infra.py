"""RL infrastructure you can measure: the loop's time profile, async overlap, the KV cache.

* ``PhaseClock``: the training loop laps it after each phase; with
  ``TrainConfig.profile_time`` it writes ``time_<phase>`` seconds (phases in
  ``history.PHASES``) into the epoch's last step record. ``time_profile`` reads them back,
  ``plot_time_profile`` stacks them per epoch.
* ``measure_overlap``: a producer thread samples the next batch while the trainer steps
  on the current one (asynchronous RL with staleness 1), timed against doing both in turn;
  ``overlap_model`` is the cost model (s + t) / max(s, t) fed by measured phase times.
* ``kv_cache_bytes``: the rollouts' key/value cache (the memory line-up's missing term).

Taught in notebook 12.
"""

from __future__ import annotations

import copy
import queue
import threading
import time

import torch

from ._validate import check_number, check_positive_ints
from .history import PHASES


class PhaseClock:
    """Wall-clock laps of one epoch: ``start()``, then ``lap(phase)`` after each phase.

    ``stop(phase, history)`` laps the last phase and, if ``enabled``, writes every
    ``time_<phase>`` (seconds; 0.0 for a phase that did not run) into the history's last
    step record. Consecutive laps share their end points, so the phases add up to the
    time from ``start()`` to ``stop()`` up to float rounding.
    """

    def __init__(self, enabled: bool):
        self.enabled = bool(enabled)
        self.times: dict[str, float] = {}
        self._last = time.perf_counter()

    def start(self) -> None:
        self.times = dict.fromkeys(PHASES, 0.0)
        self._last = time.perf_counter()

    def lap(self, phase: str) -> None:
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}; valid: {PHASES}")
        now = time.perf_counter()
        self.times[phase] += now - self._last
        self._last = now

    def stop(self, phase: str, history) -> None:
        self.lap(phase)
        if self.enabled:
            last_step = next(r for r in reversed(history) if r["kind"] == "step")
            last_step.update({f"time_{name}": t for name, t in self.times.items()})


def time_profile(history) -> dict[str, list[float]]:
    """{'epoch': [...], phase: [seconds per epoch]} from a run with ``profile_time=True``."""
    rows = [r for r in history if r["kind"] == "step" and "time_sampling" in r]
    if not rows:
        raise ValueError("the history has no time profile: train with profile_time=True")
    return {"epoch": [r["epoch"] for r in rows]} | {
        phase: [r[f"time_{phase}"] for r in rows] for phase in PHASES
    }


def plot_time_profile(history, ax=None):
    """Stacked bars: milliseconds per phase per epoch. Returns the matplotlib axes."""
    import matplotlib.pyplot as plt

    profile = time_profile(history)
    ax = plt.gca() if ax is None else ax
    bottom = [0.0] * len(profile["epoch"])
    for phase in PHASES:
        ms = [1000 * t for t in profile[phase]]
        ax.bar(profile["epoch"], ms, bottom=bottom, label=phase)
        bottom = [b + m for b, m in zip(bottom, ms)]
    ax.set_xlabel("epoch")
    ax.set_ylabel("wall time (ms)")
    ax.legend(fontsize="small")
    return ax


# --------------------------------------------------------------------------------------
# Asynchronous overlap: a producer thread samples while the trainer steps
# --------------------------------------------------------------------------------------


def overlap_model(sample_s: float, train_s: float) -> float:
    """Cost model of the speed-up of overlapping sampling and training (a *model*).

    In turn, an epoch costs s + t; with a producer running one batch ahead it costs
    max(s, t) (perfect overlap, no contention): speed-up (s + t) / max(s, t) <= 2.
    """
    check_number(sample_s, "sample_s", 0, low_inclusive=True)
    check_number(train_s, "train_s", 0, low_inclusive=True)
    if max(sample_s, train_s) == 0:
        raise ValueError("sample_s and train_s are both 0: the speed-up is undefined")
    return (sample_s + train_s) / max(sample_s, train_s)


def measure_overlap(config, epochs: int = 10, repeats: int = 3) -> dict[str, float]:
    """Wall time of ``epochs`` epochs of sampling + training, in turn and overlapped.

    The policy of ``config`` samples ``config.batch_prompts`` x G responses (``sample``),
    and the trainer takes ``num_steps_per_epoch`` REINFORCE steps (``train``) on a batch.
    'sequential' alternates; 'overlapped' runs sampling in a producer thread one batch
    ahead (a frozen copy refreshed with the trainer's weights after each epoch: staleness
    1). Best of ``repeats``. Returns seconds {'sequential', 'overlapped', 'sample',
    'train'} (the last two per epoch, measured alone), 'speedup' and 'model_speedup';
    the four are timed in turn, ``repeats`` times, and each keeps its fastest run.
    torch runs on one intra-op thread, so two Python threads can use two cores only
    where torch releases the GIL.
    """
    threads_before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _measure_overlap(config, epochs, repeats)
    finally:
        torch.set_num_threads(threads_before)


def _measure_overlap(config, epochs: int, repeats: int) -> dict[str, float]:
    check_positive_ints(epochs=epochs, repeats=repeats)
    policy = config.build_policy()
    task = config.build_task()
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.learning_rate)
    sampler = copy.deepcopy(policy)
    gen = torch.Generator().manual_seed(config.seed)
    prompts = task.training_prompts(config.batch_prompts, gen, torch.empty(0, dtype=torch.long))

    def sample():
        with torch.no_grad():
            responses, mask = sampler.sample(prompts, config.num_responses, gen)
        return responses, mask, task.reward(prompts, responses)

    def train(batch):
        responses, mask, rewards = batch
        deltas = rewards - rewards.mean(dim=-1, keepdim=True)
        for _ in range(config.num_steps_per_epoch):
            log_probs = policy.log_probs(prompts, responses)
            loss = -(log_probs * deltas[..., None] * mask).sum() / mask.sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        sampler.load_state_dict(policy.state_dict())  # the weight sync

    def sequential():
        for _ in range(epochs):
            train(sample())

    def overlapped():
        batches: queue.Queue = queue.Queue(maxsize=1)

        def producer():
            for _ in range(epochs):
                batches.put(sample())

        thread = threading.Thread(target=producer)
        thread.start()
        for _ in range(epochs):
            train(batches.get())
        thread.join()

    batch = sample()
    runs = {"sample": sample, "train": lambda: train(batch)}
    runs |= {"sequential": sequential, "overlapped": overlapped}
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):  # interleaved, so a change of the machine's load hits all four
        for name, fn in runs.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    result = {name: min(t) for name, t in times.items()}
    result["sequential"] /= epochs
    result["overlapped"] /= epochs
    result["speedup"] = result["sequential"] / result["overlapped"]
    result["model_speedup"] = overlap_model(result["sample"], result["train"])
    return result


# --------------------------------------------------------------------------------------
# The KV cache of the rollouts
# --------------------------------------------------------------------------------------


def kv_cache_bytes(
    batch: int, length: int, layers: int, heads: int, head_dim: int, bytes_per_value: float = 2
) -> float:
    """Bytes of the key/value cache: batch x length x layers x heads x head_dim x 2 x bytes.

    batch = sequences generated at once (prompts x G), length = prompt + response tokens,
    heads = key/value heads (fewer than query heads with grouped-query attention), 2 =
    one key and one value vector per token, layer and head. bf16: 2 bytes per value.
    """
    check_positive_ints(batch=batch, length=length, layers=layers, heads=heads, head_dim=head_dim)
    check_number(bytes_per_value, "bytes_per_value", 0)
    return batch * length * layers * heads * head_dim * 2 * bytes_per_value
