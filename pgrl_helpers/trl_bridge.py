"""Bridge to Hugging Face TRL: the sort task and our ``TrainConfig`` as ``trl.GRPOTrainer`` sees them.

Optional: needs the extra ``requirements-scale.txt`` (trl, transformers, tokenizers,
datasets). Nothing here imports those libraries at module import time, so the core
package never requires them; each function imports what it uses.

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

Shapes: prompts int[batch, pos] (our convention), TRL's flat rows are
``batch * G`` completions, prompt ``i`` repeated G times in a row.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .advantages import DELTA_MODES
from .kl import KL_ESTIMATORS
from .losses import LOSS_MODES
from .sort_task import REWARD_FNS

#: Our delta modes that GRPOTrainer reproduces, and the ``scale_rewards`` value that does it.
DELTA_MODE_TO_SCALE_REWARDS: dict[str, str] = {
    "centered_rewards": "none",
    "normalized_rewards": "group",
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
}

#: TRL's ``scale_rewards`` values with no delta mode of ours.
TRL_ONLY_SCALE_REWARDS: dict[str, str] = {
    "batch": "divide by the std of the whole batch instead of each group's (PPO-Lite)",
}

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

#: Special tokens of the word-level sort tokenizer (ids 0, 1, 2, 3 in this order).
PAD_TOKEN, EOS_TOKEN, UNK_TOKEN, SEP_TOKEN = "<pad>", "<eos>", "<unk>", ":"
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, EOS_TOKEN, UNK_TOKEN, SEP_TOKEN)

#: TrainConfig fields used by ``grpo_config_kwargs`` (the names fixed for the series).
_MAPPED_FIELDS = (
    "deltas_mode",
    "loss_mode",
    "epsilon",
    "kl_penalty",
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


# --------------------------------------------------------------------------------------
# TrainConfig -> GRPOConfig keyword arguments
# --------------------------------------------------------------------------------------


def _get(config: Any, name: str, default: Any = None) -> Any:
    if isinstance(config, dict):
        return config.get(name, default)
    return getattr(config, name, default)


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
    if deltas_mode in UNSUPPORTED_DELTA_MODES:
        raise ValueError(
            f"deltas_mode {deltas_mode!r} has no GRPOTrainer equivalent: "
            f"{UNSUPPORTED_DELTA_MODES[deltas_mode]}. Supported: "
            f"{', '.join(DELTA_MODE_TO_SCALE_REWARDS)}"
        )
    raise ValueError(
        f"unknown deltas_mode {deltas_mode!r}; valid values are: {', '.join(DELTA_MODES)}"
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
    if loss_mode not in LOSS_MODES:
        raise ValueError(
            f"unknown loss_mode {loss_mode!r}; valid values are: {', '.join(LOSS_MODES)}"
        )
    if loss_mode == "naive" and num_steps_per_epoch != 1:
        raise ValueError(
            "loss_mode 'naive' with num_steps_per_epoch > 1 has no GRPOTrainer equivalent: naive "
            "(-log_probs * delta) reuses a batch without importance weights, while TRL always "
            "weights by the ratio pi / pi_old. Use num_steps_per_epoch=1 (then the gradients "
            f"agree) or loss_mode 'unclipped' / 'clipped'; got {num_steps_per_epoch} steps"
        )
    if loss_mode == "clipped":
        if not 0 < epsilon < 1:
            raise ValueError(f"epsilon must lie in (0, 1) for the clipped loss, got {epsilon}")
        if epsilon_high is not None and not (
            isinstance(epsilon_high, (int, float)) and 0 < epsilon_high < math.inf
        ):
            raise ValueError(f"epsilon_high must be a positive finite number, got {epsilon_high}")
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
    if loss_aggregation not in AGGREGATION_TO_LOSS_TYPE:
        raise ValueError(
            f"unknown loss_aggregation {loss_aggregation!r}; valid values are: "
            f"{', '.join(AGGREGATION_TO_LOSS_TYPE)}"
        )
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
    kl_penalty: float,
    kl_estimator: str,
    max_completion_length: int,
    compute_ref_model_period: int | None,
    num_steps_per_epoch: int,
    loss_type: str = DEFAULT_LOSS_TYPE,
    variable_length: bool = False,
) -> dict[str, Any]:
    """``beta`` and the reference-sync arguments for our KL settings.

    Our loss adds ``kl_penalty x`` the KL of each response (k3 summed over its real
    tokens), averaged over responses: kl_penalty * sum_it k3_it / N. TRL adds
    ``beta * k3`` to every token's loss and then aggregates by ``loss_type``:

    * fixed length T (every response has max_completion_length = T tokens): every
      loss_type gives beta * sum_it k3_it / (N T), so ``beta = kl_penalty * T``;
    * variable length: only ``dr_grpo`` divides by a constant, beta * sum_it k3_it /
      (N * max_completion_length), so ``beta = kl_penalty * max_completion_length``;
      ``dapo`` / ``bnpo`` divide by the batch's token count and ``grpo`` by each
      response's own length, which no constant beta reproduces: ValueError.

    TRL only has k3 (in our direction, KL(policy || ref)); ``use_bias_correction_kl`` is
    turned off because ours does not multiply the KL by the ratio. Our reference refresh
    (a copy of the policy every ``compute_ref_model_period`` epochs) is TRL's
    ``sync_ref_model`` with ``ref_model_mixup_alpha=1`` (a full copy) every
    ``period * num_steps_per_epoch`` optimizer steps.
    """
    if kl_estimator not in KL_ESTIMATORS:
        raise ValueError(
            f"unknown kl_estimator {kl_estimator!r}; valid values are: {', '.join(KL_ESTIMATORS)}"
        )
    if not (isinstance(kl_penalty, (int, float)) and math.isfinite(kl_penalty) and kl_penalty >= 0):
        raise ValueError(f"kl_penalty must be >= 0 and finite, got {kl_penalty!r}")
    if kl_penalty == 0:
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
            f"kl_penalty > 0 with variable-length responses and loss_type {loss_type!r} has no "
            "GRPOTrainer equivalent: our KL term is each response's KL summed over its tokens, "
            "averaged over responses, while TRL adds beta * KL to every token and then divides "
            f"by {divisor}, so no constant beta matches when lengths differ. Use loss_aggregation="
            "'constant_normalizer' (TRL's dr_grpo, beta = kl_penalty x max_completion_length) "
            "or kl_penalty=0"
        )
    kwargs: dict[str, Any] = {
        "beta": float(kl_penalty) * max_completion_length,
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
    a ``max_completion_length`` override that breaks ``dr_grpo``'s constant). ``overrides``
    (e.g. ``output_dir``, ``report_to``) are added last and win.

    Not mapped (TRL takes them elsewhere): ``reward_fn`` (pass ``sort_reward_func``),
    ``model`` / ``embedding_dim`` (TRL needs a causal LM: ``build_tiny_gpt2``),
    ``prompt_source`` / ``vocab_size`` (the dataset: ``make_sort_dataset``), ``eval_every``.
    """
    if hasattr(config, "validate"):
        config.validate()  # a TrainConfig checks its own fields first
    missing = [name for name in _MAPPED_FIELDS if _get(config, name) is None]
    if missing:
        raise ValueError(f"config lacks the field(s) {', '.join(missing)}")
    if _get(config, "detach_old_log_probs", True) is False:
        raise ValueError(
            "detach_old_log_probs=False (the freeze pitfall) has no GRPOTrainer equivalent: TRL "
            "always computes the old log-probs without gradients"
        )
    steps = int(_get(config, "num_steps_per_epoch"))
    group = int(_get(config, "num_responses"))
    if group < 2:
        raise ValueError(f"GRPOTrainer needs num_responses (G) >= 2, got {group}")
    entropy_coef = _get(config, "entropy_coef")
    if not (isinstance(entropy_coef, (int, float)) and 0 <= entropy_coef < math.inf):
        raise ValueError(f"entropy_coef must be >= 0 and finite, got {entropy_coef!r}")
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
            _get(config, "kl_penalty"),
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
        "top_entropy_quantile": 1.0,
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
            f"kl_penalty={_get(config, 'kl_penalty')}, kl_estimator={_get(config, 'kl_estimator')!r}",
            kl_args,
            f"k3, KL(policy || ref); beta = kl_penalty x {length} (we sum KL over a response)",
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


