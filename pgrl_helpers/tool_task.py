"""A two-turn tool-use task: the policy calls a tool, reads its answer, then answers.

Multi-turn RL for language models (agents, tool use, search) interleaves two kinds of
tokens in one sequence: the ones the policy *generates* and the ones the *environment*
writes (a tool's output, a search result). The policy conditions on both, but only its
own tokens are actions: the environment's tokens must be out of the loss and out of GAE's
recursion (their mask is 0, a *hole* in the response mask). verl, SkyRL and slime
keep such a loss mask; ``gae.compute_gae`` skips the holes as verl's
``compute_gae_advantage_return`` does.

The task (``task="tool_compare"`` in ``TrainConfig``, with ``model="autoregressive"``):
the prompt names two items ``[a, b]`` (ids 0 .. vocab_size - 1). Every sampled episode the
environment draws fresh hidden prices for the items (a random order of all ids); the
question is "which of a, b is more expensive?". Only the tool knows the prices, so without
it the best a policy can do is guess one of the two (reward 1/2 on average). One episode
is six response slots:

====  ==========  ====================================================================
slot  written by  content
====  ==========  ====================================================================
0     policy      first operand of the call ``compare x y``
1     policy      second operand
2     tool        the more expensive of x, y  (EOS, the error token, if x or y is EOS)
3     tool        the cheaper of x, y         (EOS likewise)
4     policy      the answer
5     grader      the right answer (written after the answer, so the policy never sees it)
====  ==========  ====================================================================

Reward (on the final answer only): 1 if slot 4 equals slot 5, else 0. A policy that calls
``compare a b`` (either order) and copies slot 2 is always right, also on pairs it never
trained on; a call with other operands makes the tool's reply useless.

Evaluation prices (``keyed_prices``): greedy evaluation must score a *prompt*, not a
position in a batch, so its hidden prices are a function of the prompt's key {a, b} and a
seed only (``price_seed`` of ``run_tool_episodes``; ``greedy`` uses ``GREEDY_PRICE_SEED``).
Sampled training episodes draw fresh prices from the sampler's generator.

``ToolUsePolicy`` is ``AutoregressiveSortPolicy`` whose ``sample`` and ``greedy`` run the
episode with the tool in the loop (teacher-forced ``log_probs`` and ``token_entropy`` are
inherited: they read the tool's tokens as context). Its mask is 1 on slots 0, 1, 4 and 0
on the environment's slots 2, 3, 5; ``mask_tool_tokens=False`` plants the bug of leaving the tool's
reply (slots 2, 3) in the mask (the loss then pushes the policy's probability of tokens it never
chose, up or down with the episode's advantage, and GAE treats them as actions). The grader's
slot 5 stays out of the mask either way: it is the scorer's record, not a token of the
conversation, and leaving it in would also train the policy on the right answer.

Taught in notebook 15.
"""

from __future__ import annotations

import hashlib

import torch
import torch.nn.functional as F
from einops import rearrange, repeat

from ._validate import check_bool, check_number, check_positive_ints, check_prompts
from .autoregressive import AutoregressiveSortPolicy, _with_separator
from .task import PromptTask

#: response slots of one episode (see the module docstring)
RESPONSE_LENGTH = 6
CALL_SLOTS = (0, 1)
TOOL_SLOTS = (2, 3)
ANSWER_SLOT = 4
GRADER_SLOT = 5
ENVIRONMENT_SLOTS = (*TOOL_SLOTS, GRADER_SLOT)
PROMPT_LENGTH = 2
#: seed of the hidden prices in greedy episodes (sampled episodes use the sampler's generator)
GREEDY_PRICE_SEED = 0


def hidden_prices(n: int, num_items: int, generator: torch.Generator | None) -> torch.Tensor:
    """int64[n, num_items]: one random price order per episode (a permutation of 0 .. V-1)."""
    return torch.rand(n, num_items, generator=generator).argsort(dim=-1)


