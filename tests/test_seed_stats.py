"""seed_stats.compare_seeds / format_comparison / permutation_p_value /
paired_permutation_p_value: exact values that a wrong implementation would miss, and planted
faults that these checks reject."""

import itertools
import math
import random
import statistics

import pytest

from pgrl_helpers import seed_stats
from pgrl_helpers.seed_stats import (
    compare_seeds,
    format_comparison,
    pair_by_seed,
    paired_permutation_p_value,
    permutation_p_value,
)


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
    # Every seed of A above every seed of B, but only three seeds each: p = 0.1, which is the
    # smallest p that 3 vs 3 seeds can give: the test decides nothing, and says so.
    assert compare_fn([5, 6, 7], [1, 2, 3], "A", "B")["verdict"] == (
        "undecided: 3 vs 3 seeds cannot reach p < 0.05 (smallest possible p = 0.1)"
    )
    # A floor exactly at alpha cannot reject either: one seed against 19 others, p >= 1/20.
    result = compare_fn([100.0], [float(v) for v in range(19)], "A", "B")
    assert result["p_value"] == pytest.approx(0.05, abs=1e-15)
    assert result["verdict"] == (
        "undecided: 1 vs 19 seeds cannot reach p < 0.05 (smallest possible p = 0.05)"
    )
    assert compare_fn([100.0], [float(v) for v in range(19)], "A", "B", alpha=0.051)["verdict"] == (
        "A better (p < 0.051)"
    )
    # Five seeds each can reach 0.05 (floor 2/252): a p above alpha is "no difference detected".
    overlap = compare_fn([0.5, 0.7, 0.6, 0.9, 0.4], [0.6, 0.5, 0.8, 0.4, 0.7], "A", "B")
    assert overlap["p_value"] == pytest.approx(reference_p([0.5, 0.7, 0.6, 0.9, 0.4],
                                                           [0.6, 0.5, 0.8, 0.4, 0.7]))  # fmt: skip
    assert overlap["verdict"] == f"no difference detected at 0.05 (p = {overlap['p_value']:.3g})"
    # p exactly at alpha (above the floor) is not significant: 4 pairs, d = [1, 1, 1, -1] has
    # |sum| >= 2 in 10 of the 16 sign patterns, p = 0.625; the floor is 2/16.
    at = compare_fn([1.0, 1.0, 1.0, -1.0], [0.0] * 4, "A", "B", alpha=0.625, paired=True)
    assert (at["p_value"], at["floor"]) == (0.625, 0.125)
    assert at["verdict"] == "no difference detected at 0.625 (p = 0.625)"
    above = compare_fn([1.0, 1.0, 1.0, -1.0], [0.0] * 4, "A", "B", alpha=0.63, paired=True)
    assert above["verdict"] == "A better (p < 0.63)"
    # Five pairs, every one in the same direction: p = 2/32 is the floor, so undecided.
    five = compare_fn([1.1, 2.3, 3.2, 4.9, 5.4], [1.0, 2.0, 3.0, 4.0, 5.0], "A", "B", paired=True)
    assert five["verdict"] == (
        "undecided: 5 paired seeds cannot reach p < 0.05 (smallest possible p = 0.0625)"
    )
    # Undecided is a property of the design, not of the data: p = 0.75 with 3 pairs is too.
    mixed = compare_fn([3.0, 1.0, -1.0], [0.0] * 3, "A", "B", paired=True)
    assert mixed["p_value"] == 0.75 and mixed["verdict"] == (
        "undecided: 3 paired seeds cannot reach p < 0.05 (smallest possible p = 0.25)"
    )


