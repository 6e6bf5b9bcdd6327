"""The loop's extension points, side by side: one explicit dict per axis.

``run_policy_gradient`` looks every variant up here, by the ``TrainConfig`` field named in
brackets; nothing registers itself by import side effect, so this file is the full list.

* ``TASKS`` (``task``) and ``MODELS`` (``model``): ``fn(config) -> Task`` / ``-> Policy``.
* ``ROLLOUT_SOURCES`` (``rollout_source``): who samples, and whose log-probs are "old".
* ``BATCH_FILTERS`` (``batch_filter``): which sampled groups the optimizer sees.
* ``ADVANTAGE_ESTIMATORS`` (``advantage_estimator``): rollout -> deltas.
* ``POLICY_OBJECTIVES`` (``policy_objective``): log-probs -> (per-token loss, metrics).

Adding a variant is one function (or class) plus one entry in its dict. The math these
entries call lives in the leaf modules (``advantages``, ``losses``, ``kl``, ``masking``,
``gae``), which import nothing from here. The README's registry table lists the entries.

Not imported by a notebook: the loop reads it (notebook 07); notebooks 10 and 11 name its entries.
"""

from __future__ import annotations

import torch

from .advantages import compute_deltas
from .autoregressive import AutoregressiveSortPolicy
from .covariance import clip_cov_tokens
from .dedup_task import SortDedupTask
from .losses import clip_mask, loss_options, per_token_loss_and_metrics
from .masking import high_entropy_mask
from .models import LectureModel, SortTransformer
from .offpolicy import StaleSource
from .rollout import (
    Rollout,
    dapo_filter,
    dynamic_sampling,
    keep_all_groups,
    overlong_filtering,
    overlong_shaping,
)
from .sort_task import SortTask, lecture_prompts
from .tool_task import ToolCompareTask, ToolUsePolicy
from .value import GAEEstimator

# --------------------------------------------------------------------------------------
# Tasks and models (TrainConfig.task, TrainConfig.model)
# --------------------------------------------------------------------------------------


def make_sort_task(config) -> SortTask:
    """The sort task; the lecture's 3 fixed prompts when ``prompt_source`` is 'lecture'."""
    fixed = lecture_prompts() if config.prompt_source == "lecture" else None
    return SortTask(config.prompt_length, config.vocab_size, config.reward_fn, fixed)


def make_sort_dedup_task(config) -> SortDedupTask:
    """Sort, drop repeats, end with EOS: the variable-length task (notebook 08)."""
    return SortDedupTask(config.prompt_length, config.vocab_size, config.reward_fn)


def make_tool_compare_task(config) -> ToolCompareTask:
    """Compare two numbers with a tool call: the multi-turn task (notebook 15)."""
    return ToolCompareTask(config.vocab_size, config.prompt_length)


#: name -> ``fn(config) -> Task`` (``TrainConfig.task``).
TASKS: dict[str, object] = {
    "sort": make_sort_task,
    "sort_dedup": make_sort_dedup_task,
    "tool_compare": make_tool_compare_task,
}


def make_lecture_model(config) -> LectureModel:
    """The lecture's toy policy: one independent softmax per response slot."""
    return LectureModel(
        config.vocab_size,
        config.embedding_dim,
        config.prompt_length,
        config.prompt_length,
        seed=config.seed,
    )


def make_transformer_model(config) -> SortTransformer:
    """A small transformer that reads the prompt and outputs every slot at once."""
    return SortTransformer(
        config.vocab_size,
        config.prompt_length,
        d_model=config.embedding_dim,
        num_layers=config.num_layers,
        num_heads=config.num_heads,
        seed=config.seed,
    )


def make_autoregressive_model(config):
    """The token-by-token policy; on 'tool_compare' it plays tool episodes (``ToolUsePolicy``)."""
    if config.task == "tool_compare":
        return ToolUsePolicy(
            config.vocab_size,
            d_model=config.embedding_dim,
            num_layers=config.num_layers,
            num_heads=config.num_heads,
            seed=config.seed,
            mask_tool_tokens=config.mask_tool_tokens,
        )
    return AutoregressiveSortPolicy(
        config.vocab_size,
        config.prompt_length,
        config.response_length,
        d_model=config.embedding_dim,
        num_layers=config.num_layers,
        num_heads=config.num_heads,
        seed=config.seed,
    )


