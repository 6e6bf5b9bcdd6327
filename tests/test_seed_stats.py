"""seed_stats.compare_seeds / format_comparison / permutation_p_value: exact values that a wrong
implementation would miss, and planted faults that these checks reject."""

import itertools
import math
import random
import statistics

import pytest

from pgrl_helpers import seed_stats
from pgrl_helpers.seed_stats import compare_seeds, format_comparison, permutation_p_value


def reference_p(a, b):
    """Independent exact two-sided p: every assignment of the pooled values to labels a/b with
    the right group sizes (bit masks instead of combinations), in exact fractions."""
    from fractions import Fraction

    pooled = [Fraction(v).limit_denominator(10**9) for v in list(a) + list(b)]
    n, total = len(a), len(pooled)
    observed = abs(sum(pooled[:n]) / n - sum(pooled[n:]) / len(b))
    hits = count = 0
    for mask in range(2**total):
        chosen = [i for i in range(total) if mask >> i & 1]
        if len(chosen) != n:
            continue
        x = sum(pooled[i] for i in chosen) / n
        y = sum(pooled[i] for i in range(total) if not mask >> i & 1) / len(b)
        count += 1
        hits += abs(x - y) >= observed
    return hits / count


# ------------------------------------------------------------------ checks, reused on plants


def check_exact_p_values(p_fn):
    fully_separated = p_fn([10, 11, 12, 13, 14], [0, 1, 2, 3, 4])
    assert fully_separated == pytest.approx(2 / 252, abs=1e-15), fully_separated
    # Hand count: a = [1, 2], b = [3, 4]; of the 6 splits, {1,2}|{3,4} and {3,4}|{1,2} reach 2.
    assert p_fn([1, 2], [3, 4]) == pytest.approx(2 / 6, abs=1e-15)
    # Three seeds each, fully separated: 2 of 20 splits, never below 0.05.
    assert p_fn([5, 6, 7], [1, 2, 3]) == pytest.approx(0.1, abs=1e-15)
    assert p_fn([1, 2, 3], [1, 2, 3]) == 1.0
    rng = random.Random(0)
    for _ in range(20):
        n_a, n_b = rng.randint(1, 5), rng.randint(1, 5)
        a = [round(rng.gauss(0.6, 0.2), 3) for _ in range(n_a)]
        b = [round(rng.gauss(0.5, 0.2), 3) for _ in range(n_b)]
        assert p_fn(a, b) == pytest.approx(reference_p(a, b), abs=1e-12), (a, b)


def check_worst_seed(compare_fn):
    high = compare_fn([0.9, 0.2, 0.8], [0.5, 0.6, 0.7], "A", "B", higher_is_better=True)
    assert (high["worst_a"], high["worst_b"]) == (0.2, 0.5)
    low = compare_fn([0.9, 0.2, 0.8], [0.5, 0.6, 0.7], "A", "B", higher_is_better=False)
    assert (low["worst_a"], low["worst_b"]) == (0.9, 0.7)
    assert (high["median_a"], high["median_b"]) == (0.8, 0.6)


def check_verdicts(compare_fn):
    good, bad = [10, 11, 12, 13, 14], [0, 1, 2, 3, 4]
    assert compare_fn(good, bad, "A", "B")["verdict"] == "A better (p < 0.05)"
    assert compare_fn(bad, good, "A", "B")["verdict"] == "B better (p < 0.05)"
    # Lower is better (e.g. a loss): the group with the smaller values wins.
    assert compare_fn(good, bad, "A", "B", higher_is_better=False)["verdict"] == (
        "B better (p < 0.05)"
    )
    # Every seed of A above every seed of B, but only three seeds each: p = 0.1.
    assert compare_fn([5, 6, 7], [1, 2, 3], "A", "B")["verdict"] == "within seed noise"
    # p exactly at alpha is not significant: one extreme seed against 19 others, p = 1/20.
    result = compare_fn([100.0], [float(v) for v in range(19)], "A", "B")
    assert result["p_value"] == pytest.approx(0.05, abs=1e-15)
    assert result["verdict"] == "within seed noise"
    assert compare_fn([100.0], [float(v) for v in range(19)], "A", "B", alpha=0.051)["verdict"] == (
        "A better (p < 0.051)"
    )


# ------------------------------------------------------------------ the real module passes


def test_exact_p_values():
    check_exact_p_values(permutation_p_value)
    check_exact_p_values(lambda a, b: compare_seeds(a, b)["p_value"])


def test_worst_seed_follows_the_direction():
    check_worst_seed(compare_seeds)


def test_verdicts():
    check_verdicts(compare_seeds)


def test_counts_and_names_are_reported():
    result = compare_seeds([1.0, 2.0], [3.0, 4.0, 5.0], "GRPO", "RLOO")
    assert (result["name_a"], result["name_b"], result["n_a"], result["n_b"]) == (
        "GRPO",
        "RLOO",
        2,
        3,
    )


def test_p_is_symmetric_and_shift_invariant():
    a, b = [0.91, 0.95, 0.99, 0.97], [0.90, 0.93, 0.92, 0.96, 0.89]
    p = permutation_p_value(a, b)
    assert permutation_p_value(b, a) == pytest.approx(p, abs=1e-15)
    assert permutation_p_value([v + 100 for v in a], [v + 100 for v in b]) == pytest.approx(
        p, abs=1e-15
    )