def check_floors(floor_fn):
    """The smallest p of each design, by hand, and as the p of fully separated data."""
    assert floor_fn(3, 3, paired=True) == 0.25  # 2/2^3
    assert floor_fn(5, 5, paired=True) == 2 / 32
    assert floor_fn(10, 10, paired=True) == 2 / 1024
    assert floor_fn(1, 1, paired=True) == 1.0  # +d and -d
    assert floor_fn(3, 3, paired=False) == pytest.approx(2 / 20, abs=1e-15)  # swap = same |diff|
    assert floor_fn(5, 5, paired=False) == pytest.approx(2 / 252, abs=1e-15)
    assert floor_fn(2, 3, paired=False) == pytest.approx(1 / 10, abs=1e-15)  # no mirror split
    assert floor_fn(1, 19, paired=False) == pytest.approx(1 / 20, abs=1e-15)
    for n_a, n_b in [(1, 2), (2, 2), (2, 4), (3, 3), (3, 5), (4, 4)]:
        top = [100.0 + i for i in range(n_a)]
        low = [float(i) for i in range(n_b)]
        assert permutation_p_value(top, low) == pytest.approx(
            floor_fn(n_a, n_b, paired=False), abs=1e-15
        ), (n_a, n_b)
    for n in range(1, 8):
        up = [float(i) + 1 + i / 10 for i in range(n)]
        assert paired_permutation_p_value(up, [float(i) for i in range(n)]) == pytest.approx(
            floor_fn(n, n, paired=True), abs=1e-15
        ), n
    rng = random.Random(2)
    for _ in range(30):  # never below the floor
        n_a, n_b = rng.randint(1, 5), rng.randint(1, 5)
        a = [round(rng.gauss(0.6, 0.2), 3) for _ in range(n_a)]
        b = [round(rng.gauss(0.5, 0.2), 3) for _ in range(n_b)]
        assert permutation_p_value(a, b) >= floor_fn(n_a, n_b, paired=False) - 1e-15
        assert paired_permutation_p_value(a, a[::-1]) >= floor_fn(n_a, n_a, paired=True) - 1e-15


# ------------------------------------------------------------------ the real module passes


def test_exact_p_values():
    check_exact_p_values(permutation_p_value)
    check_exact_p_values(lambda a, b: compare_seeds(a, b)["p_value"])


def test_worst_seed_follows_the_direction():
    check_worst_seed(compare_seeds)


def test_verdicts():
    check_verdicts(compare_seeds)


def test_floors():
    check_floors(seed_stats.p_value_floor)
    result = compare_seeds([5, 6, 7], [1, 2, 3])
    assert result["floor"] == pytest.approx(0.1, abs=1e-15)
    assert compare_seeds([5, 6, 7], [1, 2, 3], paired=True)["floor"] == 0.25


def brute_force_floor(a, b, paired):
    """The smallest p over every arrangement of the values: every sign pattern of the pairs'
    differences, or every split of the pooled values into groups of len(a) and len(b)."""
    if paired:
        diffs = [x - y for x, y in zip(a, b)]
        return min(
            paired_permutation_p_value([s * d for s, d in zip(signs, diffs)], [0.0] * len(diffs))
            for signs in itertools.product((1, -1), repeat=len(diffs))
        )
    pooled = list(a) + list(b)
    return min(
        permutation_p_value(
            [pooled[i] for i in chosen], [pooled[i] for i in range(len(pooled)) if i not in chosen]
        )
        for chosen in itertools.combinations(range(len(pooled)), len(a))
    )


def check_observed_floors(floor_fn):
    # ties raise the floor: 10 pairs of which 4 differ cannot go below 2/2^4
    a, b = [3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 2.0, 4.0, 2.0, 4.0], [3.0] * 6 + [3.0, 3.0, 3.0, 3.0]
    assert floor_fn(a, b, paired=True) == 2 / 16
    assert floor_fn([1.0, 2.0], [1.0, 2.0], paired=True) == 1.0  # no pair differs
    assert floor_fn([0.0, 0.0, 1.0], [0.0, 1.0, 1.0], paired=False) == pytest.approx(
        brute_force_floor([0.0, 0.0, 1.0], [0.0, 1.0, 1.0], False), abs=1e-15
    )
    rng = random.Random(3)
    for _ in range(40):
        n_a = rng.randint(1, 4)
        n_b = n_a if rng.random() < 0.5 else rng.randint(1, 4)
        a = [float(rng.randint(0, 2)) for _ in range(n_a)]  # few values: many ties
        b = [float(rng.randint(0, 2)) for _ in range(n_b)]
        assert floor_fn(a, b, paired=False) == pytest.approx(
            brute_force_floor(a, b, False), abs=1e-15
        ), (a, b)
        if n_a == n_b:
            assert floor_fn(a, b, paired=True) == pytest.approx(
                brute_force_floor(a, b, True), abs=1e-15
            ), (a, b)
        # continuous values: the design's floor
        x = [rng.random() for _ in range(n_a)]
        y = [rng.random() for _ in range(n_b)]
        assert floor_fn(x, y, paired=False) == pytest.approx(
            seed_stats.p_value_floor(n_a, n_b, paired=False), abs=1e-15
        )


