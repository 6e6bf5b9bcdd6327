"""Policies for the sort task.

``LectureModel`` is the lecture's toy policy, with its bug fixed (``forward``
returns logits ``[batch, pos, vocab]``, not the decoded hidden states
``[batch, pos, dim]``). It decodes every output position independently from one
shared code vector: not autoregressive, and not able to represent sorting in
general (see notebook 07).
"""

from __future__ import annotations

import math

import torch
from einops import einsum
from torch import nn

from ._validate import check_integer, check_ndim, check_token_range


class LectureModel(nn.Module):
    """Per-position linear encoder/decoder that shares the embedding as output layer.

    prompts int[batch, pos] -> embeddings [batch, pos, dim]
      -> encoded = sum_pos E[pos] @ W_enc[pos]        [batch, dim]
      -> decoded[out_pos] = encoded @ W_dec[out_pos]  [batch, out_pos, dim]
      -> logits = decoded @ embedding.T               [batch, out_pos, vocab]
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
        for value, name in (
            (vocab_size, "vocab_size"),
            (embedding_dim, "embedding_dim"),
            (prompt_length, "prompt_length"),
            (response_length, "response_length"),
        ):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
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
        """int[batch, pos] -> logits float[batch, response_length, vocab]."""
        check_ndim(prompts, 2, "prompts", "batch, pos")
        check_integer(prompts, "prompts")
        check_token_range(prompts, self.vocab_size, "prompts")
        if prompts.shape[1] != self.prompt_length:
            raise ValueError(
                f"this model takes prompts of length {self.prompt_length}, got shape "
                f"{list(prompts.shape)}"
            )
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


#: The name the lecture uses.
Model = LectureModel
