"""PPO's critic, value loss, the 'gae' estimator in the loop, and its config checks."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from pgrl_helpers.autoregressive import AutoregressiveSortPolicy
from pgrl_helpers.config import TrainConfig
from pgrl_helpers.gae import compute_gae, outcome_token_rewards, whiten
from pgrl_helpers.kl import kl_k1
from pgrl_helpers.losses import compute_per_token_loss
from pgrl_helpers.memory import FP32_ADAM, measured_memory, memory_breakdown
from pgrl_helpers.registry import build_estimator
from pgrl_helpers.rollout import Rollout
from pgrl_helpers.training import run_policy_gradient
from pgrl_helpers.value import (
    AutoregressiveValueModel,
    GAEEstimator,
    build_critic,
    value_loss,
)

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
    losses = first.run.advantage_estimator.value_losses
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


# --- mutants ---
# The cases mutation testing found unchecked (tests/MUTATION.md).
#
# The critic's values against the trunk computed by hand, its defaults and seeding, the value
# loss's clip on both sides and its 0.5, build_critic's mapping of the config, GAEEstimator's
# learning rate, whitening and critic steps, the memory count by hand, and error messages
# matched from their start so that they name the argument.


RESPONSES = torch.tensor(
    [[[0, 1, 4, 2, 2], [3, 4, 0, 0, 1]], [[2, 2, 2, 4, 0], [1, 0, 3, 2, 4]]]
)  # [2, 2, 5]; 4 is EOS (vocab 4)


def by_hand(trunk, head, prompts, responses):
    """V at slot t from the trunk's hidden state after prompt + SEP + response[:t]."""
    out = torch.zeros(responses.shape)
    for b in range(responses.shape[0]):
        for g in range(responses.shape[1]):
            tokens = torch.cat([prompts[b], torch.tensor([trunk.sep_token]), responses[b, g, :-1]])[
                None
            ]
            x = trunk.embedding(tokens) + trunk.position[: tokens.shape[1]]
            for block in trunk.blocks:
                x = block(x)
            x = trunk.final_norm(x)
            out[b, g] = head(x[0, prompts.shape[1] :]).squeeze(-1)
    return out


def test_critic_values_equal_the_trunk_and_head_by_hand():
    model = AutoregressiveValueModel(4, 3, 5, d_model=8, num_layers=2, num_heads=2, seed=3)
    values = model.values(PROMPTS, RESPONSES.int())
    torch.testing.assert_close(values, by_hand(model.trunk, model.head, PROMPTS, RESPONSES))
    assert not hasattr(model.trunk, "unembed") and model.prompt_length == 3


def test_critic_defaults_and_seeding():
    model = AutoregressiveValueModel(4, 3, 5, seed=0)
    policy = AutoregressiveSortPolicy(4, 3, 5, seed=0)  # d_model 64, 2 layers, 4 heads
    assert model.head.in_features == 64 and len(model.trunk.blocks) == 2
    for a, b in zip(model.trunk.parameters(), policy.parameters()):  # the same trunk
        assert torch.equal(a, b)
    torch.manual_seed(1)  # the head is seeded with seed + 1
    expected = nn.Linear(64, 1)
    assert torch.equal(model.head.weight, expected.weight)
    assert torch.equal(model.head.bias, expected.bias)
    state = torch.random.get_rng_state()
    AutoregressiveValueModel(4, 3, 5, d_model=8, num_layers=1, num_heads=2, seed=7)
    assert torch.equal(torch.random.get_rng_state(), state)  # seeded: global RNG untouched
    torch.manual_seed(11)
    a = AutoregressiveValueModel(4, 3, 5, d_model=8, num_layers=1, num_heads=2)
    torch.manual_seed(11)
    c = AutoregressiveValueModel(4, 3, 5, d_model=8, num_layers=1, num_heads=2)
    assert torch.equal(a.head.weight, c.head.weight)
    assert not torch.equal(a.head.weight, AutoregressiveValueModel(4, 3, 5, 8, 1, 2).head.weight)


def test_responses_must_be_3d():
    model = AutoregressiveValueModel(4, 3, 5, d_model=8, num_layers=1, num_heads=2, seed=0)
    with pytest.raises(
        ValueError, match=re.escape("responses must have shape [batch, trial, pos] (3 dims)")
    ):
        model.values(PROMPTS, RESPONSES[0])


MASK = torch.tensor([[[1.0, 1.0, 1.0, 0.0]]])


RETURNS = torch.tensor([[[1.0, 1.0, -1.0, 50.0]]])


