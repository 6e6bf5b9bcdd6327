"""Policy-gradient losses: naive (REINFORCE), unclipped ratio, clipped ratio (PPO/GRPO),
the 2025 family: dual-clip PPO, CISPO, SAPO, and GSPO's sequence-level ratio, and KL-Cov
(a penalty on the few tokens whose covariance drives entropy collapse).

Shapes: log_probs and old_log_probs float[batch, trial, pos] (one value per
sampled token), deltas float[batch, trial] (one per response, broadcast over pos) or
float[batch, trial, pos] (one per token, e.g. GAE advantages from ``pgrl_helpers.gae``).
``compute_per_token_loss`` returns float[batch, trial, pos] so a caller can choose
the reduction; ``compute_loss`` takes the mean over every token, as the lecture does.
"""

from __future__ import annotations

import math

import torch

from ._validate import (
    MAX_LOG_RATIO,
    check_finite,
    check_mode,
    check_ndim,
    check_same_shape,
)
from .covariance import check_kl_cov, kl_cov_tokens

LOSS_MODES: tuple[str, ...] = (
    "naive", "unclipped", "clipped", "dual_clip", "cispo", "sapo", "kl_cov",
)  # fmt: skip

#: Where the importance ratio lives: one per token (PPO/GRPO) or one per response (GSPO).
IMPORTANCE_SAMPLING_LEVELS: tuple[str, ...] = ("token", "sequence")

FREEZE_MESSAGE = (
    "old_log_probs requires grad: the ratio exp(log_probs - old_log_probs) is then "
    "exactly 1 with zero gradient on the first step (the freeze pitfall). Compute "
    "old_log_probs under torch.no_grad() or call .detach() on them; pass "
    "check_frozen=False only to demonstrate the bug."
)


def compute_ratio(
    log_probs: torch.Tensor, old_log_probs: torch.Tensor, max_log_ratio: float = MAX_LOG_RATIO
) -> torch.Tensor:
    """Per-token importance ratio pi/pi_old = exp(log_probs - old_log_probs), [batch, trial, pos].

    The log-ratio is clamped to [-max_log_ratio, max_log_ratio] first, so the ratio
    (and its gradient) can never be inf or NaN; beyond the clamp the gradient is 0.
    """
    check_same_shape(log_probs, old_log_probs, "log_probs", "old_log_probs")
    return torch.exp((log_probs - old_log_probs).clamp(-max_log_ratio, max_log_ratio))


