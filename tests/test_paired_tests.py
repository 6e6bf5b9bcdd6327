"""Per-problem paired tests (pgrl_helpers.paired_tests): McNemar's exact test, Holm, the bootstrap,
the power calculations."""

from __future__ import annotations

import math

import pytest
import torch

from pgrl_helpers.paired_tests import (
    bootstrap_mean_difference,
    holm,
    mcnemar_exact,
    mcnemar_problems_needed,
    seeds_needed,
)


def test_mcnemar_counts_only_discordant_problems():
    a = [1, 1, 1, 0, 0, 1]
    b = [1, 0, 0, 0, 1, 1]
    r = mcnemar_exact(a, b)
    assert (r["a_only"], r["b_only"]) == (2, 1)
    assert r["p_value"] == pytest.approx(1.0)  # 2 * P(Bin(3, 1/2) <= 1) = 2 * 4/8


def test_mcnemar_matches_the_binomial_tail():
    # 10 problems only a solves, 0 only b: p = 2 / 2^10
    r = mcnemar_exact([1] * 10 + [0] * 5, [0] * 10 + [0] * 5)
    assert r["p_value"] == pytest.approx(2 / 2**10)
    # 12 vs 3 discordant: two-sided exact tail
    a, b = [1] * 12 + [0] * 3, [0] * 12 + [1] * 3
    expected = 2 * sum(math.comb(15, i) for i in range(4)) / 2**15
    assert mcnemar_exact(a, b)["p_value"] == pytest.approx(expected)
    assert mcnemar_exact(b, a)["p_value"] == pytest.approx(expected)  # symmetric


def test_mcnemar_without_discordance_is_one_and_rejects_non_binary():
    assert mcnemar_exact([1, 0, 1], [1, 0, 1])["p_value"] == 1.0
    with pytest.raises(ValueError):
        mcnemar_exact([0.5], [1])
    with pytest.raises(ValueError):
        mcnemar_exact([1, 0], [1])


def test_holm_step_down():
    # m = 4: sorted 0.01, 0.02, 0.03, 0.5 -> 0.04, 0.06, 0.06 (monotone), 0.5
    assert holm([0.03, 0.01, 0.5, 0.02]) == pytest.approx([0.06, 0.04, 0.5, 0.06])
    assert holm([0.9, 0.8]) == pytest.approx([1.0, 1.0])  # 2 x 0.8 capped at 1
    assert holm([0.3, 0.4]) == pytest.approx([0.6, 0.6])  # 0.4 x 1 < 0.6: kept monotone
    assert holm([]) == []
    with pytest.raises(ValueError):
        holm([1.5])


def test_bootstrap_interval_covers_the_mean_and_is_paired():
    g = torch.Generator().manual_seed(3)
    a = (torch.rand(3, 64, generator=g) < 0.9).int().tolist()
    b = (torch.rand(3, 64, generator=g) < 0.5).int().tolist()
    r = bootstrap_mean_difference(a, b, resamples=2000, seed=1)
    assert r["low"] < r["mean"] < r["high"]
    assert 0.1 < r["low"] and r["high"] < 0.7
    # identical arms: every resample's difference is exactly 0 (the draws are shared)
    same = bootstrap_mean_difference(a, a, resamples=500)
    assert same["low"] == same["high"] == same["mean"] == 0.0
    # a constant difference per problem has a zero-width interval only when paired
    shifted = bootstrap_mean_difference([[1] * 10] * 2, [[0] * 10] * 2, resamples=200)
    assert shifted["low"] == shifted["high"] == 1.0


def test_bootstrap_rejects_mismatched_shapes():
    with pytest.raises(ValueError):
        bootstrap_mean_difference([[1, 0]], [[1, 0, 1]])


def test_connor_problems_needed_by_hand():
    # 11 and 3 discordant of 64: psi = 14/64, delta = 8/64; z = 1.95996, 0.84162:
    # (1.95996 * sqrt(0.21875) + 0.84162 * sqrt(0.203125))^2 / 0.015625 = 107.5 -> 108
    assert mcnemar_problems_needed(11, 3, 64) == 108
    assert mcnemar_problems_needed(11, 3, 64, alpha=0.01) > 108  # a stricter level needs more
    assert mcnemar_problems_needed(3, 11, 64) == 108  # two-sided: the sign does not matter
    assert mcnemar_problems_needed(5, 5, 64) is None  # no difference to detect
    with pytest.raises(ValueError):
        mcnemar_problems_needed(40, 30, 64)


def test_connor_size_gives_about_the_power_asked():
    # Simulate McNemar's exact test on 108 problems with the pilot's rates: ~80 % must reject at
    # 0.05 (the exact test is a little conservative; a formula off by a square root would not be).
    g = torch.Generator().manual_seed(0)
    n, trials = mcnemar_problems_needed(11, 3, 64), 1500
    u = torch.rand(trials, n, generator=g)
    a = (u < 11 / 64).int()  # a only
    b = ((u >= 11 / 64) & (u < 14 / 64)).int()  # b only
    rejected = sum(mcnemar_exact(x, y)["p_value"] < 0.05 for x, y in zip(a.tolist(), b.tolist()))
    assert 0.70 <= rejected / trials <= 0.88


def test_seeds_needed_normal_approximation():
    # mean 0.2, sd 0.1: ((1.95996 + 0.84162) x 0.5)^2 = 1.96 -> at least 2
    assert seeds_needed([0.1, 0.2, 0.3]) == 2
    # mean 0.1, sd 0.1: (2.80158)^2 = 7.85 -> 8
    assert seeds_needed([0.0, 0.1, 0.2]) == 8
    assert seeds_needed([0.3]) is None  # one seed: no spread
    assert seeds_needed([0.1, -0.1]) is None  # no mean difference
    with pytest.raises(ValueError):
        seeds_needed([0.1, 0.2], power=1.5)
