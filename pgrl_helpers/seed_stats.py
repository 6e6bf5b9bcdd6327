"""Is a difference between two methods larger than seed noise? Exact permutation tests on
per-seed results, one for each design:

* **paired** (``paired_permutation_p_value``): both methods ran on the *same* seeds, so seed k of
  one and seed k of the other share the initial weights, the prompts and the sampling stream. The
  test is on the per-seed differences d_k = a_k - b_k: under "no difference" each d_k is as likely
  to be -d_k, so it enumerates all 2^n sign patterns (Fisher's randomization test of paired data,
  *The Design of Experiments*, 1935, ch. III section 21; Good, *Permutation, Parametric and
  Bootstrap Tests of Hypotheses*, 3rd ed. 2005, ch. 3, matched pairs). n pairs give at
  least p = 2/2^n: 5 seeds can never go below 0.0625, 10 seeds reach 0.002.
* **unpaired** (``permutation_p_value``): the two groups of runs are independent (different seeds,
  or a different number of them). Using it on paired runs throws the pairing away: it can call a
  difference carried by one seed "significant" (the shared seed-to-seed spread is counted as
  noise in one direction only) or miss one that every seed shows.

``compare_seeds(..., paired=...)`` is the one entry point a notebook or benchmark calls;
``tests/repo/test_paired_comparisons.py`` fails when a call site does not say which design it
uses.

Taught in notebook 05; also used in notebooks 07, 08, 09, 10, 11, 12, 13, 14, 15.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping

from ._validate import check_bool, check_number

MAX_SPLITS = 3_000_000
"""Largest number of splits ``permutation_p_value`` enumerates (10 vs 10 seeds: 184,756; 12 vs 12:
2,704,156, about half a minute)."""

MAX_PAIRS = 20
"""Most pairs ``paired_permutation_p_value`` enumerates: 2^20 = 1,048,576 sign patterns."""


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


def _check_pairs(a, b) -> list[float]:
    """The per-pair differences a_k - b_k, after the checks a paired test needs."""
    _check_values(a, b)
    if len(a) != len(b):
        raise ValueError(
            "a paired comparison needs one value per seed in each arm, the same seeds in the "
            f"same order: a has {len(a)} values, b has {len(b)}"
        )
    if len(a) > MAX_PAIRS:
        raise ValueError(
            f"{len(a)} pairs give 2^{len(a)} sign patterns, more than 2^MAX_PAIRS = "
            f"2^{MAX_PAIRS} to enumerate exactly"
        )
    return [float(x) - float(y) for x, y in zip(a, b)]


def pair_by_seed(
    a: Mapping[int, float], b: Mapping[int, float]
) -> tuple[list[int], list[float], list[float]]:
    """The two arms of a paired comparison on the seeds both ran: (seeds, a values, b values),
    seeds in increasing order. a, b: {seed: value}. Seeds that only one arm ran are left out
    (e.g. a 5-seed variant against a 10-seed baseline is compared on its 5 seeds).

    Raises ValueError when the arms share no seed.

    Taught in notebook 07; also used in notebooks 08, 11.
    """
    seeds = sorted(set(a) & set(b))
    if not seeds:
        raise ValueError(
            f"the two arms share no seed (a: {sorted(a)}, b: {sorted(b)}): nothing to pair"
        )
    return seeds, [a[s] for s in seeds], [b[s] for s in seeds]


def paired_permutation_p_value(a: list[float], b: list[float]) -> float:
    """Exact two-sided sign-flip permutation test of mean(a - b) over paired seeds.

    a: [seeds], b: [seeds], the same seeds in the same order (a[k] and b[k] ran on seed k).
    With d_k = a_k - b_k, the p-value is the fraction of all 2^n sign patterns s whose
    |sum_k s_k d_k| is at least the observed |sum_k d_k| (Fisher 1935, ch. III section 21).
    The observed pattern counts, so p >= 2/2^n when some d_k != 0 (n = 5: 0.0625, so five
    paired seeds can never show a difference at 0.05), and p = 1 when every d_k = 0.
    Hand example: d = [3, 1, 1] has the sums +-3 +-1 +-1 in {5, 3, 3, 1, -1, -3, -3, -5}; two
    reach |5|, p = 2/8.

    Raises ValueError on empty or non-finite input, on arms of different lengths, or on more
    than ``MAX_PAIRS`` pairs."""
    diffs = _check_pairs(a, b)
    observed = abs(math.fsum(diffs))
    # Equal sums may differ in their last bits: compare with a relative slack.
    threshold = observed - 1e-9 * max(1.0, observed)
    hits = 0
    for signs in itertools.product((1.0, -1.0), repeat=len(diffs)):
        hits += abs(math.fsum(s * d for s, d in zip(signs, diffs))) >= threshold
    return hits / 2 ** len(diffs)


def compare_seeds(
    a: list[float],
    b: list[float],
    name_a: str = "a",
    name_b: str = "b",
    higher_is_better: bool = True,
    alpha: float = 0.05,
    *,
    paired: bool = False,
) -> dict:
    """The one way a notebook or benchmark ranks two methods measured over seeds: medians,
    worst seed of each (the minimum if higher is better, else the maximum), the exact
    permutation p-value of the mean difference, and a verdict that says "within seed noise"
    when p >= alpha. Returns a dict (with ``"paired": True`` added for a paired comparison);
    ``format_comparison`` turns it into one line.

    a, b: one value per seed, e.g. test exact-sort per seed, [seeds]. The better method is the
    one whose mean is better (the test is on the mean difference); medians and worst seeds are
    reported beside it. alpha: in (0, 1).
    paired: True when a[k] and b[k] ran on the same seed (same seed list, same order): the
    sign-flip test ``paired_permutation_p_value`` on the differences; False for independent
    groups: ``permutation_p_value``. Say it at every call site (the repo test
    ``tests/repo/test_paired_comparisons.py`` checks that notebooks and benchmarks do); the
    default False is kept only so that old call sites still run.

    Taught in notebook 05; also used in notebooks 07, 08, 11, 12, 13, 14, 15.
    """
    _check_values(a, b)
    check_number(alpha, "alpha", 0, 1, high_inclusive=False)
    check_bool(paired, "paired")
    worst = min if higher_is_better else max
    p = paired_permutation_p_value(a, b) if paired else permutation_p_value(a, b)
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
        **({"paired": True} if paired else {}),
    }


def format_comparison(result: dict, digits: int = 3) -> str:
    """One line: 'A: median .., worst .. (n seeds) | B: ... | exact permutation p = .. -> verdict'
    ('exact paired sign-flip p' for a paired comparison).

    Taught in notebook 05; also used in notebooks 07, 08, 11, 12, 13, 15.
    """
    r, d = result, digits
    return (
        f"{r['name_a']}: median {r['median_a']:.{d}f}, worst {r['worst_a']:.{d}f} ({r['n_a']} seeds)"
        f" | {r['name_b']}: median {r['median_b']:.{d}f}, worst {r['worst_b']:.{d}f} ({r['n_b']} seeds)"
        f" | exact {'paired sign-flip' if r.get('paired') else 'permutation'} p = {r['p_value']:.3f}"
        f" -> {r['verdict']}"
    )
