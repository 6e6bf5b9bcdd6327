"""Bridge to Hugging Face TRL: the sort task and our ``TrainConfig`` as ``trl.GRPOTrainer`` sees them.

Optional: needs the extra ``requirements-scale.txt`` (trl, transformers, tokenizers,
datasets). Nothing here imports those libraries at module import time, so the core
package never requires them; each function imports what it uses.

The TrainConfig -> GRPOConfig mapping lives in ``trl_config`` (import it from there); this
module holds the sort task in text (tokenizer, prompts, dataset, reward), the tiny GPT-2,
and the pieces that cross-check TRL's loss against ours.

Shapes: prompts int[batch, prompt_pos] (our convention), TRL's flat rows are
``batch * G`` completions, prompt ``i`` repeated G times in a row.

Taught in notebook 09.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence

import torch

from .._validate import check_positive_ints
from ..sort_task import REWARD_FNS

#: Special tokens of the word-level sort tokenizer (ids 0, 1, 2, 3 in this order).
PAD_TOKEN, EOS_TOKEN, UNK_TOKEN, SEP_TOKEN = "<pad>", "<eos>", "<unk>", ":"
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, EOS_TOKEN, UNK_TOKEN, SEP_TOKEN)


# --------------------------------------------------------------------------------------
# The sort task in text: tokenizer, prompts, dataset, reward, tiny model
# --------------------------------------------------------------------------------------


def format_prompt(prompt: Sequence[int]) -> str:
    """[3, 1, 4] -> '3 1 4 :' (digits separated by spaces, then the separator)."""
    return " ".join(str(int(x)) for x in prompt) + f" {SEP_TOKEN}"


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


def content_split(
    length: int, vocab_size: int, seed: int = 0, n_test: int = 7, n_val: int = 7
) -> dict[str, torch.Tensor]:
    """Every prompt int[n, length], split by content: {'train', 'val', 'test'}.

    A prompt's content is its multiset of values (``[2, 0, 2]`` and ``[0, 2, 2]`` share
    one): the multisets are shuffled with ``seed``, the first ``n_test`` go to 'test', the
    next ``n_val`` to 'val', the rest to 'train', each with all their orderings. A model
    scored on 'test' has never been trained on any ordering of those values.
    """
    multisets = list(itertools.combinations_with_replacement(range(vocab_size), length))
    if n_test + n_val >= len(multisets):
        raise ValueError(
            f"n_test + n_val = {n_test + n_val} leaves no training content out of "
            f"{len(multisets)} multisets (length {length}, vocab_size {vocab_size})"
        )
    random.Random(seed).shuffle(multisets)
    groups = {
        "test": multisets[:n_test],
        "val": multisets[n_test : n_test + n_val],
        "train": multisets[n_test + n_val :],
    }
    return {
        name: torch.tensor(sorted({p for m in sets for p in itertools.permutations(m)}))
        for name, sets in groups.items()
    }


def fresh_test_split(
    length: int,
    vocab_size: int,
    seed: int = 0,
    n_test: int = 7,
    n_val: int = 7,
    fresh_seed: int = 1,
) -> dict[str, torch.Tensor]:
    """``content_split`` with its test set replaced by a fresh one: {'train', 'val', 'test',
    'old_test'}, each int[n, length].

    For a test set that has been scored too often (recipes were compared on it, so it guided
    the choice): 'val' is ``content_split``'s validation set, unchanged; the new 'test' is
    ``n_test`` multisets drawn with ``fresh_seed`` from ``content_split``'s training
    multisets; the old test multisets ('old_test', all orderings) join the training content.
    The new test set shares no multiset with 'train', 'val' or 'old_test'.
    """
    old = content_split(length, vocab_size, seed, n_test, n_val)
    key = lambda prompts: {tuple(sorted(p)) for p in prompts.tolist()}  # noqa: E731
    old_train = sorted(key(old["train"]))
    if n_test >= len(old_train):
        raise ValueError(
            f"n_test = {n_test} must be smaller than the {len(old_train)} training multisets"
        )
    random.Random(fresh_seed).shuffle(old_train)
    test_sets = old_train[:n_test]
    train_sets = old_train[n_test:] + sorted(key(old["test"]))

    def prompts(sets):
        return torch.tensor(sorted({p for m in sets for p in itertools.permutations(m)}))

    return {
        "train": prompts(train_sets),
        "val": old["val"],
        "test": prompts(test_sets),
        "old_test": old["test"],
    }


def build_sort_tokenizer(vocab_size: int):
    """A word-level ``PreTrainedTokenizerFast``: 4 special tokens, then '0' .. str(vocab_size - 1).

    Ids: <pad>=0, <eos>=1, <unk>=2, ':'=3, digit d = 4 + d. Words are split on
    whitespace; decoding joins them with single spaces. Built locally, nothing downloaded.
    """
    check_positive_ints(vocab_size=vocab_size)
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
    """A ``datasets.Dataset`` with a 'prompt' text column, one row per prompt.

    prompts: int[batch, prompt_pos].
    """
    from datasets import Dataset

    if not isinstance(prompts, torch.Tensor) or prompts.ndim != 2:
        shape = list(prompts.shape) if isinstance(prompts, torch.Tensor) else type(prompts).__name__
        raise ValueError(f"prompts must be a tensor of shape [batch, prompt_pos], got {shape}")
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
    (one micro-batch per optimizer step, as ``trl_config.grpo_config_kwargs`` configures).
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
    """Greedy completions of a causal LM on prompts int[batch, prompt_pos] -> summary numbers.

    Returns {'mean_reward', 'exact_sort', 'malformed'}: the mean reward of the greedy
    completions (malformed ones scored by ``sort_reward_func``'s -1), the fraction sorted
    exactly, and the fraction that did not parse as ``pos`` numbers.
    """
    if not isinstance(prompts, torch.Tensor) or prompts.ndim != 2:
        shape = list(prompts.shape) if isinstance(prompts, torch.Tensor) else type(prompts).__name__
        raise ValueError(f"prompts must be a tensor of shape [batch, prompt_pos], got {shape}")
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
