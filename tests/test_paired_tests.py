"""Per-problem paired tests (pgrl_helpers.paired_tests): McNemar's exact test, Holm, the bootstrap."""

from __future__ import annotations

import math

import pytest
import torch

from pgrl_helpers.paired_tests import bootstrap_mean_difference, holm, mcnemar_exact


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
