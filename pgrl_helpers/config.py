"""``TrainConfig``: the one flat, documented dataclass a reader edits to set up a run.

Every field has a one-line docstring (``config_fields()`` lists them), and the fields come
in sections, as in TRL's ``GRPOConfig``: the lecture's run, the task, the model, evaluation
and stopping, runtime, the 2025 objectives, DAPO's batch, the loop's extension points, PPO,
off-policy rollouts and the remedies. ``validate()`` raises a clear error naming the first
bad field; each feature checks its own fields in its own module (``kl.check_kl_fields``,
``value.check_value_fields``, ...), and ``validate()`` lists those checks. Named recipes
(GRPO, Dr. GRPO, DAPO, GSPO, CISPO, RLOO, REINFORCE++) are ``TrainConfig.preset(name)``
(``recipes.RECIPES``). ``build_task()`` and ``build_policy()`` make the ``Task`` and
``Policy`` objects the loop talks to, so notebooks never need to build them by hand.

Taught in notebook 07; also used in notebooks 04, 08, 09, 10, 11, 12, 15.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable
from dataclasses import dataclass, fields

from ._validate import check_bool, check_choice, check_number
from .advantages import DELTA_MODES, GROUP_MODES, zero_deltas_reason
from .autoregressive import check_autoregressive_fields
from .covariance import check_clip_cov_fields
from .dedup_task import DEDUP_REWARD_FNS
from .kl import check_kl_fields
from .losses import LossOptions, check_loss_fields
from .masking import LOSS_AGGREGATIONS
from .offpolicy import check_off_policy_fields
from .recipes import RECIPES
from .registry import (
    ADVANTAGE_ESTIMATORS,
    BATCH_FILTERS,
    MODELS,
    ROLLOUT_SOURCES,
    TASKS,
)
from .rollout import check_batch_filter_fields
from .sort_task import LECTURE_PROMPTS, REWARD_FNS
from .task import check_task_fields
from .tool_task import RESPONSE_LENGTH as TOOL_RESPONSE_LENGTH
from .tool_task import check_tool_task_fields
from .value import check_value_fields

PROMPT_SOURCES: tuple[str, ...] = ("lecture", "random")

#: (field, value) pairs that can give a negative reward: the position reward of 'sort_dedup'
#: (correct positions minus extra tokens) and DAPO's overlong shaping (a penalty <= 0).
NEGATIVE_REWARDS: tuple[tuple[str, str], ...] = (
    ("reward_fn", "dedup_position_reward"),
    ("batch_filter", "overlong_shaping"),
    ("batch_filter", "dapo"),
)

#: The loss options' defaults: ``TrainConfig`` declares each ``LossOptions`` field with the
#: default ``LossOptions`` gives it (one source; ``losses.loss_options`` copies them back).
_LOSS_DEFAULTS = LossOptions()


@dataclass
class TrainConfig:
    """Everything one run of ``run_policy_gradient`` needs. Defaults = the lecture's run.

    Taught in notebook 07; also used in notebooks 04, 08, 09, 10, 11, 12, 15.
    """

    # --- The lecture's run (the defaults reproduce it): objective and loop sizes ------------
    deltas_mode: str = "centered_rewards"
    """How rewards become deltas: one of ``advantages.DELTA_MODES``."""
    loss_mode: str = "naive"
    """Policy loss: one of ``losses.LOSS_MODES`` (naive ... dual_clip, cispo, sapo, kl_cov)."""
    epsilon: float = _LOSS_DEFAULTS.epsilon
    """Lower clip edge 1 - epsilon of 'clipped', 'dual_clip' and 'cispo' (>= 1: no lower clip)."""
    kl_coef: float = 0.0
    """Coefficient beta of the KL(policy || reference) term; 0 turns the reference off."""
    entropy_coef: float = 0.0
    """Weight of an entropy bonus (loss -= coef x mean token entropy); 0 = the lecture's loss."""
    kl_estimator: str = "k3"
    """Per-sample KL estimator: one of ``kl.KL_ESTIMATORS``."""
    compute_ref_model_period: int = 10
    """Refresh the frozen reference model every this many epochs (only when kl_coef > 0)."""
    num_epochs: int = 100
    """Number of epochs: each samples one batch of responses."""
    num_steps_per_epoch: int = 10
    """Optimizer steps taken on each epoch's batch."""
    num_responses: int = 10
    """G, the number of responses sampled per prompt (the group)."""
    detach_old_log_probs: bool = True
    """True: old log-probs frozen under no_grad. False reproduces the freeze pitfall."""

    # --- Task: prompts, rewards, responses (``registry.TASKS``) ----------------------------
    task: str = "sort"
    """'sort', 'sort_dedup' (drop repeats, EOS) or 'tool_compare' (tool use); see ``TASKS``."""
    prompt_source: str = "lecture"
    """'lecture' (the 3 fixed prompts every epoch) or 'random' (fresh prompts each epoch)."""
    prompts_per_epoch: int | None = None
    """Prompts per epoch for prompt_source 'random' (None: 64); 'lecture' always uses its 3."""
    prompt_length: int = 3
    """Length of prompts and responses (the lecture prompts have length 3)."""
    vocab_size: int = 5
    """Token values are 0 .. vocab_size - 1 (the lecture prompts need >= 5)."""
    reward_fn: str | Callable = "sort_inclusion_ordering_reward"
    """A name from ``sort_task.REWARD_FNS`` or a reward function (see ``compute_reward``)."""
    max_response_length: int | None = None
    """Autoregressive policy: most tokens per response, EOS included (None: prompt_length + 2)."""
    mask_tool_tokens: bool = True
    """'tool_compare': mask the tool's tokens out of loss and GAE; False plants the bug."""

    # --- Model: the policy (``registry.MODELS``) and its optimizer ------------------------
    model: str = "lecture"
    """Policy: 'lecture' (LectureModel), 'transformer' (SortTransformer) or 'autoregressive'."""
    embedding_dim: int = 10
    """Embedding size of LectureModel; d_model of the transformer policies and of the critic."""
    num_layers: int = 2
    """Transformer blocks of SortTransformer, the autoregressive policy and the critic."""
    num_heads: int = 4
    """Attention heads of the transformers and the critic (must divide embedding_dim)."""
    learning_rate: float = 1e-3
    """Adam learning rate."""
    seed: int = 0
    """Seeds the model's initial weights, the training prompts and the sampling."""

    # --- Evaluation and stopping: the held-out validation and test sets ------------------
    eval_every: int = 10
    """Evaluate on the held-out prompts every this many epochs (also before and at the end)."""
    num_eval_prompts: int | None = None
    """Prompts in each held-out set, validation and test (None: see ``heldout_size``)."""
    eval_seed: int = 12345
    """Seed of the held-out prompt set: the same for every training seed."""
    target_validation_exact_sort: float | None = None
    """Stop once greedy exact-sort on the VALIDATION set reaches this (None: never); never test."""
    epochs_after_target: int = 0
    """Keep training this many epochs after validation first reaches the target (stability)."""

    # --- Runtime: progress, threads, timing (never change the results) -------------------
    progress: bool = False
    """Show a tqdm.auto progress bar over epochs."""
    num_threads: int | None = 1
    """torch CPU threads during the run (restored after); 1 is fastest for tiny models."""
    profile_time: bool = False
    """Log the wall time of each phase per epoch (time_* keys; off keeps histories exact)."""

    # --- The 2025 objectives: loss options (notebook 11; ``TrainConfig.preset``) ---------
    loss_aggregation: str = "token_mean"
    """Per-token losses -> one number: one of ``masking.LOSS_AGGREGATIONS`` (padding never counts)."""
    epsilon_high: float | None = _LOSS_DEFAULTS.epsilon_high
    """Clip-higher (DAPO): upper clip edge 1 + epsilon_high; None means epsilon (symmetric)."""
    dual_clip_c: float = _LOSS_DEFAULTS.dual_clip_c
    """loss_mode 'dual_clip': a negative-delta objective is bounded below by c x delta (c > 1)."""
    sapo_temperature_pos: float = _LOSS_DEFAULTS.sapo_temperature_pos
    """loss_mode 'sapo': gate temperature for tokens with delta > 0 (TRL's default)."""
    sapo_temperature_neg: float = _LOSS_DEFAULTS.sapo_temperature_neg
    """loss_mode 'sapo': gate temperature for tokens with delta <= 0 (TRL's default)."""
    kl_cov_ratio: float = _LOSS_DEFAULTS.kl_cov_ratio
    """loss_mode 'kl_cov': fraction k of real tokens (top covariance) that get the KL term."""
    kl_cov_coef: float = _LOSS_DEFAULTS.kl_cov_coef
    """loss_mode 'kl_cov': weight beta of |log pi - log pi_old| on those tokens (paper: 1)."""

    # --- DAPO's batch: overlong shaping and dynamic sampling (``batch_filter``) ----------
    overlong_buffer: int = 2
    """Overlong shaping (batch_filter 'overlong_shaping' / 'dapo'): DAPO's buffer L_cache."""
    overlong_penalty_factor: float = 1.0
    """Overlong shaping: scale of the soft overlong penalty (DAPO: 1)."""
    dynamic_sampling_max_draws: int = 0
    """Dynamic sampling: extra batches it may draw to refill non-tied groups (0: shrink)."""

    # --- The loop's extension points: each names an entry of a registry (see README) -----
    advantage_estimator: str = "group"
    """How deltas are made: a key of ``registry.ADVANTAGE_ESTIMATORS`` ('group')."""
    importance_sampling_level: str = _LOSS_DEFAULTS.importance_sampling_level
    """The loss's ratio pi / pi_old per 'token' or per 'sequence' (GSPO): a loss option."""
    batch_filter: str = "none"
    """Which sampled groups the optimizer sees: a key of ``registry.BATCH_FILTERS``."""
    rollout_source: str = "on_policy"
    """Who samples, and whose log-probs are old: a key of ``registry.ROLLOUT_SOURCES``."""

    # --- PPO with a value model (advantage_estimator 'gae'; see value.py and gae.py) -----
    gamma: float = 1.0
    """GAE discount gamma in [0, 1] (per token; 1: no discount within a response)."""
    gae_lambda: float = 0.95
    """GAE lambda in [0, 1]: 0 = one-step TD error, 1 = Monte Carlo return minus V."""
    critic_learning_rate: float | None = None
    """Adam learning rate of the separate critic (None: learning_rate)."""
    value_clip: float | None = 0.2
    """PPO2 value clipping range for the critic's loss (None: unclipped squared error)."""
    whiten_advantages: bool = True
    """'gae': normalise the per-token advantages over the batch's real tokens (PPO's usual)."""
    kl_in_reward: bool = False
    """True: -kl_coef x k1 per token in the reward (PPO-RLHF; 'gae' only), not in the loss."""

    # --- Off-policy rollouts (rollout_source 'stale'; see pgrl_helpers.offpolicy) --------
    staleness: int = 0
    """'stale' source: epochs (policy versions) the sampler lags behind the trainer."""
    sampler_temperature: float = 1.0
    """'stale' source: the sampler divides its logits by this; the loss ignores it."""
    sampler_dtype: str = "float32"
    """'stale' source: the sampler rounds its logits to this dtype ('bfloat16': engine-like)."""
    off_policy_correction: str = "none"
    """'none' (old = sampler), 'recompute' (old = trainer, no weight), 'tis' or 'mis'."""
    correction_level: str = "token"
    """TIS / MIS weights per 'token' or per 'sequence' (product over the response).

    Not ``importance_sampling_level``: these weights pi_trainer / pi_sampler (no gradient)
    correct for a sampler that is not the trainer, while that field sets where the loss's own
    ratio pi / pi_old (clipped, with gradient) lives; a run may set the two differently."""
    correction_cap: float = 2.0
    """C of TIS (weights truncated at C) and MIS (weights above C dropped); inf allowed."""
    correction_cap_low: float | None = None
    """Two-sided TIS / MIS: weights below this are raised to it (TIS) or dropped (MIS)."""

    # --- Remedies practitioners reach for, each off by default ---------------------------
    # The defaults leave every run as it was. Entropy: Clip-Cov and the high-entropy-token
    # mask act on the per-token policy loss (``objective.apply_token_remedies``); KL: the
    # adaptive controller sets beta once per epoch (``kl.AdaptiveKLController``); off-policy:
    # ``correction_cap_low`` above.
    clip_cov_ratio: float = 0.0
    """Clip-Cov (arXiv 2505.22617): fraction of real tokens detached from the loss (0: off)."""
    clip_cov_lb: float = 1.0
    """Clip-Cov: a token is a candidate only if its covariance is > this (verl: 1)."""
    clip_cov_ub: float = 5.0
    """Clip-Cov: ... and < this (verl: 5)."""
    top_entropy_quantile: float = 1.0
    """Train only on this top fraction of real tokens by entropy (arXiv 2506.01939; 1: off)."""
    kl_target: float | None = None
    """Adaptive KL (Ziegler et al. 2019): target KL per response; None keeps beta fixed."""
    kl_horizon: int = 10000
    """Adaptive KL: horizon H; once per epoch beta changes by a factor 1 + e_t x responses / H."""

    @classmethod
    def preset(cls, name: str, **overrides) -> TrainConfig:
        """The named recipe of ``recipes.RECIPES`` ('grpo', 'dapo', ...), then ``overrides``.

        ``TrainConfig.preset("dapo", seed=3)``: the lecture's defaults, DAPO's fields on top,
        and the overrides on top of both. An unknown name raises, listing the valid names.
        """
        check_choice(name, RECIPES, "preset")
        return cls(**{**RECIPES[name], **overrides})

    @property
    def response_length(self) -> int:
        """Slots per sampled response: prompt_length, or the autoregressive maximum."""
        if self.task == "tool_compare":
            return TOOL_RESPONSE_LENGTH
        if self.model != "autoregressive":
            return self.prompt_length
        if self.max_response_length is None:
            return self.prompt_length + 2
        return self.max_response_length

    @property
    def kl_loss_coef(self) -> float:
        """Weight of the KL term in the loss: kl_coef, or 0 when the KL is in the reward."""
        return 0.0 if self.kl_in_reward else self.kl_coef

    def validate(self, builds_task: bool = True, builds_policy: bool = True) -> None:
        """Raise ValueError/TypeError naming the first bad field; called before training.

        Each feature checks its own fields in its own module; this is the list.
        ``builds_task`` / ``builds_policy`` False: the run is given its task / policy
        (``run_policy_gradient(config, policy=..., task=...)``), so the fields that only
        build the toy task (task, prompt_length, vocab_size, max_response_length, reward_fn)
        / the toy model (model, embedding_dim, num_layers, num_heads) are not checked.
        """
        self._validate_extension_points(builds_task, builds_policy)
        self._validate_lecture_run()
        self._validate_task(builds_task)
        self._validate_model(builds_policy)
        self._validate_evaluation()
        check_loss_fields(self)  # loss_mode, epsilon ... kl_cov_coef (losses.LossOptions)
        check_choice(self.loss_aggregation, LOSS_AGGREGATIONS, "loss_aggregation")
        check_kl_fields(self)  # kl_coef, kl_estimator, reference refresh, adaptive KL
        check_value_fields(self)  # PPO: gamma, gae_lambda, the critic, kl_in_reward
        check_batch_filter_fields(self)  # DAPO: overlong shaping / filtering, resampling
        check_off_policy_fields(self)  # the stale source and its corrections
        check_clip_cov_fields(self)  # remedy: Clip-Cov
        check_number(self.top_entropy_quantile, "top_entropy_quantile", 0, 1)  # remedy
        self._refuse_ignored_settings()  # a setting the run would not read

    def _validate_extension_points(self, builds_task=True, builds_policy=True) -> None:
        """Each registry name is one of its registry's keys (task / model: if built here)."""
        if builds_task:
            check_choice(self.task, TASKS, "task")
        if builds_policy:
            check_choice(self.model, MODELS, "model")
        check_choice(self.advantage_estimator, ADVANTAGE_ESTIMATORS, "advantage_estimator")
        check_choice(self.batch_filter, BATCH_FILTERS, "batch_filter")
        check_choice(self.rollout_source, ROLLOUT_SOURCES, "rollout_source")

    def _validate_lecture_run(self) -> None:
        """deltas_mode, the loop's sizes, the entropy bonus; a group baseline needs G >= 2
        (with G = 1 it is the response's own reward: every delta 0, nothing trains)."""
        check_choice(self.deltas_mode, DELTA_MODES, "deltas_mode")
        check_bool(self.detach_old_log_probs, "detach_old_log_probs")
        for name in ("num_epochs", "num_steps_per_epoch", "num_responses"):
            check_number(getattr(self, name), name, 1, low_inclusive=True, integer=True)
        check_number(self.entropy_coef, "entropy_coef", 0, low_inclusive=True)
        if (
            self.advantage_estimator == "group"
            and self.deltas_mode in GROUP_MODES
            and self.num_responses < 2
        ):
            raise ValueError(
                f"deltas_mode {self.deltas_mode!r} compares responses within a group and "
                f"needs num_responses (G) >= 2, got {self.num_responses}"
            )
        if self.advantage_estimator == "group":  # G = 1: every centred delta is 0
            reason = zero_deltas_reason(self.deltas_mode, self.num_responses)
            if reason is not None:
                raise ValueError(reason)

    def _validate_task(self, builds_task: bool = True) -> None:
        """Prompts and their source, the task / model pairing, the tool task, reward_fn
        (the toy task's fields only if ``builds_task``)."""
        if builds_task:
            check_task_fields(self)  # prompt_length, vocab_size and the prompt space
            check_autoregressive_fields(self)  # task / model pairing, max_response_length
            check_tool_task_fields(self)  # mask_tool_tokens, the tool task's shape
        check_choice(self.prompt_source, PROMPT_SOURCES, "prompt_source")
        check_number(
            self.prompts_per_epoch, "prompts_per_epoch", 1, low_inclusive=True, integer=True,
            allow_none=True,
        )  # fmt: skip
        if self.prompt_source == "lecture":
            if self.prompt_length != 3 or self.vocab_size < 5:
                raise ValueError(
                    "prompt_source 'lecture' uses the prompts "
                    f"{LECTURE_PROMPTS}: it needs prompt_length 3 and vocab_size >= 5, got "
                    f"prompt_length {self.prompt_length} and vocab_size {self.vocab_size}"
                )
            if self.prompts_per_epoch not in (None, len(LECTURE_PROMPTS)):
                raise ValueError(
                    "prompt_source 'lecture' always trains on its 3 prompts; leave "
                    f"prompts_per_epoch None (got {self.prompts_per_epoch})"
                )
        if self.task == "tool_compare" or not builds_task:
            pass  # its reward is fixed (tool_compare) / the given task has its own (reward_fn unused)
        elif isinstance(self.reward_fn, str):
            names = DEDUP_REWARD_FNS if self.task == "sort_dedup" else REWARD_FNS
            check_choice(self.reward_fn, names, "reward_fn")
        elif not callable(self.reward_fn):
            raise TypeError(
                f"reward_fn must be a name or callable, got {type(self.reward_fn).__name__}"
            )

    def _validate_model(self, builds_policy: bool = True) -> None:
        """The policy's sizes (if built here) and learning rate; heads divide d_model."""
        for name in ("embedding_dim", "num_layers", "num_heads") if builds_policy else ():
            check_number(getattr(self, name), name, 1, low_inclusive=True, integer=True)
        check_number(self.learning_rate, "learning_rate", 0)
        check_number(self.seed, "seed", 0, low_inclusive=True, integer=True)
        transformer = self.model in ("transformer", "autoregressive")
        if builds_policy and transformer and self.embedding_dim % self.num_heads:
            raise ValueError(
                f"embedding_dim ({self.embedding_dim}) must be divisible by num_heads "
                f"({self.num_heads}) for the transformer"
            )

    def _validate_evaluation(self) -> None:
        """The held-out sets and their seed, the validation target and the epochs after it;
        the runtime fields (threads, the progress bar, timing)."""
        check_number(self.eval_every, "eval_every", 1, low_inclusive=True, integer=True)
        check_number(self.eval_seed, "eval_seed", 0, low_inclusive=True, integer=True)
        check_bool(self.progress, "progress")
        check_bool(self.profile_time, "profile_time")
        for name in ("num_eval_prompts", "num_threads"):
            value = getattr(self, name)
            check_number(value, name, 1, low_inclusive=True, integer=True, allow_none=True)
        target = self.target_validation_exact_sort
        check_number(target, "target_validation_exact_sort", 0, 1, allow_none=True)
        after = self.epochs_after_target
        check_number(after, "epochs_after_target", 0, low_inclusive=True, integer=True)
        if after > 0 and target is None:
            raise ValueError(
                f"epochs_after_target={after} counts epochs after the target is reached: "
                "set target_validation_exact_sort too"
            )

    def _refuse_ignored_settings(self) -> None:
        """Refuse a value the run would silently not read, or read with the wrong sign.

        * advantage_estimator 'gae' takes its deltas from the critic (GAE over per-token
          rewards), so deltas_mode is not read: a value other than the default
          'centered_rewards' is refused. The default itself passes: a dataclass cannot tell
          it from the same value given explicitly, so a PPO run derived from a GRPO config
          (notebook 10, bench_ppo_vs_grpo) sets deltas_mode back to the default;
        * kl_in_reward always puts k1 per token into the rewards: a kl_estimator other than
          k1 (or the default) is not read;
        * deltas_mode 'max_rewards' (the lecture's winner takes all) weights the best
          responses by their own reward, so it needs rewards >= 0: with a reward that can be
          negative (``NEGATIVE_REWARDS``) the best response would be pushed down.
        """
        default = {field.name: field.default for field in fields(TrainConfig)}
        if self.advantage_estimator == "gae" and self.deltas_mode != default["deltas_mode"]:
            raise ValueError(
                f"deltas_mode {self.deltas_mode!r} would be ignored: advantage_estimator 'gae' "
                "takes its deltas from the critic (GAE over per-token rewards), not from the "
                f"group's rewards; leave deltas_mode at its default {default['deltas_mode']!r} "
                "(or use advantage_estimator 'group' for group deltas)"
            )
        if self.kl_in_reward and self.kl_estimator not in (default["kl_estimator"], "k1"):
            raise ValueError(
                f"kl_estimator {self.kl_estimator!r} would be ignored: kl_in_reward always puts "
                "k1 (log pi - log pi_ref per token, as in PPO-RLHF) into the rewards; set "
                f"kl_estimator 'k1' or leave it at its default {default['kl_estimator']!r}"
            )
        if self.deltas_mode == "max_rewards":
            for field, value in NEGATIVE_REWARDS:
                if getattr(self, field) == value:
                    raise ValueError(
                        f"deltas_mode 'max_rewards' weights the best responses by their own "
                        f"reward, and {field} {value!r} can make it negative (the best response "
                        "would be pushed down): use deltas_mode 'centered_rewards' (or "
                        "'normalized_rewards')"
                    )

    @property
    def batch_prompts(self) -> int:
        """Prompts per epoch actually used."""
        if self.prompt_source == "lecture":
            return len(LECTURE_PROMPTS)
        return 64 if self.prompts_per_epoch is None else self.prompts_per_epoch

    @property
    def heldout_size(self) -> int:
        """Prompts in each of the validation and test sets.

        One prompt per held-out key while a set has key quota left (a quarter of the task's
        keys, ``Task.max_heldout_keys``); a larger set reuses its own keys. Default: with the
        lecture's fixed prompts, min(1000, a quarter of all prompts); with random prompts,
        min(500, a tenth of the task's keys) each, so validation and test together hold out
        a fifth of the keys (multisets for 'sort').
        """
        return self.heldout_size_for()

    def heldout_size_for(self, task=None) -> int:
        """``heldout_size`` with the keys of ``task`` (a given task; None: ``build_task()``)."""
        if self.num_eval_prompts is not None:
            return self.num_eval_prompts
        keys = (self.build_task() if task is None else task).num_keys()
        if self.prompt_source == "lecture":
            return min(1000, keys // 4)
        return max(1, min(500, keys // 10))

    def build_task(self):
        """The ``Task`` of this run: ``registry.TASKS[task](self)``."""
        return TASKS[self.task](self)

    def build_policy(self):
        """The policy named by ``model``, initialised with ``seed``: ``registry.MODELS[model](self)``."""
        return MODELS[self.model](self)


def unknown_field_message(name: str) -> str:
    """'TrainConfig has no field NAME; did you mean CLOSEST?' (difflib's nearest field name)."""
    names = [field.name for field in fields(TrainConfig)]
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}?" if close else "config_fields() lists them"
    return f"TrainConfig has no field {name!r}; {hint}"


def _refuse_unknown_fields(init):
    """``TrainConfig.__init__`` that names the closest field for a mistyped keyword (TypeError,
    as the dataclass's own ``__init__`` raises), instead of Python's bare "unexpected keyword"."""

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        names = {field.name for field in fields(TrainConfig)}
        for name in kwargs:
            if name not in names:
                raise TypeError(unknown_field_message(name))
        init(self, *args, **kwargs)

    return __init__


TrainConfig.__init__ = _refuse_unknown_fields(TrainConfig.__init__)


def config_fields() -> dict[str, str]:
    """{field name: its one-line docstring}, read from this module's source.

    Taught in notebook 07.
    """
    import inspect

    lines = inspect.getsource(TrainConfig).splitlines()
    docs: dict[str, str] = {}
    names = {f.name for f in fields(TrainConfig)}
    for i, line in enumerate(lines[:-1]):
        stripped = line.strip()
        name = stripped.split(":", 1)[0]
        if name in names and ":" in stripped:
            docs[name] = lines[i + 1].strip().strip('"').strip()
    return docs
