"""The Rollout: what one epoch samples and scores, and the optimizer steps then consume.

Two of the loop's extension points live here:

* **rollout sources** (``ROLLOUT_SOURCES``, chosen by ``TrainConfig.rollout_source``):
  who samples the responses and whose log-probs count as "old". ``"on_policy"``: the
  policy being trained samples, and its own frozen log-probs are the old ones.
  ``"stale"`` (``offpolicy.StaleSource``): a copy lagging ``staleness`` epochs behind,
  optionally with mismatched numerics, samples (asynchronous RL, engine mismatch).
* **batch filters** (``BATCH_FILTERS``, ``TrainConfig.batch_filter``): which sampled
  groups the optimizer steps see. ``"none"`` keeps all of them.

A rollout source is a class built as ``Source(policy, config)`` with two methods,
``sample(prompts, num_samples, generator) -> (responses, mask)`` and
``old_log_probs(rollout) -> float[batch, trial, pos]`` (called under ``torch.no_grad``),
and an ``after_optimizer_step()`` hook (a stale source uses it to know that the next
``sample`` starts a new epoch, so that refills within an epoch share its sampler).
A batch filter is a function ``(rollout, config) -> Rollout``; a filter that needs more
groups than were sampled (dynamic sampling with ``dynamic_sampling_max_draws``) calls
``rollout.resample(n)``, a ``Resampler`` the loop attaches: n fresh prompts drawn, sampled
and scored exactly as the loop's step 2 does (held-out keys excluded, responses counted).

Taught in notebook 11; also used in notebook 08.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ._validate import check_number, check_positive_ints


@dataclass
class Rollout:
    """One epoch's batch. Shapes: batch = prompts, trial = G samples, pos = response slots.

    * ``prompts`` int64[batch, prompt_pos]
    * ``responses`` int64[batch, trial, pos]
    * ``mask`` float32[batch, trial, pos]: 1 for a real token (EOS included), 0 for padding
    * ``rewards`` float32[batch, trial]
    * ``deltas`` float[batch, trial] or, per token (GAE), float[batch, trial, pos]: the
      advantage-like weights (set by the estimator)
    * ``old_log_probs`` float[batch, trial, pos]: log-probs of the policy that sampled the
      responses, frozen (no gradient)
    * ``ref_log_probs`` float[batch, trial, pos] or None: the reference model's, frozen
      (None when the KL term is off)
    * ``loss_weights`` float[batch, trial, pos] or None: per-token weights an off-policy
      correction (TIS / MIS, ``offpolicy``) multiplies into the per-token loss; None = 1
    * ``token_entropy`` float[batch, trial, pos] or None: the trained policy's entropy per
      slot before the epoch's optimizer steps (the sampler's too, except under the 'stale'
      source), stored by the loop only for ``TrainConfig.top_entropy_quantile`` < 1
    * ``metrics`` dict: extra step metrics the rollout source or filter reports (e.g. ESS)
    * ``resample`` a ``Resampler`` or None: draws more groups for a batch filter

    Taught in notebook 11; also used in notebook 08.
    """

    prompts: torch.Tensor
    responses: torch.Tensor
    mask: torch.Tensor
    rewards: torch.Tensor
    deltas: torch.Tensor | None = None
    old_log_probs: torch.Tensor | None = None
    ref_log_probs: torch.Tensor | None = None
    loss_weights: torch.Tensor | None = None
    metrics: dict = field(default_factory=dict)
    resample: object = None
    token_entropy: torch.Tensor | None = None

    @property
    def num_responses(self) -> int:
        """batch x trial: responses in this rollout."""
        return self.responses.shape[0] * self.responses.shape[1]

    def to(self, device: torch.device) -> Rollout:
        """This rollout with every tensor on ``device`` (the policy's: ``policy_device``).

        The loop calls it once per batch, right after the responses are scored: the policy,
        the task and the estimator may have made their tensors anywhere, and from here on
        the loss mixes them. A tensor already on ``device`` is kept as it is (no copy).
        """

        def move(x):
            return x.to(device) if isinstance(x, torch.Tensor) else x

        moved = Rollout(*(move(getattr(self, f)) for f in _FIELDS))
        moved.metrics, moved.resample = self.metrics, self.resample
        moved.token_entropy = move(self.token_entropy)
        return moved

    def weighted(self, per_token_loss: torch.Tensor) -> torch.Tensor:
        """The per-token loss times ``loss_weights`` (unchanged when they are None)."""
        if self.loss_weights is None:
            return per_token_loss
        return per_token_loss * self.loss_weights


_FIELDS = (
    "prompts", "responses", "mask", "rewards", "deltas", "old_log_probs", "ref_log_probs",
    "loss_weights",
)  # fmt: skip


def policy_device(policy) -> torch.device:
    """The device the loop puts a policy's inputs on: ``policy.device`` if the policy declares
    one, else the device of its first parameter, else the CPU."""
    declared = getattr(policy, "device", None)
    if declared is not None:
        return torch.device(declared)
    parameters = getattr(policy, "parameters", None)
    first = next(parameters(), None) if callable(parameters) else None
    return torch.device("cpu") if first is None else first.device


class Resampler:
    """Draws n fresh training groups: the loop's step 2, and more groups for a batch filter
    that must refill its batch (DAPO's dynamic sampling).

    ``resampler(n) -> Rollout`` (prompts, responses, mask, rewards): n prompts from
    ``task.training_prompts`` (never a key in ``history.heldout_keys``), recorded in ``history``
    (``record_training_prompts``), moved to ``device`` (the policy's), G =
    ``history.config.num_responses`` responses each from ``source``, scored by ``task.reward``;
    the responses are added to ``counters["responses_sampled"]``. The rollout comes back with
    every tensor on ``device`` (``Rollout.to``: the one place the loop moves a batch). It
    shares the loop's generators, so the run stays deterministic; ``draws`` counts the calls
    made by batch filters (the loop's own draw, ``draw``, is not counted).
    """

    def __init__(self, task, source, history, prompt_generator, sample_generator, counters,
                 device=None):  # fmt: skip
        self.task, self.source, self.history, self.counters = task, source, history, counters
        self.prompt_generator, self.sample_generator = prompt_generator, sample_generator
        self.device = torch.device("cpu") if device is None else torch.device(device)
        self.draws = 0

    def __call__(self, n: int) -> Rollout:
        check_number(n, "n (prompts to draw)", 1, low_inclusive=True, integer=True)
        self.draws += 1
        return self.draw(n, "rewards of a resampled batch (dynamic sampling)")

    def draw(self, n: int, where: str, clock=None) -> Rollout:
        """n prompts drawn, sampled and scored; a reward function's ValueError names ``where``;
        ``clock`` (a ``PhaseClock``), if given, laps 'sampling' before the scoring."""
        keys = self.history.heldout_keys
        prompts = self.task.training_prompts(n, self.prompt_generator, keys)
        self.history.record_training_prompts(prompts, self.task.prompt_key(prompts))
        prompts = prompts.to(self.device)  # [batch, prompt_pos]
        group = self.history.config.num_responses
        responses, mask = self.source.sample(prompts, group, self.sample_generator)
        self.counters["responses_sampled"] += responses.shape[0] * responses.shape[1]
        if clock is not None:
            clock.lap("sampling")
        try:
            rewards = self.task.reward(prompts, responses)  # [batch, trial]
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from err
        return Rollout(prompts, responses, mask, rewards).to(self.device)


# --------------------------------------------------------------------------------------
# Rollout sources ("stale": ``offpolicy.StaleSource``)
# --------------------------------------------------------------------------------------


class OnPolicySource:
    """Rollout source ``"on_policy"``: the trained policy samples; its frozen log-probs at
    sampling time are the old ones."""

    def __init__(self, policy, config):
        self.policy = policy

    def sample(self, prompts, num_samples, generator):
        return self.policy.sample(prompts, num_samples, generator)

    def old_log_probs(self, rollout: Rollout) -> torch.Tensor:
        return self.policy.log_probs(rollout.prompts, rollout.responses)

    def after_optimizer_step(self) -> None:
        pass


# --------------------------------------------------------------------------------------
# Batch filters
# --------------------------------------------------------------------------------------


def keep_all_groups(rollout: Rollout, config) -> Rollout:
    """The identity filter: the optimizer steps see every sampled group."""
    return rollout


def tied_groups(rewards: torch.Tensor) -> torch.Tensor:
    """bool[batch]: the groups whose G rewards all tie (zero std, no learning signal).

    Taught in notebook 11.
    """
    if rewards.ndim != 2 or rewards.shape[0] == 0:
        raise ValueError(
            f"rewards must be [batch, trial] with batch >= 1, got {list(rewards.shape)}"
        )
    return (rewards == rewards[:, :1]).all(dim=-1)


def select_groups(rollout: Rollout, keep: torch.Tensor) -> Rollout:
    """The rollout restricted to the prompts (groups) where ``keep`` bool[batch] is True."""

    def pick(x):
        return None if x is None else x[keep]

    return Rollout(
        rollout.prompts[keep],
        rollout.responses[keep],
        rollout.mask[keep],
        rollout.rewards[keep],
        pick(rollout.deltas),
        pick(rollout.old_log_probs),
        pick(rollout.ref_log_probs),
    )


def concat_rollouts(parts: list[Rollout]) -> Rollout:
    """Groups of several rollouts (prompts, responses, mask, rewards only) in one, in order."""
    return Rollout(*(torch.cat([getattr(p, f) for p in parts]) for f in _SCORED))


_SCORED = ("prompts", "responses", "mask", "rewards")


def dynamic_sampling(rollout: Rollout, config=None, shaping=None) -> Rollout:
    """DAPO's dynamic sampling (Yu et al. 2025, arXiv 2503.14476, eq. 11 and Algorithm 1):
    keep only the groups whose rewards do not all tie (with a group baseline a tied group
    has all-zero deltas: no signal).

    ``config.dynamic_sampling_max_draws`` = 0 (default, or no config): the batch simply
    shrinks to its non-tied groups. > 0: like DAPO, draw more: ``rollout.resample`` is called
    for ``config.batch_prompts`` fresh prompts at a time, at most that many times, until the
    batch holds ``batch_prompts`` non-tied groups (the first ones, in draw order; the surplus
    is discarded, though its responses were sampled and counted). If the cap is hit first
    the batch keeps what it found. ``shaping`` (a filter, e.g. ``overlong_shaping``) is applied
    to every draw before the tie test. Logged: ``dynamic_sampling_draws`` (extra draws) and
    ``dynamic_sampling_fill`` (non-tied groups kept / batch_prompts), when resampling is on.
    When *every* group ties (and no draw found one) the rollout is returned unchanged: there
    is nothing to keep, and with a group baseline its deltas are all zero.

    Taught in notebook 11.
    """
    resample = rollout.resample
    if shaping is not None:
        rollout = shaping(rollout, config)
    max_draws = 0 if config is None else config.dynamic_sampling_max_draws
    keep = ~tied_groups(rollout.rewards)
    if max_draws == 0:
        return select_groups(rollout, keep) if keep.any() else rollout
    if resample is None:
        raise ValueError(
            "dynamic_sampling_max_draws > 0 needs rollout.resample (a Resampler; the training "
            "loop attaches one) to draw more groups"
        )
    target = config.batch_prompts
    parts, found, draws = [select_groups(rollout, keep)], int(keep.sum()), 0
    while found < target and draws < max_draws:
        extra = resample(target)
        draws += 1
        if shaping is not None:
            extra = shaping(extra, config)
        keep = ~tied_groups(extra.rewards)
        parts.append(select_groups(extra, keep))
        found += int(keep.sum())
    metrics = {
        "dynamic_sampling_draws": draws,
        "dynamic_sampling_fill": min(found, target) / target,
    }
    if found == 0:
        rollout.metrics.update(metrics)
        return rollout
    merged = concat_rollouts(parts)
    kept = select_groups(merged, torch.arange(found, device=merged.rewards.device) < target)
    kept.metrics.update(metrics)
    return kept


def overlong_penalty(
    lengths: torch.Tensor, max_length: int, buffer: int, factor: float = 1.0
) -> torch.Tensor:
    """DAPO's soft overlong punishment (arXiv 2503.14476, eq. 13), float32 like ``lengths``.

    R_length(|y|) = 0 for |y| <= L_max - L_cache, ((L_max - L_cache) - |y|) / L_cache
    inside the buffer, -1 beyond L_max; times ``factor``. ``lengths`` int/float[batch,
    trial] (tokens per response, EOS included), ``max_length`` = L_max, ``buffer`` =
    L_cache (1 <= buffer <= max_length). TRL: ``trl.rewards.get_soft_overlong_punishment``.

    Taught in notebook 11.
    """
    check_positive_ints(max_length=max_length)
    check_number(
        buffer, "buffer", 1, max_length, low_inclusive=True, integer=True, note="at most max_length"
    )
    check_number(factor, "factor", 0, low_inclusive=True)
    lengths = lengths.to(torch.float32)
    start = max_length - buffer
    inside = (start - lengths) / buffer
    penalty = torch.where(lengths <= start, torch.zeros_like(lengths), inside)
    return factor * torch.where(lengths > max_length, torch.full_like(lengths, -1.0), penalty)


def truncated_responses(rollout: Rollout, eos_token: int) -> torch.Tensor:
    """bool[batch, trial]: responses cut off at the maximum length (no EOS anywhere).

    Taught in notebook 08.
    """
    return ~(rollout.responses == eos_token).any(dim=-1)


def overlong_shaping(rollout: Rollout, config) -> Rollout:
    """Add DAPO's soft overlong penalty to the rewards (``overlong_penalty``), with
    L_max = ``config.response_length``, L_cache = ``config.overlong_buffer``, factor
    ``config.overlong_penalty_factor``; |y| = real tokens (``rollout.mask``, EOS counted)."""
    lengths = rollout.mask.sum(dim=-1)
    penalty = overlong_penalty(
        lengths, config.response_length, config.overlong_buffer, config.overlong_penalty_factor
    )
    shaped = Rollout(rollout.prompts, rollout.responses, rollout.mask, rollout.rewards + penalty)
    return shaped


def overlong_filtering(rollout: Rollout, config) -> Rollout:
    """DAPO's overlong filtering (arXiv 2503.14476, sec. 3.4): truncated responses (no EOS;
    EOS is token ``config.vocab_size``) get an all-zero mask, so no token of theirs enters
    the loss. Their rewards still count in the group baseline. If every response is
    truncated the rollout is returned unchanged (a loss over no tokens is undefined).

    Taught in notebook 08.
    """
    cut = truncated_responses(rollout, config.vocab_size)  # [batch, trial]
    if bool(cut.all()):
        return rollout
    mask = torch.where(cut[:, :, None], torch.zeros_like(rollout.mask), rollout.mask)
    return Rollout(rollout.prompts, rollout.responses, mask, rollout.rewards)


def dapo_filter(rollout: Rollout, config) -> Rollout:
    """DAPO's batch recipe: overlong shaping of the rewards, then dynamic sampling (the
    tie test reads the shaped rewards; resampled groups are shaped too)."""
    return dynamic_sampling(rollout, config, shaping=overlong_shaping)


#: Filters that read EOS / the maximum length: the variable-length task only.
OVERLONG_FILTERS: tuple[str, ...] = ("overlong_shaping", "overlong_filtering", "dapo")

#: Filters that may leave a response with an all-zero mask row (no real token).
ROW_EMPTYING_FILTERS: tuple[str, ...] = ("overlong_filtering",)

#: Settings that average over each response's own real tokens, so an all-zero mask row
#: breaks them: field -> (that value, what to use instead). Every other setting was run
#: against emptied rows (``tests/integration/test_review_probes.py``).
NEEDS_EVERY_ROW: dict[str, tuple[str, str]] = {
    "loss_aggregation": ("sequence_mean", "'token_mean' or 'constant_normalizer'"),
    "importance_sampling_level": ("sequence", "'token' (GSPO's s_i is a per-response mean)"),
}


def check_batch_filter_fields(config) -> None:
    """Raise naming the first bad batch-filter (DAPO) field of a ``TrainConfig``.

    dynamic_sampling_max_draws an int >= 0, and > 0 only with a filter that refills the
    batch; overlong_penalty_factor a finite number >= 0; the overlong filters read EOS and
    the maximum length (task 'sort_dedup'), with overlong_buffer an int in 1 ..
    response_length; a filter of ``ROW_EMPTYING_FILTERS`` can empty a response's mask, which
    the settings of ``NEEDS_EVERY_ROW`` (sequence_mean, GSPO's sequence ratio) cannot average
    over.
    """
    draws = config.dynamic_sampling_max_draws
    check_number(draws, "dynamic_sampling_max_draws", 0, low_inclusive=True, integer=True)
    if draws > 0 and config.batch_filter not in ("dynamic_sampling", "dapo"):
        raise ValueError(
            "dynamic_sampling_max_draws > 0 refills the batch of dynamic sampling: it needs "
            f"batch_filter 'dynamic_sampling' or 'dapo', got {config.batch_filter!r}"
        )
    factor = config.overlong_penalty_factor
    check_number(factor, "overlong_penalty_factor", 0, low_inclusive=True)
    if config.batch_filter in OVERLONG_FILTERS:
        if config.task != "sort_dedup":
            raise ValueError(
                f"batch_filter {config.batch_filter!r} reads EOS and the maximum length: it "
                f"needs task 'sort_dedup' (got task {config.task!r})"
            )
        check_number(
            config.overlong_buffer, "overlong_buffer", 1, config.response_length,
            low_inclusive=True, integer=True, note="DAPO's L_cache, at most response_length",
        )  # fmt: skip
    else:  # not read, but typed: a later switch to an overlong filter must not surprise
        check_number(config.overlong_buffer, "overlong_buffer", 1, low_inclusive=True, integer=True)
    if config.batch_filter in ROW_EMPTYING_FILTERS:
        for field, (value, use_instead) in NEEDS_EVERY_ROW.items():
            if getattr(config, field) == value:
                raise ValueError(
                    f"batch_filter {config.batch_filter!r} empties the mask of truncated "
                    f"responses, and {field} {value!r} averages over each response's real "
                    f"tokens, which such a response has none of: use {field} {use_instead}, "
                    "or another batch_filter"
                )


def frac_reward_zero_std(rewards: torch.Tensor) -> float:
    """Fraction of groups whose G rewards all tie (TRL's ``frac_reward_zero_std``).

    rewards float[batch, trial] -> a float in [0, 1]. Such a group gets zero centred
    deltas: it contributes no gradient (DAPO's dynamic sampling drops it).
    """
    return tied_groups(rewards).float().mean().item()
