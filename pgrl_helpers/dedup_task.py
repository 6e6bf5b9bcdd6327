"""A variable-length task: sort the prompt, drop duplicates, then stop (EOS).

Prompt ``[3, 1, 3, 0]`` -> response ``[0, 1, 3, EOS]``. The right length depends on the
prompt (1 .. prompt_length tokens plus EOS), so a policy has to decide when to stop:
the setting where response masks and loss aggregation matter.

Responses are int[batch, trial, pos] from an autoregressive policy (see
``pgrl_helpers.autoregressive``): task tokens, the first ``eos_token`` ends the answer,
anything after it is padding. The *content* of a response is what comes before its
first EOS (all pos tokens if there is none: the answer was cut off).

Rewards (vectorised, no Python loop; float32[batch, trial]):

* ``dedup_exact_reward``: 1 if the content equals the target and is followed by EOS,
  else 0.
* ``dedup_position_reward``: partial credit that cannot be gamed by length,
  (correct positions - extra tokens) / target length, where a position i < target
  length is correct when the content has a token there and it equals target[i], and
  every content token beyond the target length costs 1. It is 1 exactly for the right
  answer and below 1 for any other: stopping early forfeits the missing positions,
  running long pays for every extra token (a response that never stops pays most).

A response that never emits EOS was cut off: it has not ended, so it is scored as wrong
by both rewards rather than refused (training samples such responses all the time, and a
reward that raised would crash the run). ``dedup_exact_reward`` requires the EOS;
``dedup_position_reward`` counts a cut-off response as at least one token too long
(``extra >= 1``), so its reward is below 1 even when its ``pos`` tokens are exactly the
answer (a policy with no slot left for EOS, pos <= target length). With the slots a
``TrainConfig`` allows (max_response_length >= prompt_length + 1 > target length) a
cut-off response already has ``extra >= 1``, so this rule changes no reward there.

Taught in notebook 08; also used in notebook 11.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ._validate import (
    check_choice,
    check_finite,
    check_integer,
    check_ndim,
    check_number,
    check_tensor,
)
from .task import PromptTask


def dedup_targets(prompts: torch.Tensor, pad_token: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted distinct values of each prompt, left-aligned and padded with ``pad_token``.

    prompts int[batch, prompt_pos] -> (targets int64[batch, prompt_pos], lengths int64[batch]).
    ``[3, 1, 3, 0]`` -> ``[0, 1, 3, pad]``, length 3.

    Taught in notebook 08.
    """
    check_ndim(prompts, 2, "prompts", "batch, prompt_pos")
    check_integer(prompts, "prompts")
    values = prompts.long().sort(dim=-1).values
    first = torch.ones_like(values, dtype=torch.bool)
    first[:, 1:] = values[:, 1:] != values[:, :-1]  # first occurrence of each value
    slot = first.long().cumsum(dim=-1) - 1  # where each first occurrence goes
    targets = torch.full_like(values, pad_token)
    # duplicates write to a dummy column that is dropped afterwards
    index = torch.where(first, slot, torch.full_like(slot, values.shape[1]))
    wide = torch.cat([targets, targets[:, :1]], dim=1)
    wide.scatter_(1, index, values)
    return wide[:, :-1], first.sum(dim=-1)


def dedup_reference_responses(prompts: torch.Tensor, eos_token: int, length: int) -> torch.Tensor:
    """The correct responses padded with EOS to ``length``: int64[batch, 1, length].

    Taught in notebook 08.
    """
    targets, _ = dedup_targets(prompts, eos_token)
    if length < targets.shape[1] + 1:
        raise ValueError(
            f"length {length} cannot hold the longest answer ({targets.shape[1]} tokens + EOS)"
        )
    extra = torch.full((targets.shape[0], length - targets.shape[1]), eos_token)
    return torch.cat([targets, extra], dim=1)[:, None, :]


def _check_batch(prompts: torch.Tensor, responses: torch.Tensor, eos_token: int) -> None:
    check_ndim(check_tensor(prompts, "prompts"), 2, "prompts", "batch, prompt_pos")
    check_ndim(check_tensor(responses, "responses"), 3, "responses", "batch, trial, pos")
    check_integer(prompts, "prompts")
    check_integer(responses, "responses")
    if responses.shape[0] != prompts.shape[0]:
        raise ValueError(
            f"prompts and responses disagree on batch size: prompts {list(prompts.shape)}, "
            f"responses {list(responses.shape)}"
        )
    check_number(eos_token, "eos_token", integer=True)
    if prompts.numel() and int(prompts.max()) >= eos_token:
        raise ValueError(
            f"prompt values must be below eos_token {eos_token}, got max {int(prompts.max())}"
        )


def content_lengths(responses: torch.Tensor, eos_token: int) -> torch.Tensor:
    """int64[batch, trial]: tokens before the first EOS (pos if there is no EOS)."""
    check_ndim(responses, 3, "responses", "batch, trial, pos")
    is_eos = responses == eos_token
    before = (is_eos.long().cumsum(dim=-1) == 0).sum(dim=-1)  # slots before the first EOS
    return before