OLD = torch.zeros(1, 1, 4)


def test_value_loss_clips_both_sides_and_halves():
    values = torch.tensor([[[0.5, 3.0, -3.0, 9.0]]], requires_grad=True)
    # slot 0: 0.25 vs clip 0.2 -> 0.64; slot 1: 4 vs clip 0.2 -> 0.64 (max 4);
    # slot 2: 4 vs clip -0.2 -> 0.64 (max 4): the clip acts on both sides of old_V
    loss = value_loss(values, OLD, RETURNS, MASK, value_clip=0.2)
    torch.testing.assert_close(loss, torch.tensor(0.5 * (0.64 + 4 + 4) / 3))
    up = value_loss(torch.tensor([[[1.5, 0.0, 0.0, 0.0]]]), OLD, RETURNS, MASK, value_clip=1)
    torch.testing.assert_close(up, torch.tensor(0.5 * (0.25 + 1 + 1) / 3))
    down = value_loss(torch.tensor([[[0.0, 0.0, -2.0, 0.0]]]), OLD, RETURNS, MASK, value_clip=1)
    torch.testing.assert_close(down, torch.tensor(0.5 * (1 + 1 + 1) / 3))
    # the lower clip binds in the max: V = -1 is 1 below old_V, R = -5 below both
    one = torch.tensor([[[1.0, 0.0, 0.0, 0.0]]])
    low = value_loss(-one, OLD, -5 * one, one, value_clip=0.2)
    torch.testing.assert_close(low, torch.tensor(0.5 * 4.8**2))
    plain = value_loss(values, OLD, RETURNS, MASK)
    torch.testing.assert_close(plain, torch.tensor(0.5 * (0.25 + 4 + 4) / 3))


@pytest.mark.parametrize("clip", [0, 0.0, -0.1, True, math.inf, math.nan, "0.2"])
def test_a_bad_value_clip_is_named(clip):
    with pytest.raises(
        ValueError,
        match=rf"^value_clip .*positive finite number or None.*{re.escape(repr(clip))}",
    ):
        value_loss(torch.zeros(1, 1, 4), OLD, RETURNS, MASK, value_clip=clip)


@pytest.mark.parametrize("which", [0, 1, 2])
def test_value_loss_names_the_bad_tensor(which):
    name = ("values", "old_values", "returns")[which]
    args = [torch.zeros(1, 1, 4), OLD, RETURNS]
    short = list(args)
    short[which] = args[which][..., :3]
    with pytest.raises(
        ValueError, match=rf"^{name} and mask .*same shape.*\[1, 1, 3\] and \[1, 1, 4\]"
    ):
        value_loss(*short, MASK)
    flat = list(args)
    flat[which] = args[which][0]
    with pytest.raises(
        ValueError, match="^" + re.escape(f"{name} must have shape [batch, trial, pos]")
    ):
        value_loss(*flat, MASK)
    bad = list(args)
    bad[which] = args[which].clone()
    bad[which][0, 0, 3] = math.nan
    with pytest.raises(ValueError, match=f"^{name} contains 1 non-finite"):
        value_loss(*bad, MASK)


def test_value_loss_mask_may_have_holes_but_must_be_0_1():
    values = torch.tensor([[[1.0, 2.0, 3.0, 4.0]]])
    holes = torch.tensor([[[1.0, 0.0, 1.0, 0.0]]])
    got = value_loss(values, values, torch.zeros(1, 1, 4), holes)
    assert got.item() == 0.5 * (1.0 + 9.0) / 2  # tokens 0 and 2 only
    with pytest.raises(ValueError, match="^mask must hold only 0 and 1"):
        value_loss(torch.zeros(1, 1, 4), OLD, RETURNS, torch.tensor([[[1.0, 0.5, 1.0, 0.0]]]))


def test_build_critic_maps_the_config():
    # max_response_length 7, not the default prompt_length + 2 = 5: a critic built with the
    # default length must fail here (issue 50; a fixture equal to the default could not tell)
    config = TrainConfig(
        model="autoregressive", task="sort_dedup", prompt_source="random", prompt_length=3,
        vocab_size=4, max_response_length=7, embedding_dim=12, num_layers=3, num_heads=3, seed=4,
    )  # fmt: skip
    assert config.response_length == 7 != config.prompt_length + 2
    model = build_critic(config)
    assert model.trunk.max_response_length == 7
    expected = AutoregressiveValueModel(4, 3, 7, 12, 3, 3, seed=4)
    assert len(list(model.parameters())) == len(list(expected.parameters()))
    for a, b in zip(model.parameters(), expected.parameters()):
        assert a.shape == b.shape and torch.equal(a, b)
    # the head count does not change the parameters' shapes, only the attention
    torch.testing.assert_close(
        model.values(PROMPTS, RESPONSES), expected.values(PROMPTS, RESPONSES)
    )
    four_heads = AutoregressiveValueModel(4, 3, config.response_length, 12, 3, 4, seed=4)
    assert not torch.allclose(
        model.values(PROMPTS, RESPONSES), four_heads.values(PROMPTS, RESPONSES)
    )