#: name -> ``fn(config) -> Policy``, initialised with ``config.seed`` (``TrainConfig.model``).
MODELS: dict[str, object] = {
    "lecture": make_lecture_model,
    "transformer": make_transformer_model,
    "autoregressive": make_autoregressive_model,
}

# --------------------------------------------------------------------------------------
# Rollout sources (TrainConfig.rollout_source)
# --------------------------------------------------------------------------------------


class OnPolicySource:
    """The trained policy samples; its frozen log-probs at sampling time are the old ones."""

    def __init__(self, policy, config):
        self.policy = policy

    def sample(self, prompts, num_samples, generator):
        return self.policy.sample(prompts, num_samples, generator)

    def old_log_probs(self, rollout: Rollout) -> torch.Tensor:
        return self.policy.log_probs(rollout.prompts, rollout.responses)

    def after_optimizer_step(self) -> None:
        pass


#: name -> rollout source class (``TrainConfig.rollout_source``).
ROLLOUT_SOURCES: dict[str, type] = {"on_policy": OnPolicySource, "stale": StaleSource}

# --------------------------------------------------------------------------------------
# Batch filters (TrainConfig.batch_filter); the filter functions live in ``rollout``
# --------------------------------------------------------------------------------------

#: name -> batch filter ``fn(rollout, config) -> Rollout`` (``TrainConfig.batch_filter``).
BATCH_FILTERS: dict[str, object] = {
    "none": keep_all_groups,
    "dynamic_sampling": dynamic_sampling,
    "overlong_shaping": overlong_shaping,
    "overlong_filtering": overlong_filtering,
    "dapo": dapo_filter,
}

# --------------------------------------------------------------------------------------
# Advantage estimators (TrainConfig.advantage_estimator)
# --------------------------------------------------------------------------------------


def group_baseline_deltas(rollout, config) -> torch.Tensor:
    """Deltas from the group of G responses per prompt: ``compute_deltas`` by deltas_mode.

    rollout.rewards float[batch, trial] -> float[batch, trial]. No value model: the
    baseline is built from the other samples of the same prompt (GRPO, RLOO, ...).
    ``reinforce_pp_baseline`` whitens over the rollout's tokens (``rollout.mask``).
    """
    mask = rollout.mask if config.deltas_mode == "reinforce_pp_baseline" else None
    return compute_deltas(rollout.rewards, config.deltas_mode, mask=mask)


