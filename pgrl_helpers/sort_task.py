"""The toy task of the series: sort a short list of integers.

A *prompt* is a list of ``pos`` integers in ``0 .. vocab_size - 1`` (for example
``[1, 0, 2]``); the correct *response* is the same list sorted (``[0, 1, 2]``).
Rewards are verifiable: a few lines of code score any response.

Each reward comes in two forms:

* the readable per-example form the lecture uses, on plain lists
  (``sort_distance_reward(prompt, response) -> float``), and
* a vectorised form over whole batches with no Python loop
  (``sort_distance_reward_batch(prompts, responses) -> float[batch, trial]``).

``compute_reward`` accepts either (or a name from ``REWARD_FNS``).

Taught in notebook 01; also used in notebooks 00, 02, 03, 04, 05, 06, 07, 08, 09, 13.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from ._validate import check_finite, check_integer, check_ndim, check_positive_ints, check_tensor
from .task import PromptTask

#: The three fixed training prompts of the lecture's experiment (vocab 5, length 3).
LECTURE_PROMPTS: list[list[int]] = [[1, 0, 2], [3, 2, 4], [1, 2, 3]]


def lecture_prompts() -> torch.Tensor:
    """The lecture's three training prompts as int64[3, 3].

    Taught in notebook 04; also used in notebooks 00, 05, 06, 07.
    """
    return torch.tensor(LECTURE_PROMPTS, dtype=torch.long)


def make_prompts(
    batch: int, length: int, vocab_size: int, generator: torch.Generator | int | None = None
) -> torch.Tensor:
    """Random prompts, int64[batch, length], values uniform in 0 .. vocab_size - 1.

    ``generator`` may be a ``torch.Generator`` or an int seed; the same seed gives
    the same prompts. Values may repeat inside a prompt (sorting still has one answer).

    Taught in notebook 01; also used in notebooks 08, 09.
    """
    check_positive_ints(batch=batch, length=length, vocab_size=vocab_size)
    if isinstance(generator, int):
        generator = torch.Generator().manual_seed(generator)
    return torch.randint(0, vocab_size, (batch, length), generator=generator)


def sorted_responses(prompts: torch.Tensor) -> torch.Tensor:
    """Ground truth: each prompt sorted ascending. int[batch, prompt_pos] -> int[batch, pos].

    Taught in notebook 01; also used in notebook 07.
    """
    check_ndim(prompts, 2, "prompts", "batch, prompt_pos")
    check_integer(prompts, "prompts")
    return prompts.sort(dim=-1).values


# --------------------------------------------------------------------------------------
# Per-example rewards (the lecture's readable form)
# --------------------------------------------------------------------------------------


def _as_list(x, name: str) -> list[int]:
    if isinstance(x, torch.Tensor):
        if x.ndim != 1:
            raise ValueError(f"{name} must be one sequence (1 dim), got shape {list(x.shape)}")
        return [int(v) for v in x.tolist()]
    return [int(v) for v in x]


def _check_lengths(prompt: list[int], response: list[int]) -> None:
    if len(prompt) != len(response):
        raise ValueError(
            f"prompt and response must have the same length, got {len(prompt)} and {len(response)}"
        )


def sort_distance_reward(prompt: Sequence[int], response: Sequence[int]) -> float:
    """Number of positions where ``response`` matches ``sorted(prompt)``.

    Range 0 .. len(prompt); the maximum means a perfect sort.

    Taught in notebook 01.
    """
    prompt, response = _as_list(prompt, "prompt"), _as_list(response, "response")
    _check_lengths(prompt, response)
    ground_truth = sorted(prompt)
    return float(sum(1 for got, want in zip(response, ground_truth) if got == want))


def sort_inclusion_ordering_reward(prompt: Sequence[int], response: Sequence[int]) -> float:
    """Partial credit: inclusion + ordering, range 0 .. 2 * len(prompt) - 1.

    * inclusion: one point per prompt token (counted with repeats, as in the lecture)
      that appears anywhere in the response;
    * ordering: one point per adjacent pair of the response with ``x <= y``.

    It has a loophole: any ascending run earns all ordering points, whatever it holds.

    Taught in notebook 01; also used in notebook 06.
    """
    prompt, response = _as_list(prompt, "prompt"), _as_list(response, "response")
    _check_lengths(prompt, response)
    inclusion = sum(1 for x in prompt if x in response)
    ordering = sum(1 for x, y in zip(response, response[1:]) if x <= y)
    return float(inclusion + ordering)


# --------------------------------------------------------------------------------------
# Vectorised rewards: int[batch, prompt_pos] x int[batch, trial, pos] -> float[batch, trial]
# --------------------------------------------------------------------------------------


def _check_batch(prompts: torch.Tensor, responses: torch.Tensor) -> None:
    check_ndim(prompts, 2, "prompts", "batch, prompt_pos")
    check_ndim(responses, 3, "responses", "batch, trial, pos")
    check_integer(prompts, "prompts")
    check_integer(responses, "responses")
    if responses.shape[0] != prompts.shape[0]:
        raise ValueError(
            f"prompts and responses disagree on batch size: prompts {list(prompts.shape)}, "
            f"responses {list(responses.shape)}"
        )
    if responses.shape[2] != prompts.shape[1]:
        raise ValueError(
            f"prompt and response length differ: prompts {list(prompts.shape)}, "
            f"responses {list(responses.shape)} (pos must match)"
        )


def sort_distance_reward_batch(prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
    """Vectorised ``sort_distance_reward``: float32[batch, trial]."""
    _check_batch(prompts, responses)
    truth = sorted_responses(prompts)[:, None, :]  # [batch, 1, pos]
    return (responses == truth).sum(dim=-1).to(torch.float32)


def sort_inclusion_ordering_reward_batch(
    prompts: torch.Tensor, responses: torch.Tensor
) -> torch.Tensor:
    """Vectorised ``sort_inclusion_ordering_reward``: float32[batch, trial]."""
    _check_batch(prompts, responses)
    batch, trial, pos = responses.shape
    if responses.numel() == 0 or prompts.numel() == 0:
        return torch.zeros(batch, trial, dtype=torch.float32, device=responses.device)
    if min(int(prompts.min()), int(responses.min())) < 0:
        raise ValueError("token ids must be >= 0 (negative ids in prompts or responses)")
    vocab = int(max(prompts.max(), responses.max())) + 1
    # in_response[b, t, v] = token v occurs somewhere in response (b, t)
    in_response = torch.zeros(batch, trial, vocab, dtype=torch.bool, device=responses.device)
    in_response.scatter_(2, responses.long(), True)
    # inclusion[b, t] = number of prompt tokens (with repeats) found in response (b, t)
    prompt_index = prompts.long()[:, None, :].expand(batch, trial, prompts.shape[1])
    inclusion = in_response.gather(2, prompt_index).sum(dim=-1)
    ordering = (responses[..., :-1] <= responses[..., 1:]).sum(dim=-1)
    return (inclusion + ordering).to(torch.float32)


sort_distance_reward.batched = sort_distance_reward_batch
sort_inclusion_ordering_reward.batched = sort_inclusion_ordering_reward_batch
sort_distance_reward_batch.vectorized = True
sort_inclusion_ordering_reward_batch.vectorized = True

#: Reward functions by name. Each value is the per-example form; ``.batched`` is the fast one.
REWARD_FNS: dict[str, Callable] = {
    "sort_distance_reward": sort_distance_reward,
    "sort_inclusion_ordering_reward": sort_inclusion_ordering_reward,
}


def max_reward(reward_fn: str | Callable, length: int) -> float:
    """Best score a response of ``length`` tokens can get under a built-in reward.

    Taught in notebook 01; also used in notebook 06.
    """
    name = reward_fn if isinstance(reward_fn, str) else getattr(reward_fn, "__name__", "")
    name = name.removesuffix("_batch")
    if name == "sort_distance_reward":
        return float(length)
    if name == "sort_inclusion_ordering_reward":
        return float(2 * length - 1)
    raise ValueError(f"max_reward knows only {sorted(REWARD_FNS)}, got {name!r}")


def compute_reward(
    prompts: torch.Tensor, responses: torch.Tensor, reward_fn: str | Callable
) -> torch.Tensor:
    """Score each response: int[batch, prompt_pos], int[batch, trial, pos] -> float32[batch, trial].

    ``reward_fn`` may be

    * a name from ``REWARD_FNS`` (uses the vectorised form),
    * a vectorised function (marked ``fn.vectorized = True``) called once on the batch,
    * a per-example function ``fn(prompt: list[int], response: list[int]) -> float``,
      called in a Python loop (slow: this is the lecture's way, kept for comparison).

    Taught in notebook 01; also used in notebooks 00, 03, 04, 05, 06, 09, 13.
    """
    _check_batch(check_tensor(prompts, "prompts"), check_tensor(responses, "responses"))
    if isinstance(reward_fn, str):
        if reward_fn not in REWARD_FNS:
            raise ValueError(
                f"unknown reward function {reward_fn!r}; valid names are: {', '.join(REWARD_FNS)}"
            )
        # built-in rewards count matches: finite by construction, no further checks needed
        return REWARD_FNS[reward_fn].batched(prompts, responses)
    if not callable(reward_fn):
        raise TypeError(f"reward_fn must be callable or a name, got {type(reward_fn).__name__}")
    if getattr(reward_fn, "vectorized", False):
        rewards = reward_fn(prompts, responses)
        if rewards.shape != responses.shape[:2]:
            raise ValueError(
                f"vectorised reward returned shape {list(rewards.shape)}, "
                f"expected [batch, trial] = {list(responses.shape[:2])}"
            )
        rewards = rewards.to(torch.float32)
    else:
        batch, trial, _ = responses.shape
        p_list, r_list = prompts.tolist(), responses.tolist()
        rewards = torch.tensor(
            [
                [float(reward_fn(p_list[b], r_list[b][t])) for t in range(trial)]
                for b in range(batch)
            ],
            dtype=torch.float32,
        ).reshape(batch, trial)
    check_finite(rewards, "rewards")
    return rewards


def exact_sort(prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
    """bool[batch, trial]: the response is exactly ``sorted(prompt)``.

    Taught in notebook 01; also used in notebooks 02, 06, 13.
    """
    _check_batch(prompts, responses)
    return (responses == sorted_responses(prompts)[:, None, :]).all(dim=-1)


# --------------------------------------------------------------------------------------
# The task object the training loop uses (see pgrl_helpers.task)
# --------------------------------------------------------------------------------------


class SortTask(PromptTask):
    """Sort the prompt: responses have ``prompt_length`` tokens, exact = ``exact_sort``.

    ``reward_fn``: a name from ``REWARD_FNS`` or a callable (see ``compute_reward``).
    ``fixed_prompts``: train on these every epoch (the lecture's 3) instead of random ones.
    """

    name = "sort"

    def __init__(
        self,
        prompt_length: int,
        vocab_size: int,
        reward_fn: str | Callable = "sort_distance_reward",
        fixed_prompts: torch.Tensor | None = None,
    ):
        super().__init__(prompt_length, vocab_size, fixed_prompts)
        self.reward_fn = reward_fn

    def prompt_key(self, prompts: torch.Tensor) -> torch.Tensor:
        """int64[batch]: the multiset of the prompt (its sorted values), encoded.

        The answer depends only on the multiset, and ``SortTransformer`` cannot tell two
        orderings of one multiset apart (it ignores prompt order by design): to it a prompt
        is unseen only if its multiset is. With ``fixed_prompts`` (the lecture's 3) nothing
        is sampled from the prompt distribution and the position-aware ``LectureModel``
        reads the order, so there the key is the ordered prompt.
        """
        if self.fixed_prompts is not None:
            return super().prompt_key(prompts)
        return super().prompt_key(prompts.sort(dim=-1).values)

    def num_keys(self) -> int:
        """Distinct keys: C(vocab + length - 1, length) multisets (ordered: vocab**length)."""
        if self.fixed_prompts is not None:
            return super().num_keys()
        return math.comb(self.vocab_size + self.prompt_length - 1, self.prompt_length)

    def reward(self, prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        """float32[batch, trial] by ``reward_fn``."""
        return compute_reward(prompts, responses, self.reward_fn)

    def exact(self, prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        """bool[batch, trial]: the response is exactly sorted(prompt)."""
        return exact_sort(prompts, responses)
