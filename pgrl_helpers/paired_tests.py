"""Per-problem paired tests: two models scored on the *same* test problems.

A seed-level test (``seed_stats.compare_seeds``) sees one number per seed, so with 3 paired seeds
its smallest p is 2/2^3 = 0.25 whatever the data. When each run stores a 0/1 outcome per test
problem, the problems themselves carry evidence:

* ``mcnemar_exact(a, b)``: McNemar's test (McNemar 1947, *Psychometrika* 12(2), 153-157) in its
  exact form. Only the discordant problems count (a solved and b not: n10; b solved and a not:
  n01); under "no difference" each discordant problem is a fair coin, so the two-sided p is
  min(1, 2 P(Binomial(n10 + n01, 1/2) <= min(n10, n01))).
* ``holm(p_values)``: Holm's step-down adjustment (Holm 1979, "A simple sequentially rejective
  multiple test procedure", *Scand. J. Statist.* 6(2), 65-70): the i-th smallest of m p-values is
  multiplied by m - i + 1, then made non-decreasing. It controls the family-wise error rate over
  the m comparisons made; always state m.
* ``bootstrap_mean_difference(a, b)``: a percentile bootstrap (Efron and Tibshirani 1993, ch. 13)
  of the mean of a - b over seeds and problems, resampling seeds and then problems with
  replacement, the same indices for both models (both stay paired). With few seeds the seed level
  has few distinct resamples, so the interval mostly reflects the problems; say so.
* ``mcnemar_problems_needed(a_only, b_only, problems)`` and ``seeds_needed(differences)``: power
  calculations, the sample a future run needs to detect the difference seen, with power 0.8 by
  default. Problems per seed for McNemar's test by Connor's formula (Connor 1987, "Sample size for
  testing differences in proportions for the paired-sample design", *Biometrics* 43(1), 207-211,
  eq. 3); seeds for a paired mean over seeds by the normal approximation
  n = ((z_{1-alpha/2} + z_{power}) sd / mean)^2. Both plug in the estimates of a pilot, so they
  are as rough as the pilot is small; say so.

Notebook 16 compares the real language model's two arms and the base model with them.

Taught in notebook 16; also used in notebooks 07, 08, 17.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import torch

__all__ = [
    "bootstrap_mean_difference",
    "holm",
    "mcnemar_exact",
    "mcnemar_problems_needed",
    "seeds_needed",
]


def _binary(values: Sequence[float], name: str) -> list[int]:
    out = []
    for v in values:
        if v not in (0, 1):
            raise ValueError(f"{name} must hold 0/1 outcomes per problem, got {v!r}")
        out.append(int(v))
    return out


def mcnemar_exact(a: Sequence[float], b: Sequence[float]) -> dict:
    """McNemar's exact two-sided test of paired 0/1 outcomes ``a[i]``, ``b[i]`` on problem i.

    Returns ``{"a_only": n10, "b_only": n01, "p_value": p}``; p = 1 when no problem is discordant.

    Taught in notebook 16.
    """
    a, b = _binary(a, "a"), _binary(b, "b")
    if len(a) != len(b) or not a:
        raise ValueError(
            f"a and b must be non-empty and the same length, got {len(a)} and {len(b)}"
        )
    a_only = sum(x > y for x, y in zip(a, b))
    b_only = sum(y > x for x, y in zip(a, b))
    n, k = a_only + b_only, min(a_only, b_only)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return {"a_only": a_only, "b_only": b_only, "p_value": min(1.0, 2 * tail)}


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values, in the order given (reject comparison i at level alpha when its
    adjusted p <= alpha; the family is the len(p_values) comparisons made).

    Taught in notebook 16; also used in notebooks 07, 08.
    """
    p = [float(x) for x in p_values]
    if any(not 0.0 <= x <= 1.0 for x in p):
        raise ValueError(f"p-values must lie in [0, 1], got {p}")
    m = len(p)
    adjusted, running = [0.0] * m, 0.0
    for rank, index in enumerate(sorted(range(m), key=lambda i: p[i])):
        running = max(running, min(1.0, (m - rank) * p[index]))
        adjusted[index] = running
    return adjusted