def test_observed_floors():
    check_observed_floors(seed_stats.observed_floor)
    # compare_seeds reports it, and ties can make a ten-seed test undecided
    a, b = [3.0] * 6 + [2.0, 4.0, 2.0, 4.0], [3.0] * 10
    result = compare_seeds(a, b, "A", "B", paired=True)
    assert (result["p_value"], result["floor"]) == (1.0, 2 / 16)
    assert result["verdict"] == (
        "undecided: 10 paired seeds (4 differ) cannot reach p < 0.05 (smallest possible p = 0.125)"
    )
    one = compare_seeds([1.0, 0.0, 0.0], [0.0, 0.0, 0.0], "A", "B", paired=True)
    assert one["verdict"] == (
        "undecided: 3 paired seeds (1 differs) cannot reach p < 0.05 (smallest possible p = 1)"
    )
    tied = compare_seeds([1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0], "A", "B")
    # three 1s and five 0s: a takes the three 1s and a 0 (5 splits) or four 0s (5, as extreme)
    assert tied["floor"] == pytest.approx(10 / 70, abs=1e-15)
    assert tied["verdict"] == (
        "undecided: 4 vs 4 seeds (tied values) cannot reach p < 0.05 (smallest possible p = 0.143)"
    )


@pytest.mark.parametrize(
    "planted",
    [
        # the design's floor, ignoring ties
        lambda a, b, *, paired: seed_stats.p_value_floor(len(a), len(b), paired=paired),
        # the arrangement with the largest sum in a only (misses the other extreme)
        lambda a, b, *, paired: (
            seed_stats.observed_floor(a, b, paired=True)
            if paired
            else permutation_p_value(
                sorted(a + b)[-len(a) :], sorted(a + b)[: -len(a)] if len(a) < len(a + b) else []
            )
            if len(b)
            else 1.0
        ),
    ],
    ids=["ignores_ties", "one_extreme_only"],
)
def test_planted_observed_floor_faults_are_caught(planted):
    with pytest.raises(AssertionError):
        check_observed_floors(planted)


@pytest.mark.parametrize(
    ("args", "match"),
    [((0, 3, False), "n_a must be"), ((3, 0, False), "n_b must be"), ((3, 4, True), "n_a = n_b"),
     ((2.0, 2, False), "n_a must be"), ((2, 2, 1), "paired")],
)  # fmt: skip
def test_floor_bad_input_is_a_clear_error(args, match):
    with pytest.raises((ValueError, TypeError), match=match):
        seed_stats.p_value_floor(args[0], args[1], paired=args[2])


@pytest.mark.parametrize(
    "planted",
    [
        lambda n_a, n_b, *, paired: 1 / 2**n_a if paired else 2 / math.comb(n_a + n_b, n_a),
        lambda n_a, n_b, *, paired: 2 / 2**n_a if paired else 1 / math.comb(n_a + n_b, n_a),
        lambda n_a, n_b, *, paired: 2 / 2**n_a if paired else 2 / math.comb(n_a + n_b, n_a),
    ],
    ids=["paired_without_mirror", "unpaired_without_mirror", "unpaired_mirror_always"],
)
def test_planted_floor_faults_are_caught(planted):
    with pytest.raises(AssertionError):
        check_floors(planted)


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
        ([1.0], [2.0], {"alpha": 0.0}, r"^alpha must be a number in \(0, 1\), got 0.0$"),
        ([1.0], [2.0], {"alpha": 1.5}, r"^alpha must be a number in \(0, 1\), got 1.5$"),
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
    def compare(a, b, name_a="a", name_b="b", higher_is_better=True, alpha=0.05, *, paired=False):
        result = compare_seeds(a, b, name_a, name_b, higher_is_better, alpha, paired=paired)
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
            r["verdict"]
            if r["p_value"] > al
            else f"{na if (statistics.mean(a) > statistics.mean(b)) == hib else nb} better (p < {al})"
        ),
        # Ignores the direction.
        lambda a, b, na, nb, hib, al, r: (
            r["verdict"]
            if r["p_value"] >= al
            else f"{na if statistics.mean(a) > statistics.mean(b) else nb} better (p < {al})"
        ),
        # The old verdict: "within seed noise" whenever p >= alpha, floor or not (MAJOR 16-3).
        lambda a, b, na, nb, hib, al, r: (
            "within seed noise"
            if r["p_value"] >= al
            else f"{na if (statistics.mean(a) > statistics.mean(b)) == hib else nb} better (p < {al})"
        ),
        # Calls a test undecided only when p equals its floor (the data, not the design).
        lambda a, b, na, nb, hib, al, r: (
            f"no difference detected at {al} (p = {r['p_value']:.3g})"
            if r["p_value"] >= al and r["p_value"] > r["floor"] + 1e-12
            else r["verdict"]
        ),
        # Undecided only when the floor is strictly above alpha (a floor at alpha cannot reject).
        lambda a, b, na, nb, hib, al, r: (
            f"no difference detected at {al} (p = {r['p_value']:.3g})"
            if r["p_value"] >= al and r["floor"] == pytest.approx(al)
            else r["verdict"]
        ),
    ],
    ids=[
        "ignores_p",
        "p_equal_alpha_significant",
        "ignores_direction",
        "old_within_seed_noise",
        "undecided_only_at_the_floor",
        "floor_at_alpha_decides",
    ],
)
def test_planted_verdict_faults_are_caught(verdict_fn):
    with pytest.raises(AssertionError):
        check_verdicts(_compare_with(verdict=verdict_fn))


