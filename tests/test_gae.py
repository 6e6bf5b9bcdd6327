"""GAE (Schulman et al. 2015, eq. 16) against a hand-written loop, its two limits, bad input."""

from __future__ import annotations

import math
import re

import pytest
import torch

from pgrl_helpers.gae import (
    check_binary_mask,
    check_prefix_mask,
    compute_gae,
    outcome_token_rewards,
    whiten,
)

#: Other test files whose tests also pin pgrl_helpers/gae.py (tests/mutation.py).
MUTATION_ALSO = ("integration/test_framework_agreement.py",)


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


# --- mutants ---
# The cases mutation testing found unchecked (tests/MUTATION.md).
#
# The defaults gamma = 1 and lam = 0.95 pinned, the closed interval [0, 1] (both ends
# allowed), dtypes (int and float64 inputs give float32), no gradient through the values,
# whiten's eps and its use of the real tokens only, and error messages matched from their
# start so that they name the offending argument.


MASK = torch.tensor([[[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]]])  # [1, 2, 4]


REWARDS = torch.tensor([[[0.5, -1.0, 2.0, 7.0], [3.0, 9.0, 9.0, 9.0]]])


VALUES = torch.tensor([[[0.25, 1.0, -0.5, 5.0], [1.5, 4.0, 4.0, 4.0]]])


def by_hand(gamma, lam):
    """GAE of the two responses above written out (response 2 has one real token)."""
    r, v = REWARDS[0, 0, :3].tolist(), VALUES[0, 0, :3].tolist() + [0.0]
    d = [r[t] + gamma * v[t + 1] - v[t] for t in range(3)]
    a2 = d[2]
    a1 = d[1] + gamma * lam * a2
    a0 = d[0] + gamma * lam * a1
    b0 = REWARDS[0, 1, 0].item() - VALUES[0, 1, 0].item()  # terminal after one token
    adv = torch.tensor([[[a0, a1, a2, 0.0], [b0, 0.0, 0.0, 0.0]]])
    return adv, (adv + VALUES) * MASK


def test_defaults_are_gamma_one_and_lam_095():
    adv, ret = compute_gae(REWARDS, VALUES, MASK)
    ref_adv, ref_ret = by_hand(1.0, 0.95)
    torch.testing.assert_close(adv, ref_adv)
    torch.testing.assert_close(ret, ref_ret)


@pytest.mark.parametrize("gamma, lam", [(0, 0), (1, 1), (0.0, 1.0), (1.0, 0.0), (0.5, 0.25)])
def test_both_ends_of_the_unit_interval_are_allowed(gamma, lam):
    adv, ret = compute_gae(REWARDS, VALUES, MASK, gamma, lam)
    ref_adv, ref_ret = by_hand(float(gamma), float(lam))
    torch.testing.assert_close(adv, ref_adv)
    torch.testing.assert_close(ret, ref_ret)


def test_one_slot_responses():
    # pos = 1: the backward pass has a single step (and no slot 1 to read)
    mask = torch.tensor([[[1.0], [0.0]]])
    adv, ret = compute_gae(torch.tensor([[[2.0], [5.0]]]), torch.tensor([[[0.5], [1.0]]]), mask)
    assert adv.tolist() == [[[1.5], [0.0]]] and ret.tolist() == [[[2.0], [0.0]]]


def test_int_inputs_give_float32_and_float64_stays_float64_without_gradient():
    ints = compute_gae(REWARDS.long(), VALUES.long(), MASK.long(), 0.9, 0.8)
    floats = compute_gae(REWARDS.long().float(), VALUES.long().float(), MASK, 0.9, 0.8)
    for got, want in zip(ints, floats):
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, want)
    values = VALUES.double().requires_grad_(True)
    adv, ret = compute_gae(REWARDS.double(), values, MASK.double(), 0.9, 0.8)
    assert adv.dtype == ret.dtype == torch.float64
    assert not adv.requires_grad and not ret.requires_grad
    ref_adv, ref_ret = by_hand(0.9, 0.8)
    torch.testing.assert_close(adv, ref_adv.double())
    torch.testing.assert_close(ret, ref_ret.double())


def test_outcome_rewards_are_float32_for_int_rewards_and_a_bool_mask():
    out = outcome_token_rewards(torch.tensor([[2, 3]]), MASK.bool())
    assert out.dtype == torch.float32
    assert out.tolist() == [[[0.0, 0.0, 2.0, 0.0], [3.0, 0.0, 0.0, 0.0]]]


def test_prefix_mask_is_returned_as_float_and_names_a_custom_argument():
    got = check_prefix_mask(MASK.long())
    assert got.dtype == torch.float32 and torch.equal(got, MASK)
    full = torch.ones(1, 1, 3)  # no padding at all: ones only is a valid prefix mask
    assert torch.equal(check_prefix_mask(full), full)
    with pytest.raises(ValueError, match="^response_mask must hold only 0 and 1"):
        check_prefix_mask(MASK * 2, "response_mask")
    with pytest.raises(ValueError, match="^response_mask has holes.*then 0 on the padding"):
        check_prefix_mask(torch.tensor([[[1.0, 0.0, 1.0]]]), "response_mask")
    with pytest.raises(ValueError, match=r"^response_mask must have shape \[batch, trial, pos\]"):
        check_prefix_mask(MASK[0], "response_mask")


