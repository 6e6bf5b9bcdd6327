"""A small pretrained checkpoint made here, loaded the way a hub model is (notebook 14).

``build_checkpoint(path)`` builds a word-level tokenizer with the ``tokenizers`` library and a
chat template, a Llama-architecture causal LM at toy size, trains it by supervised fine-tuning
(the "cold start" of DeepSeek-R1, arXiv 2501.12948, section 2.3.1) on a PARTIAL skill, and
writes both with ``save_pretrained``. Everything downstream loads it with
``AutoModelForCausalLM.from_pretrained(path)`` / ``AutoTokenizer.from_pretrained(path)``.

The task: the user writes ``sort 3 1 2``; the assistant answers ``1 2 3`` and ends its turn.
The partial skill the SFT data covers: lists of length 2-4 with values 0-5. Outside it:
longer lists (length 5-6) and unseen values (a 6-9 in the list).

Held out by content: the key of a prompt is its multiset (``sorted(numbers)``); the test and
validation multisets are drawn once (``make_splits``, a fixed split seed) and no SFT or RL
example ever has one of those keys (``history['heldout_keys_in_training']`` counts them: 0).

Taught in notebook 14.
"""

from __future__ import annotations

import functools
import json
import math
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from .._validate import check_number, check_positive_ints
from .common import kv_cache, model_device, right_padded

PAD, EOS, START = "<pad>", "<|im_end|>", "<|im_start|>"
ROLES = ("system", "user", "assistant")
WORDS = ("sort",)
#: A ChatML-style template over whitespace-separated words (the tokenizer splits on spaces).
CHAT_TEMPLATE = (
    "{% for m in messages %}" + START + " {{ m['role'] }} {{ m['content'] }} " + EOS + " "
    "{% endfor %}{% if add_generation_prompt %}" + START + " assistant {% endif %}"
)
#: Value ranges and lengths of the three regions (SFT covers only the first).
SFT_VALUES = tuple(range(6))
UNSEEN_VALUES = tuple(range(6, 10))
SFT_LENGTHS = (2, 3, 4)
LONGER_LENGTHS = (5, 6)
METADATA = "pgrl_checkpoint.json"
#: Where ``python3 tasks.py checkpoint`` caches the checkpoint (git-ignored).
DEFAULT_PATH = Path(__file__).resolve().parents[2] / ".cache" / "pgrl" / "checkpoint"


@dataclass(frozen=True)
class CheckpointConfig:
    """Model size and SFT recipe. ``QUICK`` is the seconds-long version notebook 14 builds live."""

    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 128
    sft_steps: int = 100
    sft_batch: int = 64
    sft_lr: float = 3e-3
    seed: int = 0

    def validate(self) -> None:
        names = ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size")
        check_positive_ints(**{name: getattr(self, name) for name in names})
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_heads ({self.num_heads})"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be divisible by num_kv_heads ({self.num_kv_heads})"
            )
        check_number(self.sft_steps, "sft_steps", 0, low_inclusive=True, integer=True)
        check_positive_ints(sft_batch=self.sft_batch)
        check_number(self.sft_lr, "sft_lr", 0, 1, high_inclusive=False)


FULL = CheckpointConfig()
QUICK = CheckpointConfig(
    hidden_size=32,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    intermediate_size=64,
    sft_steps=300,
    sft_batch=32,
)
TINY = CheckpointConfig(
    hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=32, sft_steps=5
)


# ----------------------------------------------------------------------------- the task


def key(numbers) -> tuple[int, ...]:
    """The content key of a prompt: its multiset (the sorted tuple)."""
    return tuple(sorted(int(x) for x in numbers))


def prompt_messages(numbers) -> list[dict]:
    """The chat prompt for ``numbers``: one user turn ``sort 3 1 2``."""
    return [{"role": "user", "content": "sort " + " ".join(str(int(x)) for x in numbers)}]


def answer_text(numbers) -> str:
    """The correct assistant reply: the sorted list."""
    return " ".join(str(x) for x in key(numbers))


