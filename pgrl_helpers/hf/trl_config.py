"""Our ``TrainConfig`` as ``trl.GRPOConfig`` arguments: the mapping and where it must refuse.

``grpo_config_kwargs(config)`` returns the GRPOConfig keyword arguments that make
``trl.GRPOTrainer`` minimise the same loss as ``training.run_policy_gradient`` for
``config``, and raises ValueError, naming the setting and why, for anything it cannot
reproduce. ``mapping_table`` lists the rows for a reader. Needs nothing but the core
package (TRL is not imported); ``pgrl_helpers.hf.trl_bridge`` re-exports everything here.

Checked against TRL 1.16.0 (``trl/trainer/grpo_trainer.py`` and ``grpo_config.py``):

* advantages: ``rewards - group mean``, divided by ``std + 1e-4`` when
  ``scale_rewards="group"`` (sample std of the group, Bessel-corrected like ``torch.std``),
  by the std of the whole batch when ``"batch"``, not divided when ``"none"``;
* per-token loss of ``loss_type`` grpo/bnpo/dr_grpo/dapo:
  ``-min(ratio * A, clip(ratio, 1 - epsilon, 1 + epsilon_high) * A)`` with
  ``ratio = exp(logp - old_logp)``, plus ``beta * k3`` where
  ``k3 = exp(ref - logp) - (ref - logp) - 1``: an estimate of KL(policy || ref) from samples
  of the policy, the same estimator and direction as ``kl.kl_k3`` (multiplied by the ratio
  when ``use_bias_correction_kl=True``, the 1.16 default);
* aggregation: ``grpo`` mean per sequence then over sequences, ``bnpo`` mean over the
  tokens of the local batch, ``dapo`` mean over the tokens of the global batch,
  ``dr_grpo`` sum / (sequences x max_completion_length) (masking.py's three aggregations);
* entropy bonus: ``loss -= entropy_coef * H`` with H the mean entropy over the real
  completion tokens, whatever ``loss_type`` (``GRPOConfig.entropy_coef``).

Taught in notebook 09; also used in notebook 11.
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

from .._validate import check_choice, check_number
from ..advantages import DELTA_MODES
from ..kl import KL_ESTIMATORS
from ..losses import LOSS_MODES

#: TRL ``GRPOConfig.scale_rewards`` -> our delta mode. TRL adds 1e-4 to the std where we
#: floor it at ``std_floor`` and add ``eps``: the two agree wherever the std is >> 1e-3.
TRL_SCALE_REWARDS: dict[str, str] = {
    "group": "normalized_rewards",
    "batch": "batch_normalized_rewards",
    "none": "centered_rewards",
}

#: Our delta modes that GRPOTrainer reproduces, and the ``scale_rewards`` value that does it.
DELTA_MODE_TO_SCALE_REWARDS: dict[str, str] = {
    "centered_rewards": "none",
    "normalized_rewards": "group",
    "batch_normalized_rewards": "batch",
}

#: Our delta modes with no GRPOTrainer equivalent, and why.
UNSUPPORTED_DELTA_MODES: dict[str, str] = {
    "rewards": (
        "GRPOTrainer always subtracts the group mean reward (a baseline); raw rewards as "
        "deltas have no scale_rewards setting"
    ),
    "max_rewards": (
        "GRPOTrainer has no winner-takes-all advantage; its advantages are always "
        "rewards minus the group mean (optionally divided by a std)"
    ),
    "loo_rewards": (
        "the leave-one-out baseline is TRL's RLOOTrainer, not GRPOTrainer (scale_rewards='none' "
        "is the nearest and differs by the factor G / (G - 1))"
    ),
    "reinforce_pp_baseline": (
        "GRPOTrainer has no REINFORCE++ normalisation (group-centred rewards divided by the "
        "batch std of the centred rewards); scale_rewards='batch' divides by the std of the raw "
        "rewards instead"
    ),
}

#: TRL's ``scale_rewards`` values with no delta mode of ours.
TRL_ONLY_SCALE_REWARDS: dict[str, str] = {}

#: Our ``loss_aggregation`` -> TRL's ``loss_type`` with the same aggregation (masking.py).
AGGREGATION_TO_LOSS_TYPE: dict[str, str] = {
    "token_mean": "dapo",  # sum over real tokens / real tokens of the (global) batch
    "sequence_mean": "grpo",  # mean over each completion's tokens, then over completions
    "constant_normalizer": "dr_grpo",  # token sum / (completions x max_completion_length)
}
#: The default aggregation's loss type (our lecture loss: the mean over every token).
DEFAULT_LOSS_TYPE = AGGREGATION_TO_LOSS_TYPE["token_mean"]
#: loss_type values that equal our aggregation, besides the one above: ``bnpo`` divides by the
#: tokens of the LOCAL batch, which is the token mean on one process with one micro-batch.
EQUIVALENT_LOSS_TYPES: dict[str, tuple[str, ...]] = {
    "token_mean": ("dapo", "bnpo"),
    "sequence_mean": ("grpo",),
    "constant_normalizer": ("dr_grpo",),
}
#: Every loss_type the mapping may produce; for fixed-length responses they all agree.
LOSS_TYPES: tuple[str, ...] = ("dapo", "bnpo", "grpo", "dr_grpo")

#: TrainConfig fields used by ``grpo_config_kwargs`` (the names fixed for the series).
_MAPPED_FIELDS = (
    "deltas_mode",
    "loss_mode",
    "epsilon",
    "kl_coef",
    "entropy_coef",
    "kl_estimator",
    "compute_ref_model_period",
    "num_epochs",
    "num_steps_per_epoch",
    "num_responses",
    "prompt_length",
    "learning_rate",
    "seed",
)

#: TrainConfig fields that ``grpo_config_kwargs`` also reads: optional ones (a dict may leave
#: them out; some may be None) and the two it reads only to refuse a value TRL lacks
#: (``detach_old_log_probs=False``, ``dynamic_sampling_max_draws > 0``).
_ALSO_MAPPED = (
    "epsilon_high",
    "loss_aggregation",
    "importance_sampling_level",
    "top_entropy_quantile",
    "task",
    "model",
    "max_response_length",
    "prompt_source",
    "prompts_per_epoch",
    "detach_old_log_probs",
    "dynamic_sampling_max_draws",
)

#: TrainConfig fields not mapped because TRL takes them elsewhere or they never change the
#: loss: any value is accepted. Every other field must keep ``TrainConfig``'s default (an
#: allow-list: a new field is refused until it is mapped or listed here).
NOT_MAPPED: dict[str, str] = {
    "reward_fn": "TRL's reward_funcs (pass trl_bridge.sort_reward_func)",
    "vocab_size": "the dataset and the tokenizer (make_sort_dataset, build_sort_tokenizer)",
    "embedding_dim": "the model TRL trains (build_tiny_gpt2)",
    "num_layers": "the model TRL trains (build_tiny_gpt2)",
    "num_heads": "the model TRL trains (build_tiny_gpt2)",
    "eval_every": "our loop's held-out evaluation (TRL: eval_dataset, callbacks)",
    "num_eval_prompts": "our loop's held-out evaluation",
    "eval_seed": "our loop's held-out evaluation",
    "target_validation_exact_sort": "our loop's stopping rule (TRL: a callback)",
    "epochs_after_target": "our loop's stopping rule (TRL: a callback)",
    "progress": "runtime only (TRL: disable_tqdm)",
    "num_threads": "runtime only",
    "profile_time": "runtime only",
}

#: Why GRPOTrainer cannot reproduce a non-default value of these unmapped fields.
_WHY_NOT_MAPPED: dict[str, str] = {
    "advantage_estimator": "GRPOTrainer has no critic; GAE needs a value model, as in PPO",
    "batch_filter": "GRPOTrainer never shapes rewards or filters groups as DAPO's batch does",
    "rollout_source": "GRPOTrainer samples with the policy it trains, never a stale one",
    "kl_target": "GRPOTrainer's beta is fixed: no adaptive KL controller",
    "clip_cov_ratio": "GRPOTrainer has no Clip-Cov",
    "kl_in_reward": "GRPOTrainer puts the KL in the loss, never in the reward",
}


def check_every_field_mapped(config: Any) -> None:
    """Raise ValueError naming the first field of ``config`` (a ``TrainConfig`` or a dict of
    its fields) that is not at ``TrainConfig``'s default and that ``grpo_config_kwargs``
    neither maps (``_MAPPED_FIELDS``, ``_ALSO_MAPPED``) nor leaves to TRL's other arguments
    (``NOT_MAPPED``): the TRL run would ignore it and minimise a different loss."""
    from ..config import TrainConfig, unknown_field_message

    defaults = {field.name: field.default for field in fields(TrainConfig)}
    items = config.items() if isinstance(config, dict) else (
        (name, getattr(config, name)) for name in defaults
    )  # fmt: skip
    allowed = set(_MAPPED_FIELDS) | set(_ALSO_MAPPED) | set(NOT_MAPPED)
    for name, value in items:
        if name not in defaults:
            raise ValueError(unknown_field_message(name))
        if name in allowed or value == defaults[name]:
            continue
        why = _WHY_NOT_MAPPED.get(name, "its value changes our loop's loss")
        raise ValueError(
            f"{name}={value!r} has no GRPOConfig equivalent ({why}), so the TRL run would "
            f"minimise a different loss: leave {name} at its default {defaults[name]!r} to "
            "use this bridge"
        )


# --------------------------------------------------------------------------------------
# TrainConfig -> GRPOConfig keyword arguments
# --------------------------------------------------------------------------------------


def _get(config: Any, name: str, default: Any = None) -> Any:
    """A field of ``config``: a plain dict may leave out a field (then ``default``); any other
    config (a ``TrainConfig``) must have it (a missing field raises AttributeError)."""
    if isinstance(config, dict):
        if "policy_objective" in config:
            raise ValueError(
                "policy_objective was renamed importance_sampling_level (TRL's name); "
                "a config dict from before the rename must use the new key"
            )
        return config.get(name, default)
    return getattr(config, name)


def _batch_prompts(config: Any) -> int:
    if not isinstance(config, dict) and hasattr(config, "batch_prompts"):
        return int(config.batch_prompts)
    if _get(config, "prompt_source", "lecture") == "lecture":
        return 3
    value = _get(config, "prompts_per_epoch")
    return 64 if value is None else int(value)


def scale_rewards_for(deltas_mode: str) -> str:
    """TRL's ``scale_rewards`` for one of our delta modes; ValueError when there is none."""
    if deltas_mode in DELTA_MODE_TO_SCALE_REWARDS:
        return DELTA_MODE_TO_SCALE_REWARDS[deltas_mode]
    check_choice(deltas_mode, DELTA_MODES, "deltas_mode")
    raise ValueError(
        f"deltas_mode {deltas_mode!r} has no GRPOTrainer equivalent: "
        f"{UNSUPPORTED_DELTA_MODES[deltas_mode]}. Supported: "
        f"{', '.join(DELTA_MODE_TO_SCALE_REWARDS)}"
    )


