"""The loop's extension points, side by side: one explicit dict per axis.

``run_policy_gradient`` looks every variant up here, by the ``TrainConfig`` field named in
brackets; nothing registers itself by import side effect, so this file is the full list.

* ``TASKS`` (``task``) and ``MODELS`` (``model``): ``fn(config) -> Task`` / ``-> Policy``.
* ``ROLLOUT_SOURCES`` (``rollout_source``): who samples, and whose log-probs are "old".
* ``BATCH_FILTERS`` (``batch_filter``): which sampled groups the optimizer sees.
* ``ADVANTAGE_ESTIMATORS`` (``advantage_estimator``): rollout -> deltas (= advantages).

The policy objective is not a table: ``objective.surrogate_loss`` is the loop's one call, and
the ratio's level (``importance_sampling_level``, 'token' or GSPO's 'sequence') is a loss
option like epsilon (``losses.IMPORTANCE_SAMPLING_LEVELS``, read once by ``loss_options``).

Adding a variant is one function (or class) plus one entry in its dict. This file holds the
tables and the small factories they name (a task or model built from the config;
``build_estimator``, which turns an ``ADVANTAGE_ESTIMATORS`` entry into the run's estimator
object, sits beside its table because it reads it). What the entries do lives with their
concept: the rollout sources and batch filters in ``rollout`` (``offpolicy.StaleSource``), the
group deltas in ``objective`` (beside the loss's glue: old log-probs, the token remedies),
PPO's critic in ``value``; the math they call in the leaf modules
(``advantages``, ``losses``, ``kl``, ``masking``, ``gae``), which import nothing from here.
The README's registry table lists the entries.

Not imported by a notebook: the loop reads it (notebook 07); notebooks 10 and 11 name its entries.
"""

from __future__ import annotations

import torch

from .autoregressive import AutoregressiveSortPolicy, autoregressive_arguments
from .dedup_task import SortDedupTask
from .models import LectureModel, SortTransformer
from .objective import group_baseline_deltas
from .offpolicy import StaleSource
from .rollout import (
    OnPolicySource,
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
    return AutoregressiveSortPolicy(**autoregressive_arguments(config))


#: name -> ``fn(config) -> Policy``, initialised with ``config.seed`` (``TrainConfig.model``).
MODELS: dict[str, object] = {
    "lecture": make_lecture_model,
    "transformer": make_transformer_model,
    "autoregressive": make_autoregressive_model,
}

# --------------------------------------------------------------------------------------
# Rollout sources (TrainConfig.rollout_source); the classes live in ``rollout``, ``offpolicy``
# --------------------------------------------------------------------------------------


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
# Advantage estimators (TrainConfig.advantage_estimator); 'group': ``objective``, 'gae': ``value``
# --------------------------------------------------------------------------------------


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
