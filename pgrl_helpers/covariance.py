"""Entropy collapse's driver, per token: Cui et al. 2025 (arXiv 2505.22617), KL-Cov.

For a softmax policy one update changes the entropy by about -Cov(log pi(a), change of logit
a); under a policy gradient the logit change is proportional to pi(a) A(a), so confident
tokens with a high advantage lower the entropy. KL-Cov ranks the batch's real tokens by
``token_covariance`` and adds beta |log pi - log pi_old| to the loss of the top k fraction
(``kl_cov_tokens``); ``losses.compute_per_token_loss(..., mode="kl_cov")`` uses both. The
paper's other remedy, Clip-Cov (``clip_cov_tokens``; ``TrainConfig.clip_cov_ratio``), detaches
the policy-gradient loss of a few random tokens whose covariance is in a band.
Shapes: log_probs float[batch, trial, pos], deltas float[batch, trial] or [batch, trial, pos],
mask bool/float[batch, trial, pos].

Not imported by a notebook: used through ``losses`` and the loop (notebook 11 teaches KL-Cov).
"""

from __future__ import annotations

import math

import torch

from ._validate import check_ndim, check_number, check_same_shape, check_tensor


def token_covariance(
    log_probs: torch.Tensor, deltas: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Cui et al.'s per-token covariance term, float[batch, trial, pos] (no gradient).

    Cov(y_t) = (log pi(y_t) - mean log pi) * (A_t - mean A), both means over the batch's
    real tokens (``mask`` bool/float[batch, trial, pos], None: all); padding gets -inf so
    it is never ranked first. A high value marks a confident token with a high advantage
    (or an unlikely one with a low advantage): the tokens whose update lowers the entropy
    most (arXiv 2505.22617, the covariance that drives the entropy change).
    """
    check_ndim(log_probs, 3, "log_probs", "batch, trial, pos")
    check_tensor(deltas, "deltas")
    if tuple(deltas.shape) not in (tuple(log_probs.shape[:2]), tuple(log_probs.shape)):
        raise ValueError(
            f"deltas must be [batch, trial] or [batch, trial, pos] matching log_probs: "
            f"deltas {list(deltas.shape)}, log_probs {list(log_probs.shape)}"
        )
    real = torch.ones(log_probs.shape, dtype=torch.bool) if mask is None else mask != 0
    check_same_shape(log_probs, real, "log_probs", "mask")
    if not real.any():
        raise ValueError("mask selects no tokens: the covariance needs at least one")
    with torch.no_grad():
        logp = log_probs.detach()
        adv = (deltas[:, :, None] if deltas.ndim == 2 else deltas).detach().expand(logp.shape)
        cov = (logp - logp[real].mean()) * (adv - adv[real].mean())
        return torch.where(real, cov, torch.full_like(cov, -math.inf))


def kl_cov_tokens(
    log_probs: torch.Tensor,
    deltas: torch.Tensor,
    kl_cov_ratio: float,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """bool[batch, trial, pos]: KL-Cov's set I_KL, the max(1, floor(k N)) real tokens with the
    largest ``token_covariance`` (N real tokens, k = ``kl_cov_ratio``); ties go to the
    earlier token in row-major order (a stable sort), so the choice is deterministic."""
    check_number(kl_cov_ratio, "kl_cov_ratio", 0, 1)
    cov = token_covariance(log_probs, deltas, mask).flatten()
    real = int(torch.isfinite(cov).sum())
    count = max(1, int(kl_cov_ratio * real))
    order = torch.sort(cov, descending=True, stable=True).indices[:count]
    chosen = torch.zeros(cov.shape, dtype=torch.bool)
    chosen[order] = True
    return chosen.reshape(log_probs.shape)


def check_clip_cov(ratio, lower, upper) -> None:
    """Raise ValueError naming the bad Clip-Cov setting (ratio in [0, 1], lower < upper)."""
    check_number(ratio, "clip_cov_ratio", 0, 1, low_inclusive=True, note="0: off")
    check_number(lower, "clip_cov_lb", allow_inf=True)
    check_number(upper, "clip_cov_ub", allow_inf=True)
    if not lower < upper:
        raise ValueError(f"clip_cov_lb must be < clip_cov_ub, got {lower!r} and {upper!r}")


def check_clip_cov_fields(config) -> None:
    """Raise naming the bad Clip-Cov field of a ``TrainConfig`` (``clip_cov_*``).

    The settings as ``check_clip_cov``; Clip-Cov (ratio > 0) detaches tokens of the clipped
    PPO loss, so it needs loss_mode 'clipped' and importance_sampling_level 'token'.
    """
    check_clip_cov(config.clip_cov_ratio, config.clip_cov_lb, config.clip_cov_ub)
    if config.clip_cov_ratio > 0 and (
        config.loss_mode != "clipped" or config.importance_sampling_level != "token"
    ):
        raise ValueError(
            "clip_cov_ratio > 0 (Clip-Cov) detaches tokens of the clipped PPO loss: it "
            "needs loss_mode 'clipped' and importance_sampling_level 'token', got "
            f"{config.loss_mode!r} and {config.importance_sampling_level!r}"
        )


def clip_cov_tokens(
    log_probs: torch.Tensor,
    deltas: torch.Tensor,
    already_clipped: torch.Tensor,
    clip_cov_ratio: float,
    lower: float = 1.0,
    upper: float = 5.0,
    mask: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """bool[batch, trial, pos]: Clip-Cov's tokens, whose policy-gradient loss is detached.

    Cui et al. 2025 (arXiv 2505.22617), Clip-Cov: among the real tokens whose
    ``token_covariance`` lies strictly inside (``lower``, ``upper``) and whose PPO term is not
    clipped already (``already_clipped`` bool[batch, trial, pos]), pick
    min(max(1, floor(``clip_cov_ratio`` N)), candidates) uniformly at random (N real tokens;
    ``generator`` seeds the draw). verl's ``compute_policy_loss_clip_cov`` (defaults ratio
    2e-4, bounds 1 and 5) multiplies the clipped PPO loss of these tokens by 0.
    """
    check_clip_cov(clip_cov_ratio, lower, upper)
    check_same_shape(log_probs, already_clipped, "log_probs", "already_clipped")
    cov = token_covariance(log_probs, deltas, mask)
    real = torch.isfinite(cov)
    candidates = real & ~already_clipped & (cov > lower) & (cov < upper)
    chosen = torch.zeros(cov.shape, dtype=torch.bool)
    where = candidates.flatten().nonzero().squeeze(-1)
    count = min(max(1, int(clip_cov_ratio * int(real.sum()))), where.numel())
    if clip_cov_ratio == 0 or count == 0:
        return chosen
    pick = where[torch.randperm(where.numel(), generator=generator)[:count]]
    chosen.view(-1)[pick] = True
    return chosen
