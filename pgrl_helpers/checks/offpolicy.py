"""Checkers: the truncated importance weight and Kong's effective sample size (series nb 12)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from .._validate import is_number
from ..offpolicy import corrected_weights, effective_sample_size, importance_weights
from ._core import (
    _as_tensor,
    _call,
    _check_unchanged,
    _close,
    _expected_got,
    _Failed,
    _first_match,
    _fmt_shape,
    _graded_too,
    _run,
)

#: Real tokens per response of the padded test batch [batch=2, trial=2, pos=4].
IS_LENGTHS = ((4, 2), (3, 4))
#: The truncation cap C of the check (TIS; Yao et al. 2025 use C = 2).
IS_CAP = 2.0


def _is_inputs(seed: int):
    """(log_p_train, log_p_sampler, mask) float[2, 2, 4] with weights from about 0.3 to 13: some above C, some above e^C."""
    g = torch.Generator().manual_seed(1300 + seed)
    mask = (torch.arange(4) < torch.tensor(IS_LENGTHS)[..., None]).float()
    log_p_sampler = -torch.rand(2, 2, 4, generator=g) * 2 - 0.1
    log_w = torch.linspace(-1.2, 2.6, 16)[torch.randperm(16, generator=g)].reshape(2, 2, 4)
    return log_p_sampler + log_w, log_p_sampler, mask


@_graded_too
def check_truncated_weights(fn: Callable, *, seed: int = 0, strict: bool = False):
    """fn(log_p_train, log_p_sampler, mask, cap) -> float[batch, trial, pos]: the truncated
    importance weight min(pi_train / pi_sampler, cap) per token (TIS). Only real tokens
    (mask 1) are compared; padding may hold anything."""

    def diagnose() -> str:
        train, sampler, mask = _is_inputs(seed)
        before = [train.clone(), sampler.clone(), mask.clone()]
        out = _as_tensor(_call(fn, train, sampler, mask, IS_CAP))
        _check_unchanged(before, [train, sampler, mask])
        raw = importance_weights(train, sampler, mask)
        want = corrected_weights(raw, "tis", IS_CAP)
        if out.shape != want.shape:
            raise _Failed(
                f"expected one weight per token, shape {_fmt_shape(want)}, got {_fmt_shape(out)}"
            )
        real = mask > 0
        if _close(out[real], want[real], 1e-5):
            above = int((raw[real] > IS_CAP).sum())
            return (
                f"truncated weights match on {int(real.sum())} real tokens ({above} above the "
                f"cap C = {IS_CAP:g}, truncated to C)"
            )
        log_w = train - sampler
        candidates = [
            (
                torch.exp(sampler - train).clamp(max=IS_CAP),
                "weights from the wrong policy pair: the weight is pi_train / pi_sampler "
                "(the trainer's policy over the one that sampled), exp(log_p_train - "
                "log_p_sampler)",
            ),
            (
                torch.exp(log_w.clamp(max=IS_CAP)),
                f"cap applied before the exp: you clamped the log-weight at C = {IS_CAP:g}, "
                f"which caps the weight at e^C = {math.exp(IS_CAP):.2f}; take min(exp(log w), C) "
                "(or clamp the log-weight at log C)",
            ),
            (torch.exp(log_w), f"you did not truncate: min(w, C) with C = {IS_CAP:g}"),
            (
                torch.where(torch.exp(log_w) <= IS_CAP, torch.exp(log_w), torch.zeros_like(log_w)),
                "that is masked IS (weights above C set to 0); truncated IS keeps them at C",
            ),
            (
                torch.exp(log_w).clamp(min=IS_CAP),
                "you clamped from below (max(w, C)); truncation is min(w, C)",
            ),
        ]
        mistake = _first_match(out[real], [(c[real], m) for c, m in candidates], 1e-5)
        raise _Failed(
            mistake or "the weights on real tokens differ from min(pi_train / pi_sampler, C)"
        )

    __tracebackhide__ = True  # noqa: F841 (IPython hides this frame in tracebacks)
    return _run("truncated_weights", diagnose, strict)


def _ess_weights(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1400 + seed)
    return torch.exp(torch.randn(12, generator=g))


@_graded_too
def check_effective_sample_size(fn: Callable, *, seed: int = 0, strict: bool = False):
    """fn(weights float[n]) -> Kong's (1992) effective sample size (sum w)^2 / sum w^2, a
    number (float or 0-d tensor) between 1 and n."""

    def diagnose() -> str:
        cases = [
            (_ess_weights(seed), "12 log-normal weights"),
            (torch.ones(7), "7 equal weights (ESS must be 7)"),
            (torch.tensor([100.0, 1e-3, 1e-3, 1e-3]), "one dominant weight (ESS about 1)"),
        ]
        for weights, label in cases:
            before = [weights.clone()]
            out = _call(fn, weights)
            _check_unchanged(before, [weights])
            if isinstance(out, torch.Tensor):
                if out.numel() != 1:
                    raise _Failed(
                        f"expected one number, got a tensor of shape {_fmt_shape(out)}: sum "
                        "over the weights"
                    )
                out = out.item()
            if not is_number(out):
                raise _Failed(f"expected a number, got {type(out).__name__}")
            want = effective_sample_size(weights)
            got = torch.tensor(float(out), dtype=torch.float64)
            if _close(got, torch.tensor(want, dtype=torch.float64), 1e-5):
                continue
            n = weights.numel()
            w = weights.double()
            mistake = _first_match(
                got,
                [
                    (
                        torch.tensor(1 / want, dtype=torch.float64),
                        "inverted: ESS = (sum w)^2 / sum w^2, not sum w^2 / (sum w)^2",
                    ),
                    (
                        torch.tensor(want / n, dtype=torch.float64),
                        "you returned ESS / n (the fraction the history logs as ess_fraction); "
                        "return the effective sample size itself",
                    ),
                    (
                        (w**2).sum() / w.sum(),
                        "ESS = (sum w)^2 / sum w^2: square the SUM in the numerator",
                    ),
                    (
                        w.sum() / (w**2).sum(),
                        "the wrong numerator: ESS = (sum w)^2 / sum w^2, the SQUARE of the sum "
                        "(you divided sum w by sum w^2, which changes with the weights' scale)",
                    ),
                    (
                        (w**2).sum() / (w**2).sum(),
                        "the wrong numerator: (sum w)^2 is the square of the sum, not the sum "
                        "of the squares",
                    ),
                    (
                        w.sum() ** 2 / (w.sum() ** 2),
                        "the denominator is the sum of the squares, sum w^2",
                    ),
                ],
                1e-5,
            )
            raise _Failed(f"{label}: " + (mistake or _expected_got(float(want), float(out))))
        return "matches (sum w)^2 / sum w^2 on log-normal, equal and degenerate weights"

    __tracebackhide__ = True  # noqa: F841 (IPython hides this frame in tracebacks)
    return _run("effective_sample_size", diagnose, strict)