def completion_text(completion) -> str:
    """Text of a TRL completion: a str (standard format) or [{'role': 'assistant', ...}]."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    raise ValueError(f"a completion must be a str or a list of messages, got {completion!r}")


def parse_answer(text: str) -> list[int] | None:
    """The list of single digits the reply names, or None if any word is not a digit."""
    words = text.replace(EOS, " ").split()
    if not words or any(not (len(w) == 1 and w.isdigit()) for w in words):
        return None
    return [int(w) for w in words]


def is_correct(numbers, text: str) -> bool:
    return parse_answer(text) == list(key(numbers))


def _multisets(values, lengths) -> list[tuple[int, ...]]:
    import itertools

    return [m for n in lengths for m in itertools.combinations_with_replacement(sorted(values), n)]


def make_splits(
    num_test: int = 30, num_validation: int = 20, split_seed: int = 0
) -> dict[str, list[tuple[int, ...]]]:
    """Held-out multisets per region, drawn once with ``split_seed`` (the same for every run).

    Returns keys 'test_in', 'test_longer', 'test_unseen', 'validation_in',
    'validation_longer' (lists of sorted tuples) and 'train_in', 'train_longer' (the rest,
    the only multisets SFT (in) and RL (in + longer) may draw). Unseen values are never trained.
    """
    check_positive_ints(num_test=num_test, num_validation=num_validation)
    rng = random.Random(split_seed)
    out: dict[str, list[tuple[int, ...]]] = {}
    for region, values, lengths in (
        ("in", SFT_VALUES, SFT_LENGTHS),
        ("longer", SFT_VALUES, LONGER_LENGTHS),
    ):
        pool = _multisets(values, lengths)
        if num_test + num_validation >= len(pool):
            raise ValueError(
                f"num_test + num_validation must be below the {len(pool)} multisets of "
                f"region {region!r}, got {num_test + num_validation}"
            )
        rng.shuffle(pool)
        out[f"test_{region}"] = sorted(pool[:num_test])
        out[f"validation_{region}"] = sorted(pool[num_test : num_test + num_validation])
        out[f"train_{region}"] = sorted(pool[num_test + num_validation :])
    unseen = [
        m
        for m in _multisets(SFT_VALUES + UNSEEN_VALUES, SFT_LENGTHS)
        if any(x in UNSEEN_VALUES for x in m)
    ]
    rng.shuffle(unseen)
    out["test_unseen"] = sorted(unseen[:num_test])
    return out


def order(multiset, rng: random.Random) -> list[int]:
    """One random ordering of a multiset (the prompt the model sees)."""
    numbers = list(multiset)
    rng.shuffle(numbers)
    return numbers


# ----------------------------------------------------------------------------- model + tokenizer


def build_tokenizer():
    """A word-level ``PreTrainedTokenizerFast`` with a chat template; nothing downloaded.

    Vocabulary: <pad>, <|im_end|> (EOS, ends a turn), <|im_start|>, <unk>, the roles, 'sort'
    and the digits 0-9. Words split on whitespace; decoding joins them with spaces.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = [PAD, EOS, START, "<unk>", *ROLES, *WORDS, *(str(d) for d in range(10))]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    core.add_special_tokens([AddedToken(t, special=True) for t in (PAD, EOS, START, "<unk>")])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=PAD, eos_token=EOS, unk_token="<unk>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_model(tokenizer, config: CheckpointConfig = FULL):
    """A randomly initialised ``LlamaForCausalLM`` at toy size (grouped-query attention, RoPE,
    SwiGLU, RMSNorm as in Llama 2/3; tied embeddings, no dropout).

    Llama rather than Qwen2: transformers 5 loads a Qwen2 checkpoint's tokenizer with its own
    byte-level BPE class, which would rebuild our word-level tokenizer wrongly; for Llama it
    loads ``tokenizer.json`` as written."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config.validate()
    torch.manual_seed(config.seed)
    model_config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_kv_heads,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    model = LlamaForCausalLM(model_config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def prompt_ids(tokenizer, numbers) -> list[int]:
    """Token ids of the chat-formatted prompt, ending with the assistant header."""
    return list(_prompt_ids(tokenizer, tuple(int(x) for x in numbers)))


@functools.lru_cache(maxsize=65536)
def _prompt_ids(tokenizer, numbers: tuple[int, ...]) -> tuple[int, ...]:
    text = tokenizer.apply_chat_template(
        prompt_messages(numbers), add_generation_prompt=True, tokenize=False
    )
    return tuple(tokenizer(text, add_special_tokens=False)["input_ids"])


def sft_batch(tokenizer, multisets, batch: int, rng: random.Random):
    """input_ids, attention_mask, labels [batch, pos]: prompt + answer + EOS, loss on the answer."""
    prompts, answers = [], []
    for _ in range(batch):
        numbers = order(rng.choice(multisets), rng)
        prompts.append(prompt_ids(tokenizer, numbers))
        digits = [tokenizer.convert_tokens_to_ids(str(x)) for x in key(numbers)]
        answers.append(digits + [tokenizer.eos_token_id])
    return right_padded(prompts, answers, tokenizer.pad_token_id)


def sft(model, tokenizer, multisets, config: CheckpointConfig) -> list[float]:
    """Supervised fine-tuning (next-token cross-entropy on the answer tokens) with AdamW and a
    cosine schedule. Returns the loss per step."""
    rng = random.Random(config.seed)
    torch.manual_seed(config.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=config.sft_lr, weight_decay=0.01)
    total = max(config.sft_steps, 1)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total) / total))
    )
    model.train()
    losses = []
    for _ in range(config.sft_steps):
        ids, mask, lab = sft_batch(tokenizer, multisets, config.sft_batch, rng)
        loss = model(input_ids=ids, attention_mask=mask, labels=lab).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses


def build_checkpoint(path, config: CheckpointConfig = FULL, overwrite: bool = False) -> Path:
    """Build tokenizer + Llama model, SFT on the partial skill, ``save_pretrained`` to ``path``.

    Skips the work when ``path`` already holds a checkpoint with the same config (the cache of
    ``python3 tasks.py checkpoint``) unless ``overwrite``. Writes ``pgrl_checkpoint.json`` with
    the recipe, the SFT loss and the count of held-out keys seen in training (0)."""
    path = Path(path)
    config.validate()
    meta_file = path / METADATA
    if meta_file.exists() and not overwrite:
        meta = json.loads(meta_file.read_text())
        if meta.get("config") == asdict(config):
            return path
    splits = make_splits()
    heldout = {m for name, keys in splits.items() if not name.startswith("train_") for m in keys}
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, config)
    train = splits["train_in"]
    losses = sft(model, tokenizer, train, config)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    meta = {
        "config": asdict(config),
        "sft_multisets": len(train),
        "sft_values": list(SFT_VALUES),
        "sft_lengths": list(SFT_LENGTHS),
        "heldout_keys_in_training": sum(m in heldout for m in train),
        "sft_loss_first": losses[0] if losses else None,
        "sft_loss_last": losses[-1] if losses else None,
        "num_parameters": sum(p.numel() for p in model.parameters()),
    }
    meta_file.write_text(json.dumps(meta, indent=1))
    return path


def load(path):
    """``AutoModelForCausalLM.from_pretrained(path)``, ``AutoTokenizer.from_pretrained(path)``:
    the same calls a user makes with a hub id."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(path)
    model.eval()
    return model, AutoTokenizer.from_pretrained(path)