def loss_kwargs_for(
    loss_mode: str,
    epsilon: float,
    num_steps_per_epoch: int,
    loss_type: str = DEFAULT_LOSS_TYPE,
    epsilon_high: float | None = None,
) -> dict[str, Any]:
    """``loss_type`` / ``epsilon`` / ``epsilon_high`` for one of our loss modes.

    * ``clipped``: TRL's clip ``clip(ratio, 1 - epsilon, 1 + epsilon_high)``; our
      ``epsilon_high`` (clip-higher, DAPO) maps to TRL's, None meaning ``epsilon`` (symmetric);
    * ``unclipped``: the clip range opened to [0, inf) (epsilon = 1, epsilon_high = inf),
      so ``clip(ratio)`` is ``ratio`` and the loss is exactly ``-ratio * A``;
    * ``naive`` (``-logp * A``) has no TRL form: TRL always uses the ratio. With one step
      per batch (``num_iterations=1``) the ratio is ``exp(logp - logp.detach())`` = 1 and
      the gradient equals naive's, so that case maps to the unclipped form; with more
      steps naive reuses the batch without importance weights, which TRL never does.
    """
    check_choice(loss_mode, LOSS_MODES, "loss_mode")
    if loss_mode == "kl_cov":
        raise ValueError(
            "loss_mode 'kl_cov' (KL-Cov, Cui et al. 2025) has no GRPOConfig equivalent: TRL has "
            "no loss_type that adds |log pi - log pi_old| on the top-covariance tokens (verl "
            "has it as actor.policy_loss.loss_mode='kl_cov'); use 'naive', 'unclipped' or "
            "'clipped' with this bridge"
        )
    if loss_mode not in ("naive", "unclipped", "clipped"):
        raise ValueError(
            f"loss_mode {loss_mode!r} is not mapped to a GRPOConfig here: TRL's 'cispo' and "
            "'sapo' loss types parameterise their clip differently (notebook 11 and "
            "pgrl_helpers.hf.trl_objectives check them against ours directly), and TRL has no "
            "dual-clip; use 'naive', 'unclipped' or 'clipped' with this bridge"
        )
    if loss_mode == "naive" and num_steps_per_epoch != 1:
        raise ValueError(
            "loss_mode 'naive' with num_steps_per_epoch > 1 has no GRPOTrainer equivalent: naive "
            "(-log_probs * delta) reuses a batch without importance weights, while TRL always "
            "weights by the ratio pi / pi_old. Use num_steps_per_epoch=1 (then the gradients "
            f"agree) or loss_mode 'unclipped' / 'clipped'; got {num_steps_per_epoch} steps"
        )
    if loss_mode == "clipped":
        check_number(epsilon, "epsilon", 0, 1, high_inclusive=False, note="the clipped loss")
        check_number(epsilon_high, "epsilon_high", 0, allow_none=True)
        high = epsilon if epsilon_high is None else epsilon_high
        return {"loss_type": loss_type, "epsilon": float(epsilon), "epsilon_high": float(high)}
    return {"loss_type": loss_type, "epsilon": 1.0, "epsilon_high": math.inf}


