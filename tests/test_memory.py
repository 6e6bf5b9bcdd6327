"""The RL-infrastructure memory calculator, checked against an independent count."""

import pytest
import torch

from pgrl_helpers.memory import (
    FP32_ADAM,
    GIB,
    MIXED_ADAM,
    Precision,
    activation_bytes,
    kv_cache_bytes,
    logprob_cache_bytes,
    measure_copies,
    memory_breakdown,
    memory_table,
    total_memory,
)


def small_mlp():
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 8))


def test_grpo_keeps_a_trained_policy_and_a_frozen_reference_no_old_weight_copy():
    rows = memory_breakdown(1000, "grpo")
    assert [r["copy"] for r in rows] == ["policy", "reference"]
    assert [r["trained"] for r in rows] == [True, False]
    assert all(r["assumption"] for r in rows), "every line states its assumption"
    assert "old policy" not in [r["copy"] for r in memory_breakdown(1000, "ppo")]


def test_mixed_precision_totals_are_18_and_34_bytes_per_parameter():
    # policy: 2 (bf16 weights) + 2 (bf16 grads) + 12 (fp32 master, Adam m, v) = 16; ref: 2
    assert total_memory(1000, "grpo", MIXED_ADAM) == 18_000
    assert total_memory(1000, "ppo", MIXED_ADAM) == 34_000
    assert total_memory(1000, "grpo", FP32_ADAM) == 20_000  # 16 + 4
    assert total_memory(1000, "ppo", FP32_ADAM) == 36_000


@pytest.mark.parametrize("mixed, precision", [(True, MIXED_ADAM), (False, FP32_ADAM)])
@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_constants_match_the_bytes_real_modules_and_adam_allocate(mixed, precision, algorithm):
    measured = measure_copies(small_mlp, algorithm, mixed=mixed)
    n = measured["num_params"]
    assert n == 16 * 32 + 32 + 32 * 8 + 8
    predicted = {r["copy"]: r["total"] for r in memory_breakdown(n, algorithm, precision)}
    for name, value in predicted.items():
        assert measured[name] == value, (name, measured[name], value)
    assert measured["total"] == total_memory(n, algorithm, precision)


def test_independent_count_catches_a_wrong_constant():
    # planted bug: a calculator that forgets the fp32 master copy (8 instead of 12 bytes)
    wrong = Precision(weight_bytes=2, grad_bytes=2, optimizer_bytes=8)
    measured = measure_copies(small_mlp, "grpo", mixed=True)
    assert measured["total"] != total_memory(measured["num_params"], "grpo", wrong)


def test_value_and_reward_models_are_separate_lines():
    n = 7e9
    extra = total_memory(n, "ppo") - total_memory(n, "grpo")
    value = memory_breakdown(n, "ppo")[-1]
    assert value["copy"] == "value model" and value["trained"]
    assert extra == pytest.approx(value["total"]) == pytest.approx(16 * n)
    small_critic = memory_breakdown(n, "ppo", value_params=1e9)[-1]
    assert small_critic["total"] == pytest.approx(16e9)
    rows = memory_breakdown(n, "grpo", reward_model_params=7e9)
    assert rows[-1]["copy"] == "reward model" and not rows[-1]["trained"]
    assert rows[-1]["total"] == pytest.approx(2 * 7e9)


def test_per_token_lines():
    # Llama-2-7B-like: 32 layers, 32 KV heads of dim 128; 64 sequences x 1024 tokens in bf16
    kv = kv_cache_bytes(32, 32, 128, 64 * 1024)
    assert kv == 2 * 32 * 32 * 128 * 64 * 1024 * 2
    assert kv / GIB == pytest.approx(32.0)
    assert logprob_cache_bytes(64 * 1024) == 4 * 64 * 1024
    full = activation_bytes(32, 4096, 32, 1024, 8, recompute=False)
    ckpt = activation_bytes(32, 4096, 32, 1024, 8, recompute=True)
    assert ckpt == 32 * 2 * 1024 * 8 * 4096
    assert full == pytest.approx(32 * 1024 * 8 * 4096 * (34 + 5 * 32 * 1024 / 4096))
    assert full > 10 * ckpt


def test_7b_and_70b_numbers_and_table():
    assert total_memory(7e9, "grpo") / GIB == pytest.approx(18 * 7e9 / GIB)
    assert total_memory(70e9, "ppo") == pytest.approx(34 * 70e9)
    table = memory_table({"7B": 7e9, "70B": 70e9})
    assert "7B" in table and "70B" in table and "GiB" in table and "old policy" in table
    assert f"{34 / 18:.2f}" in table


@pytest.mark.parametrize(
    "args, kwargs, error",
    [
        ((0,), {}, ValueError),
        ((-5,), {}, ValueError),
        (("7B",), {}, ValueError),
        ((1000, "dpo"), {}, ValueError),
        ((1000, "grpo", "bf16"), {}, TypeError),
        ((1000,), {"reward_model_params": -1}, ValueError),
        ((1000, "ppo"), {"value_params": "big"}, ValueError),
    ],
)
def test_bad_inputs_raise(args, kwargs, error):
    with pytest.raises(error):
        memory_breakdown(*args, **kwargs)


def test_bad_precision_empty_table_and_bad_counts():
    with pytest.raises(ValueError, match="weight_bytes"):
        Precision(weight_bytes=-1)
    with pytest.raises(ValueError, match="empty"):
        memory_table({})
    with pytest.raises(ValueError, match="valid ones are: grpo, ppo"):
        total_memory(10, "a2c")
    with pytest.raises(ValueError, match="num_tokens"):
        kv_cache_bytes(32, 8, 128, 0)
    with pytest.raises(ValueError, match="nn.Linear"):
        measure_copies(lambda: torch.nn.Tanh())
