"""GAE (Schulman et al. 2015, eq. 16) against a hand-written loop, its two limits, bad input."""

from __future__ import annotations

import pytest
import torch

from pgrl_helpers.gae import compute_gae, outcome_token_rewards, whiten


def reference_gae(rewards, values, mask, gamma, lam):
    """One response at a time, in plain Python: sum_l (gamma lam)^l delta_{t+l}."""
    batch, trial, pos = mask.shape
    adv = [[[0.0] * pos for _ in range(trial)] for _ in range(batch)]
    ret = [[[0.0] * pos for _ in range(trial)] for _ in range(batch)]
    for b in range(batch):
        for g in range(trial):
            length = int(mask[b, g].sum())
            r = [float(x) for x in rewards[b, g, :length]]
            v = [float(x) for x in values[b, g, :length]] + [0.0]  # terminal: V = 0
            deltas = [r[t] + gamma * v[t + 1] - v[t] for t in range(length)]
            for t in range(length):
                adv[b][g][t] = sum((gamma * lam) ** k * deltas[t + k] for k in range(length - t))
                ret[b][g][t] = adv[b][g][t] + v[t]
    return torch.tensor(adv), torch.tensor(ret)


def random_batch(seed, batch=3, trial=4, pos=6):
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, pos + 1, (batch, trial), generator=gen)
    mask = (torch.arange(pos) < lengths[..., None]).float()
    rewards = torch.randn(batch, trial, pos, generator=gen)
    values = torch.randn(batch, trial, pos, generator=gen)
    return rewards, values, mask, gen


@pytest.mark.parametrize("seed", range(20))
def test_matches_a_hand_written_loop_on_random_padded_batches(seed):
    rewards, values, mask, gen = random_batch(seed)
    gamma, lam = torch.rand(2, generator=gen).tolist()
    if seed % 4 == 0:
        gamma, lam = 1.0, 1.0
    adv, ret = compute_gae(rewards, values, mask, gamma, lam)
    ref_adv, ref_ret = reference_gae(rewards, values, mask, gamma, lam)
    torch.testing.assert_close(adv, ref_adv, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ret, ref_ret, rtol=1e-5, atol=1e-5)


def test_padding_is_ignored_and_gets_zero():
    # Values and rewards on padding must not leak in (bootstrap 0 after the last token).
    rewards, values, mask, _ = random_batch(1)
    adv, ret = compute_gae(rewards, values, mask, 0.9, 0.8)
    garbage = 100.0 * (1 - mask)
    adv2, ret2 = compute_gae(rewards + garbage, values + garbage, mask, 0.9, 0.8)
    torch.testing.assert_close(adv, adv2)
    torch.testing.assert_close(ret, ret2)
    assert (adv[mask == 0] == 0).all() and (ret[mask == 0] == 0).all()


def test_monte_carlo_limit():
    # gamma = lam = 1 and V = 0: the advantage is the return, the sum of future rewards.
    rewards, _, mask, _ = random_batch(2)
    adv, ret = compute_gae(rewards, torch.zeros_like(rewards), mask, 1.0, 1.0)
    future = (rewards * mask).flip(-1).cumsum(-1).flip(-1) * mask
    torch.testing.assert_close(adv, future)
    torch.testing.assert_close(ret, future)
    # an outcome reward on the last token reaches every token of its response unchanged
    outcome = torch.tensor([[1.5, -0.5]])
    mask2 = torch.tensor([[[1.0, 1, 1, 0], [1, 0, 0, 0]]])
    adv, _ = compute_gae(
        outcome_token_rewards(outcome, mask2), torch.zeros(1, 2, 4), mask2, 1.0, 1.0
    )
    torch.testing.assert_close(adv, outcome[..., None] * mask2)


def test_discounted_monte_carlo_with_lambda_one():
    rewards, _, mask, _ = random_batch(3)
    gamma = 0.7
    adv, _ = compute_gae(rewards, torch.zeros_like(rewards), mask, gamma, 1.0)
    pos = rewards.shape[-1]
    expected = torch.zeros_like(rewards)
    for t in range(pos):
        for k in range(t, pos):
            expected[..., t] += gamma ** (k - t) * (rewards * mask)[..., k]
    torch.testing.assert_close(adv, expected * mask)


def test_td_error_limit():
    # lam = 0: A_t = r_t + gamma V(s_{t+1}) - V(s_t), with V = 0 after the last real token.
    rewards, values, mask, _ = random_batch(4)
    gamma = 0.9
    adv, _ = compute_gae(rewards, values, mask, gamma, 0.0)
    next_v = torch.cat([(values * mask)[..., 1:], torch.zeros_like(values[..., :1])], dim=-1)
    expected = (rewards + gamma * next_v - values) * mask
    torch.testing.assert_close(adv, expected)


def test_outcome_reward_sits_on_the_last_real_token():
    mask = torch.tensor([[[1.0, 1, 0], [1, 1, 1], [0, 0, 0]]])
    rewards = outcome_token_rewards(torch.tensor([[2.0, 3.0, 4.0]]), mask)
    assert rewards.tolist() == [[[0.0, 2.0, 0.0], [0.0, 0.0, 3.0], [0.0, 0.0, 0.0]]]


def test_whiten_over_real_tokens():
    rewards, _, mask, _ = random_batch(5)
    white = whiten(rewards * 3 + 2, mask)
    real = white[mask > 0]
    assert abs(real.mean().item()) < 1e-5 and abs(real.std().item() - 1) < 1e-4
    assert (white[mask == 0] == 0).all()


def test_bad_input_raises_naming_the_argument():
    rewards, values, mask, _ = random_batch(6)
    with pytest.raises(ValueError, match="values and mask must have the same shape"):
        compute_gae(rewards, values[..., :-1], mask)
    with pytest.raises(ValueError, match="rewards and mask"):
        compute_gae(rewards[:, :2], values, mask)
    with pytest.raises(ValueError, match=r"rewards must have shape \[batch, trial, pos\]"):
        compute_gae(rewards[0], values, mask)
    for bad in (-0.1, 1.01, float("nan"), True, "1"):
        with pytest.raises(ValueError, match="gamma must be a number in"):
            compute_gae(rewards, values, mask, gamma=bad)
        with pytest.raises(ValueError, match="lam must be a number in"):
            compute_gae(rewards, values, mask, lam=bad)
    with pytest.raises(ValueError, match="mask must hold only 0 and 1"):
        compute_gae(rewards, values, mask * 0.5)
    nan = values.clone()
    nan[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="values contains 1 non-finite"):
        compute_gae(rewards, nan, mask)
    with pytest.raises(ValueError, match="rewards .* must be \\[batch, trial\\]"):
        outcome_token_rewards(torch.ones(2, 2), mask)