def loss_type_for(
    loss_aggregation: str, variable_length: bool, loss_type: str | None = None
) -> str:
    """TRL's ``loss_type`` that aggregates per-token losses like our ``loss_aggregation``.

    token_mean -> dapo, sequence_mean -> grpo, constant_normalizer -> dr_grpo (see
    ``AGGREGATION_TO_LOSS_TYPE``; the masking module's formulas are TRL's, read from
    ``GRPOTrainer._compute_loss``). A ``loss_type`` given explicitly is accepted when it
    aggregates the same: one of ``EQUIVALENT_LOSS_TYPES[loss_aggregation]``, or any of
    ``LOSS_TYPES`` when every response has the same length (then all of them are the plain
    token mean); otherwise ValueError.
    """
    check_choice(loss_aggregation, AGGREGATION_TO_LOSS_TYPE, "loss_aggregation")
    if loss_type is None:
        return AGGREGATION_TO_LOSS_TYPE[loss_aggregation]
    same = LOSS_TYPES if not variable_length else EQUIVALENT_LOSS_TYPES[loss_aggregation]
    if loss_type not in same:
        raise ValueError(
            f"loss_type {loss_type!r} does not aggregate like loss_aggregation "
            f"{loss_aggregation!r}"
            + (" for variable-length responses" if variable_length else "")
            + f"; use one of {', '.join(same)} (or leave loss_type None)"
        )
    return loss_type


