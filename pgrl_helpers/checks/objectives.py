"""Checkers: GSPO's sequence ratio and CISPO's loss (series notebook 11), against autograd."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..losses import compute_per_token_loss, sequence_log_ratio
from ..masking import aggregate_loss
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

#: Real tokens per response of the padded test batch [batch=2, trial=3, pos=4].
RATIO_LENGTHS = ((4, 2, 3), (1, 4, 2))
#: CISPO's clip edges in the check (MiniMax-M1 clips the weight at 1 + eps_high only; a
#: finite lower edge keeps the symmetric-clip mistake visible).
CISPO_EPS_LOW, CISPO_EPS_HIGH = 0.2, 0.28


def _ratio_inputs(seed: int, finite: bool = True):
    """(log_probs with grad, old_log_probs, mask) float[2, 3, 4]; garbage in padding: -9.0
    in log_probs (``finite``), else -inf in log_probs and NaN in old_log_probs (what a
    masked-out log-softmax leaves: -inf, and -inf - -inf = NaN)."""
    g = torch.Generator().manual_seed(1100 + seed)
    mask = (torch.arange(4) < torch.tensor(RATIO_LENGTHS)[..., None]).float()
    old = -torch.rand(2, 3, 4, generator=g) * 2 - 0.1
    shift = (torch.rand(2, 3, 4, generator=g) - 0.5) * 0.8
    pad = -9.0 if finite else float("-inf")
    log_probs = torch.where(mask > 0, old + shift, torch.full_like(old, pad))
    if not finite:
        old = torch.where(mask > 0, old, torch.full_like(old, float("nan")))
    return log_probs.requires_grad_(True), old, mask


# --------------------------------------------------------------------------------------
# Exercise: GSPO's sequence-level ratio
# --------------------------------------------------------------------------------------


@_graded_too
def check_sequence_ratio(fn: Callable, *, seed: int = 0, strict: bool = False):
    """fn(log_probs, old_log_probs, mask) -> s float[batch, trial]: GSPO's ratio
    s_i = (pi(y_i|x) / pi_old(y_i|x))^(1/|y_i|) = exp(mean over the real tokens of
    log_probs - old_log_probs) (Zheng et al. 2025, arXiv 2507.18071, eq. 7), with gradient."""

    def diagnose() -> str:
        log_probs, old, mask = _ratio_inputs(seed)
        before = [log_probs.detach().clone(), old.clone(), mask.clone()]
        out = _as_tensor(_call(fn, log_probs, old, mask))
        _check_unchanged(before, [log_probs.detach(), old, mask])
        want = sequence_log_ratio(log_probs, old, mask).squeeze(-1).exp()
        if out.shape != want.shape:
            hint = ": one ratio per response, not per token" if out.shape == log_probs.shape else ""
            raise _Failed(
                f"expected shape [batch, trial] = {_fmt_shape(want)}, got {_fmt_shape(out)}{hint}"
            )
        if not _close(out, want, 1e-5):
            with torch.no_grad():
                diff = torch.where(mask > 0, log_probs - old, torch.zeros_like(old))
                token_ratio = torch.where(
                    mask > 0, torch.exp(log_probs - old), torch.zeros_like(old)
                )
                lengths = mask.sum(-1)
            mistake = _first_match(
                out,
                [
                    (
                        diff.sum(-1).exp(),
                        "the ratio is not length-normalised: exp(sum of log-ratios) is the "
                        "whole-sequence ratio, whose size grows with length; GSPO takes the "
                        "1/|y_i| power (the MEAN log-ratio over the real tokens)",
                    ),
                    (
                        (diff.sum(-1) / mask.shape[-1]).exp(),
                        "you divided by the padded length pos, so padding counted; divide by "
                        "each response's own number of real tokens |y_i| = mask.sum(-1)",
                    ),
                    (
                        (log_probs - old).mean(-1).exp(),
                        "padding entered the mean: average the log-ratio over real tokens only",
                    ),
                    (
                        token_ratio.sum(-1) / lengths,
                        "you averaged the token ratios (arithmetic mean); GSPO's s_i is their "
                        "geometric mean, exp(mean log-ratio)",
                    ),
                    (
                        1 / want,
                        "inverted: the ratio is pi / pi_old, exp(log_probs - old_log_probs)",
                    ),
                ],
                1e-5,
            )
            raise _Failed(mistake or "s_i differs from exp(mean over real tokens of the log-ratio)")
        if not out.requires_grad:
            raise _Failed("value is right but carries no gradient (do not detach log_probs)")
        weights = torch.linspace(-1, 1, out.numel()).reshape(out.shape)
        (got,) = torch.autograd.grad((out * weights).sum(), log_probs, allow_unused=True)
        (ref,) = torch.autograd.grad((want * weights).sum(), log_probs)
        if got is None or not _close(got, ref, 1e-5):
            raise _Failed("value is right but the gradient differs (padding must get 0)")
        log_probs, old, mask = _ratio_inputs(seed, finite=False)
        out = _as_tensor(_call(fn, log_probs, old, mask))
        want = sequence_log_ratio(log_probs, old, mask).squeeze(-1).exp()
        leaked = out.shape != want.shape or not torch.isfinite(out.detach()).all()
        if not leaked and out.requires_grad:
            (got,) = torch.autograd.grad((out * weights).sum(), log_probs, allow_unused=True)
            leaked = got is not None and not torch.isfinite(got).all()
        if leaked:
            raise _Failed(
                "padding may hold anything: with -inf in the padding of log_probs (and NaN in "
                "old_log_probs) your ratio or its gradient is NaN; (log_probs - old_log_probs) "
                "* mask gives -inf * 0 = NaN, so select the real tokens instead "
                "(torch.where(mask > 0, log_probs - old_log_probs, 0))"
            )
        if not _close(out, want, 1e-5):
            raise _Failed("with -inf / NaN in the padding slots the ratio differs")
        return (
            f"s_i and its gradient match autograd on {out.numel()} padded responses "
            f"(lengths {list(RATIO_LENGTHS)}), with finite and with -inf / NaN padding"
        )

    __tracebackhide__ = True  # noqa: F841 (IPython hides this frame in tracebacks)
    return _run("sequence_ratio", diagnose, strict)


# --------------------------------------------------------------------------------------
# Exercise: CISPO
# --------------------------------------------------------------------------------------


def _cispo_inputs(seed: int):
    """(log_probs with grad, old_log_probs, deltas) on [2, 3, 4] with ratios 0.5-1.6."""
    g = torch.Generator().manual_seed(1200 + seed)
    old = -torch.rand(2, 3, 4, generator=g) * 2 - 0.1
    shift = (torch.rand(2, 3, 4, generator=g) - 0.5) * 1.2
    log_probs = (old + shift).requires_grad_(True)
    deltas = torch.tensor([[1.0, -0.5, 2.0], [-1.5, 0.7, -0.2]])
    return log_probs, old, deltas


@_graded_too
def check_cispo_loss(fn: Callable, *, seed: int = 0, strict: bool = False):
    """fn(log_probs, old_log_probs float[batch, trial, pos], deltas float[batch, trial],
    eps_low, eps_high) -> scalar: the mean over tokens of
    -sg(clip(r, 1 - eps_low, 1 + eps_high)) * delta * log_probs (MiniMax-M1, arXiv
    2506.13585, eq. 4-5). Value and gradient are compared with autograd on a fixed batch."""

    def diagnose() -> str:
        lo, hi = CISPO_EPS_LOW, CISPO_EPS_HIGH
        log_probs, old, deltas = _cispo_inputs(seed)
        before = [log_probs.detach().clone(), old.clone(), deltas.clone()]
        out = _as_tensor(_call(fn, log_probs, old, deltas, lo, hi))
        _check_unchanged(before, [log_probs.detach(), old, deltas])
        want = aggregate_loss(
            compute_per_token_loss(log_probs, deltas, "cispo", old, lo, epsilon_high=hi),
            None,
            "token_mean",
        )
        if out.shape != want.shape:
            raise _Failed(f"expected a scalar (shape []), got shape {_fmt_shape(out)}")
        lp = log_probs.detach()
        d = deltas[:, :, None]
        ratio = torch.exp(lp - old)
        weight = ratio.clamp(1 - lo, 1 + hi)
        if not _close(out, want, 1e-5):
            ppo = -torch.minimum(ratio * d, weight * d).mean()
            mistake = _first_match(
                out,
                [
                    (-want, "wrong sign: minimise -weight * delta * log_probs"),
                    (
                        ppo,
                        "that is PPO's clipped loss (min of ratio * delta and clip(ratio) * "
                        "delta); CISPO multiplies log_probs by the clipped, detached weight",
                    ),
                    (
                        (-weight * d).mean(),
                        "the loss is -weight * delta * LOG_PROBS (REINFORCE with a clipped "
                        "importance weight), not -clip(ratio) * delta",
                    ),
                    (
                        (-ratio * d * lp).mean(),
                        "you forgot to clip the weight: clip(r, 1 - eps_low, 1 + eps_high)",
                    ),
                    (
                        (-ratio.clamp(1 - lo, 1 + lo) * d * lp).mean(),
                        "the upper clip edge is 1 + eps_high, not 1 + eps_low",
                    ),
                    (
                        (-ratio.clamp(max=1 + hi) * d * lp).mean(),
                        "the lower clip edge is missing: clip the weight to [1 - eps_low, "
                        "1 + eps_high] (ratios below 1 - eps_low must be raised to it)",
                    ),
                    (
                        (-ratio.clamp(min=1 - lo) * d * lp).mean(),
                        "the upper clip edge is missing: clip the weight to [1 - eps_low, "
                        "1 + eps_high] (ratios above 1 + eps_high must be cut to it)",
                    ),
                    ((-weight * d * lp).sum(), "you summed over the tokens; take the mean"),
                ],
                1e-5,
            )
            raise _Failed(mistake or f"value differs: {_expected_got(want.item(), out.item(), 5)}")
        if not out.requires_grad:
            raise _Failed("value is right but carries no gradient (do not detach log_probs)")
        (got,) = torch.autograd.grad(out, log_probs, allow_unused=True)
        (ref,) = torch.autograd.grad(want, log_probs)
        if got is None or not _close(got, ref, 1e-5):
            inside = torch.autograd.grad(
                (-(torch.exp(log_probs - old).clamp(1 - lo, 1 + hi)) * d * log_probs).mean(),
                log_probs,
            )[0]
            if got is not None and _close(got, inside, 1e-5):
                raise _Failed(
                    "the clip is inside the gradient: the weight clip(r) must be a constant "
                    "(stop-gradient: .detach() it), so every token's gradient is "
                    "weight * delta * grad log pi"
                )
            raise _Failed("value is right but the gradient with respect to log_probs differs")
        clipped = int(((ratio < 1 - lo) | (ratio > 1 + hi)).sum())
        return (
            f"value and gradient match autograd on {lp.numel()} tokens ({clipped} with a "
            "clipped weight, each still with a gradient)"
        )

    __tracebackhide__ = True  # noqa: F841 (IPython hides this frame in tracebacks)
    return _run("cispo_loss", diagnose, strict)