def _check_number(value, name: str, low: float = 0.0) -> None:
    """value must be a finite real number > low (bools refused)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= low
    ):
        raise ValueError(f"{name} must be a finite number > {low:g}, got {value!r}")


def _check_deltas(deltas, shape) -> None:
    """deltas float[batch, trial] (one per response) or float[batch, trial, pos] (per token)."""
    if not isinstance(deltas, torch.Tensor):
        raise TypeError(f"deltas must be a torch.Tensor, got {type(deltas).__name__}")
    if tuple(deltas.shape) not in (tuple(shape[:2]), tuple(shape)):
        raise ValueError(
            f"deltas must be [batch, trial] or [batch, trial, pos] matching log_probs: "
            f"deltas {list(deltas.shape)}, log_probs {list(shape)}"
        )


def _per_token(deltas: torch.Tensor) -> torch.Tensor:
    """[batch, trial] -> [batch, trial, 1] (broadcasts over pos); [batch, trial, pos] as is."""
    return deltas[:, :, None] if deltas.ndim == 2 else deltas


def _check_inputs(log_probs, deltas, mode, old_log_probs, epsilon, check_frozen, epsilon_high=None):
    check_mode(mode, LOSS_MODES, "loss mode")
    check_ndim(log_probs, 3, "log_probs", "batch, trial, pos")
    _check_deltas(deltas, log_probs.shape)
    check_finite(deltas, "deltas")
    check_finite(log_probs, "log_probs")
    if mode != "naive":
        if old_log_probs is None:
            raise ValueError(
                f"loss mode {mode!r} needs old_log_probs (the frozen log-probs of the "
                "policy that sampled the responses)"
            )
        check_same_shape(log_probs, old_log_probs, "log_probs", "old_log_probs")
        check_finite(old_log_probs, "old_log_probs")
        if check_frozen and old_log_probs.requires_grad:
            raise ValueError(FREEZE_MESSAGE)
    if mode in ("clipped", "dual_clip", "cispo") and (
        isinstance(epsilon, bool)
        or not isinstance(epsilon, (int, float))
        or not math.isfinite(epsilon)
        or epsilon <= 0
    ):
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon!r}")
    if epsilon_high is not None and (
        isinstance(epsilon_high, bool)
        or not isinstance(epsilon_high, (int, float))
        or not math.isfinite(epsilon_high)
        or epsilon_high <= 0
    ):
        raise ValueError(
            f"epsilon_high must be a positive finite number or None, got {epsilon_high!r}"
        )


def _check_mask(mask, log_probs, importance_sampling_level) -> torch.Tensor | None:
    """The response mask as bool[batch, trial, pos] (None: every slot is real)."""
    check_mode(importance_sampling_level, IMPORTANCE_SAMPLING_LEVELS, "importance_sampling_level")
    if mask is None:
        return None
    check_same_shape(log_probs, mask, "log_probs", "mask")
    if mask.dtype != torch.bool:
        if not ((mask == 0) | (mask == 1)).all():
            raise ValueError("mask must hold only 0 and 1 (or be bool)")
        mask = mask != 0
    if importance_sampling_level == "sequence" and not mask.any(dim=-1).all():
        raise ValueError(
            "mask: importance_sampling_level 'sequence' averages each response's log-ratio "
            "over its real tokens, but some response has none (an all-zero mask row)"
        )
    return mask


def sequence_log_ratio(
    log_probs: torch.Tensor, old_log_probs: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """GSPO's log s_i = (1/|y_i|) sum_t (log pi_t - log pi_old,t): float[batch, trial, 1].

    The mean runs over response i's real tokens (``mask`` float/bool[batch, trial, pos],
    None: all). GSPO (Zheng et al. 2025, arXiv 2507.18071) eq. 7:
    s_i = (pi(y_i|x) / pi_old(y_i|x))^(1/|y_i|). Padding is selected away (never multiplied
    by 0), so a NaN there cannot leak in.
    """
    check_same_shape(log_probs, old_log_probs, "log_probs", "old_log_probs")
    mask = _check_mask(mask, log_probs, "sequence")
    diff = log_probs - old_log_probs
    if mask is None:
        return diff.mean(dim=-1, keepdim=True)
    total = torch.where(mask, diff, torch.zeros_like(diff)).sum(dim=-1, keepdim=True)
    return total / mask.sum(dim=-1, keepdim=True).to(diff.dtype)


def compute_per_token_loss(
    log_probs: torch.Tensor,
    deltas: torch.Tensor,
    mode: str,
    old_log_probs: torch.Tensor | None = None,
    epsilon: float = 0.2,
    check_frozen: bool = True,
    epsilon_high: float | None = None,
    return_clip_mask: bool = False,
    *,
    importance_sampling_level: str = "token",
    mask: torch.Tensor | None = None,
    dual_clip_c: float = 3.0,
    sapo_temperature_pos: float = 1.0,
    sapo_temperature_neg: float = 1.05,
    kl_cov_ratio: float = 0.002,
    kl_cov_coef: float = 1.0,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Per-token loss float[batch, trial, pos]; minimise its (masked) mean.

    With r the importance ratio, A = delta (broadcast over pos), eps_l = epsilon,
    eps_h = epsilon_high (None: epsilon) and sg the stop-gradient:

    * ``naive``:     -log_probs * A
    * ``unclipped``: -r * A
    * ``clipped``:   -min(r A, clip(r, 1 - eps_l, 1 + eps_h) A)   (PPO/GRPO; DAPO clip-higher)
    * ``dual_clip``: as ``clipped``, but for A < 0 the objective is bounded below by
      ``dual_clip_c`` * A: -max(min(r A, clip(r) A), c A) (Ye et al. 2020, arXiv 1912.09729,
      dual-clip PPO); c > 1. Stops a huge ratio on a bad token from giving an unbounded update.
    * ``cispo``:     -sg(clip(r, 1 - eps_l, 1 + eps_h)) * A * log_probs (MiniMax-M1, arXiv
      2506.13585, eq. 4-5): the *weight* is clipped, so no token's gradient is dropped.
    * ``sapo``:      -(4 / tau) sigmoid(tau (r - 1)) * A with tau = ``sapo_temperature_pos``
      for A > 0 and ``sapo_temperature_neg`` otherwise (SAPO, arXiv 2511.20347; TRL's
      ``loss_type="sapo"``): a soft gate, gradient weight 4 sigma (1 - sigma) r A, 1 at r = 1.
    * ``kl_cov``:    -r A, plus ``kl_cov_coef`` * |log_probs - old_log_probs| on the
      ``kl_cov_ratio`` fraction of real tokens with the largest covariance
      (log pi - mean) (A - mean) (``kl_cov_tokens``; Cui et al. 2025, arXiv 2505.22617,
      KL-Cov; verl's ``loss_mode="kl_cov"``). Token level only; reads ``mask``.

    ``importance_sampling_level``: ``"token"`` (r_t = exp(log_probs - old_log_probs) per
    token, ``compute_ratio``) or ``"sequence"`` (GSPO: one ratio per response,
    s_i = exp(``sequence_log_ratio``), the mean log-ratio over the response's real tokens,
    broadcast over pos; arXiv 2507.18071 eq. 5-7). ``mask`` float/bool[batch, trial, pos]
    says which slots are real (None: all); the sequence level and ``kl_cov`` read it. Aggregate
    the result with ``masking.aggregate_loss`` (GSPO's eq. 5 is ``sequence_mean``).

    All modes have the same gradient as ``naive`` when old_log_probs equal log_probs
    (detached). ``epsilon`` any positive finite number (>= 1: the lower edge never binds).
    ``return_clip_mask=True`` (token level, naive / unclipped / clipped only) also
    returns ``clip_mask(...)``.
    """
    _check_inputs(log_probs, deltas, mode, old_log_probs, epsilon, check_frozen, epsilon_high)
    bool_mask = _check_mask(mask, log_probs, importance_sampling_level)
    if mode == "dual_clip":
        _check_number(dual_clip_c, "dual_clip_c", low=1.0)
    if mode == "sapo":
        _check_number(sapo_temperature_pos, "sapo_temperature_pos")
        _check_number(sapo_temperature_neg, "sapo_temperature_neg")
    if mode == "kl_cov":
        check_kl_cov(kl_cov_ratio, kl_cov_coef, importance_sampling_level)
    if return_clip_mask and (
        mode not in ("naive", "unclipped", "clipped") or importance_sampling_level != "token"
    ):
        raise ValueError(
            f"return_clip_mask supports token-level naive / unclipped / clipped only, got mode "
            f"{mode!r} with importance_sampling_level {importance_sampling_level!r}"
        )
    delta = _per_token(deltas)  # [batch, trial, 1] broadcasts over pos, or per token
    upper = epsilon if epsilon_high is None else epsilon_high
    if mode == "naive":
        loss = -log_probs * delta
    else:
        if importance_sampling_level == "token":
            ratio = compute_ratio(log_probs, old_log_probs)
        else:  # one ratio per response, [batch, trial, 1]
            log_s = sequence_log_ratio(log_probs, old_log_probs, bool_mask)
            ratio = torch.exp(log_s.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO))
        if mode == "unclipped":
            loss = -ratio * delta
        elif mode in ("clipped", "dual_clip"):
            clipped_ratio = ratio.clamp(1 - epsilon, 1 + upper)
            objective = torch.minimum(ratio * delta, clipped_ratio * delta)
            if mode == "dual_clip":
                bounded = torch.maximum(objective, dual_clip_c * delta)
                objective = torch.where(delta < 0, bounded, objective)
            loss = -objective
        elif mode == "cispo":
            weight = ratio.clamp(1 - epsilon, 1 + upper).detach()
            loss = -weight * delta * log_probs
        elif mode == "kl_cov":
            chosen = kl_cov_tokens(log_probs, deltas, kl_cov_ratio, bool_mask)
            penalty = kl_cov_coef * (log_probs - old_log_probs).abs()
            loss = -ratio * delta + torch.where(chosen, penalty, torch.zeros_like(penalty))
        else:  # sapo
            tau = torch.where(
                delta > 0,
                torch.full_like(delta, float(sapo_temperature_pos)),
                torch.full_like(delta, float(sapo_temperature_neg)),
            )
            loss = -torch.sigmoid(tau * (ratio - 1)) * (4 / tau) * delta
        loss = loss.expand(log_probs.shape)
    if not return_clip_mask:
        return loss
    if mode != "clipped":
        return loss, torch.zeros(log_probs.shape, dtype=torch.int8)
    return loss, clip_mask(log_probs, old_log_probs, deltas, epsilon, epsilon_high)


