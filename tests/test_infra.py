"""The loop's time profile, the async-overlap measurement and model, the KV cache."""

from __future__ import annotations

import time

import pytest
import torch

from pgrl_helpers.config import TrainConfig
from pgrl_helpers.history import PHASES, history_columns
from pgrl_helpers.infra import (
    PhaseClock,
    kv_cache_bytes,
    measure_overlap,
    overlap_model,
    time_profile,
)
from pgrl_helpers.training import run_policy_gradient

#: Tolerance of the phase sum against the epoch's wall time measured from outside:
#: the clock misses only the loop's bookkeeping between epochs (the progress bar, the
#: callback) -- microseconds, but a shared CPU can preempt us for a few milliseconds.
TOLERANCE_S = 0.005
TOLERANCE_REL = 0.05


def test_phases_sum_to_the_epochs_wall_time():
    stamps = []

    def callback(epoch, history):
        stamps.append(time.perf_counter())  # the callback itself is ~1 us

    config = TrainConfig(
        model="transformer", prompt_source="random", prompts_per_epoch=16, embedding_dim=16,
        num_heads=2, num_layers=1, loss_mode="clipped", kl_coef=0.05, num_epochs=6,
        num_steps_per_epoch=3, eval_every=2, profile_time=True,
    )  # fmt: skip
    history = run_policy_gradient(config, callback=callback)
    profile = time_profile(history)
    assert profile["epoch"] == list(range(6))
    totals = [sum(profile[phase][e] for phase in PHASES) for e in range(6)]
    walls = [b - a for a, b in zip(stamps, stamps[1:])]  # epochs 1..5, seen from outside
    for total, wall in zip(totals[1:], walls):
        assert abs(total - wall) <= TOLERANCE_S + TOLERANCE_REL * wall, (total, wall)
    assert all(t > 0 for phase in PHASES[:-1] for t in profile[phase])
    # the eval epochs (2, 4, 6 done) pay for a held-out evaluation
    assert min(profile["evaluation"][e] for e in (1, 3, 5)) > 0
    assert history_columns(history)["time_optimizer"][2] == profile["optimizer"][0]


def test_the_profile_is_off_by_default_and_then_leaves_no_keys():
    history = run_policy_gradient(TrainConfig(num_epochs=2, num_steps_per_epoch=2))
    assert not any(key.startswith("time_") for r in history for key in r)
    assert not any(key.startswith("time_") for key in history_columns(history))
    with pytest.raises(ValueError, match="profile_time=True"):
        time_profile(history)


def test_phase_clock_rejects_unknown_phases_and_laps_add_up():
    clock = PhaseClock(True)
    clock.start()
    time.sleep(0.002)
    clock.lap("sampling")
    with pytest.raises(ValueError, match="unknown phase"):
        clock.lap("rewards")
    record = {"kind": "step"}
    clock.stop("evaluation", [record, {"kind": "eval"}])
    assert record["time_sampling"] >= 0.002 and record["time_reward"] == 0.0


def test_overlap_model():
    assert overlap_model(1.0, 1.0) == 2.0  # equal halves overlap perfectly
    assert overlap_model(3.0, 1.0) == pytest.approx(4 / 3)
    assert overlap_model(0.0, 2.0) == 1.0  # nothing to hide
    with pytest.raises(ValueError, match="sample_s"):
        overlap_model(-1.0, 1.0)
    with pytest.raises(ValueError, match="undefined"):
        overlap_model(0.0, 0.0)


def test_measure_overlap_reports_consistent_times():
    config = TrainConfig(
        model="transformer", prompt_source="random", prompts_per_epoch=8, embedding_dim=8,
        num_heads=2, num_layers=1, num_steps_per_epoch=2,
    )  # fmt: skip
    torch.set_num_threads(2)
    result = measure_overlap(config, epochs=3, repeats=1)
    assert torch.get_num_threads() == 2  # restored
    with pytest.raises(ValueError, match="epochs"):
        measure_overlap(config, epochs=0)
    assert set(result) == {
        "sample",
        "train",
        "sequential",
        "overlapped",
        "speedup",
        "model_speedup",
    }
    assert all(v > 0 for v in result.values())
    assert result["speedup"] == pytest.approx(result["sequential"] / result["overlapped"])
    assert 1 <= result["model_speedup"] <= 2


def test_kv_cache_bytes_formula_and_an_independent_count():
    assert kv_cache_bytes(3, 5, 7, 11, 13, 2) == 3 * 5 * 7 * 11 * 13 * 2 * 2
    # independent count: allocate the cache a decoder keeps (a key and a value tensor
    # [batch, heads, length, head_dim] per layer) and count its bytes
    batch, length, layers, heads, head_dim = 2, 9, 3, 4, 8
    cache = [
        (
            torch.zeros(batch, heads, length, head_dim, dtype=torch.bfloat16),
            torch.zeros(batch, heads, length, head_dim, dtype=torch.bfloat16),
        )
        for _ in range(layers)
    ]
    counted = sum(t.numel() * t.element_size() for kv in cache for t in kv)
    assert kv_cache_bytes(batch, length, layers, heads, head_dim, 2) == counted
    # Llama-2-7B (32 layers, 32 KV heads of 128): 0.5 MiB per token in fp16
    assert kv_cache_bytes(1, 1, 32, 32, 128, 2) == 0.5 * 2**20
    with pytest.raises(ValueError, match="heads"):
        kv_cache_bytes(1, 1, 1, 0, 1)
    with pytest.raises(ValueError, match="bytes_per_value"):
        kv_cache_bytes(1, 1, 1, 1, 1, 0)
