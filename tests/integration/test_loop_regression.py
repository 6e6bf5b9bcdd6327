"""The loop reproduces, number for number, the histories recorded in
``tests/integration/data``.

The data are recorded by ``tests/integration/loop_regression_configs.py``: seven configs that cover the
lecture model, the transformer and the autoregressive policy; naive / unclipped / clipped
losses; KL with k1 and k3; the entropy bonus; clip-higher; both loss aggregations; the
freeze pitfall. Any change in how the loop samples, scores or steps changes some number
here.

What "number for number" means across machines: every integer, string and boolean (counts,
epochs, stop reasons) must be identical; a float may differ by at most ``FLOAT_TOL``
(1e-5, absolute below 1, relative above: ``param_sum``, a sum over every weight near 50, moves
by up to 2.7e-4). The data were recorded on an AMD EPYC; on an Intel Xeon the same code gives
losses, KL values and gradient norms that differ in the 7th significant digit (largest seen:
4.3e-6, on ``lecture_kl_clipped_normalized``), because float32 reductions are vectorised
differently by CPU; the mean rewards and exact-sort rates agree to the last digit. A real change
in the loop moves these numbers by far more (``test_a_real_change_is_not_within_tolerance``).
"""

from __future__ import annotations

import json

import pytest
from loop_regression_configs import CONFIGS, DATA, record

RECORDED = json.loads(DATA.read_text())
FLOAT_TOL = 1e-5


def same(got, expected) -> bool:
    """Equal, except that two floats may differ by FLOAT_TOL, relative to the larger of 1 and
    the recorded value (round-off across CPUs)."""
    if isinstance(expected, float) and isinstance(got, float):
        return abs(got - expected) <= FLOAT_TOL * max(1.0, abs(expected))
    if isinstance(expected, list) and isinstance(got, list):
        return len(got) == len(expected) and all(map(same, got, expected))
    if isinstance(expected, dict) and isinstance(got, dict):
        return got.keys() == expected.keys() and all(same(got[k], expected[k]) for k in expected)
    return got == expected


def test_every_config_was_recorded():
    assert set(RECORDED) == set(CONFIGS)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_history_identical(name):
    expected = RECORDED[name]
    got = json.loads(json.dumps(record(name)))  # same float round-trip as the file
    assert len(got["records"]) == len(expected["records"])
    for i, (g, e) in enumerate(zip(got["records"], expected["records"])):
        for key, value in e.items():
            assert same(g.get(key), value), f"{name} record {i} ({e['kind']}): {key}"
    for key in expected:
        if key != "records":
            assert same(got[key], expected[key]), f"{name}: {key}"


def test_a_real_change_is_not_within_tolerance():
    """The tolerance only absorbs round-off: a 0.1% change of a recorded loss, a changed reward
    or a changed sampled token fails the comparison."""
    step = next(r for r in RECORDED["lecture_naive"]["records"] if r["kind"] == "step")
    loss = next(k for k in step if "loss" in k and isinstance(step[k], float))
    planted = dict(step, **{loss: step[loss] * 1.001 + 1e-4})
    assert same(step, step) and not same(planted, step)
    assert not same(1.0, 2.0) and not same([1, 2], [1, 3])
