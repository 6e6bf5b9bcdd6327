"""Exact moments of the REINFORCE estimate under a baseline, and the optimal baselines (nb. 03).

Inputs are the enumeration tables of ``pgrl_helpers.exact``: ``probs`` pi(a|s) float[batch, N],
``scores`` grad log pi(a|s) float[batch, N, P] and ``rewards`` R(s, a) float[batch, N], for
``batch`` prompts s, all N responses a and P parameters. The estimate averages G samples per
prompt over the batch: g_hat = 1/(B G) sum_s sum_i grad log pi(a_i|s) (R(s, a_i) - b).

Taught in notebook 03.
"""

from __future__ import annotations

import torch


def estimate_moments(
    probs: torch.Tensor,
    scores: torch.Tensor,
    rewards: torch.Tensor,
    baseline,
    group_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact mean float[P] and per-parameter variance float[P] of g_hat for a fixed baseline.

    ``baseline`` ignores the samples and broadcasts against [batch, N, P]: a number,
    [batch, 1, 1] (per prompt), [1, 1, P] (per parameter) or [batch, 1, P].
    Var[g_hat_k] = 1/(B^2 G) sum_s (E_a[w_k^2] - E_a[w_k]^2), w = score * (R - b).

    Taught in notebook 03.
    """
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    num_prompts = probs.shape[0]
    weights = scores * (rewards[..., None] - baseline)  # [batch, N, P]
    mean = torch.einsum("bn,bnp->bp", probs, weights)
    second = torch.einsum("bn,bnp->bp", probs, weights**2)
    variance = (second - mean**2).sum(dim=0) / (num_prompts**2 * group_size)
    return mean.sum(dim=0) / num_prompts, variance


def optimal_baselines(probs, scores, rewards) -> dict[str, torch.Tensor]:
    """The baselines of notebook 03, from the enumeration tables.

    * ``value`` V(s) = E[R | s], float[batch];
    * ``b_star`` per parameter, E[(d_k log pi)^2 R] / E[(d_k log pi)^2], float[P]: the
      variance-optimal constant (Greensmith et al. 2004);
    * ``b_grad_pi`` the lecture notes' version with d_k pi in place of d_k log pi, float[P];
    * ``b_star_state`` the optimum per parameter and per prompt, float[batch, P].

    Taught in notebook 03.
    """
    sq = scores**2  # (d log pi / d theta_k)^2: [batch, N, P]
    sq_pi = (probs[..., None] * scores) ** 2  # (d pi / d theta_k)^2

    def weighted(weight, dims):
        num = torch.einsum(f"bn,bnp,bn->{dims}", probs, weight, rewards)
        return num / torch.einsum(f"bn,bnp->{dims}", probs, weight)

    return {
        "value": (probs * rewards).sum(dim=1),
        "b_star": weighted(sq, "p"),
        "b_grad_pi": weighted(sq_pi, "p"),
        "b_star_state": weighted(sq, "bp"),
    }


def group_moments(probs, scores, rewards, group_size: int, mode: str):
    """Exact mean float[P] and variance float[P] of g_hat with a *group* baseline.

    ``mode`` 'group_mean' (R_i - mean of the group), 'leave_one_out' (RLOO) or
    'group_normalized' (GRPO's (R_i - mean) / std, DeepSeekMath §4.1.2), computed
    per prompt by ``exact.group_estimate_moments`` (every ordered group of ``group_size``
    responses), then averaged over the batch like ``estimate_moments``.

    Taught in notebook 03.
    """
    from .exact import group_estimate_moments

    num_prompts = probs.shape[0]
    moments = [
        group_estimate_moments(probs[s], scores[s], rewards[s], group_size, mode)
        for s in range(num_prompts)
    ]
    mean = torch.stack([m for m, _ in moments]).mean(dim=0)
    return mean, torch.stack([v for _, v in moments]).sum(dim=0) / num_prompts**2