PPO_SMALL = TrainConfig(
    model="autoregressive", task="sort_dedup", prompt_source="random", prompt_length=3,
    vocab_size=4, embedding_dim=8, num_layers=1, num_heads=2, reward_fn="dedup_position_reward",
    num_responses=2, num_steps_per_epoch=3, learning_rate=1e-3, advantage_estimator="gae",
    whiten_advantages=False, value_clip=None,
)  # fmt: skip


def _rollout():
    mask = (RESPONSES != 4).cumprod(-1).float()
    mask = torch.cat([torch.ones_like(mask[..., :1]), mask[..., :-1]], dim=-1)  # EOS counts
    return SimpleNamespace(
        prompts=PROMPTS, responses=RESPONSES, mask=mask,
        rewards=torch.tensor([[1.0, -2.0], [0.5, 3.0]]),
    )  # fmt: skip


def test_gae_estimator_learning_rate_deltas_and_critic_steps():
    est = GAEEstimator(None, PPO_SMALL)
    with pytest.raises(ValueError, match="^after_epoch called before the estimator made"):
        est.after_epoch(_rollout())  # a call-order mistake gets a clear error
    assert est.optimizer.param_groups[0]["lr"] == 1e-3  # critic lr None: the policy's
    assert (
        GAEEstimator(None, replace(PPO_SMALL, critic_learning_rate=0.5)).optimizer.param_groups[0][
            "lr"
        ]
        == 0.5
    )
    rollout = _rollout()
    with torch.no_grad():
        old = est.critic.values(PROMPTS, RESPONSES)
    adv, returns = compute_gae(
        outcome_token_rewards(rollout.rewards, rollout.mask), old, rollout.mask,
        PPO_SMALL.gamma, PPO_SMALL.gae_lambda,
    )  # fmt: skip
    torch.testing.assert_close(est(rollout, PPO_SMALL), adv)
    # gamma and lambda come from the config (not the defaults 1 and 0.95)
    other = replace(PPO_SMALL, gamma=0.9, gae_lambda=0.5)
    adv2, _ = compute_gae(
        outcome_token_rewards(rollout.rewards, rollout.mask), old, rollout.mask, 0.9, 0.5
    )
    torch.testing.assert_close(est(rollout, other), adv2)
    white = replace(PPO_SMALL, whiten_advantages=True)
    torch.testing.assert_close(est(rollout, white), whiten(adv, rollout.mask))
    # after_epoch: num_steps_per_epoch Adam steps on the value loss, mean loss logged
    twin = GAEEstimator(None, PPO_SMALL)
    losses = []
    for _ in range(3):
        loss = value_loss(twin.critic.values(PROMPTS, RESPONSES), old * rollout.mask, returns,
                          rollout.mask)  # fmt: skip
        twin.optimizer.zero_grad()
        loss.backward()
        twin.optimizer.step()
        losses.append(loss.item())
    est.after_epoch(rollout)
    assert est.value_losses == [pytest.approx(sum(losses) / 3, rel=1e-6)]
    for a, b in zip(est.critic.parameters(), twin.critic.parameters()):
        torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match="^after_epoch got a different rollout"):
        est.after_epoch(_rollout())


def test_gae_estimator_passes_value_clip_to_the_loss():
    clipped = replace(PPO_SMALL, value_clip=1e-3, num_steps_per_epoch=2)
    rollout = _rollout()
    a, b = GAEEstimator(None, clipped), GAEEstimator(None, replace(clipped, value_clip=None))
    a(rollout, clipped)
    b(rollout, clipped)
    a.after_epoch(rollout)
    b.after_epoch(rollout)
    assert a.value_losses[0] != pytest.approx(b.value_losses[0], rel=1e-6)


