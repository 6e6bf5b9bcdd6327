"""A Hugging Face causal LM as a ``Policy``: the model TRL trains, trained by our loop.

``HFSortPolicy`` wraps the tiny GPT-2 and the word-level tokenizer of ``trl_bridge`` so that
``training.run_policy_gradient(config, policy=HFSortPolicy(...))`` trains the very model class
``trl.GRPOTrainer`` trains, on the same task (notebook 09, ``benchmarks/bench_trl_vs_loop.py``).

The policy reads ``'3 1 4 :'`` (digit tokens, then the separator) and writes
``prompt_length`` digit tokens: response token value ``d`` is token id
``tokenizer.convert_tokens_to_ids(str(d))``. ``constrain_to_digits`` gives the LM head a
frozen bias of ``MASK_LOGIT`` on every non-digit token, so the model can only ever write
digits (a constrained decoder) and its distribution lives on the task's ``vocab_size`` values
for TRL and for our loop alike: log-probs taken over the full vocabulary equal those of
``trl_bridge.completion_log_probs``. Needs ``requirements-scale.txt`` (transformers) only
for building the model; nothing here imports it.

Shapes: prompts int[batch, prompt_pos] (values 0 .. vocab_size - 1), responses
int64[batch, trial, pos] with pos = prompt_length.

Taught in notebook 09.
"""

from __future__ import annotations

import torch
from torch import nn

from .._validate import check_integer, check_ndim, check_positive_ints, check_token_range
from .common import LogSoftmaxPolicy, kv_cache
from .trl_bridge import SEP_TOKEN, SPECIAL_TOKENS

#: Logit bias of a non-digit token under ``constrain_to_digits``: exp(-1e4) is 0 in float32,
#: while log-softmax and p log p stay finite (a -inf bias would make 0 x -inf = NaN entropies).
MASK_LOGIT = -1e4


def digit_token_ids(tokenizer) -> torch.Tensor:
    """int64[vocab_size]: the token id of each task value 0 .. vocab_size - 1."""
    vocab_size = len(tokenizer) - len(SPECIAL_TOKENS)
    ids = tokenizer.convert_tokens_to_ids([str(d) for d in range(vocab_size)])
    if tokenizer.unk_token_id in ids:
        raise ValueError("tokenizer lacks a token for some digit 0 .. vocab_size - 1")
    return torch.tensor(ids, dtype=torch.long)


def constrain_to_digits(model, tokenizer):
    """Give ``model``'s LM head a frozen bias: 0 on digit tokens, ``MASK_LOGIT`` elsewhere.

    Every distribution the model outputs then puts (float32) probability 0 on the special
    tokens, so sampling (``generate``, TRL's generation, ``HFSortPolicy.sample``) writes only
    digits, and log-probs / entropies over the full vocabulary are those of the digits. A
    bias, not a forward hook: TRL's fused LM head reads ``lm_head.weight`` and
    ``lm_head.bias`` directly. Returns ``model``.
    """
    head = model.get_output_embeddings()
    if head.bias is not None:
        raise ValueError("the LM head already has a bias; constrain_to_digits adds its own")
    bias = torch.full((head.out_features,), MASK_LOGIT, dtype=head.weight.dtype)
    bias[digit_token_ids(tokenizer)] = 0.0
    head.bias = nn.Parameter(bias, requires_grad=False)
    return model


