"""Checkers: the k3 KL estimator."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..kl import kl_k1, kl_k2, kl_k3
from ._core import (
    _as_tensor,
    _call,
    _check_unchanged,
    _close,
    _Failed,
    _first_match,
    _fmt_shape,
    _graded_too,
    _run,
)

# --------------------------------------------------------------------------------------
# Exercise: the k3 KL estimator
# --------------------------------------------------------------------------------------


@_graded_too
def check_kl_k3(fn: Callable, *, seed: int = 0, strict: bool = False):
    """fn(log_probs, ref_log_probs float[batch, trial, pos]) -> float[batch, trial, pos]:
    k3 = r - 1 - log r with r = exp(ref_log_probs - log_probs), estimating KL(policy || ref)."""

    def diagnose() -> str:
        g = torch.Generator().manual_seed(800 + seed)
        log_probs = -torch.rand(2, 3, 4, generator=g) * 3
        ref_log_probs = -torch.rand(2, 3, 4, generator=g) * 3
        before = [log_probs.clone(), ref_log_probs.clone()]
        out = _as_tensor(_call(fn, log_probs, ref_log_probs))
        _check_unchanged(before, [log_probs, ref_log_probs])
        want = kl_k3(log_probs, ref_log_probs)
        if out.shape != want.shape:
            raise _Failed(
                f"expected one value per token, shape {_fmt_shape(want)} (the inputs' shape), "
                f"got {_fmt_shape(out)}"
            )
        if _close(out, want):
            if not _close(_call(fn, log_probs, log_probs), torch.zeros_like(log_probs), 1e-6):
                raise _Failed("k3 must be exactly 0 when log_probs == ref_log_probs")
            return "matches k3 = r - 1 - log r, r = exp(ref_log_probs - log_probs), on 24 tokens"
        log_r = ref_log_probs - log_probs
        r = log_r.exp()
        mistake = _first_match(
            out,
            [
                (
                    kl_k3(ref_log_probs, log_probs),
                    "wrong KL direction: r must be q/p = exp(ref_log_probs - log_probs) (the "
                    "samples come from the policy p); you used p/q",
                ),
                (kl_k1(log_probs, ref_log_probs), "that is k1 = -log r, not k3"),
                (-kl_k1(log_probs, ref_log_probs), "that is log r (k1 with the wrong sign)"),
                (kl_k2(log_probs, ref_log_probs), "that is k2 = (log r)^2 / 2, not k3"),
                (r - 1 + log_r, "wrong sign on log r: k3 = r - 1 - log r"),
                (r - log_r, "you forgot the -1: k3 = r - 1 - log r"),
                (1 - r + log_r, "wrong sign: k3 = r - 1 - log r is never negative"),
                (
                    (-log_r).exp() - 1 + log_r,
                    "wrong KL direction: r must be exp(ref_log_probs - log_probs); you used "
                    "its inverse",
                ),
            ],
        )
        if mistake is None and (out < -1e-6).any():
            mistake = "some values are negative; every k3 term is >= 0 (r - 1 >= log r)"
        raise _Failed(mistake or "values differ from k3 = r - 1 - log r")

    __tracebackhide__ = True  # noqa: F841 (IPython hides this frame in tracebacks)
    return _run("kl_k3", diagnose, strict)
