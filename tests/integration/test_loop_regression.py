"""The loop reproduces, number for number, the histories recorded in
``tests/integration/data``.

The data are recorded by ``tests/integration/loop_regression_configs.py``: seven configs that cover the
lecture model, the transformer and the autoregressive policy; naive / unclipped / clipped
losses; KL with k1 and k3; the entropy bonus; clip-higher; both loss aggregations; the
freeze pitfall. Any change in how the loop samples, scores or steps changes some number
here.

What this guarantees, on any CPU: the runs are made in float64 (``record`` sets the default
dtype), so every integer, string and boolean (sampled prompts, counts, epochs, stop reasons)
is identical, and every float agrees with the recording to ``FLOAT_TOL`` = 1e-9 (absolute below
1, relative above). PyTorch picks its vectorised float kernels by processor; measured on one AMD
EPYC with ``ATEN_CPU_CAPABILITY`` = avx512 (native), avx2 and default, the largest float64
difference over all seven histories was 2.3e-14 (the float32 runs differed by up to 2.7e-5,
which is why they are not used). A real change of the loop moves these numbers by far more:
``test_a_planted_change_of_the_loop_fails`` changes the learning rate by one part in a million
and the comparison fails.
"""

from __future__ import annotations

import json

import pytest
from loop_regression_configs import CONFIGS, DATA, record

RECORDED = json.loads(DATA.read_text())
FLOAT_TOL = 1e-9


def same(got, expected) -> bool:
    """Equal, except that two floats may differ by FLOAT_TOL, relative to the larger of 1 and
    the recorded value (float64 round-off across CPUs)."""
    if isinstance(expected, float) and isinstance(got, float):
        return abs(got - expected) <= FLOAT_TOL * max(1.0, abs(expected))
    if isinstance(expected, list) and isinstance(got, list):
        return len(got) == len(expected) and all(map(same, got, expected))
    if isinstance(expected, dict) and isinstance(got, dict):
        return got.keys() == expected.keys() and all(same(got[k], expected[k]) for k in expected)
    return got == expected


def differences(got: dict, expected: dict) -> list[str]:
    """Where ``got`` differs from the recorded ``expected`` history (empty when the same)."""
    found = []
    if len(got["records"]) != len(expected["records"]):
        found.append(f"{len(got['records'])} records, recorded {len(expected['records'])}")
    for i, (g, e) in enumerate(zip(got["records"], expected["records"])):
        found += [
            f"record {i} ({e['kind']}): {key} {g.get(key)!r} != {value!r}"
            for key, value in e.items()
            if not same(g.get(key), value)
        ]
    found += [
        f"{key}: {got.get(key)!r} != {expected[key]!r}"
        for key in expected
        if key != "records" and not same(got.get(key), expected[key])
    ]
    return found


def test_every_config_was_recorded():
    assert set(RECORDED) == set(CONFIGS)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_history_identical(name):
    got = json.loads(json.dumps(record(name)))  # same float round-trip as the file
    assert got["param_dtype"] == "torch.float64"
    found = differences(got, RECORDED[name])
    assert not found, f"{name}: " + "; ".join(found[:5])


def test_a_planted_change_of_the_loop_fails():
    """A learning rate changed by one part in a million is a real (tiny) change of the loop's
    arithmetic: the comparison must see it, so the tolerance only absorbs round-off."""
    base = CONFIGS["lecture_naive"].get("learning_rate")
    if base is None:
        from pgrl_helpers.config import TrainConfig

        base = TrainConfig().learning_rate
    got = json.loads(json.dumps(record("lecture_naive", learning_rate=base * (1 + 1e-6))))
    assert differences(got, RECORDED["lecture_naive"])


def test_a_changed_number_is_not_within_tolerance():
    """A 0.1% change of a recorded loss, a changed reward or a changed sampled token fails."""
    step = next(r for r in RECORDED["lecture_naive"]["records"] if r["kind"] == "step")
    loss = next(k for k in step if "loss" in k and isinstance(step[k], float))
    planted = dict(step, **{loss: step[loss] * 1.001 + 1e-4})
    assert same(step, step) and not same(planted, step)
    assert not same(1.0, 1.0 + 1e-8) and not same([1, 2], [1, 3])
