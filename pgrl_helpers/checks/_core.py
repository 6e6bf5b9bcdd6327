"""What every checker shares: the result type, printing, and tolerant comparisons."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

PASS, FAIL, TODO = "[PASS]", "[FAIL]", "[TODO]"


@dataclass(frozen=True)
class CheckResult:
    """Outcome of one check: ``status`` is PASS, FAIL or TODO; ``message`` says why."""

    name: str
    status: str
    message: str

    @property
    def passed(self) -> bool:
        return self.status == PASS

    def __str__(self) -> str:
        return f"{self.status} {self.name}: {self.message}"


#: Names of the package's own functions handed to the running check (see ``_call``).
_from_package: list[str] = []

#: The seed of the graded (hidden) check in every instructor notebook: ``seed=1, strict=True``.
GRADED_SEED = 1

#: While True, ``_run`` returns its CheckResult instead of printing or raising (``_graded_too``).
_capturing = [False]


def _package_name(fn) -> str | None:
    """'module.qualname' when ``fn`` is one of this package's own functions, else None."""
    module = getattr(fn, "__module__", None) or ""
    if module.split(".")[0] != "pgrl_helpers" or module.startswith("pgrl_helpers.checks"):
        return None
    return f"{module}.{getattr(fn, '__qualname__', getattr(fn, '__name__', '?'))}"


class _Failed(Exception):
    """Raised inside a diagnosis: the student's code shows the mistake in the message."""


class _NotImplemented(Exception):
    """The student's function still raises NotImplementedError."""


def _run(name: str, diagnose: Callable[[], str], strict: bool) -> CheckResult | None:
    """Run ``diagnose`` (returns the pass detail or raises _Failed); print or raise.

    A function taken from this package (e.g. ``pgrl_helpers.masking.masked_mean`` handed in
    as the answer) fails the visible check and the graded one (``strict=True``) alike, with
    the same message: the exercise is to write it."""
    _from_package.clear()
    try:
        result = CheckResult(name, PASS, diagnose())
    except _NotImplemented:
        result = CheckResult(
            name,
            TODO,
            "not implemented yet (the function still raises NotImplementedError; "
            "replace the stub with your code and run this cell again)",
        )
    except _Failed as err:
        result = CheckResult(name, FAIL, str(err))
    if result.passed and _from_package:
        result = CheckResult(
            name,
            FAIL,
            f"your function is {_from_package[0]}, the package's own implementation: the "
            "graded check needs your own code (see 'How this works' at the top)",
        )
    _from_package.clear()
    if _capturing[0]:
        return result
    if strict:
        if not result.passed:
            raise AssertionError(str(result))
        return None
    print(result)
    return None


def _result(check: Callable, args: tuple, kwargs: dict, seed) -> CheckResult:
    """``check``'s CheckResult on ``seed``'s inputs, neither printed nor raised."""
    _capturing[0] = True
    try:
        return check(*args, seed=seed, strict=True, **kwargs)
    finally:
        _capturing[0] = False


def _graded_too(check: Callable) -> Callable:
    """A checker whose visible call (``strict=False``, the default seed) also runs the graded
    check's inputs (``seed=GRADED_SEED``), so that ``[PASS]`` means the graded check passes:
    an answer hard-coded to the visible inputs fails here already. One line is printed: the
    visible inputs' verdict, or the graded inputs' when only those fail. A call with
    ``strict=True`` or another seed is the check itself, unchanged."""

    @functools.wraps(check)
    def wrapper(*args, seed: int = 0, strict: bool = False, **kwargs):
        __tracebackhide__ = True  # noqa: F841 (IPython hides this frame in tracebacks)
        if strict or seed != 0 or _capturing[0]:
            return check(*args, seed=seed, strict=strict, **kwargs)
        result = _result(check, args, kwargs, seed)
        if result.passed:
            graded = _result(check, args, kwargs, GRADED_SEED)
            if not graded.passed:
                result = CheckResult(
                    graded.name,
                    graded.status,
                    f"{graded.message} (on the graded check's inputs, seed={GRADED_SEED}; the "
                    "visible inputs pass: is something fitted to them?)",
                )
        print(result)
        return None

    return wrapper


def run_check(check: Callable, *args, seed: int = 0) -> CheckResult:
    """Run a ``check_*`` function and return its ``CheckResult`` instead of printing it."""
    try:
        check(*args, seed=seed, strict=True)
    except AssertionError as err:
        line = str(err)
        status = TODO if line.startswith(TODO) else FAIL
        name, _, message = line[len(status) + 1 :].partition(": ")
        return CheckResult(name, status, message)
    return CheckResult(check.__name__.removeprefix("check_"), PASS, "")


def _call(fn: Callable, *args, **kwargs):
    """Call the student's function; NotImplementedError -> TODO, any other error -> FAIL."""
    if not callable(fn):
        raise _Failed(f"expected a function, got {type(fn).__name__}")
    copied = _package_name(fn)
    if copied is not None and copied not in _from_package:
        _from_package.append(copied)
    try:
        return fn(*args, **kwargs)
    except NotImplementedError as err:
        raise _NotImplemented from err
    except Exception as err:  # the student's bug, reported instead of crashing the notebook
        raise _Failed(
            f"your function raised {type(err).__name__}: {str(err).strip()[:300]}"
        ) from err


def _as_tensor(out, what: str = "your function") -> torch.Tensor:
    if not isinstance(out, torch.Tensor):
        raise _Failed(f"{what} returned {type(out).__name__}, expected a torch.Tensor")
    return out


def _close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-4) -> bool:
    """Same shape and equal within ``tol`` (absolute + relative); NaN never matches."""
    if not isinstance(a, torch.Tensor) or a.shape != b.shape:
        return False
    a, b = a.detach().double(), b.detach().double()
    return bool(torch.isfinite(a).all()) and bool(
        torch.allclose(a, b, atol=tol, rtol=tol, equal_nan=False)
    )


def _first_match(out: torch.Tensor, candidates: list[tuple[torch.Tensor, str]], tol=1e-4):
    for value, message in candidates:
        try:
            if _close(out, value, tol):
                return message
        except RuntimeError:  # a candidate that does not broadcast
            continue
    return None


def _check_unchanged(before: list[torch.Tensor], after: list[torch.Tensor]) -> None:
    for b, a in zip(before, after):
        if not torch.equal(b, a):
            raise _Failed(
                "your function changed its input tensors in place (e.g. sort_(), -=, "
                "masked_fill_); work on new tensors so the caller's data stay intact"
            )


def _expected_got(want: float, got: float, decimals: int = 4) -> str:
    """'expected 0.6429, got 0.6428571' : ``decimals`` places, or as many more (up to 12) as it
    takes for the two numbers to print differently (never 'expected 0.6429, got 0.6429')."""
    places = decimals
    while places < 12 and f"{want:.{places}f}" == f"{got:.{places}f}" and want != got:
        places += 1
    if f"{want:.{places}f}" == f"{got:.{places}f}" and want != got:
        return f"expected {want!r}, got {got!r}"
    return f"expected {want:.{places}f}, got {got:.{places}f}"


def _fmt_shape(x: torch.Tensor) -> str:
    return str(list(x.shape))
