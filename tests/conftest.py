"""Shared fixtures: small, fast ``TrainConfig`` shapes and the seeds tests sweep.

Where a new test goes: see tests/README.md. A test that needs a training run asks for
``tiny_config`` and overrides only what it is about::

    def test_something(tiny_config):
        history = run_policy_gradient(tiny_config("transformer", loss_mode="clipped"))
"""

from __future__ import annotations

import pytest

from pgrl_helpers.config import TrainConfig

#: The three run shapes most tests need, each a few seconds on one core.
TINY: dict[str, dict] = {
    # the lecture's run (3 fixed prompts, LectureModel), shortened
    "lecture": dict(num_epochs=6, num_steps_per_epoch=3, eval_every=3),
    # a small transformer on random prompts of length 4, values 0-5
    "transformer": dict(
        model="transformer", prompt_source="random", prompt_length=4, vocab_size=6,
        embedding_dim=16, num_layers=1, num_heads=2, prompts_per_epoch=32, num_responses=4,
        num_epochs=4, num_steps_per_epoch=1, reward_fn="sort_distance_reward",
        learning_rate=3e-3, eval_every=1,
    ),
    # the autoregressive policy on the variable-length sort + dedup task (notebook 08)
    "autoregressive": dict(
        model="autoregressive", task="sort_dedup", prompt_source="random", prompt_length=3,
        vocab_size=5, embedding_dim=16, num_layers=1, num_heads=2,
        reward_fn="dedup_position_reward", deltas_mode="normalized_rewards", loss_mode="clipped",
        num_responses=4, prompts_per_epoch=8, num_epochs=3, num_steps_per_epoch=1,
        eval_every=3, num_eval_prompts=4,
    ),
}  # fmt: skip

#: Seeds a test sweeps when one seed could pass by luck.
SEEDS = (0, 1, 2)


@pytest.fixture
def tiny_config():
    """``make(shape="lecture", **overrides) -> TrainConfig``, validated."""

    def make(shape: str = "lecture", **overrides) -> TrainConfig:
        if shape not in TINY:
            raise ValueError(f"unknown shape {shape!r}; valid: {', '.join(TINY)}")
        config = TrainConfig(**(TINY[shape] | overrides))
        config.validate()
        return config

    return make


@pytest.fixture(params=SEEDS)
def seed(request) -> int:
    """Each of ``SEEDS`` in turn."""
    return request.param