def kl_kwargs_for(
    kl_coef: float,
    kl_estimator: str,
    max_completion_length: int,
    compute_ref_model_period: int | None,
    num_steps_per_epoch: int,
    loss_type: str = DEFAULT_LOSS_TYPE,
    variable_length: bool = False,
) -> dict[str, Any]:
    """``beta`` and the reference-sync arguments for our KL settings.

    Our loss adds ``kl_coef x`` the KL of each response (k3 summed over its real
    tokens), averaged over responses: kl_coef * sum_it k3_it / N. TRL adds
    ``beta * k3`` to every token's loss and then aggregates by ``loss_type``:

    * fixed length T (every response has max_completion_length = T tokens): every
      loss_type gives beta * sum_it k3_it / (N T), so ``beta = kl_coef * T``;
    * variable length: only ``dr_grpo`` divides by a constant, beta * sum_it k3_it /
      (N * max_completion_length), so ``beta = kl_coef * max_completion_length``;
      ``dapo`` / ``bnpo`` divide by the batch's token count and ``grpo`` by each
      response's own length, which no constant beta reproduces: ValueError.

    TRL only has k3 (in our direction, KL(policy || ref)); ``use_bias_correction_kl`` is
    turned off because ours does not multiply the KL by the ratio. Our reference refresh
    (a copy of the policy every ``compute_ref_model_period`` epochs) is TRL's
    ``sync_ref_model`` with ``ref_model_mixup_alpha=1`` (a full copy) every
    ``period * num_steps_per_epoch`` optimizer steps.
    """
    check_choice(kl_estimator, KL_ESTIMATORS, "kl_estimator")
    check_number(kl_coef, "kl_coef", 0, low_inclusive=True)
    if kl_coef == 0:
        return {"beta": 0.0, "sync_ref_model": False}
    if kl_estimator != "k3":
        raise ValueError(
            f"kl_estimator {kl_estimator!r} has no GRPOTrainer equivalent: TRL's KL term is "
            "always k3 = r - 1 - log r with r = pi_ref / pi (an estimate of KL(policy || ref)); "
            "use kl_estimator='k3'"
        )
    if variable_length and loss_type != "dr_grpo":
        divisor = "each response's length" if loss_type == "grpo" else "the batch's token count"
        raise ValueError(
            f"kl_coef > 0 with variable-length responses and loss_type {loss_type!r} has no "
            "GRPOTrainer equivalent: our KL term is each response's KL summed over its tokens, "
            "averaged over responses, while TRL adds beta * KL to every token and then divides "
            f"by {divisor}, so no constant beta matches when lengths differ. Use loss_aggregation="
            "'constant_normalizer' (TRL's dr_grpo, beta = kl_coef x max_completion_length) "
            "or kl_coef=0"
        )
    kwargs: dict[str, Any] = {
        "beta": float(kl_coef) * max_completion_length,
        "use_bias_correction_kl": False,
        "sync_ref_model": False,
    }
    if compute_ref_model_period:
        kwargs.update(
            sync_ref_model=True,
            ref_model_mixup_alpha=1.0,
            ref_model_sync_steps=int(compute_ref_model_period) * num_steps_per_epoch,
        )
    return kwargs