# --------------------------------------------------------------------------------------
# The sort task in text: tokenizer, prompts, dataset, reward, tiny model
# --------------------------------------------------------------------------------------


def format_prompt(prompt: Sequence[int]) -> str:
    """[3, 1, 4] -> '3 1 4 :' (digits separated by spaces, then the separator)."""
    return " ".join(str(int(x)) for x in prompt) + f" {SEP_TOKEN}"


def format_response(response: Sequence[int]) -> str:
    """[1, 3, 4] -> '1 3 4'."""
    return " ".join(str(int(x)) for x in response)


def parse_numbers(text: str, length: int, vocab_size: int) -> list[int] | None:
    """'1 3 4' -> [1, 3, 4]; None unless it is exactly ``length`` integers in 0 .. vocab_size - 1.

    Never raises on any string: malformed text (wrong count, letters, separators,
    out-of-range numbers) gives None.
    """
    words = str(text).split()
    if len(words) != length or not all(w.isascii() and w.isdigit() for w in words):
        return None
    numbers = [int(w) for w in words]
    if any(n >= vocab_size for n in numbers):
        return None
    return numbers


def parse_prompt(text: str) -> list[int]:
    """'3 1 4 :' -> [3, 1, 4] (the words before the separator); ValueError if malformed."""
    head = str(text).split(SEP_TOKEN)[0].split()
    if not head or not all(w.isascii() and w.isdigit() for w in head):
        raise ValueError(f"not a sort prompt like '3 1 4 :': {text!r}")
    return [int(w) for w in head]