# ------------------------------------------------------------------ paired (sign-flip) test


def reference_paired_p(a, b):
    """Independent exact two-sided paired p: every way to swap the two values *within* some
    pairs (bit masks), the statistic |mean(a') - mean(b')| in exact fractions. Swapping a pair
    is what flipping the sign of its difference means; this reference never forms d_k."""
    from fractions import Fraction

    a = [Fraction(v).limit_denominator(10**9) for v in a]
    b = [Fraction(v).limit_denominator(10**9) for v in b]
    n = len(a)
    observed = abs(sum(a) / n - sum(b) / n)
    hits = 0
    for mask in range(2**n):
        x = [b[k] if mask >> k & 1 else a[k] for k in range(n)]
        y = [a[k] if mask >> k & 1 else b[k] for k in range(n)]
        hits += abs(sum(x) / n - sum(y) / n) >= observed
    return hits / 2**n


def check_paired_p_values(p_fn):
    zeros = [0.0, 0.0, 0.0]
    # By hand: d = [3, 1, 1]: sums of +-3 +-1 +-1 are 5, 3, 3, 1, -1, -3, -3, -5; |.| >= 5 twice.
    assert p_fn([3.0, 1.0, 1.0], zeros) == pytest.approx(2 / 8, abs=1e-15)
    # d = [3, 1, -1]: observed |3|; 5, 3, 3, -3, -3, -5 reach it: 6 of 8.
    assert p_fn([3.0, 1.0, -1.0], zeros) == pytest.approx(6 / 8, abs=1e-15)
    # Five seeds, every one better: only the all-plus and all-minus patterns, 2/32.
    assert p_fn([1.1, 2.3, 3.2, 4.9, 5.4], [1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(
        2 / 32, abs=1e-15
    )
    assert p_fn([0.5, 0.7], [0.5, 0.7]) == 1.0  # no difference at all
    assert p_fn([2.0], [1.0]) == 1.0  # one pair: +d and -d, both as extreme
    # The pairing matters: the same values, paired differently, give another p.
    assert p_fn([10.0, 20.0, 30.0, 40.0, 50.0], [9.0, 19.0, 29.0, 39.0, 49.0]) == pytest.approx(
        2 / 32, abs=1e-15
    )
    assert p_fn([10.0, 20.0, 30.0, 40.0, 50.0], [49.0, 39.0, 29.0, 19.0, 9.0]) > 0.5
    rng = random.Random(1)
    for _ in range(20):
        n = rng.randint(1, 7)
        base = [rng.gauss(0.5, 0.3) for _ in range(n)]  # a per-seed level both arms share
        a = [round(v + rng.gauss(0.05, 0.05), 3) for v in base]
        b = [round(v + rng.gauss(0.0, 0.05), 3) for v in base]
        assert p_fn(a, b) == pytest.approx(reference_paired_p(a, b), abs=1e-12), (a, b)


def test_paired_p_values():
    check_paired_p_values(paired_permutation_p_value)
    check_paired_p_values(lambda a, b: compare_seeds(a, b, paired=True)["p_value"])


def test_paired_p_ignores_what_the_seeds_share():
    """Adding any per-seed offset to both arms leaves the paired p unchanged (the unpaired p
    moves): the paired test compares each seed with itself."""
    a, b = [0.62, 0.71, 0.55, 0.80, 0.66], [0.60, 0.69, 0.56, 0.75, 0.61]
    offsets = [0.0, 3.0, -2.0, 10.0, 5.0]
    shifted_a = [x + c for x, c in zip(a, offsets)]
    shifted_b = [y + c for y, c in zip(b, offsets)]
    p = paired_permutation_p_value(a, b)
    assert paired_permutation_p_value(shifted_a, shifted_b) == pytest.approx(p, abs=1e-15)
    assert paired_permutation_p_value(b, a) == pytest.approx(p, abs=1e-15)
    assert permutation_p_value(shifted_a, shifted_b) != pytest.approx(permutation_p_value(a, b))


def test_unpaired_test_on_paired_data_gives_another_answer():
    """The mistake the paired test exists for, both ways round. Every seed of A beats its own
    seed of B by a little while the seeds differ a lot: the unpaired test sees noise (p ~ 0.7),
    the paired one the best five pairs can show (2/32). And five seeds each, A above B
    everywhere: the unpaired test says p = 2/252 < 0.05, but five pairs cannot reach 0.05."""
    a, b = [10.0, 20.0, 30.0, 40.0, 50.0], [9.0, 19.0, 29.0, 39.0, 49.0]
    assert permutation_p_value(a, b) > 0.5
    assert paired_permutation_p_value(a, b) == pytest.approx(2 / 32)
    high, low = [0.9, 0.8, 1.0, 0.95, 0.85], [0.1, 0.2, 0.3, 0.25, 0.15]
    unpaired = compare_seeds(high, low, "A", "B")
    paired = compare_seeds(high, low, "A", "B", paired=True)
    assert (unpaired["p_value"], unpaired["verdict"]) == (
        pytest.approx(2 / 252),
        "A better (p < 0.05)",
    )
    assert (paired["p_value"], paired["verdict"]) == (
        pytest.approx(2 / 32),
        "undecided: 5 paired seeds cannot reach p < 0.05 (smallest possible p = 0.0625)",
    )
    assert paired["paired"] is True and "paired" not in unpaired


def test_paired_comparison_keeps_medians_worst_seeds_and_verdicts():
    check_worst_seed(lambda *args, **kw: compare_seeds(*args, **kw, paired=True))
    ten_up = compare_seeds(
        [float(v) + 1 for v in range(10)], [float(v) for v in range(10)], "A", "B", paired=True
    )
    assert (
        ten_up["p_value"] == pytest.approx(2 / 1024) and ten_up["verdict"] == "A better (p < 0.05)"
    )
    lower_better = compare_seeds(
        [float(v) + 1 for v in range(10)],
        [float(v) for v in range(10)],
        "A",
        "B",
        higher_is_better=False,
        paired=True,
    )
    assert lower_better["verdict"] == "B better (p < 0.05)"


def test_format_names_the_paired_test():
    result = compare_seeds(
        [0.9, 0.8, 1.0, 0.95, 0.85], [0.1, 0.2, 0.3, 0.25, 0.15], "A", "B", paired=True
    )
    assert format_comparison(result) == (
        "A: median 0.900, worst 0.800 (5 seeds) | B: median 0.200, worst 0.100 (5 seeds)"
        " | exact paired sign-flip p = 0.062 -> undecided: 5 paired seeds cannot reach"
        " p < 0.05 (smallest possible p = 0.0625)"
    )


@pytest.mark.parametrize(
    ("a", "b", "kwargs", "match"),
    [
        ([1.0, 2.0], [1.0], {}, "a has 2 values, b has 1"),
        ([], [], {}, "at least one value"),
        ([1.0, math.nan], [1.0, 2.0], {}, "a must hold finite"),
        ([1.0, 2.0], [1.0, -math.inf], {}, "b must hold finite"),
        ([0.0] * 21, [1.0] * 21, {}, "MAX_PAIRS"),
    ],
)
def test_paired_bad_input_is_a_clear_error(a, b, kwargs, match):
    with pytest.raises(ValueError, match=match):
        paired_permutation_p_value(a, b)
    with pytest.raises(ValueError, match=match):
        compare_seeds(a, b, paired=True)


def test_paired_must_be_a_bool():
    with pytest.raises(TypeError, match="^paired must be True or False, got 'yes'$"):
        compare_seeds([1.0], [2.0], paired="yes")


def _one_sided_paired_p(a, b):
    diffs = [x - y for x, y in zip(a, b)]
    observed = sum(diffs)
    patterns = list(itertools.product((1, -1), repeat=len(diffs)))
    return sum(sum(s * d for s, d in zip(p, diffs)) >= observed - 1e-12 for p in patterns) / len(
        patterns
    )


def _strict_paired_p(a, b):
    diffs = [x - y for x, y in zip(a, b)]
    observed = abs(sum(diffs))
    patterns = list(itertools.product((1, -1), repeat=len(diffs)))
    return sum(abs(sum(s * d for s, d in zip(p, diffs))) > observed + 1e-12 for p in patterns) / (
        len(patterns)
    )


def _pairs_broken_p(a, b):
    """Pairs the values after sorting each arm: the pairing is no longer by seed."""
    return paired_permutation_p_value(sorted(a), sorted(b))


@pytest.mark.parametrize(
    "planted",
    [permutation_p_value, _one_sided_paired_p, _strict_paired_p, _pairs_broken_p],
    ids=["unpaired_test", "one_sided", "drops_observed", "pairs_broken"],
)
def test_planted_paired_faults_are_caught(planted):
    with pytest.raises(AssertionError):
        check_paired_p_values(planted)


def test_pair_by_seed_keeps_the_shared_seeds_in_order():
    seeds, a, b = pair_by_seed({3: 0.3, 0: 0.0, 7: 0.7}, {7: 1.7, 0: 1.0, 5: 1.5})
    assert (seeds, a, b) == ([0, 7], [0.0, 0.7], [1.0, 1.7])
    with pytest.raises(ValueError, match="share no seed"):
        pair_by_seed({0: 1.0}, {1: 1.0})


# ------------------------------------------------------------------ records in results files


def check_matches_stored(match_fn):
    fresh = compare_seeds([1.1, 2.3, 3.2, 4.9, 5.4], [1.0, 2.0, 3.0, 4.0, 5.0], paired=True)
    assert fresh["verdict"].startswith("undecided")
    assert match_fn(fresh, dict(fresh))
    legacy = {k: v for k, v in fresh.items() if k != "floor"} | {"verdict": "within seed noise"}
    assert match_fn(fresh, legacy)  # a record written before the verdict named its floor
    assert not match_fn(fresh, legacy | {"p_value": 0.125})  # any other key must still match
    assert not match_fn(fresh, legacy | {"median_a": 0.0})
    assert not match_fn(
        fresh, dict(fresh) | {"verdict": "within seed noise"}
    )  # new record, old words
    del legacy["worst_b"]
    assert not match_fn(fresh, legacy)  # a key missing
    better = compare_seeds(
        [float(v) + 1 for v in range(10)], [float(v) for v in range(10)], paired=True
    )
    old_better = {k: v for k, v in better.items() if k != "floor"}
    assert match_fn(better, old_better)
    # a legacy "within seed noise" cannot stand for a result that now rejects
    assert not match_fn(better, old_better | {"verdict": "within seed noise"})


def test_matches_stored():
    check_matches_stored(seed_stats.matches_stored)


@pytest.mark.parametrize(
    "planted",
    [
        lambda fresh, stored: all(fresh[k] == v for k, v in stored.items() if k != "verdict"),
        lambda fresh, stored: (
            {k: v for k, v in fresh.items() if k not in ("floor", "verdict")}
            == {k: v for k, v in stored.items() if k != "verdict"}
        ),
        lambda fresh, stored: stored == fresh,
    ],
    ids=["ignores_the_verdict_and_missing_keys", "ignores_the_verdict", "exact_only"],
)
def test_planted_matches_stored_faults_are_caught(planted):
    with pytest.raises(AssertionError):
        check_matches_stored(planted)
