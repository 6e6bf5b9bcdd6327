"""advantages: the cases mutation testing found unchecked (tests/MUTATION.md).

dtypes (int rewards, float64), the eps term of normalized_rewards pinned, the
std_floor / eps checks, and error messages that name the offending argument.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from pgrl_helpers.advantages import DELTA_MODES, compute_deltas, group_baseline_deltas

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
    for kwargs in ({"std_floor": 0.0}, {"std_floor": -1.0}, {"eps": -1e-6}):
        with pytest.raises(ValueError, match=r"^std_floor must be > 0 and eps >= 0, got "):
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
        match=r"^delta mode 'loo_rewards' needs at least 2 samples per prompt \(trial axis\), "
        r"got rewards of shape \[2, 1\]; with one sample the group std / leave-one-out mean "
        r"is undefined$",
    ):
        compute_deltas(r[:, :1], "loo_rewards")


def test_group_baseline_deltas_uses_the_rollout_rewards_and_the_config_mode():
    rewards = torch.tensor(R)
    for mode in DELTA_MODES:
        got = group_baseline_deltas(
            SimpleNamespace(rewards=rewards), SimpleNamespace(deltas_mode=mode)
        )
        assert torch.equal(got, compute_deltas(rewards, mode)), mode
