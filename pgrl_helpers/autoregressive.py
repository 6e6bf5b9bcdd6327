"""An autoregressive policy: prompt, separator, then one token at a time until EOS.

The toy policies (``LectureModel``, ``SortTransformer``) score every output position
independently and always answer with exactly ``prompt_length`` tokens. A real language
model instead reads ``prompt + [SEP]`` and generates token by token, each token
conditioned on the ones before it, until it emits an end-of-sequence token (EOS) or hits
a maximum length. Responses then have different lengths, and a batch of them is padded
to a rectangle; the *response mask* says which slots hold real tokens.

Token ids (``vocab_size`` is the number of task values, 0 .. vocab_size - 1):

* ``0 .. vocab_size - 1``: task tokens (list values);
* ``eos_token = vocab_size``: end of the response, and also the padding after it;
* ``sep_token = vocab_size + 1``: separates prompt and response (input only, never
  generated).

The policy outputs logits over ``vocab_size + 1`` tokens (task tokens and EOS).

Shapes: prompts int[batch, prompt_pos]; responses int64[batch, trial, pos] with
pos = max_response_length; response mask float[batch, trial, pos] equal to 1 up to
and including the first EOS and 0 after it (all 1 when a response never emitted EOS
and was cut at the maximum length).

The functions mirror ``pgrl_helpers.sampling`` (``sample_responses``,
``greedy_responses``, ``compute_log_probs``, ``token_entropy``) so the training loop can
swap one module for the other.

Taught in notebook 08.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import einsum, rearrange, repeat
from torch import nn

from ._validate import (
    check_integer,
    check_ndim,
    check_number,
    check_positive_ints,
    check_prompts,
    check_token_range,
)
from .masking import masked_mean
from .models import transformer_trunk
from .policy import remember_logits, reuse_logits


def autoregressive_arguments(config) -> dict:
    """``AutoregressiveSortPolicy``'s arguments for a ``TrainConfig`` (also the critic's,
    ``value.build_critic``: the same trunk): its sizes, ``response_length`` and ``seed``."""
    return {
        "vocab_size": config.vocab_size,
        "prompt_length": config.prompt_length,
        "max_response_length": config.response_length,
        "d_model": config.embedding_dim,
        "num_layers": config.num_layers,
        "num_heads": config.num_heads,
        "seed": config.seed,
    }


class AutoregressiveSortPolicy(nn.Module):
    """A tiny causal (decoder-only) transformer: ``prompt + [SEP] + response``.

    tokens int[batch, seq] -> token + position embeddings  [batch, seq, d_model]
      -> num_layers causal blocks -> logits               [batch, seq, vocab_size + 1]

    ``logits[:, i]`` is the distribution of token ``i + 1``. Sequences may be at most
    ``prompt_length + 1 + max_response_length`` long.

    Taught in notebook 08.
    """

    def __init__(
        self,
        vocab_size: int,
        prompt_length: int,
        max_response_length: int,
        d_model: int = 64,
        num_layers: int = 2,
        num_heads: int = 4,
        seed: int | None = None,
    ):
        super().__init__()
        check_positive_ints(  # d_model, num_layers, num_heads: transformer_trunk
            vocab_size=vocab_size,
            prompt_length=prompt_length,
            max_response_length=max_response_length,
        )
        self.vocab_size = vocab_size
        self.prompt_length = prompt_length
        self.max_response_length = max_response_length
        self.response_length = max_response_length
        self.eos_token = vocab_size
        self.sep_token = vocab_size + 1
        self.output_size = vocab_size + 1
        self.max_seq_len = prompt_length + 1 + max_response_length
        self.d_model = d_model
        self.embedding, self.position, self.blocks, self.final_norm, self.unembed = (
            transformer_trunk(
                vocab_size + 2, self.max_seq_len, 0.1, d_model, num_layers, num_heads,
                self.output_size, causal=True, seed=seed,
            )
        )  # fmt: skip

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens int[batch, seq] -> next-token logits float[batch, seq, vocab_size + 1]."""
        return self.unembed(self.features(tokens))

    def features(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens int[batch, seq] -> last hidden states float[batch, seq, d_model].

        The trunk without the unembedding; the critic (``value.AutoregressiveValueModel``)
        puts its scalar head here.
        """
        check_ndim(tokens, 2, "tokens", "batch, seq")
        check_integer(tokens, "tokens")
        check_token_range(tokens, self.vocab_size + 2, "tokens")
        seq = tokens.shape[1]
        if seq > self.max_seq_len:
            raise ValueError(
                f"sequence of {seq} tokens is longer than this policy's maximum "
                f"{self.max_seq_len} (prompt {self.prompt_length} + SEP + "
                f"{self.max_response_length} response tokens)"
            )
        x = self.embedding(tokens) + self.position[:seq]
        for block in self.blocks:
            x = block(x)
        return self.final_norm(x)

    # ---- the Policy interface (pgrl_helpers.policy) -------------------------------

    def sample(self, prompts, num_samples, generator=None):
        """(responses int64[batch, trial, pos], response mask float32[batch, trial, pos])."""
        return sample_with_mask(self, prompts, num_samples, generator)

    def log_probs(self, prompts, responses):
        """Per-token log-probs float[batch, trial, pos] (padding slots too: mask them)."""
        logits = _response_logits(prompts, responses, self)
        remember_logits(self, prompts, responses, logits)  # for the entropy asked next
        return _log_probs_from_logits(logits, responses)

    def token_entropy(self, prompts, responses):
        """Entropy (nats) at every response slot, float[batch, trial, pos].

        From the forward pass of a ``log_probs`` call on the same tensors just before (the
        loop's order), else from a pass of its own: the same numbers either way."""
        logits = reuse_logits(self, prompts, responses)
        if logits is None:
            return token_entropy(self, prompts, responses)
        return _entropy_from_logits(logits)

    def mean_entropy(self, prompts, responses, mask):
        """Mean entropy over the real response tokens (padding never counts)."""
        return masked_mean(self.token_entropy(prompts, responses), mask)

    def greedy(self, prompts):
        """Greedy decoding, int64[batch, 1, pos] (switches to eval mode inside)."""
        return greedy_responses(self, prompts)


def _check_policy(model) -> None:
    for attr in ("eos_token", "sep_token", "prompt_length", "max_response_length"):
        if not hasattr(model, attr):
            raise TypeError(
                f"model must be an autoregressive policy with attribute {attr!r} "
                f"(e.g. AutoregressiveSortPolicy), got {type(model).__name__}"
            )


def _check_prompts(model, prompts: torch.Tensor) -> None:
    check_prompts(prompts, model.vocab_size, model.prompt_length)


def _with_separator(model, prompts: torch.Tensor) -> torch.Tensor:
    """int[batch, prompt_pos] -> int[batch, prompt_pos + 1]: the prompt followed by SEP."""
    sep = torch.full((prompts.shape[0], 1), model.sep_token, dtype=torch.long)
    return torch.cat([prompts.long(), sep], dim=1)


def response_mask(responses: torch.Tensor, eos_token: int) -> torch.Tensor:
    """float32[batch, trial, pos]: 1 up to and including the first EOS, 0 after it.

    A response without EOS (cut at the maximum length) is all ones.

    Taught in notebook 08.
    """
    check_ndim(responses, 3, "responses", "batch, trial, pos")
    check_integer(responses, "responses")
    is_eos = (responses == eos_token).long()
    eos_before = is_eos.cumsum(dim=-1) - is_eos  # number of EOS strictly before each slot
    return (eos_before == 0).to(torch.float32)


def _generate(
    model,
    prompts: torch.Tensor,
    num_samples: int,
    generator: torch.Generator | None,
    greedy: bool,
) -> torch.Tensor:
    _check_policy(model)
    _check_prompts(model, prompts)
    check_positive_ints(num_samples=num_samples)
    batch = prompts.shape[0]
    # every (prompt, sample) pair is one row: [(batch trial), pos + 1]
    seq = repeat(
        _with_separator(model, prompts), "batch pos -> (batch trial) pos", trial=num_samples
    )
    done = torch.zeros(seq.shape[0], dtype=torch.bool)
    eos = model.eos_token
    was_training = model.training
    model.eval()
    # a KV cache when the model is this module's transformer: each step feeds one token
    cache = KVCache(model) if type(model).forward is AutoregressiveSortPolicy.forward else None
    try:
        with torch.no_grad():
            for _ in range(model.max_response_length):  # a loop over positions only
                if cache is None:
                    logits = model(seq)[:, -1].float()  # [(batch trial), vocab + 1]
                else:  # first step: the whole prompt + SEP; then only the newest token
                    new_tokens = seq if cache.length == 0 else seq[:, -1:]
                    logits = cache.forward(new_tokens)[:, -1].float()
                if greedy:
                    token = logits.argmax(dim=-1)
                else:
                    probs = F.softmax(logits, dim=-1)
                    token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
                token = torch.where(done, torch.full_like(token, eos), token)  # pad after EOS
                done = done | (token == eos)
                seq = torch.cat([seq, token[:, None]], dim=1)
                if bool(done.all()):
                    break
    finally:
        model.train(was_training)
    responses = seq[:, model.prompt_length + 1 :]
    missing = model.max_response_length - responses.shape[1]
    if missing:  # everybody stopped early: pad the rectangle with EOS
        responses = F.pad(responses, (0, missing), value=eos)
    return rearrange(responses, "(batch trial) pos -> batch trial pos", batch=batch)


class KVCache:
    """Keys and values of every block for the tokens seen so far: generation in O(seq) steps.

    Without a cache, step t of generation runs the whole prefix (length ``prompt + 1 + t``)
    through the model again; with it, only the newest token is run, attending to the stored
    keys and values of the earlier ones (Pope et al. 2022, "Efficiently Scaling Transformer
    Inference", section 2). ``forward(tokens)`` takes int[rows, new] at positions
    ``length .. length + new - 1`` and returns their logits float[rows, new, vocab + 1],
    equal (up to float rounding) to the same rows of ``model(all tokens so far)``.
    Stored per block: keys and values float[rows, head, seq, d_head].
    """

    def __init__(self, model: AutoregressiveSortPolicy):
        self.model = model
        self.keys: list[torch.Tensor | None] = [None] * len(model.blocks)
        self.values: list[torch.Tensor | None] = [None] * len(model.blocks)
        self.length = 0

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        model, start, new = self.model, self.length, tokens.shape[1]
        if start + new > model.max_seq_len:
            raise ValueError(
                f"sequence of {start + new} tokens is longer than this policy's maximum "
                f"{model.max_seq_len}"
            )
        x = model.embedding(tokens) + model.position[start : start + new]
        for i, block in enumerate(model.blocks):
            q, k, v = rearrange(
                block.qkv(block.attention_norm(x)),
                "batch seq (three head d_head) -> three batch head seq d_head",
                three=3,
                head=block.num_heads,
            )
            if self.keys[i] is not None:
                k = torch.cat([self.keys[i], k], dim=2)
                v = torch.cat([self.values[i], v], dim=2)
            self.keys[i], self.values[i] = k, v
            scores = einsum(q, k, "batch head q d, batch head k d -> batch head q k")
            scores = scores / math.sqrt(q.shape[-1])
            # new query j sits at position start + j and sees keys 0 .. start + j
            future = torch.ones(new, start + new, dtype=torch.bool).triu(start + 1)
            scores = scores.masked_fill(future, float("-inf"))
            weights = torch.softmax(scores, dim=-1)
            mixed = einsum(weights, v, "batch head q k, batch head k d -> batch head q d")
            x = x + block.attention_out(rearrange(mixed, "batch head seq d -> batch seq (head d)"))
            x = x + block.mlp(block.mlp_norm(x))
        self.length = start + new
        return model.unembed(model.final_norm(x))


def sample_responses(
    model, prompts: torch.Tensor, num_samples: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Sample ``num_samples`` (= G) responses per prompt, token by token.

    prompts int[batch, prompt_pos] -> responses int64[batch, trial, pos], pos =
    ``model.max_response_length``. All batch x G rows are generated together; the only
    Python loop is over positions. After a row emits EOS it is padded with EOS (use
    ``response_mask`` to tell real tokens from padding). Pass a seeded
    ``torch.Generator`` for reproducible samples. Runs under ``torch.no_grad()`` in
    eval mode (no dropout here anyway).
    """
    return _generate(model, prompts, num_samples, generator, greedy=False)


def sample_with_mask(
    model, prompts: torch.Tensor, num_samples: int, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``sample_responses`` plus its response mask: (int64[batch, trial, pos], float32[...]).

    Taught in notebook 08.
    """
    responses = sample_responses(model, prompts, num_samples, generator)
    return responses, response_mask(responses, model.eos_token)


def greedy_responses(model, prompts: torch.Tensor) -> torch.Tensor:
    """Greedy decoding (argmax at every step): int[batch, prompt_pos] -> int64[batch, 1, pos].

    Taught in notebook 08.
    """
    return _generate(model, prompts, 1, None, greedy=True)


def _response_logits(prompts: torch.Tensor, responses: torch.Tensor, model) -> torch.Tensor:
    """Teacher-forced logits for every response slot: float[batch, trial, pos, vocab + 1]."""
    _check_policy(model)
    _check_prompts(model, prompts)
    check_ndim(responses, 3, "responses", "batch, trial, pos")
    check_integer(responses, "responses")
    batch, trial, pos = responses.shape
    if batch != prompts.shape[0] or pos > model.max_response_length:
        raise ValueError(
            f"responses shape {list(responses.shape)} does not fit prompts "
            f"{list(prompts.shape)}: need [batch={prompts.shape[0]}, trial, "
            f"pos<={model.max_response_length}]"
        )
    check_token_range(responses, model.vocab_size + 1, "responses")
    context = repeat(_with_separator(model, prompts), "batch pos -> (batch trial) pos", trial=trial)
    flat = rearrange(responses.long(), "batch trial pos -> (batch trial) pos")
    # input: prompt, SEP, response[:-1]; the logits at SEP and after predict response[0..]
    tokens = torch.cat([context, flat[:, :-1]], dim=1)
    logits = model(tokens)[:, model.prompt_length :]  # [(batch trial), pos, vocab + 1]
    return rearrange(logits, "(batch trial) pos vocab -> batch trial pos vocab", batch=batch)


def compute_log_probs(model, prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
    """Per-token log pi(response[t] | prompt, SEP, response[:t]): float[batch, trial, pos].

    One teacher-forced forward pass (the causal mask keeps token t from seeing later
    tokens). Padding slots after EOS get a finite log-prob too; multiply by (or select
    with) the response mask so they never count. Differentiable: wrap in
    ``torch.no_grad()`` to freeze old/reference log-probs.

    Taught in notebook 08.
    """
    return _log_probs_from_logits(_response_logits(prompts, responses, model), responses)


def _log_probs_from_logits(logits: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
    """[batch, trial, pos, vocab + 1] logits -> log-probs of the response tokens [batch, trial, pos]."""
    log_probs = F.log_softmax(logits, dim=-1)
    return log_probs.gather(dim=-1, index=responses.long().unsqueeze(-1)).squeeze(-1)


def token_entropy(model, prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of the next-token distribution at every response slot: [batch, trial, pos].

    Padding slots are included; average with the response mask.
    """
    return _entropy_from_logits(_response_logits(prompts, responses, model))


def _entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """[..., vocab + 1] logits -> entropy (nats) over the last axis [...]."""
    log_probs = F.log_softmax(logits, dim=-1)
    return -(log_probs.exp() * log_probs).sum(dim=-1)


#: Tasks the autoregressive policy is wired to (variable length, or multi-turn).
AUTOREGRESSIVE_TASKS: tuple[str, ...] = ("sort_dedup", "tool_compare")


def check_autoregressive_fields(config) -> None:
    """Raise naming the first bad task / model pairing or response length of a ``TrainConfig``.

    The tasks of ``AUTOREGRESSIVE_TASKS`` need model 'autoregressive' (it chooses when to
    stop, or reads the tool's answer) and it is wired only to them; they train on random
    prompts. ``max_response_length`` is None or an int >= prompt_length + 1 (the longest
    answer plus EOS).
    """
    if (config.task in AUTOREGRESSIVE_TASKS) != (config.model == "autoregressive"):
        raise ValueError(
            f"task {config.task!r} with model {config.model!r}: the variable-length task "
            "'sort_dedup' and the multi-turn task 'tool_compare' need model "
            "'autoregressive' (it must choose when to stop / read the tool's answer), "
            "and the autoregressive policy is only wired to those tasks"
        )
    if config.task in AUTOREGRESSIVE_TASKS and config.prompt_source != "random":
        raise ValueError(f"task {config.task!r} trains on prompt_source 'random'")
    check_number(
        config.max_response_length, "max_response_length", config.prompt_length + 1,
        low_inclusive=True, integer=True, allow_none=True,
        note="prompt_length + 1: the longest answer plus EOS",
    )  # fmt: skip
