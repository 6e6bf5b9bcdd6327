"""The loop runs each 2025 objective, delta mode and batch filter (two epochs of a small
autoregressive policy: finite losses, a gradient).
"""

from __future__ import annotations

import math

import pytest

from pgrl_helpers.config import TrainConfig
from pgrl_helpers.training import run_policy_gradient


@pytest.mark.parametrize(
    "overrides",
    [
        {"loss_mode": "clipped", "importance_sampling_level": "sequence", "epsilon": 3e-3,
         "epsilon_high": 4e-3, "loss_aggregation": "sequence_mean"},
        {"loss_mode": "cispo", "epsilon": 1.0, "epsilon_high": 4.0},
        {"loss_mode": "sapo", "deltas_mode": "reinforce_pp_baseline"},
        {"loss_mode": "dual_clip", "batch_filter": "dapo", "epsilon_high": 0.28, "kl_coef": 0.1},
        {"loss_mode": "clipped", "batch_filter": "overlong_filtering"},
        {"loss_mode": "clipped", "batch_filter": "dynamic_sampling",
         "deltas_mode": "batch_normalized_rewards"},
    ],
)  # fmt: skip
def test_the_loop_runs_every_new_mode(overrides):
    config = TrainConfig(
        model="autoregressive", task="sort_dedup", prompt_source="random", embedding_dim=8,
        num_heads=2, num_layers=1, num_epochs=2, num_steps_per_epoch=2, prompts_per_epoch=8,
        num_responses=4, reward_fn="dedup_position_reward", num_eval_prompts=16, eval_every=2,
        **overrides,
    )  # fmt: skip
    history = run_policy_gradient(config)
    steps = history.steps()
    assert len(steps) == 4 and all(math.isfinite(s["loss"]) for s in steps)
    assert any(s["grad_norm"] > 0 for s in steps)


def test_the_loop_runs_kl_cov():
    config = TrainConfig(
        model="autoregressive", task="sort_dedup", prompt_source="random", embedding_dim=8,
        num_heads=2, num_layers=1, num_epochs=2, num_steps_per_epoch=2, prompts_per_epoch=8,
        num_responses=4, reward_fn="dedup_position_reward", num_eval_prompts=16, eval_every=2,
        loss_mode="kl_cov", kl_cov_ratio=0.1,
    )  # fmt: skip
    steps = run_policy_gradient(config).steps()
    assert len(steps) == 4 and all(math.isfinite(s["loss"]) for s in steps)
