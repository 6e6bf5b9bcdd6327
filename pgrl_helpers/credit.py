"""Token-level credit, exactly: every response of a small autoregressive policy, enumerated.

For one prompt, an ``AutoregressiveSortPolicy`` with ``V`` task tokens and ``pos`` slots
has ``sum_{k<pos} V^k + V^pos`` distinct responses (EOS after k tokens, or none). For a
small problem they can all be listed with their exact probabilities, so the true value
V*(s_t) = E[R | prompt, response[:t]] of every prefix is a finite sum, and so is the
variance of any per-token advantage given the token it credits. Transitions are
deterministic (s_{t+1} = s_t + a_t) and the reward comes only at the end.

Shapes: responses int64[1, N, pos], mask float[1, N, pos], probs float[N],
rewards float[N], per-token quantities float[N, pos].

Taught in notebook 10.
"""

from __future__ import annotations

import itertools

import torch

from .autoregressive import response_mask
from .gae import compute_gae, outcome_token_rewards

#: Refuse to enumerate more candidate sequences than this.
MAX_SEQUENCES = 100_000


def enumerate_responses(policy, prompt: torch.Tensor):
    """All distinct responses to one prompt int[1, prompt_pos], with exact probabilities.

    Returns (responses int64[1, N, pos], mask float32[1, N, pos], probs float[N]);
    ``probs`` sums to 1 up to rounding (a check the caller can make).

    Taught in notebook 10.
    """
    if prompt.ndim != 2 or prompt.shape[0] != 1:
        raise ValueError(f"prompt must be int[1, prompt_pos], got shape {list(prompt.shape)}")
    tokens, pos, eos = policy.vocab_size + 1, policy.response_length, policy.eos_token
    if tokens**pos > MAX_SEQUENCES:
        raise ValueError(f"{tokens}^{pos} sequences is too many to enumerate (> {MAX_SEQUENCES})")
    every = torch.tensor(list(itertools.product(range(tokens), repeat=pos)))[None]
    mask = response_mask(every, eos)
    canonical = ((mask == 1) | (every == eos)).all(dim=-1)[0]  # EOS-padded after the end
    responses, mask = every[:, canonical], mask[:, canonical]
    with torch.no_grad():
        log_probs = policy.log_probs(prompt, responses)
    return responses, mask, (log_probs * mask).sum(-1).exp()[0]


def _prefix_groups(responses: torch.Tensor, length: int) -> torch.Tensor:
    """int64[N]: an id per distinct prefix responses[:, :length]."""
    if length == 0:
        return torch.zeros(responses.shape[0], dtype=torch.long)
    _, ids = torch.unique(responses[:, :length], dim=0, return_inverse=True)
    return ids


def _conditional(values: torch.Tensor, probs: torch.Tensor, ids: torch.Tensor):
    """E[values | group] and Var[values | group], each broadcast back to float[N]."""
    n = int(ids.max()) + 1
    weight = torch.zeros(n, dtype=probs.dtype).index_add_(0, ids, probs)
    mean = torch.zeros(n, dtype=probs.dtype).index_add_(0, ids, probs * values) / weight
    sq = torch.zeros(n, dtype=probs.dtype).index_add_(0, ids, probs * (values - mean[ids]) ** 2)
    return mean[ids], (sq / weight)[ids]


def exact_values(responses, mask, probs, rewards) -> torch.Tensor:
    """V*(s_t) = E[R | response[:t]] float[N, pos] (0 on padding), by enumeration."""
    resp, m = responses[0], mask[0]
    values = torch.zeros(m.shape, dtype=probs.dtype)
    for t in range(m.shape[-1]):
        values[:, t] = _conditional(rewards.to(probs.dtype), probs, _prefix_groups(resp, t))[0]
    return values * m


def credit_noise(responses, mask, probs, rewards, lam: float, group_size: int | None = None):
    """Mean over tokens of Var(A_t | s_t, a_t): the noise in the credit a token gets.

    ``group_size`` None: GAE(gamma=1, lam) with the exact critic V*; an int G: the group
    baseline on the same scale, leave-one-out A = R - mean of the other G - 1 rewards
    (RLOO; GRPO's centred R - mean(all G) is this times (G - 1)/G), whose variance given
    the token is Var(R | s_t, a_t) + Var(R) / (G - 1). The mean is weighted by the
    probability of each token (real tokens only).

    Taught in notebook 10.
    """
    resp, m = responses[0], mask[0]
    rewards = rewards.to(probs.dtype)
    if group_size is None:
        token_rewards = outcome_token_rewards(rewards[None], mask)
        values = exact_values(responses, mask, probs, rewards)[None]
        advantages = compute_gae(token_rewards, values, mask, 1.0, lam)[0][0].double()
    total_var = _conditional(rewards, probs, _prefix_groups(resp, 0))[1]
    noise = torch.zeros(m.shape, dtype=probs.dtype)
    for t in range(m.shape[-1]):
        ids = _prefix_groups(resp, t + 1)  # s_t and a_t fix response[:t + 1]
        if group_size is None:
            noise[:, t] = _conditional(advantages[:, t], probs, ids)[1]
        else:
            given = _conditional(rewards, probs, ids)[1]
            noise[:, t] = given + total_var / (group_size - 1)
    weights = probs[:, None] * m
    return float((noise * weights).sum() / weights.sum())
