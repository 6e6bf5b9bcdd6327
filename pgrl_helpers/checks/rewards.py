"""Checkers: the vectorised sort_distance_reward, and the exact expected reward."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..exact import all_responses, exact_expected_reward, flat_grad
from ..models import LectureModel
from ..sampling import compute_log_probs
from ..sort_task import compute_reward, make_prompts, sort_distance_reward_batch
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
# Exercise: sort_distance_reward, vectorised
# --------------------------------------------------------------------------------------


def _reward_inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """prompts int[6, 4] and responses int[6, 5, 4]: sorted, the prompt, reversed, 2 random."""
    g = torch.Generator().manual_seed(1000 + seed)
    prompts = make_prompts(6, 4, 6, generator=g)
    prompts[0] = torch.tensor([3, 1, 0, 2])
    truth = prompts.sort(dim=-1).values
    random = torch.randint(0, 6, (6, 2, 4), generator=g)
    random[:, 1, :2] = truth[:, :2]  # partly right
    responses = torch.stack([truth, prompts, truth.flip(-1), random[:, 0], random[:, 1]], dim=1)
    return prompts, responses


@_graded_too
def check_sort_distance_reward(fn: Callable, *, seed: int = 0, strict: bool = False):
    """The batched ``sort_distance_reward``.

    fn(prompts int[batch, prompt_pos], responses int[batch, trial, pos]) -> float[batch, trial].
    """

    def diagnose() -> str:
        prompts, responses = _reward_inputs(seed)
        batch, trial, pos = responses.shape
        before = [prompts.clone(), responses.clone()]
        out = _as_tensor(_call(fn, prompts, responses))
        _check_unchanged(before, [prompts, responses])
        want = sort_distance_reward_batch(prompts, responses)
        if out.shape != want.shape:
            hints = {
                (batch, trial, pos): "one value per token: count the matches, summing over "
                "pos (the last axis)",
                (batch, pos): "it looks reduced over trial; sum over pos (dim=-1) instead",
                (batch,): "reduced over too many axes; keep one reward per response",
                (): "a single number; return one reward per response",
            }
            hint = hints.get(tuple(out.shape), "")
            raise _Failed(
                f"expected shape [batch, trial] = {_fmt_shape(want)}, got {_fmt_shape(out)}"
                + (f": {hint}" if hint else "")
            )
        if not out.dtype.is_floating_point:
            raise _Failed(
                f"returned dtype {out.dtype}; rewards must be floats (e.g. .float()) so that "
                "they can be averaged and centred"
            )
        if _close(out, want):
            return f"matches the reference on {batch * trial} responses ({batch} prompts x {trial})"
        truth = prompts.sort(dim=-1).values
        mistake = _first_match(
            out,
            [
                (
                    (responses == prompts[:, None, :]).sum(-1).float(),
                    "you compared each response with the prompt itself; compare with the "
                    "prompt sorted ascending",
                ),
                (
                    (responses == truth.flip(-1)[:, None, :]).sum(-1).float(),
                    "you compared with the prompt sorted in descending order; sort ascending",
                ),
                (
                    pos - want,
                    "you counted the positions that differ; count the positions that match",
                ),
                (
                    (responses == truth[:, None, :]).all(-1).float(),
                    "you scored exact sorts only (0 or 1); the reward counts every matching "
                    "position",
                ),
            ],
        )
        if mistake:
            raise _Failed(mistake)
        b, t = (out - want).abs().nonzero()[0].tolist()
        raise _Failed(
            f"wrong on {int((out - want).abs().gt(1e-4).sum())} of {batch * trial} responses, "
            f"e.g. prompt {prompts[b].tolist()}, response {responses[b, t].tolist()}: "
            f"expected {want[b, t].item():g}, got {out[b, t].item():g}"
        )

    __tracebackhide__ = True  # noqa: F841 (IPython hides this frame in tracebacks)
    return _run("sort_distance_reward_batch", diagnose, strict)


# --------------------------------------------------------------------------------------
# Exercise: exact expected reward by enumeration (and its gradient)
# --------------------------------------------------------------------------------------

EXACT_VOCAB, EXACT_LENGTH = 3, 3


def _exact_inputs(seed: int):
    model = LectureModel(EXACT_VOCAB, 4, EXACT_LENGTH, EXACT_LENGTH, seed=seed)
    prompts = make_prompts(4, EXACT_LENGTH, EXACT_VOCAB, generator=200 + seed)
    return model, prompts


@_graded_too
def check_expected_reward(fn: Callable, *, seed: int = 0, strict: bool = False):
    """fn(model, prompts int[batch, prompt_pos]) -> float[batch]: exact E[R | s] under
    ``sort_distance_reward``, differentiable in the model's parameters."""

    def diagnose() -> str:
        model, prompts = _exact_inputs(seed)
        batch = prompts.shape[0]
        out = _as_tensor(_call(fn, model, prompts))
        want = exact_expected_reward(model, prompts, "sort_distance_reward")
        n = EXACT_VOCAB**EXACT_LENGTH
        if out.shape != want.shape:
            hints = {
                (): "that is one number: return E[R | s] for every prompt (do not average over "
                "prompts)",
                (batch, n): "that is one value per response: sum pi(a|s) R(s, a) over the "
                "responses",
                (batch, n, EXACT_LENGTH): "that is one value per token: a response's "
                "log-probability is the sum over pos",
            }
            hint = hints.get(tuple(out.shape), "")
            raise _Failed(
                f"expected shape [batch] = {_fmt_shape(want)}, got {_fmt_shape(out)}"
                + (f": {hint}" if hint else "")
            )
        if not _close(out, want):
            with torch.no_grad():
                responses = all_responses(EXACT_VOCAB, EXACT_LENGTH)
                expanded = responses[None].expand(batch, -1, -1)
                token_lp = compute_log_probs(model, prompts, expanded)  # [batch, N, pos]
                log_pi = token_lp.sum(-1)
                rewards = compute_reward(prompts, expanded, "sort_distance_reward")
            mistake = _first_match(
                out,
                [
                    (-want, "wrong sign: E[R | s] = + sum_a pi(a|s) R(s, a)"),
                    (
                        (log_pi * rewards).sum(-1),
                        "you weighted rewards by log-probabilities; use the probabilities "
                        "pi(a|s) = exp(log pi(a|s))",
                    ),
                    (
                        want / n,
                        "you averaged over the responses; the expectation is the sum of "
                        "pi(a|s) R(s, a) over all responses",
                    ),
                    (
                        rewards.mean(-1),
                        "that is the average reward of all responses, ignoring the policy: "
                        "weight each response by its probability pi(a|s)",
                    ),
                    (
                        (token_lp.exp().mean(-1) * rewards).sum(-1),
                        "a response's probability is the product of its token probabilities "
                        "(sum the log-probs over pos, then exp)",
                    ),
                    (
                        (token_lp.mean(-1).exp() * rewards).sum(-1),
                        "a response's log-probability is the sum over pos, not the mean",
                    ),
                ],
            )
            raise _Failed(
                mistake
                or f"values differ from the exact E[R | s]: expected "
                f"{[round(v, 4) for v in want.tolist()]}, got "
                f"{[round(v, 4) for v in out.detach().tolist()]}"
            )
        if not out.requires_grad:
            raise _Failed(
                "values are right but carry no gradient: do not use torch.no_grad(), "
                ".detach(), .item() or numpy; autograd must see pi(a|s)"
            )
        got_grad = flat_grad(out.sum(), model)
        want_grad = flat_grad(want.sum(), model)
        if not _close(got_grad, want_grad, 1e-3):
            if got_grad.abs().max() == 0:
                raise _Failed(
                    "values are right but the gradient is zero: the probabilities were "
                    "detached from the model somewhere"
                )
            raise _Failed("values are right but the gradient differs from the exact one")
        return f"exact E[R | s] and its gradient match on {batch} prompts ({n} responses each)"

    __tracebackhide__ = True  # noqa: F841 (IPython hides this frame in tracebacks)
    return _run("expected_reward", diagnose, strict)
