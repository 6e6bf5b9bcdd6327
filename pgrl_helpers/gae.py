"""Generalized advantage estimation (GAE) for padded, variable-length responses.

Schulman, Moritz, Levine, Jordan, Abbeel (2015), "High-Dimensional Continuous Control
Using Generalized Advantage Estimation", arXiv:1506.02438. With the one-step TD error
(their eq. 10)

    delta_t = r_t + gamma * V(s_{t+1}) - V(s_t)

the GAE(gamma, lambda) advantage is their eq. 16,

    A_t = sum_{l >= 0} (gamma * lambda)^l * delta_{t+l}
        = delta_t + gamma * lambda * A_{t+1}        (computed backwards, one pass),

and the value target ("return") is A_t + V(s_t). Two limits: lambda = 0 gives the
one-step TD error A_t = delta_t; lambda = 1 gives the discounted Monte Carlo return
minus V(s_t) (with V = 0: the Monte Carlo return itself).

A response is one episode: the state after its last real token is terminal, so
V = 0 there (bootstrap 0) and padding slots get advantage and return 0. Shapes:
float[batch, trial, pos] = prompts x G samples x response slots; ``mask`` is 1 on the
tokens the policy generated (EOS included) and 0 elsewhere.

Masks with holes (multi-turn and tool use): an environment's tokens (a tool's answer)
sit *inside* the response but were not chosen by the policy, so their mask is 0. They
are not steps of the policy's decision process: the recursion skips them, carrying
V(s_{t+1}) and A_{t+1} of the next *policy* token across them, exactly as verl does
(``verl/trainer/ppo/core_algos.py``, ``compute_gae_advantage_return``: "skip values and
TD-error on observation tokens"). With a prefix mask (real tokens, then padding) this is
the usual GAE. Every function keeps its input's floating dtype (float64 in, float64 out).

Taught in notebook 10; also used in notebook 15.
"""

from __future__ import annotations

import torch

from ._validate import check_finite, check_ndim, check_number


def check_binary_mask(mask: torch.Tensor, name: str = "mask") -> torch.Tensor:
    """Raise unless ``mask`` [batch, trial, pos] holds only 0 and 1 (holes allowed).

    Returns the mask as a float tensor (float32 for bool / integer masks; a floating mask
    keeps its dtype).
    """
    check_ndim(mask, 3, name, "batch, trial, pos")
    if not ((mask == 0) | (mask == 1)).all():
        raise ValueError(f"{name} must hold only 0 and 1")
    return mask if mask.dtype.is_floating_point else mask.float()


def check_prefix_mask(mask: torch.Tensor, name: str = "mask") -> torch.Tensor:
    """Raise unless ``mask`` float[batch, trial, pos] is 0/1 with ones before zeros per row.

    For callers that need plain padding masks (no environment tokens inside a response);
    ``compute_gae``, ``outcome_token_rewards`` and ``whiten`` accept holes. Returns the
    mask as float (see ``check_binary_mask``).
    """
    mask = check_binary_mask(mask, name)
    if (mask[..., 1:] > mask[..., :-1]).any():
        raise ValueError(
            f"{name} has holes: a 0 followed by a 1 in some response; a response mask must "
            "be 1 on the real tokens, then 0 on the padding"
        )
    return mask


def last_token_mask(mask: torch.Tensor) -> torch.Tensor:
    """1 on each response's last policy token (the last 1 of its mask row), 0 elsewhere.

    mask [batch, trial, pos] 0/1 (holes allowed) -> same shape and dtype as
    ``check_binary_mask`` returns; a row with no 1 gets all zeros.
    """
    mask = check_binary_mask(mask)
    ones_after = mask.flip(-1).cumsum(-1).flip(-1) - mask  # policy tokens strictly after t
    return mask * (ones_after == 0).to(mask.dtype)


