"""Checkers: the inner loop (freeze bug) and the clipped loss."""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch

from ..advantages import compute_deltas
from ..losses import compute_loss
from ..models import LectureModel
from ..sampling import compute_log_probs, sample_responses
from ..sort_task import compute_reward, lecture_prompts
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

# --------------------------------------------------------------------------------------
# Exercise: fix the freeze bug in an inner loop
# --------------------------------------------------------------------------------------


def _loop_inputs(seed: int):
    model = LectureModel(5, 6, 3, 3, seed=20 + seed)
    prompts = lecture_prompts()
    responses = sample_responses(model, prompts, 6, generator=torch.Generator().manual_seed(seed))
    rewards = compute_reward(prompts, responses, "sort_distance_reward")
    if bool((rewards == rewards[:, :1]).all()):  # pragma: no cover - every seed tried varies
        rewards[0, 0] += 1
    deltas = compute_deltas(rewards, "centered_rewards")
    return model, prompts, responses, deltas


def _reference_loop(model, prompts, responses, deltas, num_steps, learning_rate, refresh=False):
    """The correct inner loop (refresh=True: old log-probs recomputed every step, frozen)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate)
    with torch.no_grad():
        old = compute_log_probs(model, prompts, responses)
    for _ in range(num_steps):
        if refresh:
            with torch.no_grad():
                old = compute_log_probs(model, prompts, responses)
        log_probs = compute_log_probs(model, prompts, responses)
        loss = compute_loss(log_probs, deltas, "unclipped", old_log_probs=old)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def _params(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


@_graded_too
def check_inner_loop(fn: Callable, *, seed: int = 0, strict: bool = False):
    """fn(model, prompts, responses, deltas, num_steps, learning_rate) -> None.

    Trains ``model`` in place with SGD on the unclipped ratio loss mean(-ratio * delta),
    ratio = exp(log_probs - old_log_probs), old log-probs frozen before the first step.
    """

    def diagnose() -> str:
        model, prompts, responses, deltas = _loop_inputs(seed)
        lr = 0.5
        start = _params(model)
        results = {}
        for steps in (1, 3):
            student = copy.deepcopy(model)
            inputs = [prompts.clone(), responses.clone(), deltas.clone()]
            _call(fn, student, *inputs, num_steps=steps, learning_rate=lr)
            _check_unchanged([prompts, responses, deltas], inputs)
            reference = copy.deepcopy(model)
            _reference_loop(reference, prompts, responses, deltas, steps, lr)
            results[steps] = (_params(student) - start, _params(reference) - start)
        moved, want = results[1]
        if moved.abs().max() == 0:
            raise _Failed(
                "the parameters did not move at the first step: the ratio's gradient is zero. "
                "old_log_probs still carry gradients (ratio == 1 identically); compute them "
                "under torch.no_grad() (or .detach() them) once, before the loop"
            )
        if _close(moved, -want, 1e-5):
            raise _Failed("wrong sign: the first step climbs the loss; minimise -ratio * delta")
        if not _close(moved, want, 1e-5):
            scale = (moved @ want / (want @ want)).item()
            if _close(moved, scale * want, 1e-5):
                raise _Failed(
                    f"the first step points the right way but is {scale:.3g}x the reference: "
                    "average the per-token loss over every token (.mean()), SGD with the given "
                    "learning_rate"
                )
            raise _Failed(
                "the first step differs from the reference (SGD with the given learning_rate "
                "on the mean over every token of -ratio * delta)"
            )
        moved, want = results[3]
        if _close(moved, want, 1e-5):
            return "the ratio has a gradient at the first step and 3 steps match the reference"
        refreshed = copy.deepcopy(model)
        _reference_loop(refreshed, prompts, responses, deltas, 3, lr, refresh=True)
        if _close(moved, _params(refreshed) - start, 1e-5):
            raise _Failed(
                "the first step is right, but old_log_probs are refreshed at every step: "
                "compute them once, before the loop (they belong to the policy that sampled "
                "the responses)"
            )
        raise _Failed("the first step is right but after 3 steps the parameters differ")

    __tracebackhide__ = True  # noqa: F841 (IPython hides this frame in tracebacks)
    return _run("inner_loop", diagnose, strict)


# --------------------------------------------------------------------------------------
# Exercise: the clipped loss
# --------------------------------------------------------------------------------------


def _loss_inputs(seed: int):
    g = torch.Generator().manual_seed(700 + seed)
    old = -torch.rand(2, 3, 4, generator=g) * 2 - 0.1  # [batch, trial, pos], log-probs < 0
    shift = (torch.rand(2, 3, 4, generator=g) - 0.5) * 1.0  # ratios from 0.6 to 1.65
    log_probs = (old + shift).requires_grad_(True)
    deltas = torch.tensor([[1.0, -0.5, 2.0], [-1.5, 0.7, -0.2]])
    return log_probs, old, deltas


@_graded_too
def check_clipped_loss(fn: Callable, *, seed: int = 0, strict: bool = False):
    """fn(log_probs, old_log_probs float[batch, trial, pos], deltas float[batch, trial],
    epsilon) -> scalar: mean over tokens of -min(ratio * delta, clip(ratio) * delta)."""

    def diagnose() -> str:
        eps = 0.2
        log_probs, old, deltas = _loss_inputs(seed)
        before = [log_probs.detach().clone(), old.clone(), deltas.clone()]
        out = _as_tensor(_call(fn, log_probs, old, deltas, eps))
        _check_unchanged(before, [log_probs.detach(), old, deltas])
        want = compute_loss(log_probs, deltas, "clipped", old_log_probs=old, epsilon=eps)
        if out.shape != want.shape:
            raise _Failed(
                f"expected a scalar (shape []), got shape {_fmt_shape(out)}: return the mean "
                "of the per-token losses over batch, trial and pos"
            )
        if not _close(out, want, 1e-5):
            with torch.no_grad():
                lp = log_probs.detach()
                d = deltas[:, :, None]
                ratio = torch.exp(lp - old)
                clipped = ratio.clamp(1 - eps, 1 + eps)
                per_token = -torch.minimum(ratio * d, clipped * d)
                log_ratio = lp / old
            mistake = _first_match(
                out,
                [
                    (-want, "wrong sign: minimise the NEGATIVE clipped objective"),
                    (
                        -torch.maximum(ratio * d, clipped * d).mean(),
                        "you took the max of the two terms; PPO's pessimistic bound is the min",
                    ),
                    (
                        (
                            -torch.minimum(log_ratio * d, log_ratio.clamp(1 - eps, 1 + eps) * d)
                        ).mean(),
                        "the ratio is a quotient of probabilities, exp(log_probs - "
                        "old_log_probs), not log_probs / old_log_probs",
                    ),
                    (
                        (-clipped * d).mean(),
                        "you dropped the unclipped term: take the min of ratio * delta and "
                        "clip(ratio) * delta",
                    ),
                    ((-ratio * d).mean(), "you forgot to clip the ratio"),
                    (
                        per_token.sum(),
                        "you summed over the tokens; average (mean over batch, trial and pos)",
                    ),
                    (
                        per_token.sum(-1).mean(),
                        "you summed over pos and averaged the rest; average over every token",
                    ),
                    (
                        (
                            -torch.minimum(ratio * d, ratio.clamp(1 - 2 * eps, 1 + 2 * eps) * d)
                        ).mean(),
                        "the clip range is [1 - epsilon, 1 + epsilon]",
                    ),
                ],
                1e-5,
            )
            raise _Failed(
                mistake
                or f"value differs from the reference: {_expected_got(want.item(), out.item(), 5)}"
            )
        if not out.requires_grad:
            raise _Failed(
                "value is right but carries no gradient: do not detach log_probs or use .item()"
            )
        (got_grad,) = torch.autograd.grad(out, log_probs, allow_unused=True)
        (want_grad,) = torch.autograd.grad(want, log_probs)
        if got_grad is None or not _close(got_grad, want_grad, 1e-5):
            raise _Failed(
                "value is right but the gradient with respect to log_probs differs: "
                "gradients must flow through the ratio (clamp cuts them where it is active)"
            )
        return "value and gradient match the reference on both sides of the clip range"

    __tracebackhide__ = True  # noqa: F841 (IPython hides this frame in tracebacks)
    return _run("clipped_loss", diagnose, strict)