class _StatelessEstimator:
    """Wraps a plain estimator function in the estimator-object interface."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, rollout, config) -> torch.Tensor:
        return self.fn(rollout, config)

    def after_epoch(self, rollout) -> None:
        """Nothing to train: a group baseline has no state."""


def build_estimator(name: str, policy, config):
    """The run's estimator object: ``estimator(rollout, config) -> deltas`` + ``after_epoch``.

    A registry entry is either a function ``fn(rollout, config) -> deltas`` (stateless,
    like the group baselines) or a class built once per run as ``Cls(policy, config)``
    whose objects are called the same way and also have ``after_epoch(rollout)``, run
    after the epoch's policy steps (``value.GAEEstimator`` trains its critic there).
    Deltas are float[batch, trial] (one per response) or float[batch, trial, pos].
    """
    entry = ADVANTAGE_ESTIMATORS[name]
    return entry(policy, config) if isinstance(entry, type) else _StatelessEstimator(entry)


#: name -> estimator function ``fn(rollout, config) -> deltas`` or estimator class
#: ``Cls(policy, config)`` (``TrainConfig.advantage_estimator``; see ``build_estimator``).
ADVANTAGE_ESTIMATORS: dict[str, object] = {"group": group_baseline_deltas, "gae": GAEEstimator}

# --------------------------------------------------------------------------------------
# Policy objectives (TrainConfig.policy_objective)
# --------------------------------------------------------------------------------------


def apply_token_remedies(per_token_loss, log_probs, rollout, config) -> torch.Tensor:
    """The entropy remedies that drop tokens from the policy loss, default off.

    * Clip-Cov (``config.clip_cov_ratio`` > 0; Cui et al. 2025, arXiv 2505.22617): the
      per-token loss of ``covariance.clip_cov_tokens`` is multiplied by 0 (value and
      gradient), as verl's ``compute_policy_loss_clip_cov``. "Already clipped" means the
      clipped PPO term is active (``clip_mask`` != 0). The random pick is seeded from
      ``config.seed`` and the batch's tokens, so a run is reproducible.
    * High-entropy tokens only (``config.top_entropy_quantile`` < 1; Wang et al. 2025,
      arXiv 2506.01939; TRL's ``top_entropy_quantile``): the loss of every real token
      outside ``masking.high_entropy_mask(rollout.token_entropy, mask, q)`` is multiplied
      by 0 (TRL's ``per_token_loss * entropy_mask``; the aggregation still divides by all
      real tokens). ``rollout.token_entropy`` is the sampling policy's per-token entropy,
      which the loop stores once per batch (with one optimizer step per batch it is the
      step's own entropy, as in TRL).

    per_token_loss, log_probs float[batch, trial, pos] -> float[batch, trial, pos].
    """
    ratio = getattr(config, "clip_cov_ratio", 0.0)
    if ratio > 0:
        clipped = clip_mask(
            log_probs.detach(), rollout.old_log_probs, rollout.deltas, config.epsilon,
            config.epsilon_high,
        ) != 0  # fmt: skip
        seed = config.seed * 1_000_003 + int(rollout.responses.sum()) + rollout.responses.numel()
        chosen = clip_cov_tokens(
            log_probs,
            rollout.deltas,
            clipped,
            ratio,
            config.clip_cov_lb,
            config.clip_cov_ub,
            rollout.mask,
            torch.Generator().manual_seed(seed),
        )
        per_token_loss = torch.where(chosen, torch.zeros_like(per_token_loss), per_token_loss)
    quantile = getattr(config, "top_entropy_quantile", 1.0)
    if quantile < 1:
        keep = high_entropy_mask(rollout.token_entropy, rollout.mask, quantile)
        per_token_loss = per_token_loss * keep.to(per_token_loss.dtype)
    return per_token_loss


def _objective(log_probs: torch.Tensor, rollout, config, level: str) -> tuple[torch.Tensor, dict]:
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
        loss_options(config, level),
        check_frozen=config.detach_old_log_probs,
        mask=rollout.mask,
    )
    return apply_token_remedies(loss, log_probs, rollout, config), metrics


def token_level_objective(log_probs: torch.Tensor, rollout, config) -> tuple[torch.Tensor, dict]:
    """(per-token loss float[batch, trial, pos], the loss mode's metrics), per-token ratios.

    ``config.loss_mode`` picks the loss (``losses.LOSS_FUNCTIONS``, through
    ``per_token_loss_and_metrics``); its metrics (``clip_fraction`` for the modes that clip,
    ``weight_clip_fraction`` for CISPO; ``history.METRICS``) are measured over
    ``rollout.mask``'s real tokens. The ratio's reference is ``rollout.old_log_probs``.
    With ``config.detach_old_log_probs=False`` it is instead the current log-probs, still
    attached to the graph: the freeze pitfall, where the ratio is exactly 1 with zero
    gradient. (A second forward pass with gradients would give the same values and cancel
    only up to float rounding, ~1e-9, which Adam would amplify into noise.)
    """
    return _objective(log_probs, rollout, config, "token")


def sequence_level_objective(log_probs: torch.Tensor, rollout, config) -> tuple[torch.Tensor, dict]:
    """GSPO: the same losses with one ratio per response, s_i (arXiv 2507.18071 eq. 5-7).

    s_i = exp(mean over response i's real tokens (``rollout.mask``) of log pi - log pi_old),
    clipped per sequence; returns (float[batch, trial, pos] (constant over a response's
    tokens for the ratio losses), metrics) as ``token_level_objective``. GSPO's paper clips
    at epsilon 3e-4, epsilon_high 4e-4 and averages per sequence
    (``loss_aggregation="sequence_mean"``).
    """
    return _objective(log_probs, rollout, config, "sequence")


#: name -> objective ``fn(log_probs, rollout, config) -> (per-token loss, metrics)``
#: (``TrainConfig.policy_objective``); metrics: {name: float}, recorded in the history.
POLICY_OBJECTIVES: dict[str, object] = {
    "token": token_level_objective,
    "sequence": sequence_level_objective,
}
