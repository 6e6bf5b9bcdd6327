"""The policy objective as one concept: the loop's deltas and per-token loss, in one place.

"Where is GRPO's loss?" The math is in the leaf modules, and this module is the glue that
reads a ``TrainConfig`` and a ``Rollout``:

1. deltas (= advantages; ``advantages.DELTA_FUNCTIONS``, one function per ``deltas_mode``):
   ``group_baseline_deltas``, the ``registry.ADVANTAGE_ESTIMATORS['group']`` entry (PPO's
   critic, the 'gae' entry, lives in ``value``);
2. per-token loss (``losses.LOSS_FUNCTIONS``, one function per ``loss_mode``): ``surrogate_loss``,
   the loop's one call, picks the old log-probs (rollout's, none for REINFORCE, or the freeze
   pitfall on purpose); the ratio's level (``importance_sampling_level``: 'token', or GSPO's
   'sequence') is a loss option like epsilon, read once by ``losses.loss_options``;
3. the token remedies (Clip-Cov, the high-entropy-token mask): ``apply_token_remedies``;
4. then the loop (``training``): off-policy weights (``Rollout.weighted``), the aggregation
   (``masking.aggregate_loss`` by ``loss_aggregation``), the KL and entropy terms.

``recipes.RECIPES`` says which fields make GRPO, DAPO, GSPO, ...

Why here and not in ``registry``: ``registry`` is the list of names the config may use (tables
and the factories they name); what a name *does* to the loss lives with the rest of the
objective. Why not in ``advantages`` or ``losses``: those take tensors only (the math is a leaf
layer, copyable with ``_validate`` alone); this module reads configs and rollouts.

Not imported by a notebook: the loop calls ``surrogate_loss`` (notebook 07; the deltas through
``registry``); notebook 11 teaches the objectives it dispatches to.
"""

from __future__ import annotations

import torch

from .advantages import compute_deltas
from .covariance import clip_cov_tokens
from .losses import clip_mask, loss_options, per_token_loss_and_metrics
from .masking import high_entropy_mask

# --------------------------------------------------------------------------------------
# Deltas (advantage_estimator 'group')
# --------------------------------------------------------------------------------------


def group_baseline_deltas(rollout, config) -> torch.Tensor:
    """Deltas from the group of G responses per prompt: ``compute_deltas`` by deltas_mode.

    rollout.rewards float[batch, trial] -> float[batch, trial]. No value model: the
    baseline is built from the other samples of the same prompt (GRPO, RLOO, ...).
    ``reinforce_pp_baseline`` whitens over the rollout's tokens (``rollout.mask``).
    """
    mask = rollout.mask if config.deltas_mode == "reinforce_pp_baseline" else None
    return compute_deltas(rollout.rewards, config.deltas_mode, mask=mask)


# --------------------------------------------------------------------------------------
# The per-token loss (loss_mode; the ratio per 'token' or per 'sequence')
# --------------------------------------------------------------------------------------


def apply_token_remedies(per_token_loss, log_probs, rollout, config) -> torch.Tensor:
    """The entropy remedies that drop tokens from the policy loss, default off.

    * Clip-Cov (``config.clip_cov_ratio`` > 0; Cui et al. 2025, arXiv 2505.22617): the
      per-token loss of ``covariance.clip_cov_tokens`` is multiplied by 0 (value and
      gradient), as verl's ``compute_policy_loss_clip_cov``. "Already clipped" means the
      clipped PPO term is active (``clip_mask`` != 0, on per-token ratios: Clip-Cov is a
      token-level method, and ``TrainConfig.validate`` refuses it at GSPO's sequence level,
      where the clip acts on s_i instead). The random pick is seeded from
      ``config.seed`` and the batch's tokens, so a run is reproducible. (KL-Cov, the same
      paper's other remedy, is a loss mode: ``losses.kl_cov_loss``.)
    * High-entropy tokens only (``config.top_entropy_quantile`` < 1; Wang et al. 2025,
      arXiv 2506.01939; TRL's ``top_entropy_quantile``): the loss of every real token
      outside ``masking.high_entropy_mask(rollout.token_entropy, mask, q)`` is multiplied
      by 0 (TRL's ``per_token_loss * entropy_mask``; the aggregation still divides by all
      real tokens). ``rollout.token_entropy`` is the sampling policy's per-token entropy,
      which the loop stores once per batch (with one optimizer step per batch it is the
      step's own entropy, as in TRL).

    per_token_loss, log_probs float[batch, trial, pos] -> float[batch, trial, pos].
    """
    if config.clip_cov_ratio > 0:
        clipped = clip_mask(
            log_probs.detach(), rollout.old_log_probs, rollout.deltas, config.epsilon,
            config.epsilon_high,
        ) != 0  # fmt: skip
        seed = config.seed * 1_000_003 + int(rollout.responses.sum()) + rollout.responses.numel()
        chosen = clip_cov_tokens(
            log_probs,
            rollout.deltas,
            clipped,
            config.clip_cov_ratio,
            config.clip_cov_lb,
            config.clip_cov_ub,
            rollout.mask,
            torch.Generator().manual_seed(seed),
        )
        per_token_loss = torch.where(chosen, torch.zeros_like(per_token_loss), per_token_loss)
    if config.top_entropy_quantile < 1:
        keep = high_entropy_mask(rollout.token_entropy, rollout.mask, config.top_entropy_quantile)
        per_token_loss = per_token_loss * keep.to(per_token_loss.dtype)
    return per_token_loss


def surrogate_loss(log_probs: torch.Tensor, rollout, config) -> tuple[torch.Tensor, dict]:
    """(per-token surrogate loss float[batch, trial, pos], the loss mode's metrics).

    The surrogate loss (PPO's L^CLIP, arXiv 1707.06347; REINFORCE's -log pi A for 'naive')
    is the per-token function whose gradient is the policy-gradient estimate:
    ``config.loss_mode`` picks it (``losses.LOSS_FUNCTIONS``, through
    ``per_token_loss_and_metrics``), ``config``'s loss fields its options
    (``losses.loss_options``), ``importance_sampling_level`` among them: the ratio per token
    (r_t = pi / pi_old: PPO, GRPO, DAPO) or per response (GSPO, arXiv 2507.18071 eq. 5-7:
    s_i = exp(mean over response i's real tokens of log pi - log pi_old), clipped per
    sequence, so the loss is constant over a response's tokens); then
    ``apply_token_remedies``. The metrics (``clip_fraction`` for the modes that clip,
    ``weight_clip_fraction`` for CISPO; ``history.METRICS``) are measured over
    ``rollout.mask``'s real tokens.

    The ratio's reference is ``rollout.old_log_probs`` (none for 'naive', which reads no
    ratio). With ``config.detach_old_log_probs=False`` it is instead the current log-probs,
    still attached to the graph: the freeze pitfall, where the ratio is exactly 1 with zero
    gradient. (A second forward pass with gradients would give the same values and cancel
    only up to float rounding, ~1e-9, which Adam would amplify into noise.)
    """
    if config.loss_mode == "naive":
        old = None
    elif config.detach_old_log_probs:
        old = rollout.old_log_probs
    else:
        old = log_probs  # the freeze pitfall, on purpose
    loss, metrics = per_token_loss_and_metrics(
        log_probs,
        rollout.deltas,
        config.loss_mode,
        old,
        loss_options(config),
        check_frozen=config.detach_old_log_probs,
        mask=rollout.mask,
    )
    return apply_token_remedies(loss, log_probs, rollout, config), metrics
