"""Deltas: the advantage-like weights that multiply grad log pi.

rewards float[batch, trial] -> deltas float[batch, trial]; ``trial`` is the group
of G responses sampled for one prompt, so every baseline below is computed per
prompt (over the last axis).
"""

from __future__ import annotations

import torch

from ._validate import check_finite, check_mode, check_ndim

DELTA_MODES: tuple[str, ...] = (
    "rewards",
    "centered_rewards",
    "normalized_rewards",
    "max_rewards",
    "loo_rewards",
)

#: Modes that compare a response with the rest of its group: they need G >= 2.
GROUP_MODES: tuple[str, ...] = ("normalized_rewards", "loo_rewards")


def compute_deltas(
    rewards: torch.Tensor, mode: str, eps: float = 1e-6, std_floor: float = 1e-3
) -> torch.Tensor:
    """Turn rewards float[batch, trial] into deltas float[batch, trial].

    Modes (``r`` is one group's rewards, G = trial):

    * ``rewards``: delta = r. Plain REINFORCE, no baseline.
    * ``centered_rewards``: delta = r - mean(r). The group mean as baseline (GRPO
      without the std; Dr. GRPO's choice). A group whose rewards tie gets all zeros.
    * ``normalized_rewards``: delta = (r - mean(r)) / (max(std(r), std_floor) + eps),
      std the sample (unbiased) std as ``torch.std`` computes it, as in the GRPO
      paper. The floor keeps near-equal rewards from being blown up to +-0.7 by a
      tiny std (the lecture's plain 1e-5 does not). Needs G >= 2.
    * ``max_rewards``: keep r where it equals the group maximum, 0 elsewhere
      (winner takes all). A tied group keeps every reward unchanged.
    * ``loo_rewards``: delta_i = r_i - mean_{j != i} r_j (leave-one-out, RLOO);
      equals centered_rewards * G / (G - 1). Needs G >= 2.
    """
    check_mode(mode, DELTA_MODES, "delta mode")
    check_ndim(rewards, 2, "rewards", "batch, trial")
    if not rewards.dtype.is_floating_point:
        rewards = rewards.to(torch.float32)
    check_finite(rewards, "rewards")
    group_size = rewards.shape[-1]
    if mode in GROUP_MODES and group_size < 2:
        raise ValueError(
            f"delta mode {mode!r} needs at least 2 samples per prompt (trial axis), got "
            f"rewards of shape {list(rewards.shape)}; with one sample the group std / "
            "leave-one-out mean is undefined"
        )
    if std_floor <= 0 or eps < 0:
        raise ValueError(f"std_floor must be > 0 and eps >= 0, got {std_floor} and {eps}")

    if mode == "rewards":
        return rewards.clone()
    mean = rewards.mean(dim=-1, keepdim=True)  # [batch, 1]
    if mode == "centered_rewards":
        return rewards - mean
    if mode == "normalized_rewards":
        std = rewards.std(dim=-1, keepdim=True)  # sample std, [batch, 1]
        return (rewards - mean) / (std.clamp_min(std_floor) + eps)
    if mode == "max_rewards":
        best = rewards.max(dim=-1, keepdim=True).values
        return torch.where(rewards == best, rewards, torch.zeros_like(rewards))
    # loo_rewards
    loo_mean = (rewards.sum(dim=-1, keepdim=True) - rewards) / (group_size - 1)
    return rewards - loo_mean


# --------------------------------------------------------------------------------------
# The loop's advantage-estimator extension point (TrainConfig.advantage_estimator)
# --------------------------------------------------------------------------------------


def group_baseline_deltas(rollout, config) -> torch.Tensor:
    """Deltas from the group of G responses per prompt: ``compute_deltas`` by deltas_mode.

    rollout.rewards float[batch, trial] -> float[batch, trial]. No value model: the
    baseline is built from the other samples of the same prompt (GRPO, RLOO, ...).
    """
    return compute_deltas(rollout.rewards, config.deltas_mode)


#: name -> estimator ``fn(rollout, config) -> deltas`` (``TrainConfig.advantage_estimator``).
ADVANTAGE_ESTIMATORS: dict[str, object] = {"group": group_baseline_deltas}
