"""Policies for the sort task.

``LectureModel`` is the lecture's toy policy, with its bug fixed (``forward``
returns logits ``[batch, pos, vocab]``, not the decoded hidden states
``[batch, pos, dim]``). It decodes every output position independently from one
shared code vector: not autoregressive. It can represent sorting when
``embedding_dim >= vocab_size`` (notebook 07 sets its weights by hand so that greedy
decoding sorts every prompt); trained on the lecture's three prompts it memorizes
their answers and does not generalize (notebook 07, section 3).

Both policies implement ``policy.Policy`` (through ``PositionalPolicy``): ``sample``,
``log_probs``, ``token_entropy``, ``mean_entropy``, ``greedy``.

Taught in notebook 01; also used in notebooks 00, 02, 03, 04, 05, 06, 11.
"""

from __future__ import annotations

import math

import torch
from einops import einsum, rearrange, repeat
from torch import nn

from ._validate import check_positive_ints, check_prompts
from .policy import PositionalPolicy


class LectureModel(PositionalPolicy, nn.Module):
    """Per-position linear encoder/decoder that shares the embedding as output layer.

    prompts int[batch, prompt_pos] -> embeddings [batch, prompt_pos, dim]
      -> encoded = sum_pos E[pos] @ W_enc[pos]        [batch, dim]
      -> decoded[out_pos] = encoded @ W_dec[out_pos]  [batch, out_pos, dim]
      -> logits = decoded @ embedding.T               [batch, out_pos, vocab]

    Initial scale: ``nn.Embedding`` draws N(0, 1) entries and the same table is the (tied)
    output layer, while the encoder and decoder weights are N(0, 1/dim); the encoder and
    decoder keep the variance, so each decoded coordinate has variance about prompt_length,
    and a logit, a dim-term dot product with an N(0, 1) embedding row, has variance about
    dim * prompt_length: its std is about sqrt(dim * prompt_length) and the untrained policy
    is nearly deterministic (notebook 01 measures both).

    Taught in notebook 01; also used in notebooks 00, 02, 03, 04, 05, 06, 11.
    """

    def __init__(
        self,
        vocab_size: int,
        embedding_dim: int,
        prompt_length: int,
        response_length: int,
        seed: int | None = None,
    ):
        super().__init__()
        check_positive_ints(
            vocab_size=vocab_size,
            embedding_dim=embedding_dim,
            prompt_length=prompt_length,
            response_length=response_length,
        )
        self.vocab_size = vocab_size
        self.embedding_dim = embedding_dim
        self.prompt_length = prompt_length
        self.response_length = response_length
        with torch.random.fork_rng(enabled=seed is not None):
            if seed is not None:
                torch.manual_seed(seed)
            scale = 1 / math.sqrt(embedding_dim)
            self.embedding = nn.Embedding(vocab_size, embedding_dim)
            self.encode_weights = nn.Parameter(
                torch.randn(prompt_length, embedding_dim, embedding_dim) * scale
            )
            self.decode_weights = nn.Parameter(
                torch.randn(response_length, embedding_dim, embedding_dim) * scale
            )

    def forward(self, prompts: torch.Tensor) -> torch.Tensor:
        """int[batch, prompt_pos] -> logits float[batch, response_length, vocab]."""
        check_prompts(prompts, self.vocab_size, self.prompt_length)
        embeddings = self.embedding(prompts)  # [batch, pos, dim]
        encoded = einsum(
            embeddings, self.encode_weights, "batch pos d_in, pos d_in d_out -> batch d_out"
        )
        decoded = einsum(
            encoded, self.decode_weights, "batch d_in, out_pos d_in d_out -> batch out_pos d_out"
        )
        logits = einsum(
            decoded, self.embedding.weight, "batch out_pos dim, vocab dim -> batch out_pos vocab"
        )
        return logits  # the lecture's bug returned `decoded` here


# --------------------------------------------------------------------------------------
# A policy that can sort
# --------------------------------------------------------------------------------------