def bootstrap_mean_difference(
    a: Sequence[Sequence[float]],
    b: Sequence[Sequence[float]],
    resamples: int = 10_000,
    seed: int = 0,
    level: float = 0.95,
) -> dict:
    """Mean of ``a - b`` over seeds and problems, and its percentile bootstrap interval.

    ``a[s][i]`` and ``b[s][i]`` are the outcomes of seed s on problem i (same problems, same seeds
    for both). Each resample draws seeds with replacement, then problems with replacement, and
    uses the same draws for a and b. Returns ``{"mean", "low", "high", "seeds", "problems",
    "resamples", "level"}``.

    Taught in notebook 16.
    """
    x, y = torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)
    if x.shape != y.shape or x.dim() != 2 or x.numel() == 0:
        raise ValueError(
            f"a and b must be [seeds, problems] of one shape, got {tuple(x.shape)}, {tuple(y.shape)}"
        )
    if not 0.0 < level < 1.0 or resamples < 1:
        raise ValueError("level must lie in (0, 1) and resamples be at least 1")
    diff = x - y
    seeds, problems = diff.shape
    g = torch.Generator().manual_seed(seed)
    s = torch.randint(0, seeds, (resamples, seeds), generator=g)
    p = torch.randint(0, problems, (resamples, 1, problems), generator=g).expand(-1, seeds, -1)
    means = diff[s].gather(2, p).mean(dim=(1, 2))
    tail = (1.0 - level) / 2
    low, high = torch.quantile(
        means, torch.tensor([tail, 1.0 - tail], dtype=torch.float64)
    ).tolist()
    return {
        "mean": diff.mean().item(),
        "low": low,
        "high": high,
        "seeds": seeds,
        "problems": problems,
        "resamples": resamples,
        "level": level,
    }


def _z(alpha: float, power: float) -> tuple[float, float]:
    if not 0.0 < alpha < 1.0 or not 0.0 < power < 1.0:
        raise ValueError(f"alpha and power must lie in (0, 1), got {alpha} and {power}")
    normal = statistics.NormalDist()
    return normal.inv_cdf(1 - alpha / 2), normal.inv_cdf(power)


def mcnemar_problems_needed(
    a_only: int, b_only: int, problems: int, alpha: float = 0.05, power: float = 0.8
) -> int | None:
    """Problems per seed for McNemar's two-sided test at ``alpha`` to detect, with ``power``, the
    discordant rates of a pilot: ``a_only`` and ``b_only`` discordant problems out of
    ``problems`` (Connor 1987, eq. 3:
    n = (z_{1-alpha/2} sqrt(psi) + z_{power} sqrt(psi - delta^2))^2 / delta^2 with
    psi = p10 + p01 and delta = p10 - p01). None when the pilot shows no difference (delta = 0).
    """
    if min(a_only, b_only) < 0 or a_only + b_only > problems or problems < 1:
        raise ValueError(
            f"need 0 <= a_only + b_only <= problems, got {a_only}, {b_only}, {problems}"
        )
    z_a, z_b = _z(alpha, power)
    psi, delta = (a_only + b_only) / problems, (a_only - b_only) / problems
    if delta == 0:
        return None
    n = (z_a * math.sqrt(psi) + z_b * math.sqrt(psi - delta**2)) ** 2 / delta**2
    return math.ceil(n)


def seeds_needed(
    differences: Sequence[float], alpha: float = 0.05, power: float = 0.8
) -> int | None:
    """Seeds for a paired mean over seeds (normal approximation, two-sided ``alpha``) to detect
    the pilot's mean difference with ``power``, its spread the pilot's seed-to-seed standard
    deviation: n = ((z_{1-alpha/2} + z_{power}) sd / mean)^2, at least 2. ``differences`` holds
    one number per seed (a's mean minus b's). None when the pilot's mean is 0 or it has fewer than
    2 seeds (no spread to plug in).
    """
    d = [float(x) for x in differences]
    if len(d) < 2 or statistics.fmean(d) == 0:
        return None
    z_a, z_b = _z(alpha, power)
    n = ((z_a + z_b) * statistics.stdev(d) / statistics.fmean(d)) ** 2
    return max(2, math.ceil(n))