def _variable_length(config: Any) -> bool:
    """True when responses may have different lengths (the autoregressive sort_dedup task)."""
    return _get(config, "task", "sort") == "sort_dedup" or _get(config, "model") == "autoregressive"


def response_length(config: Any) -> int:
    """Most tokens per response, EOS included: TRL's ``max_completion_length``.

    prompt_length for the fixed-length sort task; for the autoregressive policy its
    ``max_response_length`` (None: prompt_length + 2, as ``TrainConfig.response_length``).
    """
    if not isinstance(config, dict) and hasattr(config, "response_length"):
        return int(config.response_length)
    length = int(_get(config, "prompt_length"))
    if not _variable_length(config):
        return length
    value = _get(config, "max_response_length")
    return length + 2 if value is None else int(value)


def grpo_config_kwargs(config: Any, loss_type: str | None = None, **overrides) -> dict:
    """Keyword arguments for ``trl.GRPOConfig`` that reproduce ``config`` (a ``TrainConfig``).

    ``config`` may also be a plain dict with the same field names. ``loss_type`` is taken
    from ``config.loss_aggregation`` (see ``loss_type_for``); pass one only to choose an
    equivalent (e.g. ``bnpo``). Raises ValueError, naming the setting and why, for anything
    GRPOTrainer cannot reproduce (delta modes rewards / max_rewards / loo_rewards, naive loss
    with several steps per batch, KL estimators other than k3, a KL penalty on
    variable-length responses unless aggregated by a constant, ``detach_old_log_probs=False``,
    a ``max_completion_length`` override that breaks ``dr_grpo``'s constant,
    ``top_entropy_quantile`` < 1 with several steps or an entropy bonus) and for every other
    field not at its default (an allow-list: ``check_every_field_mapped``). ``overrides``
    (e.g. ``output_dir``, ``report_to``) are added last and win.

    Not mapped (TRL takes them elsewhere, ``NOT_MAPPED``): ``reward_fn`` (pass
    ``sort_reward_func``), ``embedding_dim`` ... (TRL needs a causal LM: ``build_tiny_gpt2``),
    ``vocab_size`` (the dataset: ``make_sort_dataset``), the held-out evaluation, the runtime.
    """
    if hasattr(config, "validate"):
        config.validate()  # a TrainConfig checks its own fields first
    if _get(config, "task", "sort") == "tool_compare":
        raise ValueError(
            "task 'tool_compare' has no GRPOConfig equivalent here: the bridge's dataset and "
            "reward are the sort tasks' (TRL's tool calling is its environment API)"
        )
    missing = [name for name in _MAPPED_FIELDS if _get(config, name) is None]
    if missing:
        raise ValueError(f"config lacks the field(s) {', '.join(missing)}")
    if _get(config, "detach_old_log_probs", True) is False:
        raise ValueError(
            "detach_old_log_probs=False (the freeze pitfall) has no GRPOTrainer equivalent: TRL "
            "always computes the old log-probs without gradients"
        )
    if _get(config, "dynamic_sampling_max_draws", 0):
        raise ValueError(
            "dynamic_sampling_max_draws > 0 (DAPO's dynamic sampling that draws more prompts) "
            "has no GRPOConfig equivalent: GRPOTrainer never resamples a batch (verl: "
            "algorithm.filter_groups with max_num_gen_batches)"
        )
    steps = int(_get(config, "num_steps_per_epoch"))
    group = int(_get(config, "num_responses"))
    if group < 2:
        raise ValueError(f"GRPOTrainer needs num_responses (G) >= 2, got {group}")
    entropy_coef = _get(config, "entropy_coef")
    check_number(entropy_coef, "entropy_coef", 0, low_inclusive=True)
    quantile = _get(config, "top_entropy_quantile", 1.0)
    check_number(quantile, "top_entropy_quantile", 0, 1)
    if quantile < 1 and (steps != 1 or entropy_coef != 0):
        raise ValueError(
            f"top_entropy_quantile={quantile} maps to TRL's only with num_steps_per_epoch 1 and "
            "entropy_coef 0: TRL ranks each step's own entropies (ours: the sampling policy's, "
            "once per batch) and restricts its entropy bonus to the kept tokens (ours: every "
            f"real token); got {steps} steps and entropy_coef {entropy_coef}"
        )
    check_every_field_mapped(config)
    variable = _variable_length(config)
    aggregation = _get(config, "loss_aggregation", "token_mean")
    loss_type = loss_type_for(aggregation, variable, loss_type)
    max_length = response_length(config)
    kwargs: dict[str, Any] = {
        "scale_rewards": scale_rewards_for(_get(config, "deltas_mode")),
        **loss_kwargs_for(
            _get(config, "loss_mode"),
            _get(config, "epsilon"),
            steps,
            loss_type,
            _get(config, "epsilon_high"),
        ),
        **kl_kwargs_for(
            _get(config, "kl_coef"),
            _get(config, "kl_estimator"),
            max_length,
            _get(config, "compute_ref_model_period"),
            steps,
            loss_type,
            variable,
        ),
        # TRL 1.16's entropy bonus: loss -= entropy_coef x the mean entropy over the real
        # completion tokens, whatever loss_type, as our loop's; static, on every token
        "entropy_coef": float(entropy_coef),
        "use_adaptive_entropy": False,
        # the high-entropy-token mask (arXiv 2506.01939): TRL's per_token_loss * entropy_mask
        "top_entropy_quantile": float(quantile),
        "num_iterations": steps,
        "num_generations": group,
        # one generation batch = one epoch: all its prompts x G, used for `steps` steps
        "per_device_train_batch_size": _batch_prompts(config) * group,
        "gradient_accumulation_steps": 1,
        "steps_per_generation": 1,
        "max_steps": int(_get(config, "num_epochs")) * steps,
        # most tokens per completion, EOS included; dr_grpo's constant normaliser
        "max_completion_length": max_length,
        # a completion cut at the maximum length still counts, as in our loop
        "mask_truncated_completions": False,
        "learning_rate": float(_get(config, "learning_rate")),
        "seed": int(_get(config, "seed")),
        # our loop: plain Adam (AdamW with no weight decay), constant rate, no grad clipping
        "optim": "adamw_torch",
        "weight_decay": 0.0,
        "lr_scheduler_type": "constant",
        "warmup_steps": 0,
        "max_grad_norm": 0.0,
        # our sampling: plain softmax sampling at temperature 1, fp32, no dropout
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "bf16": False,
        "activation_checkpointing": False,  # TRL turns it on by default
        "disable_dropout": True,
    }
    if _get(config, "importance_sampling_level", "token") == "sequence":
        kwargs["importance_sampling_level"] = "sequence"  # GSPO: TRL's name and values are ours
    kwargs.update(overrides)
    if kwargs["max_completion_length"] != max_length and (
        kwargs["loss_type"] == "dr_grpo" or kwargs["beta"] > 0
    ):
        raise ValueError(
            f"max_completion_length={kwargs['max_completion_length']} overrides the response "
            f"length {max_length}: TRL's dr_grpo divides by max_completion_length and beta was "
            f"scaled by {max_length}, so the loss would no longer be ours"
        )
    return kwargs