class _Block(nn.Module):
    """Pre-norm transformer block: x + attention(norm(x)), then x + mlp(norm(x)).

    ``causal=False``: every slot attends to every slot (``SortTransformer``);
    ``causal=True``: slot i sees slots 0 .. i only (``autoregressive.AutoregressiveSortPolicy``).
    """

    def __init__(self, d_model: int, num_heads: int, causal: bool = False):
        super().__init__()
        self.num_heads = num_heads
        self.causal = causal
        self.attention_norm = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.attention_out = nn.Linear(d_model, d_model)
        self.mlp_norm = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x float[batch, seq, d_model] -> same shape."""
        q, k, v = rearrange(
            self.qkv(self.attention_norm(x)),
            "batch seq (three head d_head) -> three batch head seq d_head",
            three=3,
            head=self.num_heads,
        )
        scores = einsum(q, k, "batch head q d, batch head k d -> batch head q k")
        scores = scores / math.sqrt(q.shape[-1])
        if self.causal:
            seq = x.shape[1]
            future = torch.ones(seq, seq, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        mixed = einsum(weights, v, "batch head q k, batch head k d -> batch head q d")
        x = x + self.attention_out(rearrange(mixed, "batch head seq d -> batch seq (head d)"))
        return x + self.mlp(self.mlp_norm(x))


def transformer_trunk(
    num_embeddings: int,
    slots: int,
    slot_scale: float | None,
    d_model: int,
    num_layers: int,
    num_heads: int,
    output_size: int,
    causal: bool,
    seed: int | None,
) -> tuple[nn.Embedding, nn.Parameter, nn.ModuleList, nn.LayerNorm, nn.Linear]:
    """(embedding, slot parameter, blocks, final norm, unembedding) of a small transformer.

    The one trunk of ``SortTransformer`` (its query slots: ``slot_scale`` None, full
    attention) and of ``autoregressive.AutoregressiveSortPolicy`` (its position embeddings,
    scaled by 0.1; causal attention). Created in this order under ``seed`` (with the global
    RNG forked, so the caller's stream is untouched): assign them to the module in the same
    order so that its parameters keep it. The slot parameter is N(0, 1) x ``slot_scale``,
    float[slots, d_model]. Raises ValueError naming a size that is not a positive int, or a
    ``d_model`` that ``num_heads`` does not divide.
    """
    check_positive_ints(d_model=d_model, num_layers=num_layers, num_heads=num_heads)
    if d_model % num_heads:
        raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
    with torch.random.fork_rng(enabled=seed is not None):
        if seed is not None:
            torch.manual_seed(seed)
        embedding = nn.Embedding(num_embeddings, d_model)
        slot = torch.randn(slots, d_model)
        slot = nn.Parameter(slot if slot_scale is None else slot * slot_scale)
        blocks = nn.ModuleList(_Block(d_model, num_heads, causal=causal) for _ in range(num_layers))
        final_norm = nn.LayerNorm(d_model)
        unembed = nn.Linear(d_model, output_size)
    return embedding, slot, blocks, final_norm, unembed


class SortTransformer(PositionalPolicy, nn.Module):
    """A tiny non-autoregressive transformer that can represent sorting.

    prompts int[batch, prompt_pos] -> token embeddings     [batch, prompt_pos, d_model]
      ++ one learned query slot per output position        [batch, out_pos, d_model]
      -> num_layers blocks of full self-attention + MLP over the prompt_pos + out_pos slots
      -> the query slots, unembedded                       [batch, out_pos, vocab]

    Every output position is still sampled independently given the prompt (like
    ``LectureModel``), so sampling, log-probs and losses are unchanged. Prompt tokens
    get no position embedding: the sorted list does not depend on the order of the
    prompt, so the model is built to ignore it (its output is the same for every
    permutation of a prompt). The query slots are what tell output positions apart.
    """

    def __init__(
        self,
        vocab_size: int,
        prompt_length: int,
        d_model: int = 64,
        num_layers: int = 2,
        num_heads: int = 4,
        seed: int | None = None,
    ):
        super().__init__()
        check_positive_ints(vocab_size=vocab_size, prompt_length=prompt_length)  # + the trunk's
        self.vocab_size = vocab_size
        self.prompt_length = prompt_length
        self.response_length = prompt_length
        self.d_model = d_model
        self.embedding, self.query_slots, self.blocks, self.final_norm, self.unembed = (
            transformer_trunk(
                vocab_size, prompt_length, None, d_model, num_layers, num_heads, vocab_size,
                causal=False, seed=seed,
            )
        )  # fmt: skip

    def forward(self, prompts: torch.Tensor) -> torch.Tensor:
        """int[batch, prompt_pos] -> logits float[batch, out_pos, vocab] (out_pos = prompt_pos)."""
        check_prompts(prompts, self.vocab_size, self.prompt_length)
        batch = prompts.shape[0]
        tokens = self.embedding(prompts)  # [batch, pos, d_model]
        slots = repeat(self.query_slots, "out_pos d -> batch out_pos d", batch=batch)
        x = torch.cat([tokens, slots], dim=1)  # [batch, pos + out_pos, d_model]
        for block in self.blocks:
            x = block(x)
        return self.unembed(self.final_norm(x[:, self.prompt_length :]))  # [batch, out_pos, vocab]
