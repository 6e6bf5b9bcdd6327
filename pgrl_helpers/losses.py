"""Policy-gradient losses: naive (REINFORCE), unclipped ratio, clipped ratio (PPO/GRPO).

Shapes: log_probs and old_log_probs float[batch, trial, pos] (one value per
sampled token), deltas float[batch, trial] (one per response, broadcast over pos).
``compute_per_token_loss`` returns float[batch, trial, pos] so a caller can choose
the reduction; ``compute_loss`` takes the mean over every token, as the lecture does.
"""

from __future__ import annotations

import math

import torch

from ._validate import check_finite, check_mode, check_ndim, check_same_shape

LOSS_MODES: tuple[str, ...] = ("naive", "unclipped", "clipped")

#: log-ratios are clamped to +-MAX_LOG_RATIO before exp so the ratio stays finite.
MAX_LOG_RATIO = 20.0

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


def _check_inputs(log_probs, deltas, mode, old_log_probs, epsilon, check_frozen, epsilon_high=None):
    check_mode(mode, LOSS_MODES, "loss mode")
    check_ndim(log_probs, 3, "log_probs", "batch, trial, pos")
    check_ndim(deltas, 2, "deltas", "batch, trial")
    if deltas.shape != log_probs.shape[:2]:
        raise ValueError(
            f"deltas must be [batch, trial] matching log_probs: deltas {list(deltas.shape)}, "
            f"log_probs {list(log_probs.shape)}"
        )
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
    if mode == "clipped" and (
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


def compute_per_token_loss(
    log_probs: torch.Tensor,
    deltas: torch.Tensor,
    mode: str,
    old_log_probs: torch.Tensor | None = None,
    epsilon: float = 0.2,
    check_frozen: bool = True,
    epsilon_high: float | None = None,
    return_clip_mask: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Per-token loss float[batch, trial, pos]; minimise its mean.

    * ``naive``:     -log_probs * delta
    * ``unclipped``: -ratio * delta
    * ``clipped``:   -min(ratio * delta, clip(ratio, 1 - epsilon, 1 + epsilon_high) * delta)

    with ratio = exp(log_probs - old_log_probs) (see ``compute_ratio``). All three
    have the same gradient when old_log_probs equal log_probs (detached).
    ``epsilon_high`` (clip-higher, DAPO) sets the upper clip edge separately; None
    (the default) means ``epsilon``, the symmetric PPO/GRPO clip. A larger upper edge
    lets unlikely tokens with positive delta grow further per batch (against entropy
    collapse); DAPO uses epsilon 0.2, epsilon_high 0.28.

    Ranges: ``epsilon`` any positive finite number (with epsilon >= 1 the lower edge
    1 - epsilon <= 0 never binds, since a ratio is positive: a way to switch the lower
    clip off); ``epsilon_high`` positive finite or None. Only the clipped mode reads them.
    ``return_clip_mask=True`` also returns ``clip_mask(...)`` (int8[batch, trial, pos]:
    -1 clipped low, +1 clipped high, 0 not clipped; all 0 for naive / unclipped).
    """
    _check_inputs(log_probs, deltas, mode, old_log_probs, epsilon, check_frozen, epsilon_high)
    delta = deltas[:, :, None]  # [batch, trial, 1] broadcasts over pos
    if mode == "naive":
        loss = -log_probs * delta
    else:
        ratio = compute_ratio(log_probs, old_log_probs)
        if mode == "unclipped":
            loss = -ratio * delta
        else:
            upper = epsilon if epsilon_high is None else epsilon_high
            clipped_ratio = ratio.clamp(1 - epsilon, 1 + upper)
            loss = -torch.minimum(ratio * delta, clipped_ratio * delta)
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
) -> torch.Tensor:
    """Scalar loss: the mean of ``compute_per_token_loss`` over batch, trial and pos.

    ``epsilon`` defaults to 0.2 (the lecture hard-coded 0.01); ``epsilon_high`` is the
    optional separate upper clip edge (clip-higher). For variable-length responses use
    ``compute_per_token_loss`` with ``masking.aggregate_loss`` instead of this mean.
    """
    return compute_per_token_loss(
        log_probs, deltas, mode, old_log_probs, epsilon, check_frozen, epsilon_high
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
    check_ndim(deltas, 2, "deltas", "batch, trial")
    upper = epsilon if epsilon_high is None else epsilon_high
    with torch.no_grad():
        ratio = compute_ratio(log_probs, old_log_probs)
        delta = deltas[:, :, None].expand_as(ratio)
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


# --------------------------------------------------------------------------------------
# The loop's policy-objective extension point (TrainConfig.importance_sampling_level)
# --------------------------------------------------------------------------------------


def token_level_objective(log_probs: torch.Tensor, rollout, config) -> torch.Tensor:
    """Per-token loss float[batch, trial, pos] with per-token ratios pi_t / pi_old,t.

    ``config.loss_mode`` picks naive / unclipped / clipped (``compute_per_token_loss``);
    the ratio's reference is ``rollout.old_log_probs``. With
    ``config.detach_old_log_probs=False`` it is instead the current log-probs, still
    attached to the graph: the freeze pitfall, where the ratio is exactly 1 with zero
    gradient. (A second forward pass with gradients would give the same values and
    cancel only up to float rounding, ~1e-9, which Adam would amplify into noise.)
    """
    if config.loss_mode == "naive":
        old = None
    elif config.detach_old_log_probs:
        old = rollout.old_log_probs
    else:
        old = log_probs  # the freeze pitfall, on purpose
    return compute_per_token_loss(
        log_probs,
        rollout.deltas,
        config.loss_mode,
        old_log_probs=old,
        epsilon=config.epsilon,
        check_frozen=config.detach_old_log_probs,
        epsilon_high=config.epsilon_high,
    )


#: name -> objective ``fn(log_probs, rollout, config) -> per-token loss``
#: (``TrainConfig.importance_sampling_level``).
POLICY_OBJECTIVES: dict[str, object] = {"token": token_level_objective}