# ----------------------------------------------------------------------------- pass@k sampling


def completion_answer(tokenizer, seq: list[int]) -> list[int] | None:
    """The digits a completion names (``parse_answer``), or None if it did not end its turn.

    ``seq`` is one completion's token ids, cut after its EOS. The text is
    ``tokenizer.decode(..., skip_special_tokens=True)``, as TRL decodes completions for the
    reward functions: right for the word-level tokenizer here and for the byte-level BPE of
    GPT-2 / Qwen / Llama-3, whose tokens carry a space marker (``Ġ2``) that joining
    ``convert_ids_to_tokens`` with spaces would keep.
    """
    if not seq or seq[-1] != tokenizer.eos_token_id:
        return None
    return parse_answer(tokenizer.decode(seq[:-1], skip_special_tokens=True))


@torch.no_grad()
def sample_completions(
    model, tokenizer, numbers, n: int, generator, temperature: float = 1.0, max_new_tokens: int = 8
) -> dict:
    """``n`` completions of one prompt by plain sampling at ``temperature`` (no top-k/top-p)
    with the model's KV cache. Returns 'tokens' (list of n id lists, each cut after its EOS),
    'length' (mean tokens per completion) and 'entropy' (mean per-token entropy in nats).

    Every tensor lives on the model's device (``model_device``); the draws run on
    ``generator``'s device (the probabilities are moved there), so a CUDA model works with a
    CPU or a CUDA generator. Finished rows are padded with ``pad_token_id``, or with EOS when
    the tokenizer has no pad token (Llama-3 style)."""
    check_positive_ints(n=n)
    check_number(temperature, "temperature", 0)
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("the tokenizer has no eos_token_id: a completion could never end")
    pad = eos if tokenizer.pad_token_id is None else tokenizer.pad_token_id
    device = model_device(model)
    ids = torch.tensor([prompt_ids(tokenizer, numbers)] * n, device=device)
    out = model(input_ids=ids, use_cache=True)
    past, logits = kv_cache(out), out.logits[:, -1]
    done = torch.zeros(n, dtype=torch.bool, device=device)
    tokens = []
    length = torch.zeros(n, device=device)
    ent_sum, ent_count = 0.0, 0
    for _ in range(max_new_tokens):
        logp = torch.log_softmax(logits.float() / temperature, dim=-1)
        ent = -(logp.exp() * logp).sum(-1)
        ent_sum += float(ent[~done].sum())
        ent_count += int((~done).sum())
        probs = logp.exp().to(generator.device)
        nxt = torch.multinomial(probs, 1, generator=generator).squeeze(1).to(device)
        nxt = torch.where(done, torch.full_like(nxt, pad), nxt)
        tokens.append(nxt)
        length += (~done).float()
        done = done | (nxt == eos)
        if bool(done.all()):
            break
        out = model(input_ids=nxt[:, None], past_key_values=past, use_cache=True)
        past, logits = kv_cache(out), out.logits[:, -1]
    seqs = [s[: s.index(eos) + 1] if eos in s else s for s in torch.stack(tokens, 1).tolist()]
    return {
        "tokens": seqs,
        "length": float(length.mean()),
        "entropy": ent_sum / max(ent_count, 1),
    }