def compute_loss(
    log_probs: torch.Tensor,
    deltas: torch.Tensor,
    mode: str,
    old_log_probs: torch.Tensor | None = None,
    epsilon: float = 0.2,
    check_frozen: bool = True,
    epsilon_high: float | None = None,
    **objective_options,
) -> torch.Tensor:
    """Scalar loss: the mean of ``compute_per_token_loss`` over batch, trial and pos.

    ``epsilon`` defaults to 0.2 (the lecture hard-coded 0.01); ``epsilon_high`` is the
    optional separate upper clip edge (clip-higher). ``objective_options`` are passed on
    (``importance_sampling_level``, ``dual_clip_c``, the SAPO temperatures). For
    variable-length responses use ``compute_per_token_loss`` with
    ``masking.aggregate_loss`` instead of this mean.
    """
    if "mask" in objective_options:
        raise ValueError(
            "compute_loss takes the plain mean over every slot; with a mask use "
            "compute_per_token_loss(..., mask=mask) and masking.aggregate_loss"
        )
    return compute_per_token_loss(
        log_probs,
        deltas,
        mode,
        old_log_probs,
        epsilon,
        check_frozen,
        epsilon_high,
        **objective_options,
    ).mean()


def clip_mask(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    deltas: torch.Tensor,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
) -> torch.Tensor:
    """Which tokens the clipped loss cuts off: int8[batch, trial, pos].

    +1 (clipped high): delta > 0 and ratio > 1 + epsilon_high (default epsilon);
    -1 (clipped low): delta < 0 and ratio < 1 - epsilon; 0 otherwise. Exactly the tokens
    where the clipped loss has zero gradient (TRL logs their means as
    ``clip_ratio/high_mean`` and ``clip_ratio/low_mean``).
    """
    _check_deltas(deltas, log_probs.shape)
    upper = epsilon if epsilon_high is None else epsilon_high
    with torch.no_grad():
        ratio = compute_ratio(log_probs, old_log_probs)
        delta = _per_token(deltas).expand_as(ratio)
        high = (delta > 0) & (ratio > 1 + upper)
        low = (delta < 0) & (ratio < 1 - epsilon)
        return high.to(torch.int8) - low.to(torch.int8)


def clip_fraction(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    deltas: torch.Tensor,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    mask: torch.Tensor | None = None,
) -> float:
    """Fraction of tokens whose clipped term is active (gradient cut off), in [0, 1].

    A token is clipped when delta > 0 and ratio > 1 + epsilon_high (default epsilon),
    or delta < 0 and ratio < 1 - epsilon (see ``clip_mask``): exactly the tokens where
    ``clipped`` has zero gradient. A ratio outside the range with the other sign of
    delta is *not* counted (its gradient is kept). ``mask`` (float[batch, trial, pos],
    optional) restricts the count to real response tokens.
    """
    with torch.no_grad():
        clipped = clip_mask(log_probs, old_log_probs, deltas, epsilon, epsilon_high) != 0
        if mask is None:
            return clipped.float().mean().item()
        check_same_shape(log_probs, mask, "log_probs", "mask")
        selected = mask != 0
        if not selected.any():
            raise ValueError("clip_fraction: the mask selects no tokens")
        return clipped[selected].float().mean().item()
