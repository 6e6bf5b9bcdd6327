"""The RL-infrastructure memory calculator: parameter count x bytes per model copy."""

import pytest

from pgrl_helpers.memory import (
    FP32_ADAM,
    GIB,
    MIXED_ADAM,
    Precision,
    memory_breakdown,
    memory_table,
    total_memory,
)


def test_grpo_keeps_policy_old_policy_and_reference():
    rows = memory_breakdown(1000, "grpo")
    assert [r["copy"] for r in rows] == ["policy", "old policy", "reference"]
    assert [r["trained"] for r in rows] == [True, False, False]


def test_mixed_precision_bytes_per_parameter():
    # trained copy: 2 (bf16 weights) + 2 (bf16 grads) + 12 (fp32 master + Adam m, v) = 16
    policy, old, ref = memory_breakdown(1000, "grpo", MIXED_ADAM)
    assert policy["total"] == 16_000 and policy["optimizer"] == 12_000
    assert old["total"] == ref["total"] == 2_000  # frozen: weights only
    assert old["grads"] == old["optimizer"] == 0


def test_ppo_adds_a_trained_value_model_of_the_same_size():
    n = 7e9
    extra = total_memory(n, "ppo") - total_memory(n, "grpo")
    value = memory_breakdown(n, "ppo")[-1]
    assert value["copy"] == "value model" and value["trained"]
    assert extra == pytest.approx(value["total"]) == pytest.approx(16 * n)


def test_7b_and_70b_numbers():
    assert total_memory(7e9, "grpo") / GIB == pytest.approx(20 * 7e9 / GIB)
    assert total_memory(70e9, "ppo") == pytest.approx(36 * 70e9)
    assert total_memory(7e9, "grpo", FP32_ADAM) == pytest.approx((16 + 4 + 4) * 7e9)
    table = memory_table({"7B": 7e9, "70B": 70e9})
    assert "7B" in table and "70B" in table and "GiB" in table
    assert "1.80" in table  # PPO / GRPO = 36 / 20 bytes per parameter


@pytest.mark.parametrize(
    "args, error",
    [
        ((0,), ValueError),
        ((-5,), ValueError),
        (("7B",), TypeError),
        ((1000, "dpo"), ValueError),
        ((1000, "grpo", "bf16"), TypeError),
    ],
)
def test_bad_inputs_raise(args, error):
    with pytest.raises(error):
        memory_breakdown(*args)


def test_bad_precision_and_empty_table():
    with pytest.raises(ValueError, match="weight_bytes"):
        Precision(weight_bytes=-1)
    with pytest.raises(ValueError, match="empty"):
        memory_table({})
    with pytest.raises(ValueError, match="valid ones are: grpo, ppo"):
        total_memory(10, "a2c")