def test_whiten_uses_only_the_real_tokens_and_its_eps():
    adv = torch.tensor([[[1.0, 2.0, 3.0, 100.0], [6.0, -50.0, 7.0, 8.0]]])
    real = torch.tensor([1.0, 2.0, 3.0, 6.0])
    mean, std = real.mean(), real.std()  # sample std, as torch computes it
    expected = (adv - mean) / (std + 1e-8) * MASK
    torch.testing.assert_close(whiten(adv, MASK), expected)
    torch.testing.assert_close(whiten(adv, MASK, eps=1.0), (adv - mean) / (std + 1.0) * MASK)
    assert whiten(adv, MASK)[0, 0, 3].item() == 0.0


def test_whiten_needs_two_real_tokens_and_two_are_enough():
    mask = torch.tensor([[[1.0, 1.0, 0.0]]])
    out = whiten(torch.tensor([[[1.0, 3.0, 5.0]]]), mask)
    torch.testing.assert_close(out, torch.tensor([[[-(2**-0.5), 2**-0.5, 0.0]]]))
    with pytest.raises(ValueError, match="^whiten needs at least 2 real tokens"):
        whiten(torch.ones(1, 1, 3), torch.tensor([[[1.0, 0.0, 0.0]]]))


def test_error_messages_name_the_argument():
    with pytest.raises(
        ValueError,
        match=r"^values and mask .*same shape.*\[1, 2, 3\] and \[1, 2, 4\]",
    ):
        compute_gae(REWARDS, VALUES[..., :3], MASK)
    with pytest.raises(ValueError, match=r"^rewards and mask must have the same shape, got \["):
        compute_gae(REWARDS[..., :3], VALUES, MASK)
    with pytest.raises(ValueError, match=r"^values must have shape \[batch, trial, pos\]"):
        compute_gae(REWARDS, VALUES[0], MASK)
    with pytest.raises(ValueError, match=r"^mask must have shape \[batch, trial, pos\]"):
        compute_gae(REWARDS, VALUES, MASK[0])
    bad = REWARDS.clone()
    bad[0, 0, 0] = math.inf
    with pytest.raises(ValueError, match="^rewards contains 1 non-finite"):
        compute_gae(bad, VALUES, MASK)
    for value in (-0.1, 1.5, math.inf, math.nan, True, "0.5", None):
        with pytest.raises(ValueError, match=rf"^gamma .*\[0, 1\].*{re.escape(repr(value))}"):
            compute_gae(REWARDS, VALUES, MASK, gamma=value)
        with pytest.raises(ValueError, match=rf"^lam .*\[0, 1\].*{re.escape(repr(value))}"):
            compute_gae(REWARDS, VALUES, MASK, lam=value)
    with pytest.raises(
        ValueError,
        match=r"^rewards \[1, 3\] must be \[batch, trial\] of mask",
    ):
        outcome_token_rewards(torch.ones(1, 3), MASK)
    with pytest.raises(ValueError, match=r"^rewards must have shape \[batch, trial\]"):
        outcome_token_rewards(torch.ones(1, 2, 1), MASK)
    with pytest.raises(ValueError, match="^rewards contains 1 non-finite"):
        outcome_token_rewards(torch.tensor([[1.0, math.nan]]), MASK)
    with pytest.raises(
        ValueError,
        match=r"^advantages and mask .*same shape.*\[1, 2, 3\] and \[1, 2, 4\]",
    ):
        whiten(torch.ones(1, 2, 3), MASK)
    with pytest.raises(ValueError, match="^mask must hold only 0 and 1"):
        whiten(torch.ones(1, 1, 3), torch.tensor([[[0.0, 2.0, 1.0]]]))


def test_check_prefix_mask_default_name_and_mixed_dtypes_keep_the_values_dtype():
    with pytest.raises(ValueError, match="^mask has holes"):
        check_prefix_mask(torch.tensor([[[1.0, 0.0, 1.0]]]))
    rewards32 = torch.tensor([[1.0, 2.0]])
    mask64 = MASK.double()
    assert outcome_token_rewards(rewards32, mask64).dtype == torch.float32
    adv32 = torch.ones(1, 2, 4)
    adv32[0, 0, 0] = 3.0
    assert whiten(adv32, mask64).dtype == torch.float32


def test_check_binary_mask_keeps_a_floating_dtype():
    assert check_binary_mask(MASK.double()).dtype == torch.float64
    assert check_binary_mask(MASK.half()).dtype == torch.float16
    assert check_binary_mask(MASK.bool()).dtype == torch.float32


def test_compute_gae_casts_rewards_to_the_values_dtype_first():
    # 1 + 2**-30 is 1 in float32: with float32 values the TD error is exactly 0
    rewards = torch.tensor([[[1.0 + 2**-30]]], dtype=torch.float64)
    advantages, _ = compute_gae(rewards, torch.ones(1, 1, 1), torch.ones(1, 1, 1), 1.0, 1.0)
    assert advantages.dtype == torch.float32 and advantages.item() == 0.0


def test_half_precision_values_give_half_precision_returns_with_a_bool_mask():
    values = torch.tensor([[[0.5, 0.25]]], dtype=torch.float16)
    rewards = torch.tensor([[[0.0, 1.0]]], dtype=torch.float16)
    advantages, returns = compute_gae(
        rewards, values, torch.ones(1, 1, 2, dtype=torch.bool), 1.0, 1.0
    )
    assert advantages.dtype == returns.dtype == torch.float16
