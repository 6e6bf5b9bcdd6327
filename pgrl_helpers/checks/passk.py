"""Checkers: the unbiased pass@k estimator (Chen et al. 2021, eq. 1) against brute force."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch

from .._validate import is_number
from ..passk import pass_at_k
from ._core import _call, _check_unchanged, _expected_got, _Failed, _fmt_shape, _graded_too, _run


def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """The fraction of the C(n, k) k-subsets of n samples (c correct) holding a correct one:
    the quantity pass@k estimates, by enumeration (small n only)."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in subset) for subset in subsets) / len(subsets)


#: (n, c, k) the check enumerates: every k for two small n, the edges c = 0, c = n, n - c < k.
PASSK_CASES = [(n, c, k) for n in (5, 8) for c in (0, 1, 3, n) for k in range(1, n + 1)]


def _number(out, what: str) -> float:
    if isinstance(out, torch.Tensor):
        if out.numel() != 1:
            raise _Failed(f"{what} returned a tensor of shape {_fmt_shape(out)}; expected a number")
        out = out.item()
    if not is_number(out):
        raise _Failed(f"{what} returned {type(out).__name__}, expected a number")
    return float(out)


@_graded_too
def check_pass_at_k(fn: Callable, *, seed: int = 0, strict: bool = False):
    """fn(n, c, k) -> float: the unbiased pass@k 1 - C(n - c, k) / C(n, k), checked against
    brute-force enumeration of every k-subset, then at n = 200 for numerical stability."""

    def diagnose() -> str:
        cases = PASSK_CASES[seed % 3 :] + PASSK_CASES[: seed % 3]
        answers = {
            (n, c, k): _number(_call(fn, n, c, k), f"pass_at_k({n}, {c}, {k})") for n, c, k in cases
        }
        wrong = [
            case for case in cases if not abs(answers[case] - brute_force_pass_at_k(*case)) <= 1e-9
        ]
        if wrong and all(n - c < k for n, c, k in wrong):
            n, c, k = wrong[0]
            raise _Failed(
                f"at n = {n}, c = {c}, k = {k}: "
                f"{_expected_got(brute_force_pass_at_k(n, c, k), answers[wrong[0]])}. Your "
                f"function is right wherever n - c >= k and wrong in the {len(wrong)} cases "
                "where n - c < k: there every k-subset holds a correct sample (there are fewer "
                "than k wrong ones), so C(n - c, k) = 0 and pass@k = 1"
            )
        for n, c, k in wrong:
            got = answers[(n, c, k)]
            want = brute_force_pass_at_k(n, c, k)
            at = f"at n = {n}, c = {c}, k = {k}: {_expected_got(want, got)}"
            if abs(got - (1 - (1 - c / n) ** k)) <= 1e-9:
                raise _Failed(
                    f"biased estimator {at}: 1 - (1 - c/n)^k samples WITH replacement and "
                    "underestimates pass@k for k > 1; use 1 - C(n - c, k) / C(n, k) (the chance "
                    "that k samples drawn without replacement hold a correct one)"
                )
            if abs(got - (1 - want)) <= 1e-9:
                raise _Failed(
                    f"{at}: that is the chance that all k fail, C(n - c, k) / C(n, k); pass@k is "
                    "1 minus it"
                )
            if abs(got - c / n) <= 1e-9:
                raise _Failed(f"{at}: c / n is pass@1; pass@k depends on k")
            raise _Failed(f"{at} (brute force over every {k}-subset)")
        for n, c, k in ((200, 3, 50), (200, 150, 100), (200, 0, 10)):
            try:
                got = _number(_call(fn, n, c, k), f"pass_at_k({n}, {c}, {k})")
            except _Failed as err:
                if isinstance(err.__cause__, (OverflowError, ZeroDivisionError)):
                    raise _Failed(
                        f"at n = {n}, c = {c}, k = {k} your function raised "
                        f"{type(err.__cause__).__name__}: factorials in floats overflow at "
                        "n = 200 (200! has 375 digits); use math.comb (exact integers), or "
                        "the product 1 - prod_{i = n-c+1}^{n} (1 - k / i)"
                    ) from err
                raise
            want = pass_at_k(n, c, k)
            if not abs(got - want) <= 1e-6:
                raise _Failed(
                    f"at n = {n}, c = {c}, k = {k}: {_expected_got(want, got, 6)}; with "
                    "large n, avoid factorials in floats (use math.comb, or the product "
                    "1 - prod_{i = n-c+1}^{n} (1 - k / i))"
                )
        return (
            f"matches brute force over every k-subset in {len(PASSK_CASES)} cases "
            "(c = 0, c = n and n - c < k included) and is stable at n = 200"
        )

    __tracebackhide__ = True  # noqa: F841 (IPython hides this frame in tracebacks)
    return _run("pass_at_k", diagnose, strict)


