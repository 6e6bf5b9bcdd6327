"""pass_at_k (Chen et al. 2021, arXiv 2107.03374, eq. 1) against brute-force enumeration."""

import itertools
import math

import pytest

from pgrl_helpers.passk import pass_at_k


def brute_force(n: int, c: int, k: int) -> float:
    """Fraction of the k-subsets of n samples (the first c correct) holding a correct one."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in s) for s in subsets) / len(subsets)


def agrees_with_enumeration(estimator, max_n: int = 7) -> bool:
    return all(
        math.isclose(estimator(n, c, k), brute_force(n, c, k), abs_tol=1e-12)
        for n in range(1, max_n + 1)
        for c in range(n + 1)
        for k in range(1, n + 1)
    )


def test_pass_at_k_equals_enumeration_of_k_subsets():
    assert agrees_with_enumeration(pass_at_k)


def test_planted_biased_plugin_estimator_fails_the_enumeration():
    # 1 - (1 - c/n)^k samples WITH replacement: right at k = 1, biased low for k > 1
    def biased(n, c, k):
        return 1 - (1 - c / n) ** k

    assert not agrees_with_enumeration(biased)
    assert all(
        math.isclose(biased(n, c, 1), pass_at_k(n, c, 1)) for n in (3, 8) for c in range(n + 1)
    )
    assert biased(4, 1, 2) < pass_at_k(4, 1, 2)


def test_pass_at_k_matches_binomial_formula_at_large_n():
    n, c, k = 256, 3, 64
    assert math.isclose(pass_at_k(n, c, k), 1 - math.comb(n - c, k) / math.comb(n, k), rel_tol=1e-9)
    assert pass_at_k(256, 0, 256) == 0.0
    assert pass_at_k(256, 1, 256) == 1.0


@pytest.mark.parametrize(
    "args, word",
    [
        ((0, 0, 1), "n"),
        ((4, -1, 1), "c"),
        ((4, 5, 1), "c"),
        ((4, 1, 0), "k"),
        ((4, 1, 5), "k"),
        ((4.0, 1, 1), "n"),
        ((4, True, 1), "c"),
    ],
)
def test_bad_inputs_raise_value_error_naming_the_argument(args, word):
    with pytest.raises(ValueError, match=word):
        pass_at_k(*args)
