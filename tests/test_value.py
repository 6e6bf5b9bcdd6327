"""PPO's critic, value loss, the 'gae' estimator in the loop, and its config checks."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from pgrl_helpers.autoregressive import AutoregressiveSortPolicy
from pgrl_helpers.config import TrainConfig
from pgrl_helpers.gae import compute_gae, outcome_token_rewards
from pgrl_helpers.kl import kl_k1
from pgrl_helpers.losses import compute_per_token_loss
from pgrl_helpers.memory import FP32_ADAM, measured_memory, memory_breakdown
from pgrl_helpers.registry import build_estimator
from pgrl_helpers.rollout import Rollout
from pgrl_helpers.training import run_policy_gradient
from pgrl_helpers.value import AutoregressiveValueModel, value_loss

PROMPTS = torch.tensor([[1, 0, 2], [3, 3, 0]])

PPO = TrainConfig(
    model="autoregressive", task="sort_dedup", prompt_source="random", prompt_length=3,
    vocab_size=4, embedding_dim=16, num_layers=1, num_heads=2,
    reward_fn="dedup_position_reward", loss_mode="clipped", num_responses=8,
    prompts_per_epoch=16, num_epochs=16, num_steps_per_epoch=2, learning_rate=1e-2,
    eval_every=8, num_eval_prompts=16, advantage_estimator="gae", critic_learning_rate=1e-2,
)  # fmt: skip


def critic():
    return AutoregressiveValueModel(4, 3, 5, d_model=8, num_layers=1, num_heads=2, seed=0)


def test_critic_predicts_one_value_per_slot_causally():
    model = critic()
    responses = torch.randint(0, 5, (2, 3, 5), generator=torch.Generator().manual_seed(0))
    values = model.values(PROMPTS, responses)
    assert values.shape == (2, 3, 5) and values.requires_grad
    # V(s_t) reads prompt + SEP + response[:t]: changing token 3 moves slots 4 only
    changed = responses.clone()
    changed[..., 3] = (changed[..., 3] + 1) % 5
    after = model.values(PROMPTS, changed)
    torch.testing.assert_close(after[..., :4], values[..., :4])
    assert not torch.allclose(after[..., 4], values[..., 4])


def test_critic_is_the_policy_trunk_with_a_scalar_head():
    policy = AutoregressiveSortPolicy(4, 3, 5, d_model=8, num_layers=1, num_heads=2, seed=0)
    model = critic()
    n_policy = sum(p.numel() for p in policy.parameters())
    n_critic = sum(p.numel() for p in model.parameters())
    assert n_critic == n_policy - policy.unembed.weight.numel() - policy.unembed.bias.numel() + 9
    for a, b in zip(critic().parameters(), model.parameters(), strict=True):
        assert torch.equal(a, b)  # seeded


def test_value_loss_unclipped_and_clipped_by_hand():
    mask = torch.tensor([[[1.0, 1.0, 0.0]]])
    old = torch.zeros(1, 1, 3)
    returns = torch.tensor([[[1.0, 1.0, 50.0]]])
    values = torch.tensor([[[0.5, -0.5, 7.0]]], requires_grad=True)
    plain = value_loss(values, old, returns, mask)  # padding (50 vs 7) never counts
    torch.testing.assert_close(plain, torch.tensor(0.5 * (0.25 + 2.25) / 2))
    clipped = value_loss(values, old, returns, mask, value_clip=0.2)
    # slot 0: V clipped to 0.2 -> (0.8)^2 = 0.64 > 0.25; slot 1: 2.25 > (1.2)^2 = 1.44
    torch.testing.assert_close(clipped, torch.tensor(0.5 * (0.64 + 2.25) / 2))
    clipped.backward()
    assert values.grad[0, 0, 0] == 0  # the clipped term wins: no push beyond the clip range
    assert values.grad[0, 0, 1] != 0
    with pytest.raises(ValueError, match="value_clip must be a positive finite"):
        value_loss(values, old, returns, mask, value_clip=0)
    with pytest.raises(ValueError, match="returns and mask"):
        value_loss(values, old, returns[..., :2], mask)


def test_per_token_deltas_broadcast_like_per_response_ones():
    gen = torch.Generator().manual_seed(0)
    log_probs = torch.randn(2, 3, 4, generator=gen).clamp(max=-0.01)
    old = log_probs + 0.3 * torch.randn(2, 3, 4, generator=gen)
    deltas = torch.randn(2, 3, generator=gen)
    per_response = compute_per_token_loss(log_probs, deltas, "clipped", old)
    per_token = compute_per_token_loss(log_probs, deltas[..., None].expand(2, 3, 4), "clipped", old)
    torch.testing.assert_close(per_token, per_response)
    with pytest.raises(
        ValueError, match=r"deltas must be \[batch, trial\] or \[batch, trial, pos\]"
    ):
        compute_per_token_loss(log_probs, torch.ones(2, 3, 5), "naive")


def test_kl_in_reward_is_minus_beta_k1_on_real_tokens():
    config = replace(PPO, kl_coef=0.1, kl_in_reward=True)
    policy = config.build_policy()
    estimator = build_estimator("gae", policy, config)
    responses, mask = policy.sample(PROMPTS, 3, torch.Generator().manual_seed(0))
    rollout = Rollout(PROMPTS, responses, mask, torch.randn(2, 3))
    rollout.old_log_probs = torch.randn(2, 3, 5).clamp(max=0)
    rollout.ref_log_probs = torch.randn(2, 3, 5).clamp(max=0)
    expected = (
        outcome_token_rewards(rollout.rewards, mask)
        - 0.1 * kl_k1(rollout.old_log_probs, rollout.ref_log_probs) * mask
    )
    torch.testing.assert_close(estimator.token_rewards(rollout, config), expected)
    deltas = estimator(rollout, config)
    assert deltas.shape == (2, 3, 5) and (deltas[mask == 0] == 0).all()
    with pytest.raises(ValueError, match="different rollout"):
        estimator.after_epoch(Rollout(PROMPTS, responses, mask, rollout.rewards))
    assert config.kl_loss_coef == 0 and replace(config, kl_in_reward=False).kl_loss_coef == 0.1


def test_group_estimator_is_stateless():
    estimator = build_estimator("group", None, TrainConfig())
    rollout = Rollout(PROMPTS, None, None, torch.tensor([[1.0, 0.0], [2.0, 2.0]]))
    assert estimator(rollout, TrainConfig()).tolist() == [[0.5, -0.5], [0.0, 0.0]]
    assert estimator.after_epoch(rollout) is None


@pytest.mark.parametrize(
    "change, match",
    [
        ({"gamma": 1.5}, "gamma must be a number in"),
        ({"gae_lambda": -0.1}, "gae_lambda must be a number in"),
        ({"gae_lambda": True}, "gae_lambda must be a number in"),
        ({"value_clip": 0}, "value_clip must be a positive"),
        ({"critic_learning_rate": -1e-3}, "critic_learning_rate must be a positive"),
        ({"kl_in_reward": True}, "kl_in_reward .* kl_coef > 0"),
        ({"kl_in_reward": True, "kl_coef": 0.1, "advantage_estimator": "group"}, "needs"),
        ({"whiten_advantages": 1}, "whiten_advantages must be True or False"),
        ({"advantage_estimator": "critic"}, "advantage_estimator"),
    ],
)
def test_config_errors(change, match):
    with pytest.raises((ValueError, TypeError), match=match):
        replace(PPO, **change).validate()


def test_gae_needs_the_autoregressive_policy():
    with pytest.raises(ValueError, match="'gae' needs model 'autoregressive'"):
        TrainConfig(advantage_estimator="gae").validate()


def test_a_short_ppo_run_is_deterministic_and_learns():
    first = run_policy_gradient(PPO)
    second = run_policy_gradient(PPO)
    assert list(first) == list(second)
    rewards = [r["mean_reward"] for r in first if r["kind"] == "step"]
    start, end = sum(rewards[:6]) / 6, sum(rewards[-6:]) / 6
    assert end > start + 0.3, (start, end)
    losses = first.advantage_estimator.value_losses
    assert len(losses) == PPO.num_epochs and losses[-1] < 0.25 * losses[0], losses


def test_measured_memory_matches_the_calculator_in_fp32_adam():
    policy = PPO.build_policy()
    model = AutoregressiveValueModel(4, 3, 5, 16, 1, 2, seed=0)
    for module in (policy, model):
        optimizer = torch.optim.Adam(module.parameters())
        responses, mask = policy.sample(PROMPTS, 2, torch.Generator().manual_seed(0))
        out = (
            module.values(PROMPTS, responses)
            if module is model
            else policy.log_probs(PROMPTS, responses)
        )
        out.sum().backward()
        optimizer.step()
        measured = measured_memory(module, optimizer)
        row = memory_breakdown(measured["params"], "ppo", FP32_ADAM)[0]
        for key in ("weights", "grads", "optimizer", "total"):
            assert measured[key] == row[key], key


def test_credit_noise_limits_on_an_enumerated_policy():
    from pgrl_helpers.credit import credit_noise, enumerate_responses, exact_values

    policy = PPO.build_policy()
    prompt = torch.tensor([[2, 0, 2]])
    responses, mask, probs = enumerate_responses(policy, prompt)
    probs = probs.double()
    assert responses.shape[1] == 1 + 4 + 16 + 64 + 256 + 1024 and abs(probs.sum() - 1) < 1e-6
    rewards = PPO.build_task().reward(prompt, responses)[0].double()
    values = exact_values(responses, mask, probs, rewards)
    torch.testing.assert_close(values[:, 0], (probs * rewards).sum().expand(len(probs)))
    assert credit_noise(responses, mask, probs, rewards, 0.0) < 1e-12  # TD: exact credit
    mc = credit_noise(responses, mask, probs, rewards, 1.0)
    var = float((probs * (rewards - (probs * rewards).sum()) ** 2).sum())
    loo = credit_noise(responses, mask, probs, rewards, 1.0, group_size=8)
    assert abs(loo - (mc + var / 7)) < 1e-6 and 0 < mc < var


def test_kl_in_reward_runs_and_keeps_the_kl_out_of_the_loss():
    config = replace(PPO, num_epochs=2, kl_coef=0.5, kl_in_reward=True)
    history = run_policy_gradient(config)
    steps = history.steps()
    assert all(r["kl"] is not None for r in steps)  # still logged
    in_loss = run_policy_gradient(replace(config, kl_in_reward=False))
    # Epoch 0: the reference is the initial policy, so k1 = 0 at sampling and both runs take
    # the same first step (k3's gradient is 0 there too). At step 1 the KL is > 0: in the
    # loss it adds kl_coef x kl; in the reward it changes nothing until the next rollout.
    other = in_loss.steps()
    assert steps[0]["loss"] == other[0]["loss"] and steps[1]["kl"] > 0
    assert abs(other[1]["loss"] - steps[1]["loss"] - 0.5 * steps[1]["kl"]) < 1e-6


def test_advantage_variances_log_the_raw_gae_advantages_before_whitening():
    config = replace(PPO, gae_lambda=0.5)
    policy = config.build_policy()
    estimator = build_estimator("gae", policy, config)
    responses, mask = policy.sample(PROMPTS, 3, torch.Generator().manual_seed(0))
    rollout = Rollout(PROMPTS, responses, mask, torch.randn(2, 3, generator=torch.Generator()))
    rollout.old_log_probs = rollout.ref_log_probs = torch.zeros(2, 3, 5)
    deltas = estimator(rollout, config)
    with torch.no_grad():
        values = estimator.critic.values(PROMPTS, responses)
    raw, _ = compute_gae(outcome_token_rewards(rollout.rewards, mask), values, mask, 1.0, 0.5)
    real = raw[mask > 0]
    assert estimator.advantage_variances == [pytest.approx(float(real.var(correction=0)))]
    assert deltas[mask > 0].std() == pytest.approx(1.0, abs=1e-3)  # whitened (unit std)