def _correct_matrix(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1500 + seed)
    rates = torch.tensor([0.0, 0.1, 0.5, 0.9, 0.3, 1.0])
    return torch.rand(6, 10, generator=g) < rates[:, None]


@_graded_too
def check_mean_pass_at_k(fn: Callable, *, seed: int = 0, strict: bool = False):
    """fn(correct bool[problems, n], k) -> float: the benchmark's pass@k, the MEAN over
    problems of each problem's unbiased pass@k from its own count c_j."""

    def diagnose() -> str:
        correct = _correct_matrix(seed)
        before = [correct.clone()]
        n = correct.shape[1]
        counts = [int(c) for c in correct.sum(1)]
        mean_c = sum(counts) / len(counts)
        ks = (1, 3, 7)
        got, want = {}, {}
        for k in ks:
            got[k] = _number(_call(fn, correct, k), f"mean_pass_at_k(correct, {k})")
            _check_unchanged(before, [correct])
            want[k] = sum(pass_at_k(n, c, k) for c in counts) / len(counts)
        wrong = [k for k in ks if abs(got[k] - want[k]) > 1e-6]
        if not wrong:
            return f"mean over {len(counts)} problems matches at k = 1, 3 and 7 (n = {n})"
        k = wrong[0]
        at = f"k = {k}: {_expected_got(want[k], got[k])}"

        def matches(*forms) -> bool:
            """The output equals one of ``forms`` (functions of k) at every k checked: one
            mistake explains every answer, so two mistakes that agree at one k are told apart
            at another."""
            return all(any(abs(got[j] - form(j)) <= 1e-6 for form in forms) for j in ks)

        if matches(lambda j: float(correct.any(1).float().mean())):
            raise _Failed(f"{at}: that is pass@n (any of all n samples); use k")
        if matches(lambda j: float(correct[:, :j].any(1).float().mean())):
            raise _Failed(
                f"{at}: that is the empirical pass@k of the FIRST k samples of each problem "
                "(correct[:, :k].any(1)): it throws away the other n - k samples and depends "
                "on their order; the unbiased estimator averages over every k-subset, "
                "1 - C(n - c, k) / C(n, k) per problem"
            )
        if matches(lambda j: sum(1 - (1 - c / n) ** j for c in counts) / len(counts)):
            raise _Failed(f"{at}: that is the biased 1 - (1 - c/n)^k per problem")
        if matches(lambda j: pass_at_k(n, round(mean_c), j), lambda j: 1 - (1 - mean_c / n) ** j):
            if k == 1:
                raise _Failed(
                    f"{at}: you used the mean count over problems rounded to a whole number "
                    f"({mean_c:.2f} -> {round(mean_c)}); pass@1 = c/n is linear in c, so only "
                    "the rounding is wrong at k = 1, but at k > 1 pass@k is not linear in c: "
                    "compute pass@k per problem from its own c_j, then average"
                )
            raise _Failed(
                f"{at}: you estimated pass@k from the mean count over problems; pass@k is not "
                "linear in c, so compute it per problem, then average"
            )
        raise _Failed(f"{at} (mean over {len(counts)} problems of pass_at_k(n, c_j, k))")

    __tracebackhide__ = True  # noqa: F841 (IPython hides this frame in tracebacks)
    return _run("mean_pass_at_k", diagnose, strict)
