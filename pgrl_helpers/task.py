"""The Task interface: prompts, rewards, the exact-answer check, and the held-out key.

A task owns everything about *what* is learned, so the training loop never asks which
task it runs. Two tasks implement it: ``sort_task.SortTask`` (sort the prompt, fixed
length) and ``dedup_task.SortDedupTask`` (sort, drop repeats, stop with EOS).

``PromptTask`` below is their shared base: prompts are int[batch, prompt_length] with
values 0 .. vocab_size - 1, and the set of prompts kept out of training is defined by
``prompt_key``. A subclass provides

* ``reward(prompts, responses)`` -> float32[batch, trial],
* ``exact(prompts, responses)`` -> bool[batch, trial] (the right answer, exactly),

and may override ``prompt_key``: two prompts with the same key count as "the same
prompt" for held-out purposes. The base key is the prompt itself (its ordering).
"""

from __future__ import annotations

import torch

from ._validate import check_integer, check_ndim, check_positive_ints

#: Prompt spaces larger than this are sampled with rejection instead of a permutation.
PERMUTATION_LIMIT = 2_000_000


def encode_prompts(prompts: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """int[batch, pos] -> int64[batch]: each prompt as one number in base ``vocab_size``."""
    check_ndim(prompts, 2, "prompts", "batch, pos")
    check_integer(prompts, "prompts")
    powers = vocab_size ** torch.arange(prompts.shape[1], dtype=torch.long)
    return (prompts.long() * powers).sum(dim=-1)


def decode_prompts(codes: torch.Tensor, length: int, vocab_size: int) -> torch.Tensor:
    """The inverse of ``encode_prompts``: int64[n] -> int64[n, length]."""
    powers = vocab_size ** torch.arange(length, dtype=torch.long)
    return (codes[:, None] // powers) % vocab_size


class PromptTask:
    """Shared base of the tasks: prompt generation and the held-out set.

    ``fixed_prompts`` (int[n, pos] or None): when given, every epoch trains on exactly
    these prompts (the lecture's 3); else each epoch draws fresh random prompts.
    """

    name = "prompt_task"

    def __init__(
        self, prompt_length: int, vocab_size: int, fixed_prompts: torch.Tensor | None = None
    ):
        check_positive_ints(prompt_length=prompt_length, vocab_size=vocab_size)
        if vocab_size**prompt_length > 2**62:
            raise ValueError(
                f"vocab_size**prompt_length = {vocab_size**prompt_length} is too large to "
                "index prompts; use shorter prompts or a smaller vocabulary"
            )
        self.prompt_length = prompt_length
        self.vocab_size = vocab_size
        self.fixed_prompts = fixed_prompts

    # ---- what a subclass provides -----------------------------------------------------

    def reward(self, prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def exact(self, prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def prompt_key(self, prompts: torch.Tensor) -> torch.Tensor:
        """int64[batch]: the held-out key of each prompt (here: the prompt itself)."""
        return encode_prompts(prompts, self.vocab_size)

    # ---- prompts ------------------------------------------------------------------------

    def random_prompts(self, n: int, generator: torch.Generator | None) -> torch.Tensor:
        """int64[n, prompt_length], values uniform in 0 .. vocab_size - 1."""
        return torch.randint(0, self.vocab_size, (n, self.prompt_length), generator=generator)

    def heldout_prompts(self, n: int, seed: int) -> torch.Tensor:
        """``n`` distinct prompts int64[n, pos] drawn with ``seed``, never among ``fixed_prompts``."""
        length, vocab = self.prompt_length, self.vocab_size
        space = vocab**length
        generator = torch.Generator().manual_seed(seed)
        excluded = set()
        if self.fixed_prompts is not None:
            excluded = set(encode_prompts(self.fixed_prompts, vocab).tolist())
        if space <= PERMUTATION_LIMIT:
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
        return decode_prompts(codes, length, vocab)

    def training_prompts(
        self, n: int, generator: torch.Generator, excluded_keys: torch.Tensor
    ) -> torch.Tensor:
        """One epoch's prompts int64[n, pos]: ``fixed_prompts``, or random ones whose key is
        not in ``excluded_keys`` (int64[k]; rows that hit one are redrawn)."""
        if self.fixed_prompts is not None:
            return self.fixed_prompts.clone()
        prompts = self.random_prompts(n, generator)
        clash = torch.isin(self.prompt_key(prompts), excluded_keys)
        while clash.any():
            prompts[clash] = self.random_prompts(int(clash.sum()), generator)
            clash = torch.isin(self.prompt_key(prompts), excluded_keys)
        return prompts
