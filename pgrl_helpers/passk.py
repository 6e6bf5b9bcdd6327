"""pass@k: the chance that at least one of k samples solves a problem (notebook 14).

The unbiased estimator of Chen et al. 2021 ("Evaluating Large Language Models Trained on Code",
arXiv 2107.03374, eq. 1): draw n >= k samples per problem, count the c correct ones, and average

    pass@k = 1 - C(n - c, k) / C(n, k)

over problems. It is the probability that a k-subset drawn without replacement from the n
samples contains at least one correct sample. The plug-in 1 - (1 - c/n)^k (sampling *with*
replacement) is biased low for k > 1; the two agree only at k = 1.

Taught in notebook 14; also used in notebook 16.
"""

from __future__ import annotations

from ._validate import check_number, check_positive_ints


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem from n samples of which c are correct (Chen et al. 2021,
    eq. 1), computed as the numerically stable product 1 - prod_{i=n-c+1}^{n} (1 - k / i).

    Taught in notebook 14; also used in notebook 16.
    """
    check_positive_ints(n=n)
    check_number(c, "c", 0, low_inclusive=True, integer=True)
    check_positive_ints(k=k)
    if c > n:
        raise ValueError(f"c (correct samples) must be at most n = {n}, got {c}")
    if k > n:
        raise ValueError(f"k must be at most n = {n} (the number of samples drawn), got {k}")
    if n - c < k:
        return 1.0
    prob_all_wrong = 1.0
    for i in range(n - c + 1, n + 1):
        prob_all_wrong *= 1.0 - k / i
    return 1.0 - prob_all_wrong