class HFSortPolicy(LogSoftmaxPolicy):
    """A causal LM + word-level sort tokenizer behind the ``Policy`` interface.

    ``model`` is a ``transformers`` causal LM (e.g. ``trl_bridge.build_tiny_gpt2``) whose
    vocabulary is ``tokenizer``'s; build it with ``constrain_to_digits`` so that its
    distribution is over the digits only (``__init__`` checks). Responses have exactly
    ``prompt_length`` tokens (the sort task's fixed length): the mask is all ones.
    """

    def __init__(self, model, tokenizer, prompt_length: int):
        super().__init__()
        check_positive_ints(prompt_length=prompt_length)
        head = model.get_output_embeddings()
        digits = digit_token_ids(tokenizer)
        others = torch.ones(head.out_features, dtype=torch.bool)
        others[digits] = False
        if head.bias is None or not bool((head.bias[others] <= MASK_LOGIT).all()):
            raise ValueError("model must be built with constrain_to_digits(model, tokenizer)")
        self.model = model
        self.vocab_size = len(digits)
        self.prompt_length = prompt_length
        self.response_length = prompt_length
        self.register_buffer("digit_ids", digits, persistent=False)
        self.sep_id = tokenizer.convert_tokens_to_ids(SEP_TOKEN)

    # ---- tokens -----------------------------------------------------------------------

    def prompt_ids(self, prompts: torch.Tensor) -> torch.Tensor:
        """prompts int[batch, prompt_pos] -> token ids int64[batch, prompt_pos + 1] ('3 1 4 :')."""
        check_ndim(prompts, 2, "prompts", "batch, prompt_pos")
        check_integer(prompts, "prompts")
        check_token_range(prompts, self.vocab_size, "prompts")
        if prompts.shape[1] != self.prompt_length:
            raise ValueError(
                f"prompts have {prompts.shape[1]} positions, the policy {self.prompt_length}"
            )
        device = self.digit_ids.device  # the model's
        sep = torch.full((prompts.shape[0], 1), self.sep_id, dtype=torch.long, device=device)
        return torch.cat([self.digit_ids[prompts.long().to(device)], sep], dim=1)

    def _decode(self, prompts, num_samples, generator, greedy: bool):
        """Token by token with the model's KV cache: each step feeds only the newest token.
        (responses int64[batch, trial, pos], mask float32[...] of ones), on the model's device;
        the draws on ``generator``'s device (the probabilities are moved there)."""
        ids = self.prompt_ids(prompts).repeat_interleave(num_samples, dim=0)  # [batch*trial, seq]
        device = ids.device
        values, cache = [], None
        with torch.no_grad():
            for _ in range(self.response_length):
                out = self.model(input_ids=ids, past_key_values=cache, use_cache=True)
                cache = kv_cache(out)
                log_probs = torch.log_softmax(out.logits[:, -1].float(), dim=-1)[:, self.digit_ids]
                if greedy:
                    value = log_probs.argmax(dim=-1)
                else:
                    probs = log_probs.exp()
                    if generator is not None:
                        probs = probs.to(generator.device)
                    value = torch.multinomial(probs, 1, generator=generator)[:, 0].to(device)
                values.append(value)
                ids = self.digit_ids[value][:, None]  # [batch*trial, 1]: the cache holds the rest
        responses = torch.stack(values, dim=-1).reshape(prompts.shape[0], num_samples, -1)
        return responses, torch.ones(responses.shape, dtype=torch.float32, device=device)

    def _log_softmax(self, prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        """Full-vocabulary log-softmax at each response slot, float[batch, trial, pos, vocab]."""
        check_ndim(responses, 3, "responses", "batch, trial, pos")
        check_integer(responses, "responses")
        check_token_range(responses, self.vocab_size, "responses")
        batch, trial, pos = responses.shape
        ids = torch.cat(
            [
                self.prompt_ids(prompts).repeat_interleave(trial, dim=0),
                self._token_ids(responses.reshape(batch * trial, pos)),
            ],
            dim=1,
        )
        logits = self.model(input_ids=ids).logits[:, -pos - 1 : -1].float()  # token t <- t - 1
        return torch.log_softmax(logits, dim=-1).reshape(batch, trial, pos, -1)

    def _token_ids(self, responses: torch.Tensor) -> torch.Tensor:
        """Task values -> the model's token ids (``digit_ids``), on the model's device."""
        return self.digit_ids[responses.long().to(self.digit_ids.device)]

    # ---- the Policy interface (pgrl_helpers.policy); log_probs, token_entropy,
    # mean_entropy and greedy: ``common.LogSoftmaxPolicy``

    def sample(self, prompts, num_samples, generator=None):
        """(responses int64[batch, trial, pos], mask float32[batch, trial, pos] of ones)."""
        return self._decode(prompts, num_samples, generator, greedy=False)
