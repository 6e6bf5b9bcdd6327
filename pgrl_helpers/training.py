"""The GRPO training loop: ``TrainConfig`` + ``run_policy_gradient``.

One readable function does the whole run. Per epoch (as the lecture describes):

1. if the KL penalty is on, every ``compute_ref_model_period`` epochs copy the current
   policy into a frozen reference model (deep copy, gradients off, eval mode);
2. sample G responses per prompt, compute rewards and deltas once;
3. compute the old log-probs (for the ratio) and reference log-probs under
   ``torch.no_grad()``;
4. take ``num_steps_per_epoch`` optimizer steps on that batch: current log-probs,
   loss by ``loss_mode`` (+ ``kl_penalty`` x KL), backward, step.

The history is a list of dict records (a ``History``, which is a plain ``list`` that
also carries the trained ``model``): one ``"step"`` record per optimizer step and one
``"eval"`` record every ``eval_every`` epochs (and before the first and after the last
epoch). Every metric name is defined once in ``METRICS``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, fields

import torch
from tqdm.auto import tqdm

from . import autoregressive as ar
from .advantages import DELTA_MODES, GROUP_MODES, compute_deltas
from .dedup_task import DEDUP_REWARD_FNS, compute_dedup_reward, exact_dedup
from .kl import KL_ESTIMATORS, compute_kl_penalty, kl_estimate
from .losses import LOSS_MODES, clip_fraction, compute_per_token_loss, compute_ratio
from .masking import LOSS_AGGREGATIONS, aggregate_loss, masked_mean, masked_normalize
from .models import LectureModel, SortTransformer
from .sampling import compute_log_probs, greedy_responses, sample_responses, token_entropy
from .sort_task import (
    LECTURE_PROMPTS,
    REWARD_FNS,
    compute_reward,
    exact_sort,
    lecture_prompts,
    make_prompts,
)

MODEL_NAMES: tuple[str, ...] = ("lecture", "transformer", "autoregressive")
TASKS: tuple[str, ...] = ("sort", "sort_dedup")
PROMPT_SOURCES: tuple[str, ...] = ("lecture", "random")

#: Every metric the history records, defined once (name -> one-line description).
METRICS: dict[str, str] = {
    "kind": "'step' (one optimizer step) or 'eval' (a held-out evaluation)",
    "epoch": "step: index of the epoch (0-based); eval: number of epochs completed",
    "step": "step: index of the optimizer step (0-based, over the run); eval: steps done",
    "inner_step": "index of the step within its epoch, 0 .. num_steps_per_epoch - 1",
    "loss": "the minimised loss: policy loss + kl_penalty * KL - entropy_coef * entropy",
    "mean_reward": "mean reward of the epoch's sampled responses (all prompts, all G)",
    "kl": "KL(policy || reference) per response, by kl_estimator; None when kl_penalty is 0",
    "clip_fraction": "fraction of tokens outside the clip range (clipped mode cuts their gradient)",
    "entropy": "mean entropy (nats) of the policy over output positions of the epoch's prompts",
    "ratio_mean": "mean per-token ratio pi / pi_old against the policy that sampled the batch",
    "grad_norm": "L2 norm of the gradient of the loss over all parameters",
    "response_length": "mean tokens per sampled response, EOS included (fixed: prompt_length)",
    "responses_sampled": "number of responses sampled so far (epochs x prompts x G)",
    "heldout_exact_sort": "fraction of held-out prompts the greedy policy sorts exactly",
    "heldout_mean_reward": "mean reward of the greedy responses on the held-out prompts",
    "train_exact_sort": "fraction of the lecture's training prompts sorted greedily (else None)",
}

STEP_KEYS = (
    "kind",
    "epoch",
    "step",
    "inner_step",
    "loss",
    "mean_reward",
    "kl",
    "clip_fraction",
    "entropy",
    "ratio_mean",
    "grad_norm",
    "response_length",
)
EVAL_KEYS = (
    "kind",
    "epoch",
    "step",
    "responses_sampled",
    "heldout_exact_sort",
    "heldout_mean_reward",
    "train_exact_sort",
)

#: Prompt spaces larger than this are sampled with rejection instead of a permutation.
_PERMUTATION_LIMIT = 2_000_000


@dataclass
class TrainConfig:
    """Everything one run of ``run_policy_gradient`` needs. Defaults = the lecture's run."""

    deltas_mode: str = "centered_rewards"
    """How rewards become deltas: one of ``advantages.DELTA_MODES``."""
    loss_mode: str = "naive"
    """Policy loss: one of ``losses.LOSS_MODES`` ('naive', 'unclipped', 'clipped')."""
    epsilon: float = 0.2
    """Clip range of the 'clipped' loss (and the threshold of the clip_fraction metric)."""
    kl_penalty: float = 0.0
    """Coefficient beta of the KL(policy || reference) term; 0 turns the reference off."""
    entropy_coef: float = 0.0
    """Weight of an entropy bonus (loss -= coef x mean token entropy); 0 = the lecture's loss."""
    kl_estimator: str = "k3"
    """Per-sample KL estimator: one of ``kl.KL_ESTIMATORS``."""
    compute_ref_model_period: int = 10
    """Refresh the frozen reference model every this many epochs (only when kl_penalty > 0)."""
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
    """Size of the held-out set (None: min(1000, a quarter of all possible prompts))."""
    eval_seed: int = 12345
    """Seed of the held-out prompt set: the same for every training seed."""
    target_heldout_exact_sort: float | None = None
    """Stop early once held-out greedy exact-sort reaches this fraction (None: never)."""
    detach_old_log_probs: bool = True
    """True: old log-probs frozen under no_grad. False reproduces the freeze pitfall."""
    progress: bool = False
    """Show a tqdm.auto progress bar over epochs."""
    num_threads: int | None = 1
    """torch CPU threads during the run (restored after); 1 is fastest for tiny models."""

    task: str = "sort"
    """'sort' (fixed length) or 'sort_dedup' (sort, drop repeats, then EOS; model 'autoregressive')."""
    max_response_length: int | None = None
    """Autoregressive policy: most tokens per response, EOS included (None: prompt_length + 2)."""
    loss_aggregation: str = "token_mean"
    """Per-token losses -> one number: one of ``masking.LOSS_AGGREGATIONS`` (padding never counts)."""
    epsilon_high: float | None = None
    """Clip-higher (DAPO): upper clip edge 1 + epsilon_high; None means epsilon (symmetric)."""

    @property
    def response_length(self) -> int:
        """Slots per sampled response: prompt_length, or the autoregressive maximum."""
        if self.model != "autoregressive":
            return self.prompt_length
        if self.max_response_length is None:
            return self.prompt_length + 2
        return self.max_response_length

    def _validate_response_options(self) -> None:
        """Checks of task, model pairing, loss_aggregation, max_response_length, epsilon_high."""
        _check_choice(self.task, TASKS, "task")
        _check_choice(self.loss_aggregation, LOSS_AGGREGATIONS, "loss_aggregation")
        if (self.task == "sort_dedup") != (self.model == "autoregressive"):
            raise ValueError(
                f"task {self.task!r} with model {self.model!r}: the variable-length task "
                "'sort_dedup' needs model 'autoregressive' (it must choose when to stop), "
                "and the autoregressive policy is only wired to 'sort_dedup'"
            )
        if self.task == "sort_dedup" and self.prompt_source != "random":
            raise ValueError("task 'sort_dedup' trains on prompt_source 'random'")
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

    def validate(self) -> None:
        """Raise ValueError/TypeError naming the first bad field; called before training."""
        _check_choice(self.deltas_mode, DELTA_MODES, "deltas_mode")
        _check_choice(self.loss_mode, LOSS_MODES, "loss_mode")
        _check_choice(self.kl_estimator, KL_ESTIMATORS, "kl_estimator")
        _check_choice(self.model, MODEL_NAMES, "model")
        self._validate_response_options()
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
        if self.deltas_mode in GROUP_MODES and self.num_responses < 2:
            raise ValueError(
                f"deltas_mode {self.deltas_mode!r} compares responses within a group and "
                f"needs num_responses (G) >= 2, got {self.num_responses}"
            )
        for name in ("learning_rate", "epsilon"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a positive finite number, got {value!r}")
        if self.loss_mode == "clipped" and not self.epsilon < 1:
            raise ValueError(f"epsilon must lie in (0, 1) for the clipped loss, got {self.epsilon}")
        for name in ("kl_penalty", "entropy_coef"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be >= 0 and finite, got {value!r}")
        if isinstance(self.reward_fn, str):
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
        if self.num_eval_prompts is not None and self.num_eval_prompts > space // 2:
            raise ValueError(
                f"num_eval_prompts {self.num_eval_prompts} is more than half of the {space} "
                f"possible prompts (length {self.prompt_length}, vocab {self.vocab_size}); "
                f"training needs prompts it can use: choose <= {space // 2}"
            )
        if self.target_heldout_exact_sort is not None and not (
            0 < self.target_heldout_exact_sort <= 1
        ):
            raise ValueError(
                f"target_heldout_exact_sort must lie in (0, 1] or be None, "
                f"got {self.target_heldout_exact_sort!r}"
            )

    @property
    def batch_prompts(self) -> int:
        """Prompts per epoch actually used."""
        if self.prompt_source == "lecture":
            return len(LECTURE_PROMPTS)
        return 64 if self.prompts_per_epoch is None else self.prompts_per_epoch

    @property
    def heldout_size(self) -> int:
        """Number of held-out prompts actually used."""
        if self.num_eval_prompts is not None:
            return self.num_eval_prompts
        return min(1000, self.vocab_size**self.prompt_length // 4)


def _check_choice(value, valid: tuple[str, ...], name: str) -> None:
    if value not in valid:
        raise ValueError(f"unknown {name} {value!r}; valid values are: {', '.join(valid)}")


class History(list):
    """The run's records (a plain list of dicts) plus what a caller may want to inspect.

    Attributes: ``config``, ``model`` (the policy being trained), ``ref_model`` (the
    current frozen reference, or None), ``ref_refresh_epochs`` (epochs at which the
    reference was refreshed), ``heldout_prompts`` int[n, pos], ``train_prompts``
    (the lecture prompts, or the last random batch), ``stop_reason`` (None, 'callback'
    or 'target').
    """

    def __init__(self, config: TrainConfig):
        super().__init__()
        self.config = config
        self.model = None
        self.ref_model = None
        self.ref_refresh_epochs: list[int] = []
        self.heldout_prompts: torch.Tensor | None = None
        self.train_prompts: torch.Tensor | None = None
        self.stop_reason: str | None = None

    def steps(self) -> list[dict]:
        """The step records."""
        return [r for r in self if r["kind"] == "step"]

    def evals(self) -> list[dict]:
        """The eval records."""
        return [r for r in self if r["kind"] == "eval"]


def history_columns(history: list[dict], kind: str = "step") -> dict[str, list]:
    """Records of one kind ('step' or 'eval') as columns: {metric name: list of values}.

    Handy for plotting without pandas: ``cols = history_columns(h, "eval");
    plt.plot(cols["epoch"], cols["heldout_exact_sort"])``.
    """
    _check_choice(kind, ("step", "eval"), "record kind")
    records = [r for r in history if r.get("kind") == kind]
    keys = STEP_KEYS if kind == "step" else EVAL_KEYS
    return {key: [r.get(key) for r in records] for key in keys}


# --------------------------------------------------------------------------------------
# Prompts: a held-out set that training never sees
# --------------------------------------------------------------------------------------


def _encode(prompts: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """int[batch, pos] -> int64[batch]: each prompt as one number in base vocab_size."""
    powers = vocab_size ** torch.arange(prompts.shape[1], dtype=torch.long)
    return (prompts.long() * powers).sum(dim=-1)


def _decode(codes: torch.Tensor, length: int, vocab_size: int) -> torch.Tensor:
    powers = vocab_size ** torch.arange(length, dtype=torch.long)
    return (codes[:, None] // powers) % vocab_size


def make_heldout_prompts(config: TrainConfig) -> torch.Tensor:
    """The fixed held-out prompt set int64[n, prompt_length]: distinct, and never trained on.

    Drawn with ``config.eval_seed`` (not the training seed). For prompt_source
    'lecture' the 3 training prompts are left out; for 'random' training batches
    redraw any prompt that lands in this set (see ``_training_prompts``).
    """
    n, length, vocab = config.heldout_size, config.prompt_length, config.vocab_size
    space = vocab**length
    generator = torch.Generator().manual_seed(config.eval_seed)
    excluded = set()
    if config.prompt_source == "lecture":
        excluded = set(_encode(lecture_prompts(), vocab).tolist())
    if space <= _PERMUTATION_LIMIT:
        order = torch.randperm(space, generator=generator)
        keep = [c for c in order[: n + len(excluded)].tolist() if c not in excluded][:n]
        codes = torch.tensor(keep, dtype=torch.long)
    else:
        chosen: dict[int, None] = {}
        while len(chosen) < n:
            draw = torch.randint(0, space, (2 * n,), generator=generator).tolist()
            for c in draw:
                if c not in excluded and len(chosen) < n:
                    chosen[c] = None
        codes = torch.tensor(list(chosen), dtype=torch.long)
    return _decode(codes, length, vocab)


def _training_prompts(
    config: TrainConfig, generator: torch.Generator, heldout_codes: torch.Tensor
) -> torch.Tensor:
    """One epoch's prompts: the lecture's 3, or fresh random ones that avoid the held-out set."""
    if config.prompt_source == "lecture":
        return lecture_prompts()
    prompts = make_prompts(
        config.batch_prompts, config.prompt_length, config.vocab_size, generator=generator
    )
    clash = torch.isin(_encode(prompts, config.vocab_size), heldout_codes)
    while clash.any():  # redraw the rows that hit a held-out prompt
        fresh = make_prompts(
            int(clash.sum()), config.prompt_length, config.vocab_size, generator=generator
        )
        prompts[clash] = fresh
        clash = torch.isin(_encode(prompts, config.vocab_size), heldout_codes)
    return prompts


# --------------------------------------------------------------------------------------
# Models and evaluation
# --------------------------------------------------------------------------------------


def build_model(config: TrainConfig) -> torch.nn.Module:
    """The policy named by ``config.model``, initialised with ``config.seed``."""
    if config.model == "autoregressive":
        return ar.AutoregressiveSortPolicy(
            config.vocab_size,
            config.prompt_length,
            config.response_length,
            d_model=config.embedding_dim,
            num_layers=config.num_layers,
            num_heads=config.num_heads,
            seed=config.seed,
        )
    if config.model == "lecture":
        return LectureModel(
            config.vocab_size,
            config.embedding_dim,
            config.prompt_length,
            config.prompt_length,
            seed=config.seed,
        )
    return SortTransformer(
        config.vocab_size,
        config.prompt_length,
        d_model=config.embedding_dim,
        num_layers=config.num_layers,
        num_heads=config.num_heads,
        seed=config.seed,
    )


def evaluate_greedy(
    model, prompts: torch.Tensor, reward_fn, task: str = "sort"
) -> dict[str, float]:
    """Greedy decoding on ``prompts`` int[batch, pos]: {'exact_sort', 'mean_reward'}.

    task 'sort_dedup' (autoregressive policy): 'exact_sort' is the exact sorted-distinct
    answer followed by EOS, and the reward is a ``dedup_task`` reward.
    """
    if task == "sort_dedup":
        responses = ar.greedy_responses(model, prompts)  # [batch, 1, pos], eval mode inside
        eos = model.eos_token
        return {
            "exact_sort": exact_dedup(prompts, responses, eos).float().mean().item(),
            "mean_reward": compute_dedup_reward(prompts, responses, reward_fn, eos).mean().item(),
        }
    was_training = model.training
    model.eval()
    responses = greedy_responses(model, prompts)  # [batch, 1, pos]
    model.train(was_training)
    return {
        "exact_sort": exact_sort(prompts, responses).float().mean().item(),
        "mean_reward": compute_reward(prompts, responses, reward_fn).mean().item(),
    }


def _freeze(model: torch.nn.Module) -> torch.nn.Module:
    """A frozen deep copy: gradients off, eval mode (the lecture's ``model.clone()``)."""
    ref = copy.deepcopy(model)
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref.eval()


class NonFiniteError(FloatingPointError):
    """The loss, rewards or gradient became NaN or inf during training."""


def _check_finite_scalar(value: torch.Tensor, what: str, epoch: int, step: int) -> None:
    if not torch.isfinite(value).all():
        raise NonFiniteError(
            f"non-finite {what} ({value.flatten()[:4].tolist()}) at epoch {epoch}, step {step}: "
            "try a smaller learning_rate, or check the reward function"
        )


def _sample(config: TrainConfig, model, prompts, G: int, generator):
    """(responses int[batch, trial, pos], response mask float[...] or None for fixed length)."""
    if config.model == "autoregressive":
        responses = ar.sample_responses(model, prompts, G, generator=generator)
        return responses, ar.response_mask(responses, model.eos_token)
    return sample_responses(model, prompts, G, generator=generator), None


def _rewards(config: TrainConfig, model, prompts, responses) -> torch.Tensor:
    """float[batch, trial] by the task's reward function."""
    if config.task == "sort_dedup":
        return compute_dedup_reward(prompts, responses, config.reward_fn, model.eos_token)
    return compute_reward(prompts, responses, config.reward_fn)


def _kl(log_probs, ref_log_probs, estimator: str, mask) -> torch.Tensor:
    """KL per response (sum over real tokens), mean over responses."""
    if mask is None:
        return compute_kl_penalty(log_probs, ref_log_probs, estimator)
    per_token = kl_estimate(log_probs, ref_log_probs, estimator)
    return masked_normalize(per_token, mask, float(mask.shape[0] * mask.shape[1]))


def _entropy(model, prompts, responses, mask) -> torch.Tensor:
    """Mean policy entropy over output positions (autoregressive: over real response tokens)."""
    if mask is None:
        return token_entropy(prompts, model).mean()  # mean over batch, pos
    return masked_mean(ar.token_entropy(prompts, responses, model), mask)


# --------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------


def run_policy_gradient(
    config: TrainConfig,
    callback: Callable[[int, History], object] | None = None,
    model: torch.nn.Module | None = None,
) -> History:
    """Train a policy on the sort task with GRPO-style policy gradients; return the history.

    ``callback(epoch, history)`` runs after every epoch (and its evaluation, if any);
    returning True or "stop" ends the run. ``model`` continues training a given policy
    (it must fit the config's vocab_size and prompt_length) instead of building one.
    The same config (seed included) gives an identical history.
    """
    config.validate()
    threads_before = torch.get_num_threads()
    if config.num_threads is not None:
        torch.set_num_threads(config.num_threads)
    try:
        return _run(config, callback, model)
    finally:
        torch.set_num_threads(threads_before)


def _run(config: TrainConfig, callback, model) -> History:
    """The body of ``run_policy_gradient`` (after validation and thread setup)."""
    history = History(config)
    if model is None:
        model = build_model(config)
    elif (
        getattr(model, "vocab_size", None) != config.vocab_size
        or getattr(model, "prompt_length", config.prompt_length) != config.prompt_length
    ):
        raise ValueError(
            f"the given model (vocab_size {getattr(model, 'vocab_size', None)}, prompt_length "
            f"{getattr(model, 'prompt_length', None)}) does not fit the config (vocab_size "
            f"{config.vocab_size}, prompt_length {config.prompt_length})"
        )
    model.train()
    history.model = model
    optimizer = torch.optim.Adam(model.parameters(), lr=config.learning_rate)
    prompt_generator = torch.Generator().manual_seed(config.seed)
    sample_generator = torch.Generator().manual_seed(config.seed + 1_000_003)
    heldout = make_heldout_prompts(config)
    heldout_codes = _encode(heldout, config.vocab_size)
    history.heldout_prompts = heldout
    use_ratio = config.loss_mode != "naive"
    log_probs_fn = ar.compute_log_probs if config.model == "autoregressive" else compute_log_probs
    G = config.num_responses
    step = 0
    responses_sampled = 0

    def evaluate(epochs_done: int) -> bool:
        try:
            scores = evaluate_greedy(model, heldout, config.reward_fn, config.task)
        except ValueError as err:
            raise ValueError(f"held-out evaluation after {epochs_done} epochs: {err}") from err
        train = None
        if config.prompt_source == "lecture":
            train = evaluate_greedy(model, lecture_prompts(), config.reward_fn)["exact_sort"]
        history.append(
            {
                "kind": "eval",
                "epoch": epochs_done,
                "step": step,
                "responses_sampled": responses_sampled,
                "heldout_exact_sort": scores["exact_sort"],
                "heldout_mean_reward": scores["mean_reward"],
                "train_exact_sort": train,
            }
        )
        target = config.target_heldout_exact_sort
        return target is not None and scores["exact_sort"] >= target

    if evaluate(0):
        history.stop_reason = "target"
        return history
    epochs = range(config.num_epochs)
    bar = tqdm(epochs, desc="epochs", disable=not config.progress)
    for epoch in bar:
        # 1. refresh the frozen reference model on schedule (only when the KL term is on)
        if config.kl_penalty > 0 and epoch % config.compute_ref_model_period == 0:
            history.ref_model = _freeze(model)
            history.ref_refresh_epochs.append(epoch)

        # 2. sample G responses per prompt; rewards and deltas once per epoch
        prompts = _training_prompts(config, prompt_generator, heldout_codes)  # [batch, pos]
        history.train_prompts = prompts
        responses, mask = _sample(config, model, prompts, G, sample_generator)  # mask: None
        responses_sampled += responses.shape[0] * G
        try:
            rewards = _rewards(config, model, prompts, responses)  # [batch, trial]
        except ValueError as err:
            raise ValueError(f"rewards at epoch {epoch}, step {step}: {err}") from err
        deltas = compute_deltas(rewards, config.deltas_mode)  # [batch, trial]
        mean_reward = rewards.mean().item()

        # 3. frozen log-probs of the sampling policy and of the reference model
        with torch.no_grad():
            old_log_probs = log_probs_fn(prompts, responses, model)  # [batch, trial, pos]
            ref_log_probs = None
            if config.kl_penalty > 0:
                ref_log_probs = log_probs_fn(prompts, responses, history.ref_model)

        # 4. several optimizer steps on this one batch
        for inner_step in range(config.num_steps_per_epoch):
            log_probs = log_probs_fn(prompts, responses, model)  # [batch, trial, pos]
            _check_finite_scalar(log_probs.detach(), "log-probs", epoch, step)
            if config.detach_old_log_probs:
                ratio_reference = old_log_probs
            else:
                # The freeze pitfall: "old" log-probs that still carry gradients and come
                # from the current policy, so ratio == 1 and its gradient is exactly 0.
                # (A second forward pass with gradients gives the same values and cancels
                # up to float rounding, ~1e-9, which Adam would then amplify into noise;
                # computing them once per epoch with gradients crashes at the 2nd backward.)
                ratio_reference = log_probs
            per_token_loss = compute_per_token_loss(
                log_probs,
                deltas,
                config.loss_mode,
                old_log_probs=ratio_reference if use_ratio else None,
                epsilon=config.epsilon,
                check_frozen=config.detach_old_log_probs,
                epsilon_high=config.epsilon_high,
            )  # [batch, trial, pos]
            # padding after EOS never counts; fixed-length 'token_mean' is the plain mean
            loss = aggregate_loss(per_token_loss, mask, config.loss_aggregation)
            kl_value = None
            if config.kl_penalty > 0:
                kl = _kl(log_probs, ref_log_probs, config.kl_estimator, mask)
                loss = loss + config.kl_penalty * kl
                kl_value = kl.item()
            with torch.set_grad_enabled(config.entropy_coef > 0):
                entropy = _entropy(model, prompts, responses, mask)
            if config.entropy_coef > 0:
                loss = loss - config.entropy_coef * entropy
            _check_finite_scalar(loss.detach(), "loss", epoch, step)
            optimizer.zero_grad()
            loss.backward()
            grad_norm = torch.nn.utils.get_total_norm(
                [p.grad for p in model.parameters() if p.grad is not None]
            )
            _check_finite_scalar(grad_norm, "gradient norm", epoch, step)
            with torch.no_grad():
                ratio = compute_ratio(log_probs.detach(), old_log_probs)
                record = {
                    "kind": "step",
                    "epoch": epoch,
                    "step": step,
                    "inner_step": inner_step,
                    "loss": loss.item(),
                    "mean_reward": mean_reward,
                    "kl": kl_value,
                    "clip_fraction": clip_fraction(
                        log_probs.detach(),
                        old_log_probs,
                        deltas,
                        config.epsilon,
                        epsilon_high=config.epsilon_high,
                        mask=mask,
                    ),
                    "entropy": entropy.item(),
                    "ratio_mean": (ratio if mask is None else ratio[mask > 0]).mean().item(),
                    "grad_norm": grad_norm.item(),
                    "response_length": float(responses.shape[-1])
                    if mask is None
                    else mask.sum(dim=-1).mean().item(),
                }
            optimizer.step()
            history.append(record)
            if not all(torch.isfinite(p).all() for p in model.parameters()):
                raise NonFiniteError(
                    f"the model's parameters became non-finite in the optimizer step at epoch "
                    f"{epoch}, step {step}: try a smaller learning_rate"
                )
            step += 1

        bar.set_postfix(mean_reward=f"{mean_reward:.3f}", refresh=False)
        epochs_done = epoch + 1
        last_epoch = epochs_done == config.num_epochs
        if epochs_done % config.eval_every == 0 or last_epoch:
            if evaluate(epochs_done):
                history.stop_reason = "target"
        if callback is not None and history.stop_reason is None:
            answer = callback(epoch, history)
            if answer is True or answer == "stop":
                history.stop_reason = "callback"
        if history.stop_reason is not None:
            break
    bar.close()
    return history


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
