"""The loop reproduces, number for number, the histories recorded before its refactor.

The data were recorded by ``tests/loop_regression_configs.py`` on the pre-refactor loop
(commit 53891de) and cover the lecture model, the transformer and the autoregressive
policy; naive / unclipped / clipped losses; KL with k1 and k3; the entropy bonus;
clip-higher; both loss aggregations; the freeze pitfall. Any change in how the loop
samples, scores or steps changes some number here.
"""

from __future__ import annotations

import json

import pytest
from loop_regression_configs import CONFIGS, DATA, record

RECORDED = json.loads(DATA.read_text())


def test_every_config_was_recorded():
    assert set(RECORDED) == set(CONFIGS)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_history_identical(name):
    expected = RECORDED[name]
    got = json.loads(json.dumps(record(name)))  # same float round-trip as the file
    assert len(got["records"]) == len(expected["records"])
    for i, (g, e) in enumerate(zip(got["records"], expected["records"])):
        for key, value in e.items():
            assert g.get(key) == value, f"{name} record {i} ({e['kind']}): {key}"
    for key in expected:
        if key != "records":
            assert got[key] == expected[key], f"{name}: {key}"
