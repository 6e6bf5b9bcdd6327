"""With one optimizer step per batch, the loop takes pi_old from that step's forward pass.

pi_old = pi_theta before the only step, so the old log-probs are the step's own log-probs,
detached (TRL's GRPOTrainer does the same at ``num_iterations=1``). These tests prove that
the shortcut changes no number of the run and that it really skips a forward pass.
"""

from __future__ import annotations

import pytest
import torch

from pgrl_helpers import registry, training
from pgrl_helpers.config import TrainConfig
from pgrl_helpers.training import run_policy_gradient

CONFIGS = {
    "lecture_clipped": dict(num_epochs=4, loss_mode="clipped"),
    "lecture_kl_k3": dict(num_epochs=4, loss_mode="clipped", kl_coef=0.05, kl_estimator="k3"),
    "transformer_entropy": dict(
        model="transformer",
        prompt_source="random",
        embedding_dim=32,
        num_epochs=3,
        loss_mode="clipped",
        entropy_coef=0.01,
    ),
    "autoregressive_dedup": dict(
        model="autoregressive",
        task="sort_dedup",
        prompt_source="random",
        prompt_length=4,
        vocab_size=6,
        embedding_dim=32,
        reward_fn="dedup_position_reward",
        deltas_mode="normalized_rewards",
        loss_mode="clipped",
        num_epochs=3,
    ),
}


def run(config: TrainConfig):
    history = run_policy_gradient(config)
    params = [p.detach().clone() for p in history.run.model.parameters()]
    return [dict(r) for r in history], params


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_reusing_the_step_log_probs_changes_no_number(name, monkeypatch):
    config = TrainConfig(num_steps_per_epoch=1, **CONFIGS[name])
    assert training._reuses_step_log_probs(config, registry.OnPolicySource(None, config))
    records, params = run(config)
    monkeypatch.setattr(training, "_reuses_step_log_probs", lambda config, source: False)
    want_records, want_params = run(config)
    assert records == want_records
    assert all(torch.equal(a, b) for a, b in zip(params, want_params))


def count_old_log_prob_passes(config: TrainConfig, monkeypatch) -> int:
    calls = []
    original = registry.OnPolicySource.old_log_probs

    def counted(self, rollout):
        calls.append(1)
        return original(self, rollout)

    monkeypatch.setattr(registry.OnPolicySource, "old_log_probs", counted)
    run_policy_gradient(config)
    return len(calls)


def test_one_step_per_batch_skips_the_old_log_prob_forward_pass(monkeypatch):
    one_step = TrainConfig(num_epochs=3, loss_mode="clipped", num_steps_per_epoch=1)
    assert count_old_log_prob_passes(one_step, monkeypatch) == 0


@pytest.mark.parametrize(
    "config",
    [
        TrainConfig(num_epochs=3, loss_mode="clipped", num_steps_per_epoch=2),
        TrainConfig(
            # deltas_mode back to the default: 'gae' does not read it (others are refused)
            **(
                CONFIGS["autoregressive_dedup"] | dict(num_epochs=3, deltas_mode="centered_rewards")
            ),
            advantage_estimator="gae",
            num_steps_per_epoch=1,
        ),
    ],
    ids=["two_steps", "gae"],
)
def test_otherwise_the_old_log_probs_get_their_own_pass(config, monkeypatch):
    assert not training._reuses_step_log_probs(config, registry.OnPolicySource(None, config))
    assert count_old_log_prob_passes(config, monkeypatch) == 3
