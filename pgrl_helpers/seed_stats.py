"""Is a difference between two methods larger than seed noise? The exact permutation test the
benchmarks use (bench_ppo_vs_grpo, bench_objectives) on per-seed results."""

from __future__ import annotations

import itertools
import statistics


def permutation_p_value(a: list[float], b: list[float]) -> float:
    """Exact two-sided permutation test of mean(a) - mean(b): the fraction of all ways to
    split the pooled values into groups of len(a) and len(b) whose |mean difference| is at
    least the observed one (5 vs 5 seeds: 252 splits, smallest p = 2/252)."""
    if len(a) < 1 or len(b) < 1:
        raise ValueError(f"a and b need at least one value each, got {len(a)} and {len(b)}")
    pooled, n = list(a) + list(b), len(a)
    observed = abs(statistics.mean(a) - statistics.mean(b))
    splits = list(itertools.combinations(range(len(pooled)), n))
    hits = 0
    for chosen in splits:
        x = [pooled[i] for i in chosen]
        y = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        hits += abs(statistics.mean(x) - statistics.mean(y)) >= observed - 1e-12
    return hits / len(splits)


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

    a, b: one value per seed, e.g. test exact-sort per seed, [seeds]."""
    if len(a) < 1 or len(b) < 1:
        raise ValueError(f"a and b need at least one value each, got {len(a)} and {len(b)}")
    worst = min if higher_is_better else max
    p = permutation_p_value(a, b)
    med_a, med_b = statistics.median(a), statistics.median(b)
    if p >= alpha:
        verdict = "within seed noise"
    else:
        a_better = (statistics.mean(a) > statistics.mean(b)) == higher_is_better
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
    """One line: 'A: median .., worst .. (n seeds) | B: ... | exact permutation p = .. -> verdict'."""
    r, d = result, digits
    return (
        f"{r['name_a']}: median {r['median_a']:.{d}f}, worst {r['worst_a']:.{d}f} ({r['n_a']} seeds)"
        f" | {r['name_b']}: median {r['median_b']:.{d}f}, worst {r['worst_b']:.{d}f} ({r['n_b']} seeds)"
        f" | exact permutation p = {r['p_value']:.3f} -> {r['verdict']}"
    )
