"""The seed-noise statistics and tuning rule of benchmarks/bench_ppo_vs_grpo.py (no training)."""

from __future__ import annotations

import itertools
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_ppo_vs_grpo as bench  # noqa: E402

from pgrl_helpers.seed_stats import permutation_p_value  # noqa: E402


def brute_force_p(a, b):
    """The permutation p-value by relabelling every assignment of the pooled values."""
    pooled, observed, hits, total = a + b, abs(statistics.mean(a) - statistics.mean(b)), 0, 0
    for labels in itertools.product((0, 1), repeat=len(pooled)):
        if sum(labels) != len(b):
            continue
        x = [v for v, g in zip(pooled, labels) if g == 0]
        y = [v for v, g in zip(pooled, labels) if g == 1]
        hits += abs(statistics.mean(x) - statistics.mean(y)) >= observed - 1e-12
        total += 1
    return hits / total


def test_permutation_p_value_limits_and_brute_force():
    assert permutation_p_value([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(2 / 252)
    assert permutation_p_value([0.5] * 5, [0.5] * 5) == 1.0
    a, b = [0.2, 0.4, 0.4, 0.7, 0.1], [0.6, 0.6, 0.3, 1.0, 0.6]
    assert permutation_p_value(a, b) == pytest.approx(brute_force_p(a, b))
    assert permutation_p_value(a, b) == permutation_p_value(b, a)  # two-sided


def run(reached, responses=None, validation=0.5, test=0.5):
    return {"reached": reached, "responses_to_target": responses if reached else None,
            "validation_exact": validation, "test_exact": test}  # fmt: skip


def test_tuning_prefers_reaching_then_fewer_responses_then_validation():
    budget = bench.budget_responses()
    both = [run(True, 5000), run(True, 6000)]
    one_fast = [run(True, 1280), run(False)]
    assert bench.tuning_score(both) > bench.tuning_score(one_fast)  # seeds reaching first
    assert bench.tuning_score(one_fast)[1] == -(1280 + budget) / 2  # a miss costs the budget
    slower = [run(True, 6000), run(True, 6000)]
    assert bench.tuning_score(both) > bench.tuning_score(slower)
    assert bench.tuning_score([run(False, validation=0.6)] * 2) > bench.tuning_score(
        [run(False, validation=0.4)] * 2
    )


def test_comparisons_cover_every_pair_and_count_a_miss_as_the_budget():
    def seeded(runs):
        return [dict(r, seed=k) for k, r in enumerate(runs)]

    runs = {
        "A": seeded([run(True, 1280, test=1.0)] * 5),
        "B": seeded([run(False, test=0.0)] * 5),
        "C": seeded([run(True, 1280, test=1.0)] * 4 + [run(False, test=0.0)]),
    }
    rows = bench.comparisons(runs)
    assert {(r["a"], r["b"]) for r in rows} == {("A", "B"), ("A", "C"), ("B", "C")}
    ab = next(r for r in rows if (r["a"], r["b"], r["metric"]) == ("A", "B", "responses to target"))
    # paired by seed: five differences of one sign give the sign-flip floor 2 / 2^5
    assert ab["mean_b"] == bench.budget_responses() and ab["p_value"] == pytest.approx(2 / 32)
    assert ab["paired"] is True
    with pytest.raises(AssertionError):  # runs that are not seed k against seed k
        bench.comparisons({"A": runs["A"], "B": runs["B"][::-1][:4] + runs["B"][:1]})


def test_permutation_p_value_refuses_an_empty_group():
    with pytest.raises(ValueError, match=r"^a and b need at least one value each, got 0 and 2$"):
        permutation_p_value([], [0.1, 0.2])


def test_section_words_each_difference_by_what_its_test_can_show():
    """Three cases, at the Bonferroni level: "exceeds seed noise"; "undecided" when the test's
    smallest possible p (``seed_stats.observed_floor``, ties included) is not below the level;
    "no difference detected" otherwise. Never the old "(within seed noise)"."""
    import copy

    import _common

    stored = _common.load(bench.NAME)
    text = bench.section(stored)
    assert "(within seed noise)" not in text
    assert text.count("(undecided: its smallest possible p") == 6  # five seeds: floor >= 2/32
    payload = copy.deepcopy(stored)  # ten seeds, the test exact set by hand
    tests = {
        "PPO + GAE": [1.0] * 10,
        "GRPO": [0.0] * 10,
        "RLOO": [0.5 if i % 2 else -0.4 for i in range(10)],
    }
    for name, values in tests.items():
        runs = [dict(x, seed=i) for i, x in enumerate(payload["runs"][name] * 2)]
        payload["runs"][name] = [dict(x, test_exact=v) for x, v in zip(runs, values)]
    payload["seeds"] = list(range(10))
    payload["comparisons"] = bench.comparisons(payload["runs"], payload["max_epochs"])
    lines = {line.split(": means")[0]: line for line in bench.section(payload).splitlines()}
    assert lines["- PPO + GAE vs GRPO, test exact"].endswith("(exceeds seed noise)")
    assert lines["- GRPO vs RLOO, test exact"].endswith("(no difference detected at 0.0083)")
    assert (
        "(undecided: its smallest possible p, 0.5,"
        in lines["- PPO + GAE vs GRPO, responses to target"]
    )