def test_format_comparison_one_line():
    result = compare_seeds([0.9, 0.8, 1.0, 0.95, 0.85], [0.1, 0.2, 0.3, 0.25, 0.15], "A", "B")
    line = format_comparison(result)
    assert line == (
        "A: median 0.900, worst 0.800 (5 seeds) | B: median 0.200, worst 0.100 (5 seeds)"
        " | exact permutation p = 0.008 -> A better (p < 0.05)"
    )
    assert "median 0.9, worst 0.8" in format_comparison(result, digits=1)
    assert "\n" not in line


@pytest.mark.parametrize(
    ("a", "b", "kwargs", "match"),
    [
        ([], [1.0], {}, "at least one value"),
        ([1.0], [], {}, "at least one value"),
        ([1.0, math.nan], [1.0], {}, "a must hold finite"),
        ([1.0], [math.inf], {}, "b must hold finite"),
        ([1.0], [2.0], {"alpha": 0.0}, "alpha must be in"),
        ([1.0], [2.0], {"alpha": 1.5}, "alpha must be in"),
    ],
)
def test_bad_input_is_a_clear_error(a, b, kwargs, match):
    with pytest.raises(ValueError, match=match):
        compare_seeds(a, b, **kwargs)


def test_too_many_splits_is_refused_not_hung():
    with pytest.raises(ValueError, match="MAX_SPLITS"):
        permutation_p_value([float(i) for i in range(20)], [float(i) for i in range(20)])
    assert math.comb(20, 10) <= seed_stats.MAX_SPLITS  # 10 vs 10 seeds stays exact


# ------------------------------------------------------------------ planted faults are caught


def _one_sided_p(a, b):
    pooled, n = list(a) + list(b), len(a)
    observed = statistics.mean(a) - statistics.mean(b)
    splits = list(itertools.combinations(range(len(pooled)), n))
    hits = 0
    for chosen in splits:
        x = [pooled[i] for i in chosen]
        y = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        hits += statistics.mean(x) - statistics.mean(y) >= observed - 1e-12
    return hits / len(splits)


def _strict_p(a, b):
    """Counts only splits strictly more extreme than the observed one (drops the observed)."""
    pooled, n = list(a) + list(b), len(a)
    observed = abs(statistics.mean(a) - statistics.mean(b))
    splits = list(itertools.combinations(range(len(pooled)), n))
    hits = sum(
        abs(
            statistics.mean([pooled[i] for i in c])
            - statistics.mean([pooled[i] for i in range(len(pooled)) if i not in c])
        )
        > observed + 1e-12
        for c in splits
    )
    return hits / len(splits)


def _median_statistic_p(a, b):
    pooled, n = list(a) + list(b), len(a)
    observed = abs(statistics.median(a) - statistics.median(b))
    splits = list(itertools.combinations(range(len(pooled)), n))
    hits = sum(
        abs(
            statistics.median([pooled[i] for i in c])
            - statistics.median([pooled[i] for i in range(len(pooled)) if i not in c])
        )
        >= observed - 1e-12
        for c in splits
    )
    return hits / len(splits)


@pytest.mark.parametrize("planted", [_one_sided_p, _strict_p, _median_statistic_p])
def test_planted_p_value_faults_are_caught(planted):
    with pytest.raises(AssertionError):
        check_exact_p_values(planted)


def _compare_with(**changes):
    def compare(a, b, name_a="a", name_b="b", higher_is_better=True, alpha=0.05):
        result = compare_seeds(a, b, name_a, name_b, higher_is_better, alpha)
        for key, fn in changes.items():
            result[key] = fn(a, b, name_a, name_b, higher_is_better, alpha, result)
        return result

    return compare


def test_planted_worst_seed_fault_is_caught():
    # Worst seed always the minimum, whatever the direction.
    planted = _compare_with(
        worst_a=lambda a, b, na, nb, hib, al, r: min(a),
        worst_b=lambda a, b, na, nb, hib, al, r: min(b),
    )
    with pytest.raises(AssertionError):
        check_worst_seed(planted)


@pytest.mark.parametrize(
    "verdict_fn",
    [
        # Ranks by the sign of the difference, ignoring p.
        lambda a, b, na, nb, hib, al, r: (
            f"{na if (statistics.mean(a) > statistics.mean(b)) == hib else nb} better (p < {al})"
        ),
        # Calls p == alpha significant.
        lambda a, b, na, nb, hib, al, r: (
            "within seed noise"
            if r["p_value"] > al
            else f"{na if (statistics.mean(a) > statistics.mean(b)) == hib else nb} better (p < {al})"
        ),
        # Ignores the direction.
        lambda a, b, na, nb, hib, al, r: (
            "within seed noise"
            if r["p_value"] >= al
            else f"{na if statistics.mean(a) > statistics.mean(b) else nb} better (p < {al})"
        ),
    ],
    ids=["ignores_p", "p_equal_alpha_significant", "ignores_direction"],
)
def test_planted_verdict_faults_are_caught(verdict_fn):
    with pytest.raises(AssertionError):
        check_verdicts(_compare_with(verdict=verdict_fn))
