"""What the Hugging Face models of ``hf/`` share: where a model's inputs go, its KV cache, the
right-padded SFT batch, and the ``Policy`` methods a transformer policy derives from its
full-vocabulary log-softmax.

* ``model_device``: the device of a model's first parameter.
* ``kv_cache``: the KV cache of a forward output, read as ``out.past_key_values`` and fed back
  as ``past_key_values=``: the name every transformers 5.x release takes (5.17, the GPU
  image's, silently ignores a ``cache=`` keyword and has no ``out.cache``; 5.24 has both).
* ``right_padded``: (ids, attention mask, labels) of prompt + answer rows, loss on the answer.
* ``LogSoftmaxPolicy``: ``log_probs``, ``token_entropy`` (reusing the forward pass of the
  ``log_probs`` call just before it on the same tensors), ``mean_entropy`` and ``greedy``
  for a policy that defines ``_log_softmax`` and ``_decode``
  (``hf_policy.HFSortPolicy``, ``real_lm.ChatLMPolicy``).

Not imported by a notebook: the shared plumbing of ``hf_policy`` (notebook 14) and
``real_lm`` (notebook 16), which the notebooks use instead.

Needs only torch.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from ..masking import masked_mean

# transformers 5.24 renamed the keyword to ``cache`` and warns on ``past_key_values`` (removal
# announced for 5.40, above pyproject.toml's bound); 5.0-5.17 know only ``past_key_values``.
warnings.filterwarnings(
    "ignore", message=r"`past_key_values` is deprecated", category=FutureWarning
)


def model_device(model) -> torch.device:
    """The device of the model's first parameter, where its inputs must go (CPU without any)."""
    first = next(model.parameters(), None)
    return torch.device("cpu") if first is None else first.device


def kv_cache(out):
    """The KV cache of a forward output (``out.past_key_values``); raises if there is none."""
    cache = getattr(out, "past_key_values", None)
    if cache is None:
        raise ValueError("the model returned no KV cache (use_cache=True was ignored)")
    return cache


def right_padded(prompts: list[list[int]], answers: list[list[int]], pad: int, device=None):
    """(ids, attention mask, labels) int64[n, width] of each prompt + its answer, right-padded
    with ``pad``; labels are -100 outside the answers (the loss reads the answer tokens only)."""
    if len(prompts) != len(answers) or not prompts:
        raise ValueError(f"need as many answers as prompts (>= 1), got {len(prompts)} and "
                         f"{len(answers)}")  # fmt: skip
    rows = [list(p) + list(a) for p, a in zip(prompts, answers)]
    labels = [[-100] * len(p) + list(a) for p, a in zip(prompts, answers)]
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows], device=device)
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], device=device)
    lab = torch.tensor([x + [-100] * (width - len(x)) for x in labels], device=device)
    return ids, mask, lab


class LogSoftmaxPolicy(nn.Module):
    """The ``Policy`` methods of a transformer policy, from two of its own.

    A subclass defines ``_log_softmax(prompts, responses) -> float[batch, trial, pos, vocab]``
    (log pi at each response slot), ``_token_ids(responses)`` (the model's token ids of the
    responses; default: the responses themselves) and ``_decode(prompts, num_samples,
    generator, greedy) -> (responses, mask)``.
    """

    _logits_cache = None  # (prompts, responses, log-softmax) of the last log_probs call

    def _token_ids(self, responses: torch.Tensor) -> torch.Tensor:
        return responses.long()

    def log_probs(self, prompts, responses):
        """log pi(response token | prompt, earlier tokens), float[batch, trial, pos]."""
        full = self._log_softmax(prompts, responses)
        self._logits_cache = (prompts, responses, full)
        index = self._token_ids(responses).to(full.device)[..., None]
        return full.gather(-1, index).squeeze(-1)

    def token_entropy(self, prompts, responses):
        """Entropy (nats) at each response slot, float[batch, trial, pos].

        Reuses the forward pass of a ``log_probs`` call on the very same tensors just before
        (the loop's order: loss, then entropy bonus), once; else runs its own.
        """
        cache, self._logits_cache = self._logits_cache, None
        if cache is not None and cache[0] is prompts and cache[1] is responses:
            full = cache[2]
        else:
            full = self._log_softmax(prompts, responses)
        return -(full.exp() * full).sum(dim=-1)

    def mean_entropy(self, prompts, responses, mask):
        """Mean token entropy over the real tokens (scalar, differentiable)."""
        entropy = self.token_entropy(prompts, responses)
        return masked_mean(entropy, mask.to(entropy.device))

    def greedy(self, prompts):
        """Argmax decoding, int64[batch, 1, pos], in eval mode (the mode is restored)."""
        was_training = self.training
        self.eval()
        try:
            return self._decode(prompts, 1, None, greedy=True)[0]
        finally:
            self.train(was_training)
