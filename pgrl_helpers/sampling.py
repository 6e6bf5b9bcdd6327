"""Rollouts: sample G responses per prompt, and score their per-token log-probs.

Works with any policy whose ``forward(prompts int[batch, prompt_pos])`` returns logits
``float[batch, pos, vocab]``, or an output object with a ``.logits`` attribute of that
shape (a Hugging Face causal LM's output). Wherever a ``model`` is expected you may also
pass the logits tensor itself (``compute_log_probs(logits, prompts, responses)``), e.g.
logits you already computed with a real language model.

Taught in notebook 01; also used in notebooks 00, 02, 03, 04, 05, 06, 07, 13.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange

from ._validate import (
    check_integer,
    check_ndim,
    check_positive_ints,
    check_tensor,
    check_token_range,
)


def _logits(model, prompts: torch.Tensor) -> torch.Tensor:
    """float[batch, pos, vocab] from a model (plain or Hugging Face output) or given logits."""
    logits = model if isinstance(model, torch.Tensor) else model(prompts)
    logits = getattr(logits, "logits", logits)  # a Hugging Face ModelOutput carries .logits
    check_ndim(logits, 3, "model output (logits)", "batch, pos, vocab")
    if logits.shape[0] != prompts.shape[0]:
        raise ValueError(
            f"model returned logits for {logits.shape[0]} prompts, got {prompts.shape[0]}"
        )
    return logits


def sample_responses(
    model, prompts: torch.Tensor, num_samples: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Sample ``num_samples`` (= G) responses per prompt.

    prompts int[batch, prompt_pos] -> responses int64[batch, trial, pos], trial = num_samples.
    Each position is sampled independently from softmax(logits); pass a seeded
    ``torch.Generator`` (or seed the global RNG) for reproducible samples.

    Taught in notebook 01; also used in notebooks 00, 02, 03, 04, 05, 06, 13.
    """
    check_ndim(prompts, 2, "prompts", "batch, prompt_pos")
    check_integer(prompts, "prompts")
    check_positive_ints(num_samples=num_samples)
    with torch.no_grad():
        logits = _logits(model, prompts)  # [batch, pos, vocab]
        probs = F.softmax(logits.float(), dim=-1)
        flat = rearrange(probs, "batch pos vocab -> (batch pos) vocab")
        flat_responses = torch.multinomial(
            flat, num_samples, replacement=True, generator=generator
        )  # [(batch pos), trial]
    # the lecture wrote "-> bat trail pos" with the sample axis named twice differently
    return rearrange(flat_responses, "(batch pos) trial -> batch trial pos", batch=prompts.shape[0])


def greedy_responses(model, prompts: torch.Tensor) -> torch.Tensor:
    """The most likely token at every position: int[batch, prompt_pos] -> int64[batch, 1, pos].

    Taught in notebook 07; also used in notebook 13.
    """
    check_ndim(prompts, 2, "prompts", "batch, prompt_pos")
    with torch.no_grad():
        return _logits(model, prompts).argmax(dim=-1)[:, None, :]


def compute_log_probs(model, prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
    """Per-token log pi(response token | prompt).

    prompts int[batch, prompt_pos], responses int[batch, trial, pos] -> float[batch, trial, pos].
    Differentiable: wrap in ``torch.no_grad()`` to freeze old/reference log-probs.

    Taught in notebook 01; also used in notebooks 02, 04, 05, 06.
    """
    check_ndim(prompts, 2, "prompts", "batch, prompt_pos")
    check_ndim(responses, 3, "responses", "batch, trial, pos")
    check_integer(responses, "responses")
    log_probs = F.log_softmax(_logits(model, prompts), dim=-1)  # [batch, pos, vocab]
    batch, pos, vocab = log_probs.shape
    if responses.shape[0] != batch or responses.shape[2] != pos:
        raise ValueError(
            f"responses shape {list(responses.shape)} does not fit logits shape "
            f"{list(log_probs.shape)}: need [batch={batch}, trial, pos={pos}]"
        )
    check_token_range(responses, vocab, "responses")
    trial = responses.shape[1]
    expanded = log_probs[:, None].expand(batch, trial, pos, vocab)  # a view, no copy
    return expanded.gather(dim=-1, index=responses.unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of softmax(logits) over the last axis: float[..., vocab] -> float[...].

    Computed from log-softmax, H = -sum_v p_v log p_v with log p = log_softmax(logits), so
    very large or very negative logits give neither inf nor NaN (a token with p = 0
    contributes exactly 0). Works for any leading shape, e.g. a language model's
    [batch, seq, vocab] logits.
    """
    check_tensor(getattr(logits, "logits", logits), "logits")
    logits = getattr(logits, "logits", logits)
    if logits.ndim < 1 or logits.shape[-1] < 1:
        raise ValueError(
            f"logits must have a non-empty last (vocab) axis, got {list(logits.shape)}"
        )
    if not logits.dtype.is_floating_point:
        raise TypeError(f"logits must be floating point, got dtype {logits.dtype}")
    log_probs = F.log_softmax(logits, dim=-1)
    return -(log_probs.exp() * log_probs).sum(dim=-1)


def token_entropy(model, prompts: torch.Tensor) -> torch.Tensor:
    """Entropy of the policy at every output position (nats): float[batch, pos]."""
    return entropy_from_logits(_logits(model, prompts))
