"""The Rollout: what one epoch samples and scores, and the optimizer steps then consume.

Two of the loop's extension points live here:

* **rollout sources** (``ROLLOUT_SOURCES``, chosen by ``TrainConfig.rollout_source``):
  who samples the responses and whose log-probs count as "old". ``"on_policy"``: the
  policy being trained samples, and its own frozen log-probs are the old ones.
* **batch filters** (``BATCH_FILTERS``, ``TrainConfig.batch_filter``): which sampled
  groups the optimizer steps see. ``"none"`` keeps all of them.

A rollout source is a class built as ``Source(policy, config)`` with two methods,
``sample(prompts, num_samples, generator) -> (responses, mask)`` and
``old_log_probs(rollout) -> float[batch, trial, pos]`` (called under ``torch.no_grad``),
and an ``after_optimizer_step()`` hook (a stale source uses it to track the trainer).
A batch filter is a function ``(rollout, config) -> Rollout``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Rollout:
    """One epoch's batch. Shapes: batch = prompts, trial = G samples, pos = response slots.

    * ``prompts`` int64[batch, prompt_pos]
    * ``responses`` int64[batch, trial, pos]
    * ``mask`` float32[batch, trial, pos]: 1 for a real token (EOS included), 0 for padding
    * ``rewards`` float32[batch, trial]
    * ``deltas`` float[batch, trial]: the advantage-like weights (set by the estimator)
    * ``old_log_probs`` float[batch, trial, pos]: log-probs of the policy that sampled the
      responses, frozen (no gradient)
    * ``ref_log_probs`` float[batch, trial, pos] or None: the reference model's, frozen
      (None when the KL term is off)
    """

    prompts: torch.Tensor
    responses: torch.Tensor
    mask: torch.Tensor
    rewards: torch.Tensor
    deltas: torch.Tensor | None = None
    old_log_probs: torch.Tensor | None = None
    ref_log_probs: torch.Tensor | None = None

    @property
    def num_responses(self) -> int:
        """batch x trial: responses in this rollout."""
        return self.responses.shape[0] * self.responses.shape[1]


# --------------------------------------------------------------------------------------
# Rollout sources
# --------------------------------------------------------------------------------------


class OnPolicySource:
    """The trained policy samples; its frozen log-probs at sampling time are the old ones."""

    def __init__(self, policy, config):
        self.policy = policy

    def sample(self, prompts, num_samples, generator):
        return self.policy.sample(prompts, num_samples, generator)

    def old_log_probs(self, rollout: Rollout) -> torch.Tensor:
        return self.policy.log_probs(rollout.prompts, rollout.responses)

    def after_optimizer_step(self) -> None:
        pass


#: name -> rollout source class (``TrainConfig.rollout_source``).
ROLLOUT_SOURCES: dict[str, type] = {"on_policy": OnPolicySource}


# --------------------------------------------------------------------------------------
# Batch filters
# --------------------------------------------------------------------------------------


def keep_all_groups(rollout: Rollout, config) -> Rollout:
    """The identity filter: the optimizer steps see every sampled group."""
    return rollout


#: name -> batch filter ``fn(rollout, config) -> Rollout`` (``TrainConfig.batch_filter``).
BATCH_FILTERS: dict[str, object] = {"none": keep_all_groups}


def frac_reward_zero_std(rewards: torch.Tensor) -> float:
    """Fraction of groups whose G rewards all tie (TRL's ``frac_reward_zero_std``).

    rewards float[batch, trial] -> a float in [0, 1]. Such a group gets zero centred
    deltas: it contributes no gradient (DAPO's dynamic sampling drops it).
    """
    if rewards.ndim != 2 or rewards.shape[0] == 0:
        raise ValueError(
            f"rewards must be [batch, trial] with batch >= 1, got {list(rewards.shape)}"
        )
    tied = (rewards == rewards[:, :1]).all(dim=-1)
    return tied.float().mean().item()
