"""The Policy interface: what the training loop asks of a policy, and nothing more.

Three policies implement it: ``LectureModel`` and ``SortTransformer`` (positional: every
output slot is sampled independently given the prompt, responses have a fixed length)
and ``AutoregressiveSortPolicy`` (token by token until EOS, variable length). The loop
only ever calls these methods, so it never needs to know which policy it trains:

* ``sample(prompts, num_samples, generator)`` -> (responses int64[batch, trial, pos],
  mask float32[batch, trial, pos]): G responses per prompt and the response mask (1 for
  a real token, 0 for padding; all ones for a fixed-length policy).
* ``log_probs(prompts, responses)`` -> float[batch, trial, pos]: per-token
  log pi(token | context), differentiable.
* ``token_entropy(prompts, responses)`` -> float[batch, trial, pos]: entropy (nats) of
  the policy's distribution at every response slot.
* ``mean_entropy(prompts, responses, mask)`` -> scalar: mean of that entropy over the
  real tokens (the entropy metric and bonus; differentiable).
* ``greedy(prompts)`` -> int64[batch, 1, pos]: argmax decoding, for evaluation.

plus the attributes ``vocab_size``, ``prompt_length`` and ``response_length`` (slots per
response). ``check_policy_fits`` compares them with what a config implies.

The loop asks for the entropy right after the log-probs of the same batch (the entropy
metric and bonus of every optimizer step). The policies here answer both from one forward
pass (``remember_logits`` / ``reuse_logits``), as TRL computes the entropy from the logits
of its log-prob pass; the numbers are those of a second pass.

Not imported by a notebook: the interface the loop relies on (notebook 07 teaches the loop).
"""

from __future__ import annotations

import weakref
from typing import Protocol, runtime_checkable

import torch

from . import sampling


@runtime_checkable
class Policy(Protocol):
    """The methods the training loop calls (see the module docstring for shapes)."""

    vocab_size: int
    prompt_length: int
    response_length: int

    def sample(
        self, prompts: torch.Tensor, num_samples: int, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def log_probs(self, prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor: ...

    def token_entropy(self, prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor: ...

    def mean_entropy(
        self, prompts: torch.Tensor, responses: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor: ...

    def greedy(self, prompts: torch.Tensor) -> torch.Tensor: ...


#: policy -> (prompts, responses, logits, parameter versions, entry token) of its last
#: ``log_probs`` pass
_LAST_LOGITS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _parameter_versions(policy) -> tuple[tuple[int, int], ...]:
    # in-place updates (optimizer.step, copy_) bump a tensor's version counter; a parameter
    # replaced by a new tensor changes its id
    return tuple((id(p), p._version) for p in policy.parameters())


def remember_logits(policy, prompts, responses, logits: torch.Tensor) -> None:
    """Keep the logits of a ``log_probs`` pass for one ``reuse_logits`` on the same tensors.

    Forgotten once used, when the next pass replaces them, and when a backward pass runs
    through them (its graph is freed then).
    """
    token = object()  # names this entry (the hook must not hold the entry or the policy)
    _LAST_LOGITS[policy] = (prompts, responses, logits, _parameter_versions(policy), token)
    if logits.requires_grad:
        policy_ref = weakref.ref(policy)

        def forget(grad):
            owner = policy_ref()
            entry = None if owner is None else _LAST_LOGITS.get(owner)
            if entry is not None and entry[4] is token:
                del _LAST_LOGITS[owner]

        logits.register_hook(forget)


def reuse_logits(policy, prompts, responses) -> torch.Tensor | None:
    """The remembered logits if they are what a new pass would compute, else None.

    They are when the prompts and responses are the very same tensors (responses None: any,
    for logits that depend on the prompts only), no parameter has changed since (version
    counters), and a graph is there whenever one is needed.
    """
    entry = _LAST_LOGITS.pop(policy, None)
    if entry is None or entry[0] is not prompts:
        return None
    if entry[1] is not None and entry[1] is not responses:
        return None
    logits = entry[2]
    if entry[3] != _parameter_versions(policy):
        return None
    needs_graph = torch.is_grad_enabled() and any(p.requires_grad for p in policy.parameters())
    return None if needs_graph and not logits.requires_grad else logits


class PositionalPolicy:
    """Policy methods for a model whose ``forward(prompts)`` gives logits [batch, pos, vocab].

    Mixed into ``LectureModel`` and ``SortTransformer``: every response slot is sampled
    independently given the prompt, so every response has ``prompt_length`` tokens and
    the mask is all ones. The distribution at a slot does not depend on the sampled
    response, so the entropy is a function of the prompt alone.
    """

    def sample(self, prompts, num_samples, generator=None):
        # The logits depend on the prompts only: the forward pass that samples is remembered
        # (with its graph) for the log-probs of the first optimizer step on this batch.
        logits = sampling._logits(self, prompts)  # [batch, pos, vocab]
        remember_logits(self, prompts, None, logits)
        responses = sampling.sample_responses(logits, prompts, num_samples, generator=generator)
        return responses, torch.ones(responses.shape, dtype=torch.float32)

    def log_probs(self, prompts, responses):
        logits = reuse_logits(self, prompts, responses)
        if logits is None:
            logits = sampling._logits(self, prompts)  # [batch, pos, vocab]
        remember_logits(self, prompts, responses, logits)
        return sampling.compute_log_probs(logits, prompts, responses)

    def _slot_entropy(self, prompts, responses):
        # [batch, pos]: from the logits of a log_probs pass on the same tensors, else a new one
        logits = reuse_logits(self, prompts, responses)
        if logits is None:
            return sampling.token_entropy(self, prompts)
        return sampling.entropy_from_logits(logits)

    def token_entropy(self, prompts, responses):
        per_slot = self._slot_entropy(prompts, responses)  # [batch, pos]
        return per_slot[:, None, :].expand(responses.shape)  # same for every sample

    def mean_entropy(self, prompts, responses, mask):
        # Every slot is real and the entropy depends on the prompt only: the mean over
        # [batch, trial, pos] equals the mean over [batch, pos] (computed that way).
        return self._slot_entropy(prompts, responses).mean()

    def greedy(self, prompts):
        was_training = self.training
        self.eval()
        try:
            return sampling.greedy_responses(self, prompts)
        finally:
            self.train(was_training)


def check_policy_fits(policy, vocab_size: int, prompt_length: int, response_length: int) -> None:
    """Raise ValueError naming every attribute of ``policy`` that does not fit the run.

    A policy with fewer response slots than the run expects would be cut off before it
    can finish an answer; one with a different vocabulary or prompt length cannot read
    the prompts. Raises TypeError if ``policy`` lacks the ``Policy`` methods.
    """
    missing = [
        name
        for name in ("sample", "log_probs", "token_entropy", "mean_entropy", "greedy")
        if not callable(getattr(policy, name, None))
    ]
    if missing:
        raise TypeError(
            f"the model ({type(policy).__name__}) does not implement the Policy interface: "
            f"missing {', '.join(missing)} (see pgrl_helpers.policy)"
        )
    expected = {
        "vocab_size": vocab_size,
        "prompt_length": prompt_length,
        "response_length": response_length,
    }
    wrong = [
        f"{name} {getattr(policy, name, None)!r} (config implies {value})"
        for name, value in expected.items()
        if getattr(policy, name, None) != value
    ]
    if wrong:
        raise ValueError(f"the given model does not fit the config: {'; '.join(wrong)}")
