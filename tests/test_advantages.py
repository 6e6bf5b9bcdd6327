"""compute_deltas: every mode's invariant, ties, one-sample groups and bad input."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pgrl_helpers.advantages import (
    DELTA_FUNCTIONS,
    DELTA_MODES,
    MASK_MODES,
    compute_deltas,
    zero_deltas_reason,
)
from pgrl_helpers.hf.trl_config import TRL_SCALE_REWARDS

#: Other test files whose tests also pin pgrl_helpers/advantages.py (tests/mutation.py).
MUTATION_ALSO = ("integration/test_framework_agreement.py", "test_objective.py", "test_config.py")


def random_rewards(seed, batch=6, group=8):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 6, (batch, group), generator=g).float()


def test_rewards_mode_is_identity_and_a_copy():
    r = random_rewards(0)
    d = compute_deltas(r, "rewards")
    assert torch.equal(d, r) and d.data_ptr() != r.data_ptr()


def test_hand_case():
    r = torch.tensor([[1.0, 2.0, 3.0, 6.0]])  # mean 3, sample std sqrt(14/3)
    std = (14 / 3) ** 0.5
    torch.testing.assert_close(compute_deltas(r, "centered_rewards"), r - 3)
    torch.testing.assert_close(
        compute_deltas(r, "normalized_rewards"), (r - 3) / (std + 1e-6), rtol=1e-6, atol=1e-6
    )
    assert compute_deltas(r, "max_rewards").tolist() == [[0.0, 0.0, 0.0, 6.0]]
    # leave-one-out: 1 - (2+3+6)/3, ...
    torch.testing.assert_close(
        compute_deltas(r, "loo_rewards"), torch.tensor([[1 - 11 / 3, 2 - 10 / 3, 3 - 3.0, 6 - 2.0]])
    )


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), group=st.integers(2, 12))
def test_group_invariants(seed, group):
    r = random_rewards(seed, group=group)
    centered = compute_deltas(r, "centered_rewards")
    torch.testing.assert_close(centered.sum(-1), torch.zeros(r.shape[0]), atol=1e-5, rtol=0)
    varies = r.std(-1) > 0
    normalized = compute_deltas(r, "normalized_rewards")
    torch.testing.assert_close(
        normalized[varies].std(-1), torch.ones(int(varies.sum())), atol=1e-4, rtol=0
    )
    torch.testing.assert_close(normalized[~varies], torch.zeros_like(normalized[~varies]))
    loo = compute_deltas(r, "loo_rewards")
    torch.testing.assert_close(loo, centered * group / (group - 1), atol=1e-5, rtol=1e-5)
    best = compute_deltas(r, "max_rewards")
    is_max = r == r.max(-1, keepdim=True).values
    assert torch.equal(best[is_max], r[is_max]) and torch.all(best[~is_max] == 0)


def test_tied_groups():
    r = torch.full((3, 5), 2.0)
    for mode in ("centered_rewards", "normalized_rewards", "loo_rewards"):
        assert torch.all(compute_deltas(r, mode) == 0), mode
    # documented: with a tie every response is a winner, so max_rewards keeps them all
    assert torch.equal(compute_deltas(r, "max_rewards"), r)
    assert torch.equal(compute_deltas(r, "rewards"), r)


def test_near_equal_rewards_do_not_blow_up():
    r = torch.tensor([[1.0, 1.0 + 1e-6, 1.0, 1.0]])
    d = compute_deltas(r, "normalized_rewards")
    assert torch.isfinite(d).all() and d.abs().max() < 1e-2
    # the lecture's form (r - mean) / (std + 1e-5) turns a 1e-6 wobble into ~0.05-sized deltas
    lecture = (r - r.mean(-1, keepdim=True)) / (r.std(-1, keepdim=True) + 1e-5)
    assert lecture.abs().max() > 10 * d.abs().max()


def test_bad_inputs():
    r = random_rewards(1)
    with pytest.raises(ValueError, match="unknown delta mode 'centred'.*centered_rewards"):
        compute_deltas(r, "centred")
    for mode in ("normalized_rewards", "loo_rewards"):
        with pytest.raises(ValueError, match="at least 2 samples per prompt"):
            compute_deltas(r[:, :1], mode)
    with pytest.raises(ValueError, match=r"\[batch, trial\].*\[6, 8, 1\]"):
        compute_deltas(r[..., None], "rewards")
    bad = r.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        compute_deltas(bad, "centered_rewards")
    with pytest.raises(TypeError, match="torch.Tensor"):
        compute_deltas([[1.0, 2.0]], "rewards")


def test_every_mode_is_listed():
    r = random_rewards(2)
    for mode in DELTA_MODES:
        assert compute_deltas(r, mode).shape == r.shape


def test_the_modes_are_the_table_in_its_order_and_compute_deltas_dispatches_to_it():
    assert DELTA_MODES == (
        "rewards", "centered_rewards", "normalized_rewards", "max_rewards", "loo_rewards",
        "batch_normalized_rewards", "reinforce_pp_baseline",
    )  # fmt: skip
    assert DELTA_MODES == tuple(DELTA_FUNCTIONS)
    assert all(fn.__name__ == f"{mode}_deltas" for mode, fn in DELTA_FUNCTIONS.items())
    r = random_rewards(3)
    mask = torch.ones(*r.shape, 2, dtype=torch.bool)
    for mode, fn in DELTA_FUNCTIONS.items():
        token_mask = mask if mode in MASK_MODES else None
        want = fn(r, token_mask, 0.25, 0.5)
        assert torch.equal(compute_deltas(r, mode, 0.25, 0.5, token_mask), want), mode


# --- the batch delta modes: REINFORCE++-baseline and TRL's scale_rewards ---


def test_reinforce_pp_baseline_by_hand():
    g = torch.Generator().manual_seed(0)
    rewards = torch.rand((5, 4), generator=g, dtype=torch.float64)
    deltas = compute_deltas(rewards, "reinforce_pp_baseline", eps=0.0)
    rows = rewards.tolist()
    centered = [r - sum(row) / len(row) for row in rows for r in row]
    mean = sum(centered) / len(centered)
    std = math.sqrt(sum((c - mean) ** 2 for c in centered) / (len(centered) - 1))
    expected = torch.tensor([c / std for c in centered], dtype=torch.float64).reshape(5, 4)
    torch.testing.assert_close(deltas, expected)


def test_batch_normalized_rewards_is_trls_scale_rewards_batch():
    g = torch.Generator().manual_seed(1)
    rewards = torch.rand((5, 4), generator=g, dtype=torch.float64)
    ours = compute_deltas(rewards, TRL_SCALE_REWARDS["batch"], eps=1e-4, std_floor=1e-12)
    trl = (rewards - rewards.mean(-1, keepdim=True)) / (rewards.std() + 1e-4)  # TRL's formula
    torch.testing.assert_close(ours, trl)
    # and it is not the REINFORCE++ variant (std of the *centred* rewards)
    assert (ours - compute_deltas(rewards, "reinforce_pp_baseline")).abs().max() > 1e-3
    assert TRL_SCALE_REWARDS == {
        "group": "normalized_rewards",
        "batch": "batch_normalized_rewards",
        "none": "centered_rewards",
    }


def test_batch_delta_modes_need_two_rewards():
    for mode in ("reinforce_pp_baseline", "batch_normalized_rewards"):
        with pytest.raises(ValueError, match=f"delta mode '{mode}' .* at least 2 rewards"):
            compute_deltas(torch.ones(1, 1), mode)


@pytest.mark.parametrize("mode", [m for m in DELTA_MODES if m not in MASK_MODES])
def test_a_mask_is_refused_by_the_modes_that_do_not_read_it(mode):
    rewards, mask = random_rewards(0), torch.ones(6, 8, 3)
    with pytest.raises(ValueError, match=rf"^mask: delta mode '{mode}' does not read a mask"):
        compute_deltas(rewards, mode, mask=mask)
    assert compute_deltas(rewards, mode, mask=None).shape == rewards.shape


def test_the_mode_that_reads_the_mask_still_takes_it():
    assert MASK_MODES == ("reinforce_pp_baseline",)
    rewards = random_rewards(1)
    lengths = torch.randint(1, 4, (6, 8, 1), generator=torch.Generator().manual_seed(0))
    mask = (torch.arange(3) < lengths).float()  # lengths 1-3
    masked = compute_deltas(rewards, "reinforce_pp_baseline", mask=mask)
    assert not torch.allclose(masked, compute_deltas(rewards, "reinforce_pp_baseline"))


def test_one_response_per_prompt_names_the_modes_whose_deltas_all_vanish():
    zero = {"centered_rewards", "batch_normalized_rewards", "reinforce_pp_baseline"}
    undefined = {"normalized_rewards", "loo_rewards"}  # compute_deltas raises for G = 1
    for mode in DELTA_MODES:
        reason = zero_deltas_reason(mode, 1)
        if mode in zero:
            assert reason.startswith(f"num_responses (G) = 1 with deltas_mode '{mode}'"), reason
            assert "every delta is 0" in reason
            rewards = random_rewards(2, group=1)  # the claim itself, on other rewards
            assert torch.equal(compute_deltas(rewards, mode), torch.zeros_like(rewards)), mode
        elif mode in undefined:
            assert "at least 2 samples per prompt" in reason, (mode, reason)
        else:  # rewards, max_rewards: delta = r, the run trains
            assert reason is None, mode
        assert zero_deltas_reason(mode, 2) is None
    with pytest.raises(ValueError, match="unknown delta mode"):
        zero_deltas_reason("centred", 1)


# --- mutants ---
# The cases mutation testing found unchecked (tests/MUTATION.md).
#
# dtypes (int rewards, float64), the eps term of normalized_rewards pinned, the
# std_floor / eps checks, and error messages that name the offending argument.


R = [[1.0, 2.0, 3.0, 6.0], [0.0, 0.0, 1.0, 1.0]]


def test_int_rewards_give_float32_deltas_equal_to_the_float_ones():
    ints = torch.tensor(R, dtype=torch.float32).long()
    for mode in DELTA_MODES:
        deltas = compute_deltas(ints, mode)
        assert deltas.dtype == torch.float32, mode
        torch.testing.assert_close(deltas, compute_deltas(ints.float(), mode))


def test_float64_rewards_stay_float64():
    r = torch.tensor(R, dtype=torch.float64)
    for mode in DELTA_MODES:
        assert compute_deltas(r, mode).dtype == torch.float64, mode
    # 1/3 in float64 is not float32's 1/3: the computation itself ran in float64
    centered = compute_deltas(
        torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64), "centered_rewards"
    )
    assert centered[0, 2].item() == 1 - 1 / 3


def test_normalized_rewards_adds_eps_to_the_std():
    r = torch.tensor([[0.0, 2.0]])  # mean 1, sample std sqrt(2)
    std = 2**0.5
    for eps in (0.5, 0.0):
        expected = torch.tensor([[-1.0, 1.0]]) / (std + eps)
        torch.testing.assert_close(compute_deltas(r, "normalized_rewards", eps=eps), expected)
    # the floor replaces a smaller std: std 0.1 < floor 1 -> divide by 1 + eps
    near = torch.tensor([[0.0, 0.1 * std]])
    torch.testing.assert_close(
        compute_deltas(near, "normalized_rewards", eps=0.5, std_floor=1.0),
        (near - near.mean()) / 1.5,
    )


def test_std_floor_and_eps_are_checked_by_name():
    r = torch.tensor(R)
    for kwargs, message in (
        ({"std_floor": 0.0}, r"^std_floor must be a positive finite number, got 0\.0"),
        ({"std_floor": -1.0}, r"^std_floor must be a positive finite number, got -1\.0"),
        ({"std_floor": float("nan")}, r"^std_floor must be a positive finite number, got nan"),
        ({"eps": -1e-6}, r"^eps must be a finite number >= 0, got -1e-06"),
        ({"eps": True}, r"^eps must be a finite number >= 0, got True"),
    ):
        with pytest.raises(ValueError, match=message):
            compute_deltas(r, "normalized_rewards", **kwargs)
    compute_deltas(r, "normalized_rewards", eps=0.0)  # eps == 0 is allowed


def test_error_messages_name_the_argument():
    r = torch.tensor(R)
    with pytest.raises(ValueError, match=r"^rewards must have shape \[batch, trial\] \(2 dims\)"):
        compute_deltas(r[0], "rewards")
    bad = r.clone()
    bad[1, 1] = float("nan")
    with pytest.raises(ValueError, match="^rewards contains 1 non-finite"):
        compute_deltas(bad, "rewards")
    with pytest.raises(
        ValueError,
        match=r"^delta mode 'loo_rewards' needs at least 2 samples per prompt.*\[2, 1\].*undefined",
    ):
        compute_deltas(r[:, :1], "loo_rewards")


def test_batch_modes_by_hand():
    r = torch.tensor([[0.0, 2.0], [4.0, 10.0]])
    centered = torch.tensor([[-1.0, 1.0], [-3.0, 3.0]])
    batch_std = r.std()  # sample std of all 4 rewards
    torch.testing.assert_close(
        compute_deltas(r, "batch_normalized_rewards", eps=0.5), centered / (batch_std + 0.5)
    )
    pp_std = centered.std()  # std of the centred rewards over the batch
    torch.testing.assert_close(
        compute_deltas(r, "reinforce_pp_baseline", eps=0.5), centered / (pp_std + 0.5)
    )
    assert not torch.allclose(batch_std, pp_std)  # the two modes differ here
    # both floor the batch std: std 0.01 < floor 1 -> divide by 1 + eps
    tiny = torch.tensor([[0.0, 0.01], [0.0, 0.01]])
    for mode in ("batch_normalized_rewards", "reinforce_pp_baseline"):
        got = compute_deltas(tiny, mode, eps=0.25, std_floor=1.0)
        torch.testing.assert_close(got, (tiny - tiny.mean(-1, keepdim=True)) / 1.25)
        # default eps 1e-6 and floor 1e-3: std 0.0058 > floor
        std = (tiny - (tiny.mean(-1, keepdim=True) if mode == "reinforce_pp_baseline" else 0)).std()
        expected = (tiny - tiny.mean(-1, keepdim=True)) / (std + 1e-6)
        torch.testing.assert_close(compute_deltas(tiny, mode), expected, rtol=1e-7, atol=0)


@pytest.mark.parametrize("mode", ["batch_normalized_rewards", "reinforce_pp_baseline"])
def test_batch_modes_need_two_rewards_and_one_prompt_with_two_is_enough(mode):
    with pytest.raises(
        ValueError, match=rf"^delta mode {mode!r} .*needs at least 2 rewards.*\[1, 1\]"
    ):
        compute_deltas(torch.ones(1, 1), mode)
    two = compute_deltas(torch.tensor([[1.0], [3.0]]), mode, eps=0.0)  # G = 1, 2 prompts
    assert two.tolist() == [[0.0], [0.0]]  # one sample per group: centred to 0


def test_group_modes_need_two_samples_but_not_the_others():
    one = torch.tensor([[1.0], [3.0]])
    for mode in DELTA_MODES:
        if mode in ("normalized_rewards", "loo_rewards"):
            with pytest.raises(ValueError, match=f"^delta mode {mode!r} needs at least 2"):
                compute_deltas(one, mode)
        else:
            compute_deltas(one, mode)


def test_token_mask_type_error_names_the_type():
    with pytest.raises(TypeError, match=r"^mask must be a torch\.Tensor or None.*list"):
        compute_deltas(torch.ones(2, 2), "reinforce_pp_baseline", mask=[[1.0]])


def test_two_masked_tokens_are_enough_for_token_whitening():
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    mask = torch.tensor([[[1.0, 0.0], [0.0, 0.0]], [[0.0, 0.0], [1.0, 0.0]]])
    got = compute_deltas(rewards, "reinforce_pp_baseline", mask=mask)
    # tokens: +0.5 (response 0) and +0.5 (response 3): std 0, floored at 1e-3
    assert torch.isfinite(got).all() and got[0, 0] == got[1, 1]


def test_the_mask_refusal_says_what_to_do_instead():
    with pytest.raises(ValueError, match=r"tokens\. Pass mask=None, or apply the mask to the loss"):
        compute_deltas(torch.ones(2, 2), "centered_rewards", mask=torch.ones(2, 2, 1))


def test_max_rewards_refuses_a_negative_reward_naming_the_minimum():
    """The winner's weight is its own reward: below 0 the best response would be pushed down."""
    with pytest.raises(
        ValueError,
        match=r"^rewards: deltas_mode 'max_rewards' needs rewards >= 0 .*minimum of -0.5; "
        r"use 'centered_rewards'$",
    ):
        compute_deltas(torch.tensor([[1.0, -0.5, 0.0]]), "max_rewards")
    assert compute_deltas(torch.tensor([[0.0, 0.0]]), "max_rewards").tolist() == [[0.0, 0.0]]