def _scores(prompts, responses, eos_token):
    """(matches, extra, content_len, target_len, has_eos), each [batch, trial]."""
    _check_batch(prompts, responses, eos_token)
    pos = responses.shape[-1]
    targets, target_len = dedup_targets(prompts, eos_token)  # [batch, P], [batch]
    content_len = content_lengths(responses, eos_token)  # [batch, trial]
    width = min(pos, targets.shape[1])
    slots = torch.arange(width)
    in_content = slots < content_len[..., None]  # [batch, trial, width]
    in_target = slots < target_len[:, None, None]  # [batch, 1, width]
    equal = responses[..., :width] == targets[:, None, :width]
    matches = (equal & in_content & in_target).sum(dim=-1)
    has_eos = content_len < pos
    # a cut-off response (no EOS) has not ended: it is at least one token too long
    extra = (content_len - target_len[:, None]).clamp_min(0)
    extra = torch.where(has_eos, extra, extra.clamp_min(1))
    return matches, extra, content_len, target_len[:, None].expand_as(content_len), has_eos


def exact_dedup(prompts: torch.Tensor, responses: torch.Tensor, eos_token: int) -> torch.Tensor:
    """bool[batch, trial]: the response is the sorted distinct values followed by EOS."""
    matches, _, content_len, target_len, has_eos = _scores(prompts, responses, eos_token)
    return (matches == target_len) & (content_len == target_len) & has_eos


def dedup_exact_reward(prompts: torch.Tensor, responses: torch.Tensor, eos_token: int):
    """1.0 for an exactly right response (then EOS), else 0.0: float32[batch, trial].

    Taught in notebook 08.
    """
    return exact_dedup(prompts, responses, eos_token).to(torch.float32)


def dedup_position_reward(prompts: torch.Tensor, responses: torch.Tensor, eos_token: int):
    """(correct positions - extra tokens) / target length: float32[batch, trial], max 1.

    Equals 1 only for the exact answer followed by EOS; a response that never emits EOS
    counts as at least one token too long (see the module docstring).

    Taught in notebook 08.
    """
    matches, extra, _, target_len, _ = _scores(prompts, responses, eos_token)
    return (matches - extra).to(torch.float32) / target_len.to(torch.float32)


#: Reward functions of this task by name: fn(prompts, responses, eos_token) -> [batch, trial].
DEDUP_REWARD_FNS: dict[str, Callable] = {
    "dedup_position_reward": dedup_position_reward,
    "dedup_exact_reward": dedup_exact_reward,
}


def compute_dedup_reward(
    prompts: torch.Tensor,
    responses: torch.Tensor,
    reward_fn: str | Callable,
    eos_token: int,
) -> torch.Tensor:
    """Score each response: int[batch, prompt_pos], int[batch, trial, pos] -> float32[batch, trial].

    ``reward_fn`` is a name from ``DEDUP_REWARD_FNS`` or a vectorised callable
    ``fn(prompts, responses, eos_token)``.
    """
    if isinstance(reward_fn, str):
        check_choice(reward_fn, DEDUP_REWARD_FNS, "dedup reward function")
        reward_fn = DEDUP_REWARD_FNS[reward_fn]
    if not callable(reward_fn):
        raise TypeError(f"reward_fn must be callable or a name, got {type(reward_fn).__name__}")
    rewards = reward_fn(prompts, responses, eos_token)
    if not isinstance(rewards, torch.Tensor) or rewards.shape != responses.shape[:2]:
        shape = list(rewards.shape) if isinstance(rewards, torch.Tensor) else type(rewards)
        raise ValueError(
            f"reward function returned {shape}, expected [batch, trial] = "
            f"{list(responses.shape[:2])}"
        )
    rewards = rewards.to(torch.float32)
    check_finite(rewards, "rewards")
    return rewards


class SortDedupTask(PromptTask):
    """Sort, drop repeats, then EOS: the variable-length task (autoregressive policy).

    Token ``vocab_size`` is EOS (as in ``AutoregressiveSortPolicy``). ``reward_fn``: a
    name from ``DEDUP_REWARD_FNS`` or a callable ``fn(prompts, responses, eos_token)``.

    Taught in notebook 11.
    """

    name = "sort_dedup"

    def __init__(
        self,
        prompt_length: int,
        vocab_size: int,
        reward_fn: str | Callable = "dedup_position_reward",
    ):
        super().__init__(prompt_length, vocab_size)
        self.reward_fn = reward_fn
        self.eos_token = vocab_size

    def prompt_key(self, prompts: torch.Tensor) -> torch.Tensor:
        """int64[batch]: the *set* of distinct values, as a bit mask (sum of 2**value).

        The answer (sorted distinct values, EOS) depends on nothing else, so a policy that
        saw some ordering or multiplicity of these values has seen the answer. Holding out
        by this key is stricter than by multiset or by ordering.
        """
        if prompts.ndim != 2:
            raise ValueError(
                f"prompts must have shape [batch, prompt_pos], got {list(prompts.shape)}"
            )
        present = torch.zeros(prompts.shape[0], self.vocab_size, dtype=torch.long)
        present.scatter_(1, prompts.long(), 1)
        return (present * 2 ** torch.arange(self.vocab_size)).sum(dim=-1)

    def num_keys(self) -> int:
        """Distinct keys: non-empty sets of at most prompt_length of the vocab_size values."""
        top = min(self.prompt_length, self.vocab_size)
        return sum(math.comb(self.vocab_size, k) for k in range(1, top + 1))

    def reward(self, prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        """float32[batch, trial] by ``reward_fn``."""
        return compute_dedup_reward(prompts, responses, self.reward_fn, self.eos_token)

    def exact(self, prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        """bool[batch, trial]: the sorted distinct values, then EOS."""
        return exact_dedup(prompts, responses, self.eos_token)