def price_key_seed(seed: int, a: int, b: int) -> int:
    """The generator seed of the prompt {a, b}'s evaluation prices: a hash of (seed, min, max).

    The same set gets the same seed in either order; another set or another ``seed`` gets
    an unrelated one (the first 63 bits of BLAKE2b).
    """
    low, high = sorted((int(a), int(b)))
    digest = hashlib.blake2b(f"{seed}:{low}:{high}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def keyed_prices(prompts: torch.Tensor, num_draws: int, num_items: int, seed: int) -> torch.Tensor:
    """int64[batch * num_draws, num_items]: evaluation prices, a function of each prompt's key.

    Row ``i * num_draws + j`` (the ``(batch draw)`` order of ``run_tool_episodes``) is draw j
    of prompt i: the j-th permutation drawn by a generator seeded with
    ``price_key_seed(seed, a, b)``. So a prompt gets the same prices wherever it sits in a
    batch and whatever else the batch holds, ``[a, b]`` and ``[b, a]`` get the same ones, and
    its first j draws do not depend on ``num_draws``. prompts int[batch, 2].
    """
    check_prompts(prompts, num_items, PROMPT_LENGTH)
    check_positive_ints(num_draws=num_draws)
    check_number(seed, "seed", 0, low_inclusive=True, integer=True)
    cache: dict[tuple[int, int], torch.Tensor] = {}
    rows = []
    for a, b in prompts.tolist():
        key = (min(a, b), max(a, b))
        if key not in cache:
            generator = torch.Generator().manual_seed(price_key_seed(seed, a, b))
            draws = [hidden_prices(1, num_items, generator) for _ in range(num_draws)]
            cache[key] = torch.cat(draws)
        rows.append(cache[key])
    return torch.cat(rows) if rows else torch.zeros(0, num_items, dtype=torch.long)


def compare_tool(x: torch.Tensor, y: torch.Tensor, prices: torch.Tensor, eos_token: int):
    """The tool ``compare x y``: int64[n, 2] = (more expensive, cheaper); (EOS, EOS) if x or
    y is EOS (not an item).

    x, y int[n] with values 0 .. eos_token; prices int64[n, eos_token] (``hidden_prices``).
    """
    if x.shape != y.shape or x.ndim != 1 or prices.shape != (x.shape[0], eos_token):
        raise ValueError(
            f"x, y must be [n] and prices [n, {eos_token}], got {list(x.shape)}, "
            f"{list(y.shape)}, {list(prices.shape)}"
        )
    invalid = (x == eos_token) | (y == eos_token)
    xs, ys = x.long().clamp(max=eos_token - 1), y.long().clamp(max=eos_token - 1)
    x_higher = prices.gather(1, xs[:, None]) >= prices.gather(1, ys[:, None])
    answer = torch.where(x_higher, torch.stack([xs, ys], -1), torch.stack([ys, xs], -1))
    return torch.where(invalid[:, None], torch.full_like(answer, eos_token), answer)


def tool_mask(shape: tuple[int, int], mask_tool_tokens: bool = True) -> torch.Tensor:
    """float32[batch, trial, RESPONSE_LENGTH]: 1 on the policy's slots, 0 on the environment's.

    ``mask_tool_tokens=False`` (the planted bug) also puts the tool's reply (``TOOL_SLOTS``) in
    the mask; the grader's slot stays 0 (it is no token of the conversation, and in the loss it
    would train the policy on the right answer).

    Taught in notebook 15.
    """
    mask = torch.ones(*shape, RESPONSE_LENGTH)
    mask[..., GRADER_SLOT] = 0
    if mask_tool_tokens:
        mask[..., list(TOOL_SLOTS)] = 0
    return mask


def check_tool_task_fields(config) -> None:
    """Raise naming the first bad tool-use field of a ``TrainConfig``.

    mask_tool_tokens True or False, and False (the planted bug) only with task
    'tool_compare'; that task has prompts [a, b] (prompt_length 2) and a fixed
    RESPONSE_LENGTH (max_response_length left None).
    """
    check_bool(config.mask_tool_tokens, "mask_tool_tokens")
    if config.task != "tool_compare":
        if not config.mask_tool_tokens:
            raise ValueError(
                "mask_tool_tokens=False (the unmasked-tool-tokens bug) acts only with task "
                f"'tool_compare', got task {config.task!r}"
            )
        return
    if config.prompt_length != PROMPT_LENGTH:
        raise ValueError(
            f"task 'tool_compare' has prompts [a, b]: prompt_length must be {PROMPT_LENGTH}, "
            f"got {config.prompt_length}"
        )
    if config.max_response_length not in (None, RESPONSE_LENGTH):
        raise ValueError(
            f"task 'tool_compare' has {RESPONSE_LENGTH} response slots (a call, the tool's "
            "reply, the answer): leave max_response_length None, got "
            f"{config.max_response_length!r}"
        )


class ToolCompareTask(PromptTask):
    """Which of the items ``[a, b]`` is more expensive? With a ``compare`` tool (module doc).

    Held-out key: the *set* {a, b} (``[a, b]`` and ``[b, a]`` are the same question),
    encoded as min * vocab_size + max.

    Taught in notebook 15.
    """

    name = "tool_compare"

    def __init__(self, vocab_size: int, prompt_length: int = PROMPT_LENGTH):
        check_positive_ints(vocab_size=vocab_size, prompt_length=prompt_length)
        if prompt_length != PROMPT_LENGTH:
            raise ValueError(f"task 'tool_compare' has prompts of length 2, got {prompt_length}")
        if vocab_size < 2:
            raise ValueError(f"vocab_size must be >= 2 for a comparison, got {vocab_size}")
        super().__init__(prompt_length, vocab_size)
        self.eos_token = vocab_size

    def prompt_key(self, prompts: torch.Tensor) -> torch.Tensor:
        """int64[batch]: min(a, b) * vocab_size + max(a, b)."""
        check_prompts(prompts, self.vocab_size, PROMPT_LENGTH)
        low = prompts.long().min(dim=-1).values
        high = prompts.long().max(dim=-1).values
        return low * self.vocab_size + high

    def num_keys(self) -> int:
        """Distinct sets {a, b}: V (V + 1) / 2."""
        return self.vocab_size * (self.vocab_size + 1) // 2

    def _check(self, prompts: torch.Tensor, responses: torch.Tensor) -> None:
        check_prompts(prompts, self.vocab_size, PROMPT_LENGTH)
        if responses.ndim != 3 or responses.shape[0] != prompts.shape[0]:
            raise ValueError(
                f"responses must be [batch={prompts.shape[0]}, trial, {RESPONSE_LENGTH}], "
                f"got {list(responses.shape)}"
            )
        if responses.shape[-1] != RESPONSE_LENGTH:
            raise ValueError(
                f"responses must have {RESPONSE_LENGTH} slots (call x 2, tool x 2, answer, grader), "
                f"got {list(responses.shape)}"
            )

    def exact(self, prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        """bool[batch, trial]: the answer (slot 4) is the grader's right answer (slot 5)."""
        self._check(prompts, responses)
        return responses[..., ANSWER_SLOT] == responses[..., GRADER_SLOT]

    def reward(self, prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        """float32[batch, trial]: 1 for the right final answer, else 0 (nothing else counts)."""
        return self.exact(prompts, responses).float()

    def called_with_prompt(self, prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        """bool[batch, trial]: the call's operands are the prompt's two values (either order)."""
        self._check(prompts, responses)
        call = responses[..., list(CALL_SLOTS)].long().sort(dim=-1).values
        want = prompts.long().sort(dim=-1).values[:, None, :]
        return (call == want).all(dim=-1)


class ToolUsePolicy(AutoregressiveSortPolicy):
    """``AutoregressiveSortPolicy`` that samples whole tool episodes (module docstring).

    ``max_response_length`` is fixed at ``RESPONSE_LENGTH``; ``mask_tool_tokens`` says
    whether ``sample`` masks the tool's slots out (True) or plants the bug (False).

    Taught in notebook 15.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 64,
        num_layers: int = 2,
        num_heads: int = 4,
        seed: int | None = None,
        mask_tool_tokens: bool = True,
    ):
        super().__init__(
            vocab_size, PROMPT_LENGTH, RESPONSE_LENGTH, d_model, num_layers, num_heads, seed
        )
        check_bool(mask_tool_tokens, "mask_tool_tokens")
        self.mask_tool_tokens = mask_tool_tokens

    def sample(self, prompts, num_samples, generator=None):
        """(responses int64[batch, trial, 6], mask float32[batch, trial, 6]) with the tool."""
        responses = run_tool_episodes(self, prompts, num_samples, generator, greedy=False)
        return responses, tool_mask(tuple(responses.shape[:2]), self.mask_tool_tokens)

    def greedy(self, prompts):
        """Greedy episodes (argmax on the policy's slots, the tool on its own): [batch, 1, 6].

        The hidden prices are ``keyed_prices`` with ``GREEDY_PRICE_SEED``: a prompt's episode
        depends on the prompt and the weights only, not on its row or on the other prompts.
        """
        return run_tool_episodes(self, prompts, 1, greedy=True, price_seed=GREEDY_PRICE_SEED)


def run_tool_episodes(
    model: AutoregressiveSortPolicy,
    prompts: torch.Tensor,
    num_samples: int,
    generator: torch.Generator | None = None,
    greedy: bool = False,
    price_seed: int | None = None,
) -> torch.Tensor:
    """Play ``num_samples`` episodes per prompt: int[batch, 2] -> int64[batch, trial, 6].

    Per episode the environment draws hidden prices: with ``generator`` (``hidden_prices``,
    fresh prices per episode, for training), or, given ``price_seed``, as a function of the
    prompt's key and that seed (``keyed_prices``, for evaluation: episode j of a prompt is
    the same in any batch).
    Slot by slot: the policy samples (or, ``greedy``, takes the argmax of) its slots 0, 1
    and 4 from ``model(prompt + SEP + slots so far)``; slots 2, 3 are ``compare_tool``'s
    reply to slots 0, 1; slot 5 is the more expensive prompt item. Runs under
    ``torch.no_grad()`` in eval mode.

    Taught in notebook 15.
    """
    check_prompts(prompts, model.vocab_size, PROMPT_LENGTH)
    if model.max_response_length != RESPONSE_LENGTH:
        raise ValueError(
            f"the model must have max_response_length {RESPONSE_LENGTH}, got "
            f"{model.max_response_length}"
        )
    check_positive_ints(num_samples=num_samples)
    batch = prompts.shape[0]
    seq = repeat(_with_separator(model, prompts), "b pos -> (b trial) pos", trial=num_samples)
    if price_seed is None:
        prices = hidden_prices(seq.shape[0], model.vocab_size, generator)
    else:
        prices = keyed_prices(prompts, num_samples, model.vocab_size, price_seed)
    items = seq[:, :PROMPT_LENGTH]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for slot in range(RESPONSE_LENGTH):
                if slot == TOOL_SLOTS[0]:
                    reply = compare_tool(seq[:, -2], seq[:, -1], prices, model.eos_token)
                if slot in TOOL_SLOTS:
                    token = reply[:, slot - TOOL_SLOTS[0]]
                elif slot == GRADER_SLOT:
                    token = compare_tool(items[:, 0], items[:, 1], prices, model.eos_token)[:, 0]
                else:
                    logits = model(seq)[:, -1].float()
                    if greedy:
                        token = logits.argmax(dim=-1)
                    else:
                        probs = F.softmax(logits, dim=-1)
                        token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
                seq = torch.cat([seq, token[:, None]], dim=1)
    finally:
        model.train(was_training)
    responses = seq[:, PROMPT_LENGTH + 1 :]
    return rearrange(responses, "(b trial) pos -> b trial pos", b=batch)
