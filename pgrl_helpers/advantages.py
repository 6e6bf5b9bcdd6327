"""Deltas: the advantage-like weights that multiply grad log pi.

One function per deltas mode, side by side in ``DELTA_FUNCTIONS``.

deltas = advantages: "deltas" is the lecture's word; TRL, verl and CleanRL say advantages (and
``deltas_mode`` is what TRL splits into ``scale_rewards`` and verl calls ``adv_estimator``).

rewards float[batch, trial] -> deltas float[batch, trial]; ``trial`` is the group
of G responses sampled for one prompt, so every baseline below is computed per
prompt (over the last axis).

Every mode function has the same signature, as the loss functions of ``losses``::

    fn(rewards, mask, eps, std_floor) -> deltas float[batch, trial]

* ``rewards`` float[batch, trial], finite (``compute_deltas`` has checked the shape, cast
  integer rewards to float32 and checked the group / batch sizes the mode needs);
* ``mask`` bool[batch, trial, pos] or None: which slots are tokens (read only by the modes in
  ``MASK_MODES``; every other mode gets None);
* ``eps`` >= 0 and ``std_floor`` > 0: the std terms' guard (read only by the modes that divide
  by a std).

``DELTA_FUNCTIONS`` maps each mode to its function, as ``losses.LOSS_FUNCTIONS`` does for the
loss modes (verl registers its advantage estimators by name the same way, in
``core_algos.py``); ``compute_deltas`` checks the inputs once and dispatches. Adding a mode is
one function plus one entry in ``DELTA_FUNCTIONS``.

Taught in notebook 03; also used in notebooks 00, 04, 05, 06, 08, 09, 11, 13.
"""

from __future__ import annotations

import torch

from ._validate import check_choice, check_finite, check_ndim, check_number

#: Modes that compare a response with the rest of its group: they need G >= 2.
GROUP_MODES: tuple[str, ...] = ("normalized_rewards", "loo_rewards")

#: Modes that divide by a std over the whole batch: they need batch x trial >= 2.
BATCH_MODES: tuple[str, ...] = ("batch_normalized_rewards", "reinforce_pp_baseline")

#: Modes that read ``compute_deltas``'s token ``mask`` (every other mode refuses one).
MASK_MODES: tuple[str, ...] = ("reinforce_pp_baseline",)

# --------------------------------------------------------------------------------------
# One function per deltas mode (the signature and shapes: the module docstring)
# --------------------------------------------------------------------------------------


def rewards_deltas(rewards, mask, eps, std_floor):
    """delta = r (a copy). Plain REINFORCE, no baseline."""
    return rewards.clone()


def centered_rewards_deltas(rewards, mask, eps, std_floor):
    """delta = r - mean(r). The group mean as baseline (GRPO without the std; Dr. GRPO's
    choice, arXiv 2503.20783). A group whose rewards tie gets all zeros."""
    return rewards - rewards.mean(dim=-1, keepdim=True)


def normalized_rewards_deltas(rewards, mask, eps, std_floor):
    """delta = (r - mean(r)) / (max(std(r), std_floor) + eps): GRPO's (DeepSeekMath, arXiv
    2402.03300, which writes only std(r)). std is the sample std with the n - 1 divisor, as
    ``torch.std`` and TRL compute it. The floor keeps near-equal rewards from being blown up
    to +-0.7 by a tiny std (the lecture's plain 1e-5 does not). Needs G >= 2."""
    mean = rewards.mean(dim=-1, keepdim=True)  # [batch, 1]
    std = rewards.std(dim=-1, keepdim=True)  # sample std, [batch, 1]
    return (rewards - mean) / (std.clamp_min(std_floor) + eps)


def max_rewards_deltas(rewards, mask, eps, std_floor):
    """Keep r where it equals the group maximum, 0 elsewhere (the lecture's winner takes all).

    Defined for rewards >= 0 (every reward of the sort tasks' own functions but
    ``dedup_position_reward``), and a negative reward raises ValueError: the winner's weight
    is its own reward, so with rewards below 0 the best response would be pushed *down*
    (``TrainConfig.validate`` refuses the settings that can make one, ``NEGATIVE_REWARDS``).
    A tied group keeps every reward unchanged, on purpose: all its responses are winners, so
    the group gets plain REINFORCE (delta = r, no baseline), which pushes every response up
    by the same amount (unlike the centred modes, where a tied group gives no gradient, as
    ``frac_reward_zero_std`` counts). That is the lecture's rule, kept so its result
    reproduces (notebook 07); the centred modes are the fix.
    """
    if bool((rewards < 0).any()):
        raise ValueError(
            "rewards: deltas_mode 'max_rewards' needs rewards >= 0 (the best response is "
            f"weighted by its own reward), got a minimum of {float(rewards.min()):g}; use "
            "'centered_rewards'"
        )
    best = rewards.max(dim=-1, keepdim=True).values
    return torch.where(rewards == best, rewards, torch.zeros_like(rewards))


