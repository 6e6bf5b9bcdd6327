"""Is a difference between two methods larger than seed noise? The exact permutation test the
benchmarks use (bench_ppo_vs_grpo, bench_objectives) on per-seed results.

Taught in notebooks 05, 07, 08, 11, 12, 13, 14, 15.
"""

from __future__ import annotations

import itertools
import math
import statistics

MAX_SPLITS = 3_000_000
"""Largest number of splits ``permutation_p_value`` enumerates (10 vs 10 seeds: 184,756; 12 vs 12:
2,704,156, about half a minute)."""


def _check_values(a, b) -> None:
    if len(a) < 1 or len(b) < 1:
        raise ValueError(f"a and b need at least one value each, got {len(a)} and {len(b)}")
    for name, values in (("a", a), ("b", b)):
        for value in values:
            if not math.isfinite(value):
                raise ValueError(f"{name} must hold finite numbers, got {value!r}")


def permutation_p_value(a: list[float], b: list[float]) -> float:
    """Exact two-sided permutation test of mean(a) - mean(b): the fraction of all ways to
    split the pooled values into groups of len(a) and len(b) whose |mean difference| is at
    least the observed one (5 vs 5 seeds: 252 splits, smallest p = 2/252; 3 vs 3: 20 splits,
    smallest p = 2/20 = 0.1, so three seeds each can never show a difference at 0.05).

    a: [seeds_a], b: [seeds_b], finite values. The observed split is one of the splits, so
    p >= 1/C(n_a + n_b, n_a) > 0. Raises ValueError on empty or non-finite input, or when
    there are more than ``MAX_SPLITS`` splits to enumerate."""
    _check_values(a, b)
    pooled, n = [float(v) for v in a] + [float(v) for v in b], len(a)
    n_splits = math.comb(len(pooled), n)
    if n_splits > MAX_SPLITS:
        raise ValueError(
            f"len(a) + len(b) = {len(pooled)} gives {n_splits} splits, more than "
            f"MAX_SPLITS = {MAX_SPLITS} to enumerate exactly"
        )
    observed = abs(statistics.fmean(a) - statistics.fmean(b))
    # Equal splits may differ in the last bits of their means: compare with a relative slack.
    threshold = observed - 1e-9 * max(1.0, observed)
    hits = 0
    for chosen in itertools.combinations(range(len(pooled)), n):
        picked = set(chosen)
        x = [pooled[i] for i in chosen]
        y = [pooled[i] for i in range(len(pooled)) if i not in picked]
        hits += abs(statistics.fmean(x) - statistics.fmean(y)) >= threshold
    return hits / n_splits


def compare_seeds(
    a: list[float],
    b: list[float],
    name_a: str = "a",
    name_b: str = "b",
    higher_is_better: bool = True,
    alpha: float = 0.05,
) -> dict:
    """The one way a notebook or benchmark ranks two methods measured over seeds: medians,
    worst seed of each (the minimum if higher is better, else the maximum), the exact
    permutation p-value of the mean difference, and a verdict that says "within seed noise"
    when p >= alpha. Returns a dict; ``format_comparison`` turns it into one line.

    a, b: one value per seed, e.g. test exact-sort per seed, [seeds]. The better method is the
    one whose mean is better (the test is on the mean difference); medians and worst seeds are
    reported beside it. alpha: in (0, 1).

    Taught in notebooks 05, 07, 08, 11, 12, 14, 15.
    """
    _check_values(a, b)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    worst = min if higher_is_better else max
    p = permutation_p_value(a, b)
    med_a, med_b = statistics.median(a), statistics.median(b)
    if p >= alpha:
        verdict = "within seed noise"
    else:
        a_better = (statistics.fmean(a) > statistics.fmean(b)) == higher_is_better
        verdict = f"{name_a if a_better else name_b} better (p < {alpha})"
    return {
        "name_a": name_a,
        "name_b": name_b,
        "n_a": len(a),
        "n_b": len(b),
        "median_a": med_a,
        "median_b": med_b,
        "worst_a": worst(a),
        "worst_b": worst(b),
        "p_value": p,
        "verdict": verdict,
    }


def format_comparison(result: dict, digits: int = 3) -> str:
    """One line: 'A: median .., worst .. (n seeds) | B: ... | exact permutation p = .. -> verdict'.

    Taught in notebooks 05, 07, 08, 11, 12, 13, 14, 15.
    """
    r, d = result, digits
    return (
        f"{r['name_a']}: median {r['median_a']:.{d}f}, worst {r['worst_a']:.{d}f} ({r['n_a']} seeds)"
        f" | {r['name_b']}: median {r['median_b']:.{d}f}, worst {r['worst_b']:.{d}f} ({r['n_b']} seeds)"
        f" | exact permutation p = {r['p_value']:.3f} -> {r['verdict']}"
    )