def _floating(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor itself if floating, else as float32 (integer rewards, say)."""
    return tensor if tensor.dtype.is_floating_point else tensor.float()


def outcome_token_rewards(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Put each response's outcome reward on its last policy token (the last 1 of its mask).

    rewards float[batch, trial], mask [batch, trial, pos] (0/1, holes allowed) ->
    float[batch, trial, pos] in the rewards' floating dtype (zero everywhere else; a
    response with no policy token gets no reward).

    Taught in notebook 10; also used in notebook 15.
    """
    check_ndim(rewards, 2, "rewards", "batch, trial")
    mask = check_binary_mask(mask)
    if rewards.shape != mask.shape[:2]:
        raise ValueError(
            f"rewards {list(rewards.shape)} must be [batch, trial] of mask {list(mask.shape)}"
        )
    check_finite(rewards, "rewards")
    rewards = _floating(rewards)
    return rewards[..., None] * last_token_mask(mask).to(rewards.dtype)


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 0.95,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE advantages and returns (Schulman et al. 2015, eq. 16) for padded responses.

    rewards, values, mask: float[batch, trial, pos]. ``rewards[..., t]`` is the reward
    after token t (an outcome reward sits on the last real token, see
    ``outcome_token_rewards``; a per-token KL penalty adds to every real token);
    ``values[..., t]`` is V(s_t), the critic's estimate before token t. After the last
    real token the episode ends: V = 0 there (bootstrap 0).

    Returns (advantages, returns), both [batch, trial, pos] in the dtype of ``values``,
    0 where the mask is 0; returns = advantages + values on policy tokens (the critic's
    regression target). Masked slots inside a response (environment tokens) are skipped:
    the recursion links each policy token to the *next policy token*,
    delta_t = r_t + gamma V(s_next) - V(s_t) and A_t = delta_t + gamma lam A_next, with
    rewards on masked slots ignored (verl's ``compute_gae_advantage_return``). No gradient
    flows (the values are treated as constants). Raises ValueError naming the argument
    for mismatched shapes, non-finite entries, gamma or lam outside [0, 1], or a mask
    with entries other than 0 and 1.

    Taught in notebook 10; also used in notebook 15.
    """
    check_ndim(rewards, 3, "rewards", "batch, trial, pos")
    check_ndim(values, 3, "values", "batch, trial, pos")
    mask = check_binary_mask(mask)
    for tensor, name in ((rewards, "rewards"), (values, "values")):
        if tensor.shape != mask.shape:
            raise ValueError(
                f"{name} and mask must have the same shape, got {list(tensor.shape)} and "
                f"{list(mask.shape)}"
            )
        check_finite(tensor, name)
    check_number(gamma, "gamma", 0, 1, low_inclusive=True)
    check_number(lam, "lam", 0, 1, low_inclusive=True)
    with torch.no_grad():
        values = _floating(values).detach()
        dtype = values.dtype
        rewards = rewards.detach().to(dtype)
        mask = mask.to(dtype)
        advantages = torch.zeros_like(values)
        next_value = torch.zeros_like(values[..., 0])  # V(s_next): 0 past the last token
        next_advantage = torch.zeros_like(values[..., 0])
        for t in reversed(range(values.shape[-1])):  # a loop over positions only
            delta = rewards[..., t] + gamma * next_value - values[..., t]  # eq. 10
            advantage = delta + gamma * lam * next_advantage  # eq. 16, one step back
            real = mask[..., t] > 0  # a policy token; else carry V and A across it
            next_value = torch.where(real, values[..., t], next_value)
            next_advantage = torch.where(real, advantage, next_advantage)
            advantages[..., t] = torch.where(real, advantage, torch.zeros_like(advantage))
        return advantages, (advantages + values) * mask


def whiten(advantages: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(A - mean) / (std + eps) over the masked (policy) tokens of the whole batch; 0 elsewhere.

    The usual PPO normalisation of advantages per batch (e.g. TRL's ``whiten``; verl's
    ``masked_whiten``), std the sample (unbiased) std. float[batch, trial, pos] -> same
    shape and dtype; the mask may have holes.
    """
    mask = check_binary_mask(mask)
    if advantages.shape != mask.shape:
        raise ValueError(
            f"advantages and mask must have the same shape, got {list(advantages.shape)} "
            f"and {list(mask.shape)}"
        )
    real = advantages[mask > 0]
    if real.numel() < 2:
        raise ValueError("whiten needs at least 2 real tokens in the mask")
    return (advantages - real.mean()) / (real.std() + eps) * mask.to(advantages.dtype)