def loo_rewards_deltas(rewards, mask, eps, std_floor):
    """delta_i = r_i - mean_{j != i} r_j (leave-one-out, RLOO, arXiv 2402.14740); equals
    centered_rewards x G / (G - 1). Needs G >= 2."""
    group_size = rewards.shape[-1]
    loo_mean = (rewards.sum(dim=-1, keepdim=True) - rewards) / (group_size - 1)
    return rewards - loo_mean


def batch_normalized_rewards_deltas(rewards, mask, eps, std_floor):
    """delta = (r - mean(r)) / (max(std_batch, std_floor) + eps), std_batch the sample std of
    *every* reward of the batch (TRL's ``scale_rewards="batch"``). Needs batch x trial >= 2."""
    mean = rewards.mean(dim=-1, keepdim=True)  # [batch, 1]
    return (rewards - mean) / (rewards.std().clamp_min(std_floor) + eps)


def reinforce_pp_baseline_deltas(rewards, mask, eps, std_floor):
    """REINFORCE++-baseline (Hu et al. 2025, arXiv 2501.03262): subtract the group mean,
    c = r - mean(r), then whiten c over the batch's *tokens*.

    Every token of response i carries c_i (``mask`` bool[batch, trial, pos] says which slots
    are tokens): (c - mean_tok(c)) / (max(std_tok(c), std_floor) + eps), mean and sample std
    over the masked tokens, as verl's ``compute_reinforce_plus_plus_baseline
    _outcome_advantage`` (``masked_whiten``) does. A long response then counts once per token
    (OpenRLHF, the authors' framework, uses the population std; the two differ by
    sqrt(T / (T - 1)) for T tokens). Without ``mask`` each response counts once (one token
    each): c / (max(std_batch(c), std_floor) + eps), as the batch mean of c is 0. With equal
    lengths L the token mean is 0 as well and only Bessel's correction differs:
    std_tok = std_batch * sqrt(L (N - 1) / (N L - 1)) for N responses (L = 1: identical).
    Needs batch x trial >= 2 (and, with a mask, >= 2 masked tokens).
    """
    centered = rewards - rewards.mean(dim=-1, keepdim=True)
    if mask is None:
        return centered / (centered.std().clamp_min(std_floor) + eps)  # batch mean is 0
    tokens = centered[..., None].expand(mask.shape)[mask]
    if tokens.numel() < 2:
        raise ValueError(
            "mask: reinforce_pp_baseline whitens over the batch's tokens and needs at "
            f"least 2 masked tokens, got {tokens.numel()}"
        )
    return (centered - tokens.mean()) / (tokens.std().clamp_min(std_floor) + eps)


#: deltas mode -> ``fn(rewards, mask, eps, std_floor) -> deltas``; the order is ``DELTA_MODES``.
DELTA_FUNCTIONS: dict[str, object] = {
    "rewards": rewards_deltas,
    "centered_rewards": centered_rewards_deltas,
    "normalized_rewards": normalized_rewards_deltas,
    "max_rewards": max_rewards_deltas,
    "loo_rewards": loo_rewards_deltas,
    "batch_normalized_rewards": batch_normalized_rewards_deltas,
    "reinforce_pp_baseline": reinforce_pp_baseline_deltas,
}
DELTA_MODES: tuple[str, ...] = tuple(DELTA_FUNCTIONS)

# --------------------------------------------------------------------------------------
# The checked entry point
# --------------------------------------------------------------------------------------


