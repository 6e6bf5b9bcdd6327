"""The Task interface: prompts, rewards, the exact-answer check, and the held-out key.

A task owns everything about *what* is learned, so the training loop never asks which
task it runs. Two tasks implement it: ``sort_task.SortTask`` (sort the prompt, fixed
length) and ``dedup_task.SortDedupTask`` (sort, drop repeats, stop with EOS).

``PromptTask`` below is their shared base: prompts are int[batch, prompt_length] with
values 0 .. vocab_size - 1, and the set of prompts kept out of training is defined by
``prompt_key``. A subclass provides

* ``reward(prompts, responses)`` -> float32[batch, trial],
* ``exact(prompts, responses)`` -> bool[batch, trial] (the right answer, exactly),

and may override ``prompt_key`` (and ``num_keys``): two prompts with the same key count as
"the same prompt" for held-out purposes, so a held-out key never appears in a training
batch. Choose the key by what the policy could memorise: what it cannot tell apart, or what
the answer depends on. The base key is the prompt itself (its ordering).

Not imported by a notebook: the base of the loop's tasks (notebooks 07 and 08 teach them).
"""

from __future__ import annotations

import torch

from ._validate import check_integer, check_ndim, check_number, check_positive_ints

#: Prompt spaces larger than this are sampled with rejection instead of a permutation.
PERMUTATION_LIMIT = 2_000_000
#: ``encode_prompts`` numbers prompts in int64: vocab_size**prompt_length must stay below this.
MAX_PROMPT_SPACE = 2**62


def check_task_fields(config) -> None:
    """Raise naming the bad prompt field of a ``TrainConfig``: prompt_length and vocab_size
    positive ints whose prompt space vocab_size**prompt_length ``encode_prompts`` can number."""
    for name in ("prompt_length", "vocab_size"):
        check_number(getattr(config, name), name, 1, low_inclusive=True, integer=True)
    space = config.vocab_size**config.prompt_length
    if space > MAX_PROMPT_SPACE:
        raise ValueError(
            f"vocab_size**prompt_length = {space} is too large to index prompts; "
            "use shorter prompts or a smaller vocabulary"
        )


def encode_prompts(prompts: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """int[batch, prompt_pos] -> int64[batch]: each prompt as one number in base ``vocab_size``."""
    check_ndim(prompts, 2, "prompts", "batch, prompt_pos")
    check_integer(prompts, "prompts")
    powers = vocab_size ** torch.arange(prompts.shape[1], dtype=torch.long)
    return (prompts.long() * powers).sum(dim=-1)


def decode_prompts(codes: torch.Tensor, length: int, vocab_size: int) -> torch.Tensor:
    """The inverse of ``encode_prompts``: int64[n] -> int64[n, length]."""
    powers = vocab_size ** torch.arange(length, dtype=torch.long)
    return (codes[:, None] // powers) % vocab_size


class PromptTask:
    """Shared base of the tasks: prompt generation and the held-out set.

    ``fixed_prompts`` (int[n, prompt_pos] or None): when given, every epoch trains on exactly
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

    def num_keys(self) -> int:
        """How many distinct held-out keys exist (here: every ordering is its own key)."""
        return self.vocab_size**self.prompt_length

    def _candidates(self, generator: torch.Generator):
        """Prompts int64[k, pos] in a seeded random order, chunk by chunk, without repeats."""
        space = self.vocab_size**self.prompt_length
        if space <= PERMUTATION_LIMIT:
            order = torch.randperm(space, generator=generator)
            for start in range(0, space, 4096):
                yield decode_prompts(
                    order[start : start + 4096], self.prompt_length, self.vocab_size
                )
        else:
            seen: set[int] = set()
            while True:
                draw = torch.randint(0, space, (4096,), generator=generator).tolist()
                fresh = [c for c in dict.fromkeys(draw) if c not in seen]
                seen.update(fresh)
                yield decode_prompts(torch.tensor(fresh), self.prompt_length, self.vocab_size)

    def max_heldout_keys(self) -> int:
        """Most keys one held-out set may take: a quarter of all keys (two sets: half)."""
        return max(1, self.num_keys() // 4)

    def heldout_split(self, sizes: tuple[int, ...], seed: int) -> list[torch.Tensor]:
        """Held-out sets int64[n_i, pos], one per size, disjoint *by key* and drawn with ``seed``.

        Prompts are met in a seeded random order of all prompts; each new key (skipping the
        keys of ``fixed_prompts``) goes to the first set that still has fewer than
        min(n_i, ``max_heldout_keys()``) keys. A set takes one prompt per key while it has
        room for new keys; only a set whose key quota is full (n_i larger than the quota)
        takes further prompts of its own keys (other orderings of a held-out multiset, say).
        Sets come in order (the first is validation, the second test), and the first does
        not depend on the later ones. Training must avoid every key returned
        (``training_prompts`` redraws any prompt that has one).
        """
        check_positive_ints(**{f"held-out set size {i}": n for i, n in enumerate(sizes)})
        excluded = set()
        if self.fixed_prompts is not None:
            excluded = set(self.prompt_key(self.fixed_prompts).tolist())
        quotas = [min(n, self.max_heldout_keys()) for n in sizes]
        if sum(quotas) > self.num_keys() - len(excluded):
            raise ValueError(
                f"held-out sets of {sum(quotas)} distinct keys requested, but this task has only "
                f"{self.num_keys()} keys ({len(excluded)} used by the fixed training prompts)"
            )
        generator = torch.Generator().manual_seed(seed)
        owner: dict[int, int] = {k: -1 for k in excluded}  # key -> set index (-1: excluded)
        sets: list[list[torch.Tensor]] = [[] for _ in sizes]
        num_keys = [0] * len(sizes)
        for chunk in self._candidates(generator):
            for prompt, key in zip(chunk, self.prompt_key(chunk).tolist()):
                i = owner.get(key)
                if i is None:  # a new key: to the first set with key quota left
                    i = next((j for j, q in enumerate(quotas) if num_keys[j] < q), None)
                    if i is None:
                        continue
                    owner[key] = i
                    num_keys[i] += 1
                elif i < 0 or num_keys[i] < quotas[i]:
                    continue  # excluded, or the set still takes new keys only
                if len(sets[i]) < sizes[i]:
                    sets[i].append(prompt)
                if all(len(s) == n for s, n in zip(sets, sizes)):
                    return [torch.stack(s) for s in sets]
        short = [f"{len(s)} of {n}" for s, n in zip(sets, sizes)]
        raise ValueError(
            f"not enough prompts with the held-out keys to fill sets of sizes {sizes} "
            f"(got {', '.join(short)}); choose a smaller num_eval_prompts"
        )

    def validation_prompts(self, n: int, seed: int) -> torch.Tensor:
        """The validation set, ``heldout_split``'s first held-out set: int64[n, prompt_pos]."""
        return self.heldout_split((n,), seed)[0]

    def training_prompts(
        self, n: int, generator: torch.Generator, excluded_keys: torch.Tensor
    ) -> torch.Tensor:
        """One epoch's prompts int64[n, prompt_pos]: ``fixed_prompts``, or random ones whose
        key is not in ``excluded_keys`` (int64[k]; rows that hit one are redrawn)."""
        if self.fixed_prompts is not None:
            return self.fixed_prompts.clone()
        prompts = self.random_prompts(n, generator)
        clash = torch.isin(self.prompt_key(prompts), excluded_keys)
        while clash.any():
            prompts[clash] = self.random_prompts(int(clash.sum()), generator)
            clash = torch.isin(self.prompt_key(prompts), excluded_keys)
        return prompts