def count_correct(
    model,
    tokenizer,
    multisets,
    n: int,
    seed: int,
    temperature: float = 1.0,
    max_new_tokens: int = 8,
) -> dict:
    """Sample ``n`` completions for one random ordering of each multiset; return per-problem
    counts of correct ones 'c' [problems], 'n', the mean completion length in tokens and the
    mean per-token entropy (nats) of the sampler.

    A completion is correct when it ends its turn (EOS) within ``max_new_tokens`` and names
    exactly the sorted list (``completion_answer``). The draws use a generator seeded with
    ``seed`` on the model's device."""
    rng = random.Random(seed)
    gen = torch.Generator(device=model_device(model)).manual_seed(seed)
    counts, lengths, entropies = [], [], []
    model.eval()
    for multiset in multisets:
        numbers = order(multiset, rng)
        r = sample_completions(model, tokenizer, numbers, n, gen, temperature, max_new_tokens)
        target = list(key(numbers))
        counts.append(sum(completion_answer(tokenizer, seq) == target for seq in r["tokens"]))
        lengths.append(r["length"])
        entropies.append(r["entropy"])
    if not counts:
        raise ValueError("multisets must hold at least one problem")
    return {
        "c": counts,
        "n": n,
        "mean_length": sum(lengths) / len(lengths),
        "mean_entropy": sum(entropies) / len(entropies),
    }


def pass_at_k_curve(counts: list[int], n: int, ks) -> list[float]:
    """Mean over problems of ``pass_at_k(n, c, k)`` for each k (Chen et al. 2021, eq. 1)."""
    from pgrl_helpers.passk import pass_at_k

    if not counts:
        raise ValueError("counts must hold at least one problem")
    return [sum(pass_at_k(n, c, k) for c in counts) / len(counts) for k in ks]


def main(argv=None) -> None:
    """``python3 tasks.py checkpoint [PATH] [--seed S] [--overwrite]``."""
    import argparse
    import dataclasses
    import time

    p = argparse.ArgumentParser(description="Build the SFT checkpoint of notebook 14.")
    p.add_argument("path", nargs="?", default=str(DEFAULT_PATH))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--overwrite", action="store_true")
    args = p.parse_args(argv)
    start = time.perf_counter()
    path = build_checkpoint(args.path, dataclasses.replace(FULL, seed=args.seed), args.overwrite)
    meta = json.loads((path / METADATA).read_text())
    print(
        f"checkpoint in {path} ({meta['num_parameters']} parameters, SFT loss "
        f"{meta['sft_loss_first']:.3f} -> {meta['sft_loss_last']:.3f}; "
        f"{time.perf_counter() - start:.0f} s)"
    )


if __name__ == "__main__":
    main()