def compute_deltas(
    rewards: torch.Tensor,
    mode: str,
    eps: float = 1e-6,
    std_floor: float = 1e-3,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Turn rewards float[batch, trial] into deltas float[batch, trial].

    The checked dispatch to ``DELTA_FUNCTIONS[mode]``.

    Modes (``r`` is one group's rewards, G = trial; each mode's function cites its paper):

    * ``rewards``:                  r
    * ``centered_rewards``:         r - mean(r)                                  (Dr. GRPO)
    * ``normalized_rewards``:       (r - mean(r)) / (max(std(r), std_floor) + eps)  (GRPO)
    * ``max_rewards``:              r where r = max(r), else 0
    * ``loo_rewards``:              r_i - mean_{j != i} r_j                      (RLOO)
    * ``batch_normalized_rewards``: (r - mean(r)) / (max(std_batch, std_floor) + eps)
    * ``reinforce_pp_baseline``:    r - mean(r), whitened over the batch's tokens (REINFORCE++)

    ``normalized_rewards`` and ``loo_rewards`` need G >= 2; the batch modes need
    batch x trial >= 2. ``mask`` is read by ``reinforce_pp_baseline`` only; it must be 0/1
    [batch, trial, pos]. Passing one with any other mode raises (those modes weigh each
    response once, whatever its length, so the mask would be silently ignored).
    The output keeps the rewards' floating dtype (integer rewards become float32).

    Taught in notebook 03; also used in notebooks 00, 04, 05, 06, 08, 09, 11, 13.
    """
    check_choice(mode, DELTA_FUNCTIONS, "delta mode")
    if mask is not None and mode not in MASK_MODES:
        raise ValueError(
            f"mask: delta mode {mode!r} does not read a mask (each response counts once, "
            f"whatever its length); only {', '.join(map(repr, MASK_MODES))} whitens over "
            "tokens. Pass mask=None, or apply the mask to the loss (masking.aggregate_loss)"
        )
    check_ndim(rewards, 2, "rewards", "batch, trial")
    if not rewards.dtype.is_floating_point:
        rewards = rewards.to(torch.float32)
    check_finite(rewards, "rewards")
    if mode in GROUP_MODES and rewards.shape[-1] < 2:
        raise ValueError(
            f"delta mode {mode!r} needs at least 2 samples per prompt (trial axis), got "
            f"rewards of shape {list(rewards.shape)}; with one sample the group std / "
            "leave-one-out mean is undefined"
        )
    if mode in BATCH_MODES and rewards.numel() < 2:
        raise ValueError(
            f"delta mode {mode!r} divides by the std over the batch and needs at least 2 "
            f"rewards, got rewards of shape {list(rewards.shape)}"
        )
    check_number(std_floor, "std_floor", 0)
    check_number(eps, "eps", 0, low_inclusive=True)
    token_mask = None if mask is None else _token_mask(mask, rewards.shape)
    return DELTA_FUNCTIONS[mode](rewards, token_mask, eps, std_floor)


def _token_mask(mask: torch.Tensor, shape) -> torch.Tensor:
    """The 0/1 mask float/bool[batch, trial, pos] matching rewards [batch, trial], as bool."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor or None, got {type(mask).__name__}")
    if mask.ndim != 3 or tuple(mask.shape[:2]) != tuple(shape):
        raise ValueError(
            f"mask must be [batch, trial, pos] matching rewards {list(shape)}, got "
            f"{list(mask.shape)}"
        )
    if mask.dtype != torch.bool and not ((mask == 0) | (mask == 1)).all():
        raise ValueError("mask must hold only 0 and 1 (or be bool)")
    return mask != 0


def zero_deltas_reason(mode: str, group_size: int) -> str | None:
    """Why ``mode`` with ``group_size`` responses per prompt gives no usable delta, or None.

    With G = 1 a group baseline is the response's own reward, so every delta is 0 (or
    undefined) and the policy-gradient term never moves the policy. Found by computing the
    deltas of a probe batch with distinct rewards (4 groups of G = 1), so a new mode is
    covered without a list to keep. ``TrainConfig.validate()`` and the dashboard refuse it.
    """
    check_choice(mode, DELTA_FUNCTIONS, "delta mode")
    if group_size != 1:
        return None
    probe = torch.arange(1.0, 5.0).reshape(4, 1)  # 4 groups of G = 1, distinct rewards
    try:
        deltas = compute_deltas(probe, mode)
    except ValueError as err:
        return str(err)
    if bool((deltas == 0).all()):
        return (
            f"num_responses (G) = 1 with deltas_mode {mode!r}: each group's baseline is its "
            "only response, so every delta is 0 and no update would happen. Pick "
            "num_responses (G) >= 2, or deltas_mode 'rewards'"
        )
    return None
