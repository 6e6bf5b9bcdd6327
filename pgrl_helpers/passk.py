"""pass@k: the chance that at least one of k samples solves a problem (notebook 14).

The unbiased estimator of Chen et al. 2021 ("Evaluating Large Language Models Trained on Code",
arXiv 2107.03374, eq. 1): draw n >= k samples per problem, count the c correct ones, and average

    pass@k = 1 - C(n - c, k) / C(n, k)

over problems. It is the probability that a k-subset drawn without replacement from the n
samples contains at least one correct sample. The plug-in 1 - (1 - c/n)^k (sampling *with*
replacement) is biased low for k > 1; the two agree only at k = 1.

Taught in notebooks 14, 16.
"""

from __future__ import annotations


def _check_count(name: str, value, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem from n samples of which c are correct (Chen et al. 2021,
    eq. 1), computed as the numerically stable product 1 - prod_{i=n-c+1}^{n} (1 - k / i).

    Taught in notebooks 14, 16.
    """
    _check_count("n", n, 1)
    _check_count("c", c, 0)
    _check_count("k", k, 1)
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
