"""Checker: the loss mask of a multi-turn episode (a tool's tokens stay out of the loss)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..masking import aggregate_loss
from ..tool_task import ENVIRONMENT_SLOTS, GRADER_SLOT, RESPONSE_LENGTH, TOOL_SLOTS, tool_mask
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


def _episode_inputs(seed: int):
    """(log_probs float[2, 3, 6] with grad, deltas float[2, 3]) in the tool task's layout."""
    g = torch.Generator().manual_seed(1600 + seed)
    log_probs = (-torch.rand(2, 3, RESPONSE_LENGTH, generator=g) * 2 - 0.05).requires_grad_(True)
    deltas = torch.tensor([[1.0, -0.5, 0.25], [-1.5, 0.75, 2.0]])
    return log_probs, deltas


@_graded_too
def check_multi_turn_loss(fn: Callable, *, seed: int = 0, strict: bool = False):
    """fn(log_probs float[batch, trial, 6], deltas float[batch, trial]) -> scalar: the
    REINFORCE loss -delta * log_probs averaged over the POLICY's tokens only (slots 0, 1 and
    4 of ``pgrl_helpers.tool_task``'s episode); the tool's reply (2, 3) and the grader's
    slot (5) get no gradient."""

    def diagnose() -> str:
        log_probs, deltas = _episode_inputs(seed)
        before = [log_probs.detach().clone(), deltas.clone()]
        out = _as_tensor(_call(fn, log_probs, deltas))
        _check_unchanged(before, [log_probs.detach(), deltas])
        per_token = -deltas[:, :, None] * log_probs
        mask = tool_mask(tuple(deltas.shape))
        want = aggregate_loss(per_token, mask, "token_mean")
        if out.shape != want.shape:
            raise _Failed(f"expected a scalar (shape []), got shape {_fmt_shape(out)}")
        if not out.requires_grad:
            raise _Failed("your loss carries no gradient (do not detach log_probs)")
        (got,) = torch.autograd.grad(out, log_probs, allow_unused=True)
        got = torch.zeros_like(log_probs) if got is None else got
        leaked = [s for s in ENVIRONMENT_SLOTS if bool((got[..., s] != 0).any())]
        if leaked:
            who = ["the tool" if s in TOOL_SLOTS else "the grader" for s in leaked]
            raise _Failed(
                "a tool token leaks into the loss: slot(s) "
                + ", ".join(f"{s} (written by {w})" for s, w in zip(leaked, who))
                + " get a gradient; the policy never chose those tokens, so mask them out "
                "(mask 0 on the environment's slots)"
            )
        if _close(out, want, 1e-5):
            (ref,) = torch.autograd.grad(want, log_probs)
            if _close(got, ref, 1e-5):
                return (
                    f"token-mean over the policy's {int(mask[0, 0].sum())} slots per episode; "
                    f"the tool's slots {list(TOOL_SLOTS)} and the grader's slot {GRADER_SLOT} "
                    "get no gradient"
                )
        with torch.no_grad():
            policy = mask > 0
            zeroed = torch.where(policy, per_token, torch.zeros_like(per_token))
            mistake = _first_match(
                out,
                [
                    (
                        zeroed.sum() / per_token.numel(),
                        "averaged over every slot: the tool's tokens are out of the sum but "
                        "still in the count; divide by the number of policy tokens",
                    ),
                    (-want, "wrong sign: minimise -delta * log_probs"),
                    (zeroed.sum(), "you summed; take the mean over the policy's tokens"),
                    (
                        torch.where(policy, per_token, torch.zeros_like(per_token)).sum(-1).mean(),
                        "you summed over each episode's tokens; average over the policy's tokens",
                    ),
                ],
                1e-5,
            )
        raise _Failed(mistake or _expected_got(want.item(), out.item(), 5))

    __tracebackhide__ = True  # noqa: F841 (IPython hides this frame in tracebacks)
    return _run("multi_turn_loss", diagnose, strict)
