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
