"""``TrainConfig``: the one flat, documented dataclass a reader edits to set up a run.

Every field has a one-line docstring (``config_fields()`` lists them). ``validate()``
raises a clear error naming the first bad field. ``build_task()`` and ``build_policy()``
make the ``Task`` and ``Policy`` objects the loop talks to, so notebooks never need to
build them by hand.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields

from .advantages import DELTA_MODES, GROUP_MODES
from .covariance import check_clip_cov
from .dedup_task import DEDUP_REWARD_FNS
from .history import _check_choice
from .kl import KL_ESTIMATORS, AdaptiveKLController
from .losses import LOSS_MODES
from .masking import LOSS_AGGREGATIONS
from .offpolicy import check_off_policy_fields
from .registry import (
    ADVANTAGE_ESTIMATORS,
    BATCH_FILTERS,
    MODELS,
    OVERLONG_FILTERS,
    POLICY_OBJECTIVES,
    ROLLOUT_SOURCES,
    TASKS,
)
from .sort_task import LECTURE_PROMPTS, REWARD_FNS
from .tool_task import RESPONSE_LENGTH as TOOL_RESPONSE_LENGTH

#: tasks the autoregressive policy is wired to (variable length, or multi-turn)
AUTOREGRESSIVE_TASKS: tuple[str, ...] = ("sort_dedup", "tool_compare")
PROMPT_SOURCES: tuple[str, ...] = ("lecture", "random")


@dataclass
class TrainConfig:
    """Everything one run of ``run_policy_gradient`` needs. Defaults = the lecture's run."""

    deltas_mode: str = "centered_rewards"
    """How rewards become deltas: one of ``advantages.DELTA_MODES``."""
    loss_mode: str = "naive"
    """Policy loss: one of ``losses.LOSS_MODES`` (naive ... clipped, dual_clip, cispo, sapo)."""
    epsilon: float = 0.2
    """Clip range: lower edge 1 - epsilon of the 'clipped' loss (any > 0; >= 1: no lower clip)."""
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
    prompts_per_epoch: int | None = None
    """Prompts per epoch for prompt_source 'random' (None: 64); 'lecture' always uses its 3."""
    prompt_source: str = "lecture"
    """'lecture' (the 3 fixed prompts every epoch) or 'random' (fresh prompts each epoch)."""
    prompt_length: int = 3
    """Length of prompts and responses (the lecture prompts have length 3)."""
    vocab_size: int = 5
    """Token values are 0 .. vocab_size - 1 (the lecture prompts need >= 5)."""
    reward_fn: str | Callable = "sort_inclusion_ordering_reward"
    """A name from ``sort_task.REWARD_FNS`` or a reward function (see ``compute_reward``)."""
    model: str = "lecture"
    """Policy: 'lecture' (LectureModel), 'transformer' (SortTransformer) or 'autoregressive'."""
    embedding_dim: int = 10
    """Embedding size of LectureModel, or d_model of SortTransformer."""
    num_layers: int = 2
    """SortTransformer only: number of transformer blocks."""
    num_heads: int = 4
    """SortTransformer only: attention heads (must divide embedding_dim)."""
    learning_rate: float = 1e-3
    """Adam learning rate."""
    seed: int = 0
    """Seeds the model's initial weights, the training prompts and the sampling."""
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
    detach_old_log_probs: bool = True
    """True: old log-probs frozen under no_grad. False reproduces the freeze pitfall."""
    progress: bool = False
    """Show a tqdm.auto progress bar over epochs."""
    num_threads: int | None = 1
    """torch CPU threads during the run (restored after); 1 is fastest for tiny models."""

    task: str = "sort"
    """'sort', 'sort_dedup' (drop repeats, EOS) or 'tool_compare' (tool use); see ``TASKS``."""
    mask_tool_tokens: bool = True
    """'tool_compare': mask the tool's tokens out of loss and GAE; False plants the bug."""
    max_response_length: int | None = None
    """Autoregressive policy: most tokens per response, EOS included (None: prompt_length + 2)."""
    loss_aggregation: str = "token_mean"
    """Per-token losses -> one number: one of ``masking.LOSS_AGGREGATIONS`` (padding never counts)."""
    epsilon_high: float | None = None
    """Clip-higher (DAPO): upper clip edge 1 + epsilon_high; None means epsilon (symmetric)."""

    dual_clip_c: float = 3.0
    """loss_mode 'dual_clip': a negative-delta objective is bounded below by c x delta (c > 1)."""
    sapo_temperature_pos: float = 1.0
    """loss_mode 'sapo': gate temperature for tokens with delta > 0 (TRL's default)."""
    sapo_temperature_neg: float = 1.05
    """loss_mode 'sapo': gate temperature for tokens with delta <= 0 (TRL's default)."""
    overlong_buffer: int = 2
    """Overlong shaping (batch_filter 'overlong_shaping' / 'dapo'): DAPO's buffer L_cache."""
    overlong_penalty_factor: float = 1.0
    """Overlong shaping: scale of the soft overlong penalty (DAPO: 1)."""
    kl_cov_ratio: float = 0.002
    """loss_mode 'kl_cov': fraction k of real tokens (top covariance) that get the KL term."""
    kl_cov_coef: float = 1.0
    """loss_mode 'kl_cov': weight beta of |log pi - log pi_old| on those tokens (paper: 1)."""
    dynamic_sampling_max_draws: int = 0
    """Dynamic sampling: extra batches it may draw to refill non-tied groups (0: shrink)."""

    # The loop's extension points: each names an entry of a registry (see README).
    advantage_estimator: str = "group"
    """How deltas are made: a key of ``advantages.ADVANTAGE_ESTIMATORS`` ('group')."""
    policy_objective: str = "token"
    """Policy objective: a key of ``losses.POLICY_OBJECTIVES`` ('token'; GSPO: 'sequence')."""
    batch_filter: str = "none"
    """Which sampled groups the optimizer sees: a key of ``rollout.BATCH_FILTERS``."""
    rollout_source: str = "on_policy"
    """Who samples, and whose log-probs are old: a key of ``rollout.ROLLOUT_SOURCES``."""

    # PPO with a value model (advantage_estimator 'gae'; see value.py and gae.py)
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

    # Off-policy rollouts (rollout_source 'stale'; see pgrl_helpers.offpolicy).
    staleness: int = 0
    """'stale' source: epochs (policy versions) the sampler lags behind the trainer."""
    sampler_temperature: float = 1.0
    """'stale' source: the sampler divides its logits by this; the loss ignores it."""
    sampler_dtype: str = "float32"
    """'stale' source: the sampler rounds its logits to this dtype ('bfloat16': engine-like)."""
    off_policy_correction: str = "none"
    """'none' (old = sampler), 'recompute' (old = trainer, no weight), 'tis' or 'mis'."""
    correction_level: str = "token"
    """TIS / MIS weights per 'token' or per 'sequence' (product over the response)."""
    correction_cap: float = 2.0
    """C of TIS (weights truncated at C) and MIS (weights above C dropped); inf allowed."""
    correction_cap_low: float | None = None
    """Two-sided TIS / MIS: weights below this are raised to it (TIS) or dropped (MIS)."""

    # Remedies practitioners reach for, each off by default (the defaults leave every run as
    # it was). Entropy: Clip-Cov and the high-entropy-token mask act on the per-token policy
    # loss (``losses.apply_token_remedies``); KL: the adaptive controller sets beta each step
    # (``kl.AdaptiveKLController``); off-policy: ``correction_cap_low`` above.
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
    """Adaptive KL: horizon H, beta changes by a factor 1 + e_t x responses / H per step."""
    profile_time: bool = False
    """Log the wall time of each phase per epoch (time_* keys; off keeps histories exact)."""

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

    def _validate_value_options(self) -> None:
        """Checks of the 'gae' fields: gamma, gae_lambda, critic lr, value_clip, kl_in_reward."""
        for name in ("gamma", "gae_lambda"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or not 0 <= value <= 1
            ):
                raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
        for name in ("critic_learning_rate", "value_clip"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value <= 0
            ):
                raise ValueError(f"{name} must be a positive finite number or None, got {value!r}")
        for name in ("whiten_advantages", "kl_in_reward"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.advantage_estimator == "gae" and self.model != "autoregressive":
            raise ValueError(
                "advantage_estimator 'gae' needs model 'autoregressive' (its critic is the "
                f"autoregressive trunk with a value head), got model {self.model!r}"
            )
        if self.kl_in_reward and (self.advantage_estimator != "gae" or self.kl_coef <= 0):
            raise ValueError(
                "kl_in_reward puts -kl_coef x k1 into per-token rewards: it needs "
                "advantage_estimator 'gae' (per-token advantages) and kl_coef > 0, got "
                f"{self.advantage_estimator!r} and {self.kl_coef!r}"
            )

    def _validate_response_options(self) -> None:
        """Checks of task, model pairing, loss_aggregation, max_response_length, epsilon_high."""
        _check_choice(self.task, tuple(TASKS), "task")
        _check_choice(self.loss_aggregation, LOSS_AGGREGATIONS, "loss_aggregation")
        if (self.task in AUTOREGRESSIVE_TASKS) != (self.model == "autoregressive"):
            raise ValueError(
                f"task {self.task!r} with model {self.model!r}: the variable-length task "
                "'sort_dedup' and the multi-turn task 'tool_compare' need model "
                "'autoregressive' (it must choose when to stop / read the tool's answer), "
                "and the autoregressive policy is only wired to those tasks"
            )
        if self.task in AUTOREGRESSIVE_TASKS and self.prompt_source != "random":
            raise ValueError(f"task {self.task!r} trains on prompt_source 'random'")
        if not isinstance(self.mask_tool_tokens, bool):
            raise TypeError(
                f"mask_tool_tokens must be True or False, got {self.mask_tool_tokens!r}"
            )
        if self.task != "tool_compare" and not self.mask_tool_tokens:
            raise ValueError(
                "mask_tool_tokens=False (the unmasked-tool-tokens bug) acts only with task "
                f"'tool_compare', got task {self.task!r}"
            )
        if self.task == "tool_compare":
            if self.prompt_length != 2:
                raise ValueError(
                    f"task 'tool_compare' has prompts [a, b]: prompt_length must be 2, got "
                    f"{self.prompt_length}"
                )
            if self.max_response_length not in (None, TOOL_RESPONSE_LENGTH):
                raise ValueError(
                    f"task 'tool_compare' has {TOOL_RESPONSE_LENGTH} response slots (a call, "
                    "the tool's reply, the answer): leave max_response_length None, got "
                    f"{self.max_response_length!r}"
                )
        if self.max_response_length is not None and (
            not isinstance(self.max_response_length, int)
            or self.max_response_length < self.prompt_length + 1
        ):
            raise ValueError(
                f"max_response_length must be an int >= prompt_length + 1 = "
                f"{self.prompt_length + 1} (longest answer plus EOS), got "
                f"{self.max_response_length!r}"
            )
        eps_high = self.epsilon_high
        if eps_high is not None and (
            isinstance(eps_high, bool)
            or not isinstance(eps_high, (int, float))
            or not math.isfinite(eps_high)
            or eps_high <= 0
        ):
            raise ValueError(
                f"epsilon_high must be a positive finite number or None, got {eps_high!r}"
            )

    def _validate_objective_options(self) -> None:
        """Checks of the 2025 objective family's fields and their combinations."""
        for name, low in (
            ("dual_clip_c", 1.0),
            ("sapo_temperature_pos", 0.0),
            ("sapo_temperature_neg", 0.0),
        ):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value <= low
            ):
                raise ValueError(f"{name} must be a finite number > {low:g}, got {value!r}")
        for name, value in (("kl_cov_ratio", self.kl_cov_ratio), ("kl_cov_coef", self.kl_cov_coef)):
            low_ok = value > 0 if name == "kl_cov_ratio" else value >= 0
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or not low_ok
                or (name == "kl_cov_ratio" and value > 1)
            ):
                bounds = "in (0, 1]" if name == "kl_cov_ratio" else ">= 0 and finite"
                raise ValueError(f"{name} must be a number {bounds}, got {value!r}")
        if self.loss_mode == "kl_cov" and self.policy_objective != "token":
            raise ValueError(
                "loss_mode 'kl_cov' penalises single tokens: it needs policy_objective "
                f"'token', got {self.policy_objective!r}"
            )
        draws = self.dynamic_sampling_max_draws
        if not isinstance(draws, int) or isinstance(draws, bool) or draws < 0:
            raise ValueError(f"dynamic_sampling_max_draws must be an int >= 0, got {draws!r}")
        if draws > 0 and self.batch_filter not in ("dynamic_sampling", "dapo"):
            raise ValueError(
                "dynamic_sampling_max_draws > 0 refills the batch of dynamic sampling: it needs "
                f"batch_filter 'dynamic_sampling' or 'dapo', got {self.batch_filter!r}"
            )
        factor = self.overlong_penalty_factor
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor >= 0:
            raise ValueError(f"overlong_penalty_factor must be a number >= 0, got {factor!r}")
        if self.batch_filter in OVERLONG_FILTERS:
            if self.task != "sort_dedup":
                raise ValueError(
                    f"batch_filter {self.batch_filter!r} reads EOS and the maximum length: it "
                    f"needs task 'sort_dedup' (got task {self.task!r})"
                )
            buffer = self.overlong_buffer
            if not isinstance(buffer, int) or isinstance(buffer, bool):
                raise ValueError(f"overlong_buffer must be an int, got {buffer!r}")
            if not 1 <= buffer <= self.response_length:
                raise ValueError(
                    f"overlong_buffer must lie in 1 .. response_length={self.response_length}, "
                    f"got {buffer}"
                )
        if self.batch_filter == "overlong_filtering" and self.loss_aggregation == "sequence_mean":
            raise ValueError(
                "batch_filter 'overlong_filtering' empties the mask of truncated responses, "
                "which loss_aggregation 'sequence_mean' cannot average over: use 'token_mean' "
                "or 'constant_normalizer'"
            )

    def _validate_remedies(self) -> None:
        """Checks of the default-off remedies: Clip-Cov, entropy mask, adaptive KL."""
        check_clip_cov(self.clip_cov_ratio, self.clip_cov_lb, self.clip_cov_ub)
        if self.clip_cov_ratio > 0 and (
            self.loss_mode != "clipped" or self.policy_objective != "token"
        ):
            raise ValueError(
                "clip_cov_ratio > 0 (Clip-Cov) detaches tokens of the clipped PPO loss: it "
                "needs loss_mode 'clipped' and policy_objective 'token', got "
                f"{self.loss_mode!r} and {self.policy_objective!r}"
            )
        q = self.top_entropy_quantile
        if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 < q <= 1:
            raise ValueError(f"top_entropy_quantile must be a number in (0, 1], got {q!r}")
        if self.kl_target is not None:
            if self.kl_coef <= 0 or self.kl_in_reward:
                raise ValueError(
                    "kl_target adapts the KL term's coefficient, starting from kl_coef: it "
                    f"needs kl_coef > 0 and kl_in_reward False, got {self.kl_coef!r} and "
                    f"{self.kl_in_reward!r}"
                )
            AdaptiveKLController(self.kl_coef, self.kl_target, self.kl_horizon)  # checks
        elif (
            not isinstance(self.kl_horizon, int)
            or isinstance(self.kl_horizon, bool)
            or self.kl_horizon < 1
        ):
            raise ValueError(f"kl_horizon must be a positive int, got {self.kl_horizon!r}")

    def validate(self) -> None:
        """Raise ValueError/TypeError naming the first bad field; called before training."""
        _check_choice(self.deltas_mode, DELTA_MODES, "deltas_mode")
        _check_choice(self.loss_mode, LOSS_MODES, "loss_mode")
        _check_choice(self.kl_estimator, KL_ESTIMATORS, "kl_estimator")
        _check_choice(self.model, tuple(MODELS), "model")
        _check_choice(self.advantage_estimator, tuple(ADVANTAGE_ESTIMATORS), "advantage_estimator")
        _check_choice(self.policy_objective, tuple(POLICY_OBJECTIVES), "policy_objective")
        _check_choice(self.batch_filter, tuple(BATCH_FILTERS), "batch_filter")
        _check_choice(self.rollout_source, tuple(ROLLOUT_SOURCES), "rollout_source")
        check_off_policy_fields(self)
        self._validate_response_options()
        self._validate_objective_options()
        _check_choice(self.prompt_source, PROMPT_SOURCES, "prompt_source")
        for name in (
            "num_epochs",
            "num_steps_per_epoch",
            "num_responses",
            "compute_ref_model_period",
            "prompt_length",
            "vocab_size",
            "embedding_dim",
            "num_layers",
            "num_heads",
            "eval_every",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        for name in ("prompts_per_epoch", "num_eval_prompts", "num_threads"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive int or None, got {value!r}")
        self._validate_value_options()
        self._validate_remedies()
        if (
            self.advantage_estimator == "group"
            and self.deltas_mode in GROUP_MODES
            and self.num_responses < 2
        ):
            raise ValueError(
                f"deltas_mode {self.deltas_mode!r} compares responses within a group and "
                f"needs num_responses (G) >= 2, got {self.num_responses}"
            )
        for name in ("learning_rate", "epsilon"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a positive finite number, got {value!r}")
        for name in ("kl_coef", "entropy_coef"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be >= 0 and finite, got {value!r}")
        if self.task == "tool_compare":
            pass  # its reward is fixed: 1 for the right final answer (reward_fn is unused)
        elif isinstance(self.reward_fn, str):
            names = DEDUP_REWARD_FNS if self.task == "sort_dedup" else REWARD_FNS
            _check_choice(self.reward_fn, tuple(names), "reward_fn")
        elif not callable(self.reward_fn):
            raise TypeError(
                f"reward_fn must be a name or callable, got {type(self.reward_fn).__name__}"
            )
        if self.model in ("transformer", "autoregressive") and self.embedding_dim % self.num_heads:
            raise ValueError(
                f"embedding_dim ({self.embedding_dim}) must be divisible by num_heads "
                f"({self.num_heads}) for the transformer"
            )
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
        space = self.vocab_size**self.prompt_length
        if space > 2**62:
            raise ValueError(
                f"vocab_size**prompt_length = {space} is too large to index prompts; "
                "use shorter prompts or a smaller vocabulary"
            )
        if self.target_validation_exact_sort is not None and not (
            0 < self.target_validation_exact_sort <= 1
        ):
            raise ValueError(
                f"target_validation_exact_sort must lie in (0, 1] or be None, "
                f"got {self.target_validation_exact_sort!r}"
            )
        after = self.epochs_after_target
        if not isinstance(after, int) or isinstance(after, bool) or after < 0:
            raise ValueError(f"epochs_after_target must be an int >= 0, got {after!r}")
        if after > 0 and self.target_validation_exact_sort is None:
            raise ValueError(
                f"epochs_after_target={after} counts epochs after the target is reached: "
                "set target_validation_exact_sort too"
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
        if self.num_eval_prompts is not None:
            return self.num_eval_prompts
        keys = self.build_task().num_keys()
        if self.prompt_source == "lecture":
            return min(1000, keys // 4)
        return max(1, min(500, keys // 10))

    def build_task(self):
        """The ``Task`` of this run: ``registry.TASKS[task](self)``."""
        return TASKS[self.task](self)

    def build_policy(self):
        """The policy named by ``model``, initialised with ``seed``: ``registry.MODELS[model](self)``."""
        return MODELS[self.model](self)


def config_fields() -> dict[str, str]:
    """{field name: its one-line docstring}, read from this module's source."""
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
