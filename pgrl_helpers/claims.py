"""The notebooks' checks of their central claims, as functions that can be handed a bug.

Each ``check_*`` takes the implementation under test as an argument, computes what it should
give *independently* (by enumeration, autograd of an exact objective, or a plain-Python
reference), raises ``AssertionError`` naming the claim when they disagree, and returns the
measured discrepancy for the notebook to print. ``tests/test_planted_bugs.py`` passes each
one a planted bug (wrong sign, wrong axis, missing detach, biased std, wrong direction) and
shows that it fails.

* ``check_policy_gradient`` (notebooks 01-03): a surrogate loss's expected gradient is -grad E[R];
* ``check_ratio_gradient`` (04): the ratio loss's gradient is the true policy gradient;
* ``check_kl_estimator`` (05): an estimator's exact mean is the reverse KL, KL(pi || pi_ref);
* ``check_k3_round_off`` (05, 06): k3 >= 0 holds before the clamp, which only removes round-off;
* ``check_deltas`` (06): ``compute_deltas`` against a plain-Python per-group reference.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

import torch

from .exact import (
    _response_length,
    enumerated_rewards,
    exact_policy_gradient,
    flat_grad,
    response_log_probs,
)


def check_policy_gradient(surrogate: Callable, model, prompts, reward_fn, tol: float = 1e-5):
    """E over the policy's samples of grad ``surrogate`` must equal -grad E[R], exactly.

    ``surrogate(log_probs, rewards)`` maps float[batch, N] response log-probs and rewards to
    float[batch, N] per-sample losses (REINFORCE: -log_probs * rewards). The expectation is
    taken by enumerating every response, weights pi(a|s) detached as with real samples.
    Returns max |expected grad + exact grad|.
    """
    log_probs = response_log_probs(model, prompts)  # [batch, N]
    length = _response_length(model, prompts)
    rewards = enumerated_rewards(prompts, model.vocab_size, length, reward_fn).to(log_probs.dtype)
    per_sample = surrogate(log_probs, rewards)
    expected = (log_probs.exp().detach() * per_sample).sum(-1).mean()
    gap = (flat_grad(expected, model) + exact_policy_gradient(model, prompts, reward_fn)).abs()
    assert gap.max() < tol, f"surrogate's expected gradient != -grad E[R] (max diff {gap.max()})"
    return gap.max().item()


def check_ratio_gradient(freeze: Callable, num_tokens: int = 5, seed: int = 0, tol=1e-5):
    """The ratio loss, old log-probs made by ``freeze(log_pi)``, has the exact policy gradient.

    A categorical policy over ``num_tokens`` responses with rewards 0..n-1; at theta = theta_old
    the gradient of sum_a pi_old(a) ratio(a) A(a) must be grad E_pi[R]. ``freeze`` is how the
    code under test turns the current log-probs into old ones (right: ``lambda lp: lp.detach()``).
    Returns max |ratio-loss gradient - true gradient|.
    """
    g = torch.Generator().manual_seed(seed)
    theta = torch.randn(num_tokens, generator=g, dtype=torch.float64).requires_grad_(True)
    rewards = torch.arange(float(num_tokens), dtype=torch.float64)
    log_pi = torch.log_softmax(theta, -1)
    true = torch.autograd.grad((log_pi.exp() * rewards).sum(), theta, retain_graph=True)[0]
    old_log_pi = freeze(log_pi)
    old_probs = old_log_pi.detach().exp()
    advantages = rewards - (old_probs * rewards).sum()
    ratio = torch.exp(log_pi - old_log_pi)
    surrogate = (old_probs * ratio * advantages).sum()
    grad = torch.autograd.grad(surrogate, theta)[0]
    gap = (grad - true).abs().max().item()
    assert true.abs().max() > 0.1, "the test policy must have a non-trivial gradient"
    assert gap < tol, f"ratio loss gradient != true policy gradient (max diff {gap:.3g})"
    return gap


def check_kl_estimator(estimator: Callable, num_pairs: int = 5, seed: int = 0, tol=1e-9):
    """Exact mean of ``estimator(log_pi, log_ref)`` under pi must be KL(pi || pi_ref).

    ``num_pairs`` random pairs of 7-token categoricals, in float64, expectation by enumeration.
    Returns the largest |E_pi[k] - KL(pi || pi_ref)|.
    """
    g = torch.Generator().manual_seed(seed)
    worst = 0.0
    for _ in range(num_pairs):
        log_pi = torch.log_softmax(torch.randn(7, generator=g, dtype=torch.float64), -1)
        log_ref = torch.log_softmax(torch.randn(7, generator=g, dtype=torch.float64), -1)
        reverse = (log_pi.exp() * (log_pi - log_ref)).sum()  # written out, not categorical_kl
        mean = (log_pi.exp() * estimator(log_pi, log_ref)).sum()
        worst = max(worst, abs(mean - reverse).item())
    assert worst < tol, f"E_pi[estimator] != KL(pi || pi_ref) (max diff {worst:.3g})"
    return worst


def check_k3_round_off(k3_unclamped: Callable, k3: Callable, seed: int = 0, tol=1e-6):
    """t - 1 - log t >= 0 on *unclamped* values (up to ``tol``), and the clamp removes only that.

    Log-ratios from 1e-8 to 10 in size, float32. Returns (min unclamped value, max clamp change).
    """
    g = torch.Generator().manual_seed(seed)
    log_pi = torch.randn(100_000, generator=g)
    log_ref = log_pi + torch.randn(100_000, generator=g) * torch.logspace(-8, 1, 100_000)
    raw, clamped = k3_unclamped(log_pi, log_ref), k3(log_pi, log_ref)
    lowest, change = raw.min().item(), (clamped - raw).abs().max().item()
    assert lowest > -tol, f"unclamped k3 reaches {lowest:.3g} < 0: not round-off"
    assert change <= tol, f"the clamp changes k3 by {change:.3g}: more than round-off"
    return lowest, change


def _reference_deltas(group: list[float], mode: str, eps: float, std_floor: float) -> list[float]:
    mean = sum(group) / len(group)
    if mode == "rewards":
        return list(group)
    if mode == "centered_rewards":
        return [r - mean for r in group]
    if mode == "normalized_rewards":
        scale = max(statistics.stdev(group), std_floor) + eps
        return [(r - mean) / scale for r in group]
    if mode == "loo_rewards":
        return [r - (sum(group) - r) / (len(group) - 1) for r in group]
    if mode == "max_rewards":
        top = max(group)
        return [r if r == top else 0.0 for r in group]
    raise ValueError(f"unknown delta mode {mode!r}")


def _reference_batch_deltas(rows, mode: str, eps: float, std_floor: float) -> list[list[float]]:
    """Group mean subtracted, then divided by a std over the whole batch (plain Python).

    batch_normalized_rewards: the std of every raw reward (TRL's scale_rewards='batch');
    reinforce_pp_baseline: the std of the group-centred rewards (REINFORCE++).
    """
    centred = [[r - sum(row) / len(row) for r in row] for row in rows]
    pool = [r for row in (rows if mode == "batch_normalized_rewards" else centred) for r in row]
    scale = max(statistics.stdev(pool), std_floor) + eps
    return [[c / scale for c in row] for row in centred]


def check_deltas(
    compute_deltas: Callable, rewards: torch.Tensor, modes, eps=1e-6, std_floor=1e-3, tol=1e-5
) -> dict[str, float]:
    """``compute_deltas(rewards, mode)`` against a plain-Python loop over the groups (rows).

    The reference uses ``statistics.stdev`` (sample std) and the documented ``eps`` and
    ``std_floor``; it shares no code with ``advantages``. Returns {mode: max |difference|}.
    """
    rows = rewards.double().tolist()
    out = {}
    for mode in modes:
        got = compute_deltas(rewards, mode)
        assert tuple(got.shape) == tuple(rewards.shape), f"{mode}: shape {list(got.shape)}"
        if mode in ("batch_normalized_rewards", "reinforce_pp_baseline"):
            want = _reference_batch_deltas(rows, mode, eps, std_floor)
        else:
            want = [_reference_deltas(row, mode, eps, std_floor) for row in rows]
        diff = max(
            abs(a - b) for ga, wa in zip(got.double().tolist(), want) for a, b in zip(ga, wa)
        )
        assert math.isfinite(diff) and diff < tol * (1 + max(map(abs, sum(want, [])))), (
            f"{mode}: compute_deltas differs from the per-group reference by {diff:.3g}"
        )
        out[mode] = diff
    return out
