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
real tokens (EOS included) and 0 on the padding after them.
"""

from __future__ import annotations

import math

import torch

from ._validate import check_finite, check_ndim


def _check_unit_interval(value, name: str) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 <= value <= 1
    ):
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")


def check_prefix_mask(mask: torch.Tensor, name: str = "mask") -> torch.Tensor:
    """Raise unless ``mask`` float[batch, trial, pos] is 0/1 with ones before zeros per row.

    A response mask covers its real tokens and then padding; a 0 followed by a 1 (a
    hole) would make the "last real token" ambiguous. Returns the mask as float.
    """
    check_ndim(mask, 3, name, "batch, trial, pos")
    if not ((mask == 0) | (mask == 1)).all():
        raise ValueError(f"{name} must hold only 0 and 1")
    mask = mask.float()
    if (mask[..., 1:] > mask[..., :-1]).any():
        raise ValueError(
            f"{name} has holes: a 0 followed by a 1 in some response; a response mask must "
            "be 1 on the real tokens, then 0 on the padding"
        )
    return mask


def outcome_token_rewards(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Put each response's outcome reward on its last real token.

    rewards float[batch, trial], mask float[batch, trial, pos] -> float[batch, trial, pos]
    (zero everywhere else; a response with no real token gets no reward).
    """
    check_ndim(rewards, 2, "rewards", "batch, trial")
    mask = check_prefix_mask(mask)
    if rewards.shape != mask.shape[:2]:
        raise ValueError(
            f"rewards {list(rewards.shape)} must be [batch, trial] of mask {list(mask.shape)}"
        )
    check_finite(rewards, "rewards")
    next_mask = torch.cat([mask[..., 1:], torch.zeros_like(mask[..., :1])], dim=-1)
    is_last = mask * (1 - next_mask)  # 1 on the last real token only
    return rewards.float()[..., None] * is_last


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

    Returns (advantages, returns), both float[batch, trial, pos], 0 on padding;
    returns = advantages + values on real tokens (the critic's regression target).
    No gradient flows (the values are treated as constants). Raises ValueError naming
    the argument for mismatched shapes, non-finite entries, gamma or lam outside
    [0, 1], or a mask with holes.
    """
    check_ndim(rewards, 3, "rewards", "batch, trial, pos")
    check_ndim(values, 3, "values", "batch, trial, pos")
    mask = check_prefix_mask(mask)
    for tensor, name in ((rewards, "rewards"), (values, "values")):
        if tensor.shape != mask.shape:
            raise ValueError(
                f"{name} and mask must have the same shape, got {list(tensor.shape)} and "
                f"{list(mask.shape)}"
            )
        check_finite(tensor, name)
    _check_unit_interval(gamma, "gamma")
    _check_unit_interval(lam, "lam")
    with torch.no_grad():
        rewards = rewards.float() * mask
        values = values.float() * mask
        # V(s_{t+1}) and "is t+1 a real token": 0 past the end (terminal state)
        next_values = torch.cat([values[..., 1:], torch.zeros_like(values[..., :1])], dim=-1)
        td_errors = rewards + gamma * next_values - values  # delta_t, eq. 10
        advantages = torch.zeros_like(values)
        running = torch.zeros_like(values[..., 0])
        next_mask = torch.cat([mask[..., 1:], torch.zeros_like(mask[..., :1])], dim=-1)
        for t in reversed(range(values.shape[-1])):  # a loop over positions only
            running = td_errors[..., t] + gamma * lam * next_mask[..., t] * running
            advantages[..., t] = running
        advantages = advantages * mask
        return advantages, (advantages + values) * mask


def whiten(advantages: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(A - mean) / (std + eps) over the real tokens of the whole batch; 0 on padding.

    The usual PPO normalisation of advantages per batch (e.g. TRL's ``whiten``).
    float[batch, trial, pos] -> same shape.
    """
    mask = check_prefix_mask(mask)
    if advantages.shape != mask.shape:
        raise ValueError(
            f"advantages and mask must have the same shape, got {list(advantages.shape)} "
            f"and {list(mask.shape)}"
        )
    real = advantages[mask > 0]
    if real.numel() < 2:
        raise ValueError("whiten needs at least 2 real tokens in the mask")
    return (advantages - real.mean()) / (real.std() + eps) * mask