def build_sort_tokenizer(vocab_size: int):
    """A word-level ``PreTrainedTokenizerFast``: 4 special tokens, then '0' .. str(vocab_size - 1).

    Ids: <pad>=0, <eos>=1, <unk>=2, ':'=3, digit d = 4 + d. Words are split on
    whitespace; decoding joins them with single spaces. Built locally, nothing downloaded.
    """
    if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size < 1:
        raise ValueError(f"vocab_size must be a positive int, got {vocab_size!r}")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    for digit in range(vocab_size):
        vocab[str(digit)] = len(vocab)
    core = Tokenizer(models.WordLevel(vocab, unk_token=UNK_TOKEN))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # WordPiece's decoder joins words with spaces (no word starts with its '##' prefix)
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=PAD_TOKEN, eos_token=EOS_TOKEN, unk_token=UNK_TOKEN
    )


def build_tiny_gpt2(
    tokenizer,
    n_layer: int = 2,
    n_embd: int = 64,
    n_head: int = 4,
    n_positions: int = 32,
    seed: int = 0,
):
    """A randomly initialised GPT-2-style causal LM sized for ``tokenizer`` (nothing downloaded).

    Dropout is off so that log-probs are deterministic. The seed fixes the weights.
    """
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=n_positions,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def make_sort_dataset(prompts: torch.Tensor):
    """A ``datasets.Dataset`` with a 'prompt' text column, one row per prompt int[batch, pos]."""
    from datasets import Dataset

    if not isinstance(prompts, torch.Tensor) or prompts.ndim != 2:
        shape = list(prompts.shape) if isinstance(prompts, torch.Tensor) else type(prompts).__name__
        raise ValueError(f"prompts must be a tensor of shape [batch, pos], got {shape}")
    return Dataset.from_dict({"prompt": [format_prompt(p) for p in prompts.tolist()]})


def sort_reward_func(
    reward_fn: str | Callable = "sort_distance_reward",
    vocab_size: int = 10,
    malformed_reward: float = -1.0,
) -> Callable[..., list[float]]:
    """A TRL reward function ``f(prompts, completions, **kwargs) -> list[float]``.

    Each completion is parsed with ``parse_numbers`` against its prompt's length; a
    well-formed one gets ``reward_fn(prompt, response)`` (a name from ``REWARD_FNS`` or a
    per-example function on lists), a malformed one ``malformed_reward`` (below every
    sort reward). It never raises on a completion's text.
    """
    if isinstance(reward_fn, str):
        if reward_fn not in REWARD_FNS:
            raise ValueError(
                f"unknown reward function {reward_fn!r}; valid names are: {', '.join(REWARD_FNS)}"
            )
        name, fn = reward_fn, REWARD_FNS[reward_fn]
    elif callable(reward_fn):
        name, fn = getattr(reward_fn, "__name__", "sort_reward"), reward_fn
    else:
        raise TypeError(f"reward_fn must be a name or callable, got {type(reward_fn).__name__}")

    def reward(prompts: list[str], completions: list[str], **kwargs) -> list[float]:
        scores = []
        for prompt_text, completion in zip(prompts, completions):
            prompt = parse_prompt(prompt_text)
            response = parse_numbers(completion, len(prompt), vocab_size)
            scores.append(malformed_reward if response is None else float(fn(prompt, response)))
        return scores

    reward.__name__ = name
    return reward


# --------------------------------------------------------------------------------------
# Cross-check: TRL's loss on a hand-built batch vs ours
# --------------------------------------------------------------------------------------


def completion_log_probs(
    model, prompt_ids: torch.Tensor, completion_ids: torch.Tensor, with_entropy: bool = False
):
    """Per-token log-probs of the completion tokens, float[rows, completion_pos].

    prompt_ids int[rows, prompt_pos] (no padding), completion_ids int[rows, completion_pos].
    The token at completion position t is predicted by the logits at input position
    prompt_pos + t - 1. ``with_entropy=True`` also returns the entropy (nats) of each of
    those next-token distributions, float[rows, completion_pos] (what TRL's entropy bonus
    averages).
    """
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    logits = model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)).logits
    logits = logits[:, prompt_ids.shape[1] - 1 : -1]  # [rows, completion_pos, vocab]
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    taken = log_probs.gather(-1, completion_ids[..., None]).squeeze(-1)
    if not with_entropy:
        return taken
    return taken, -(log_probs.exp() * log_probs).sum(dim=-1)