def test_measured_memory_by_hand():
    module = nn.Linear(3, 2)  # 8 float32 parameters
    assert measured_memory(module) == {
        "params": 8, "weights": 32, "grads": 0, "optimizer": 0, "total": 32,
    }  # fmt: skip
    module.weight.grad = torch.zeros(2, 3)  # only one gradient so far
    assert measured_memory(module)["grads"] == 24
    optimizer = torch.optim.Adam(module.parameters())
    assert measured_memory(module, optimizer)["optimizer"] == 0  # no state before a step
    module(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    got = measured_memory(module.double(), optimizer)
    # double() replaced nothing in the optimizer state: exp_avg + exp_avg_sq in float32
    assert got == {"params": 8, "weights": 64, "grads": 64, "optimizer": 64, "total": 192}


def test_advantage_variance_of_a_rollout_without_policy_tokens_is_0():
    from dataclasses import replace as dc_replace

    from pgrl_helpers.registry import build_estimator
    from pgrl_helpers.rollout import Rollout

    config = dc_replace(PPO_SMALL, whiten_advantages=False)
    policy = config.build_policy()
    estimator = build_estimator("gae", policy, config)
    prompts = torch.tensor([[1, 0, 2], [3, 3, 0]])
    responses, mask = policy.sample(prompts, 2, torch.Generator().manual_seed(0))
    rollout = Rollout(prompts, responses, torch.zeros_like(mask), torch.ones(2, 2))
    deltas = estimator(rollout, config)
    assert estimator.advantage_variances == [0.0] and (deltas == 0).all()


# --- check_value_fields: each PPO field's bounds, its edges, and the two pairings ---------


def _ppo_fields(**fields):
    base = dict(
        gamma=1.0, gae_lambda=0.95, critic_learning_rate=None, value_clip=0.2,
        whiten_advantages=True, kl_in_reward=False, advantage_estimator="gae",
        model="autoregressive", kl_coef=0.0,
    )  # fmt: skip
    return SimpleNamespace(**{**base, **fields})


def test_check_value_fields_passes_the_edges_of_each_field():
    from pgrl_helpers.value import check_value_fields

    for edge in (dict(gamma=0), dict(gamma=1), dict(gae_lambda=0.0), dict(gae_lambda=1.0),
                 dict(critic_learning_rate=1e-12), dict(value_clip=None),
                 dict(value_clip=1e-12), dict(whiten_advantages=False),
                 dict(kl_in_reward=True, kl_coef=1e-9),
                 dict(advantage_estimator="group", model="lecture")):  # fmt: skip
        check_value_fields(_ppo_fields(**edge))


@pytest.mark.parametrize(
    "field, value, error, pattern",
    [
        ("gamma", 1.0001, ValueError, r"^gamma .*\[0, 1\].*1.0001"),
        ("gamma", -1e-9, ValueError, r"^gamma .*\[0, 1\].*-1e-09"),
        ("gamma", True, ValueError, r"^gamma .*\[0, 1\].*True"),
        ("gae_lambda", 1.5, ValueError, r"^gae_lambda .*\[0, 1\].*1.5"),
        ("gae_lambda", -0.1, ValueError, r"^gae_lambda .*\[0, 1\].*-0.1"),
        ("critic_learning_rate", 0, ValueError, "^critic_learning_rate .*positive finite.*or None.*0"),
        ("critic_learning_rate", math.inf, ValueError,
         "^critic_learning_rate .*positive finite.*or None.*inf"),
        ("value_clip", 0.0, ValueError, "^value_clip .*positive finite.*or None.*0.0"),
        ("whiten_advantages", 1, TypeError, "^whiten_advantages must be True or False.*1"),
        ("kl_in_reward", 0, TypeError, "^kl_in_reward must be True or False.*0"),
    ],
)  # fmt: skip
def test_check_value_fields_names_each_bad_field(field, value, error, pattern):
    from pgrl_helpers.value import check_value_fields

    with pytest.raises(error, match=pattern):
        check_value_fields(_ppo_fields(**{field: value}))


def test_check_value_fields_pairings():
    from pgrl_helpers.value import check_value_fields

    gae = r"^advantage_estimator 'gae' needs model 'autoregressive' \(its critic.*'transformer'"
    with pytest.raises(ValueError, match=gae):
        check_value_fields(_ppo_fields(model="transformer"))
    for fields, got in (
        (dict(kl_coef=0.0), "'gae' and 0.0"),
        (dict(kl_coef=0.1, advantage_estimator="group", model="lecture"), "'group' and 0.1"),
    ):
        needs = r"^kl_in_reward puts .*advantage_estimator 'gae' .*and kl_coef > 0"
        with pytest.raises(ValueError, match=needs + ".*" + re.escape(got)):
            check_value_fields(_ppo_fields(kl_in_reward=True, **fields))