def mapping_table(config: Any, loss_type: str | None = None) -> list[tuple[str, str, str]]:
    """Rows (our setting, TRL argument(s), note) for ``config``; raises like ``grpo_config_kwargs``."""
    kw = grpo_config_kwargs(config, loss_type)
    length = kw["max_completion_length"]
    kl_args = f"beta={kw['beta']:g}"
    if kw["sync_ref_model"]:
        kl_args += (
            f", sync_ref_model=True, ref_model_mixup_alpha=1, "
            f"ref_model_sync_steps={kw['ref_model_sync_steps']}"
        )
    epsilon_high = _get(config, "epsilon_high")
    aggregation = _get(config, "loss_aggregation", "token_mean")
    return [
        (
            f"deltas_mode={_get(config, 'deltas_mode')!r}",
            f"scale_rewards={kw['scale_rewards']!r}",
            "advantage = reward - group mean (divided by group std + 1e-4 for 'group')",
        ),
        (
            f"loss_mode={_get(config, 'loss_mode')!r}, epsilon={_get(config, 'epsilon')}, "
            f"epsilon_high={epsilon_high}",
            f"epsilon={kw['epsilon']:g}, epsilon_high={kw['epsilon_high']:g}",
            "clip(ratio, 1 - epsilon, 1 + epsilon_high); epsilon_high None = epsilon",
        ),
        (
            f"loss_aggregation={aggregation!r}",
            f"loss_type={kw['loss_type']!r}",
            {
                "token_mean": "sum over real tokens / real tokens of the global batch",
                "sequence_mean": "mean over each completion's tokens, then over completions",
                "constant_normalizer": "token sum / (completions x max_completion_length)",
            }[aggregation],
        ),
        (
            f"response_length={length} (task={_get(config, 'task', 'sort')!r})",
            f"max_completion_length={length}",
            "most tokens per completion, EOS included",
        ),
        (
            f"kl_coef={_get(config, 'kl_coef')}, kl_estimator={_get(config, 'kl_estimator')!r}",
            kl_args,
            f"k3, KL(policy || ref); beta = kl_coef x {length} (we sum KL over a response)",
        ),
        (
            f"entropy_coef={_get(config, 'entropy_coef')}",
            f"entropy_coef={kw['entropy_coef']:g}",
            "loss -= coef x mean entropy over the real completion tokens",
        ),
        (
            f"num_steps_per_epoch={_get(config, 'num_steps_per_epoch')}",
            f"num_iterations={kw['num_iterations']}",
            "optimizer steps per generated batch",
        ),
        (
            f"num_responses (G)={_get(config, 'num_responses')}",
            f"num_generations={kw['num_generations']}",
            "completions per prompt",
        ),
        (
            f"prompts per epoch={_batch_prompts(config)}",
            f"per_device_train_batch_size={kw['per_device_train_batch_size']}",
            "TRL counts completions: prompts x G",
        ),
        (
            f"num_epochs={_get(config, 'num_epochs')}",
            f"max_steps={kw['max_steps']}",
            "epochs x num_steps_per_epoch optimizer steps",
        ),
    ]