def trl_loss_inputs(
    prompt_ids: torch.Tensor,
    completion_ids: torch.Tensor,
    advantages: torch.Tensor,
    old_log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """The inputs dict that ``GRPOTrainer._compute_loss`` reads.

    Our shapes: prompt_ids int[batch, trial, prompt_pos] (each prompt repeated over trial),
    completion_ids int[batch, trial, pos], advantages float[batch, trial], old_log_probs /
    ref_log_probs float[batch, trial, pos], mask (the response mask, 1 up to and including
    EOS) float[batch, trial, pos] or None for full-length completions. TRL's rows are
    (batch trial) flattened; ``num_items_in_batch`` is the number of real tokens.
    """
    rows = completion_ids.shape[0] * completion_ids.shape[1]
    if advantages.shape != completion_ids.shape[:2]:
        raise ValueError(
            f"advantages must be [batch, trial] = {list(completion_ids.shape[:2])}, "
            f"got {list(advantages.shape)}"
        )
    if mask is None:
        mask = torch.ones_like(completion_ids)
    if mask.shape != completion_ids.shape:
        raise ValueError(
            f"mask must be [batch, trial, pos] = {list(completion_ids.shape)}, "
            f"got {list(mask.shape)}"
        )
    completion_ids = completion_ids.reshape(rows, -1)
    completion_mask = mask.reshape(rows, -1).long()
    inputs = {
        "prompt_ids": prompt_ids.reshape(rows, -1),
        "prompt_mask": torch.ones_like(prompt_ids.reshape(rows, -1)),
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": advantages.reshape(rows).float(),
        "old_per_token_logps": old_log_probs.reshape(rows, -1).detach(),
        "num_items_in_batch": completion_mask.sum().float(),
    }
    if ref_log_probs is not None:
        inputs["ref_per_token_logps"] = ref_log_probs.reshape(rows, -1).detach()
    return inputs


def trl_loss(trainer, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """The scalar loss ``trainer`` (a ``GRPOTrainer``) computes on ``inputs``, with its gradient.

    Calls ``trainer.compute_loss`` outside ``trainer.train()``: the one attribute the
    training loop would have set, ``current_gradient_accumulation_steps``, is set to 1
    (one micro-batch per optimizer step, as ``grpo_config_kwargs`` configures).
    Build no other ``GRPOConfig`` between creating ``trainer`` and this call: creating
    training arguments resets accelerate's process-global state that the trainer uses.
    """
    if getattr(trainer, "current_gradient_accumulation_steps", None) is None:
        trainer.current_gradient_accumulation_steps = 1
    trainer.model.train()
    return trainer.compute_loss(trainer.model, inputs)


def evaluate_greedy_lm(
    model, tokenizer, prompts: torch.Tensor, reward_fn: str | Callable = "sort_distance_reward"
) -> dict[str, float]:
    """Greedy completions of a causal LM on prompts int[batch, pos] -> summary numbers.

    Returns {'mean_reward', 'exact_sort', 'malformed'}: the mean reward of the greedy
    completions (malformed ones scored by ``sort_reward_func``'s -1), the fraction sorted
    exactly, and the fraction that did not parse as ``pos`` numbers.
    """
    if not isinstance(prompts, torch.Tensor) or prompts.ndim != 2:
        shape = list(prompts.shape) if isinstance(prompts, torch.Tensor) else type(prompts).__name__
        raise ValueError(f"prompts must be a tensor of shape [batch, pos], got {shape}")
    vocab_size = len(tokenizer) - len(SPECIAL_TOKENS)
    length = prompts.shape[1]
    texts = [format_prompt(p) for p in prompts.tolist()]
    encoded = tokenizer(texts, return_tensors="pt")  # same length: no padding
    was_training = model.training
    model.eval()
    with torch.no_grad():
        out = model.generate(
            **encoded,
            max_new_tokens=length,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    model.train(was_training)
    completions = tokenizer.batch_decode(
        out[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True
    )
    rewards = sort_reward_func(reward_fn, vocab_size)(texts, completions)
    parsed = [parse_numbers(c, length, vocab_size) for c in completions]
    truth = prompts.sort(dim=-1).values.tolist()
    n = len(texts)
    return {
        "mean_reward": sum(rewards) / n,
        "exact_sort": sum(p == t for p, t in zip(parsed, truth)) / n,
        "malformed": sum(p is None for p in parsed) / n,
    }
