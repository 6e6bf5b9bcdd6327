"""advantages: the cases mutation testing found unchecked (tests/MUTATION.md).

dtypes (int rewards, float64), the eps term of normalized_rewards pinned, the
std_floor / eps checks, and error messages that name the offending argument.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch

from pgrl_helpers.advantages import DELTA_MODES, compute_deltas
from pgrl_helpers.registry import group_baseline_deltas

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
    lengths = torch.arange(rewards.numel()).reshape(rewards.shape) % 3 + 1
    mask = (torch.arange(3) < lengths[..., None]).float()  # lengths 1, 2, 3, 1, ...
    for mode in DELTA_MODES:
        got = group_baseline_deltas(
            SimpleNamespace(rewards=rewards, mask=mask), SimpleNamespace(deltas_mode=mode)
        )
        token_mask = mask if mode == "reinforce_pp_baseline" else None
        assert torch.equal(got, compute_deltas(rewards, mode, mask=token_mask)), mode
    plain = compute_deltas(rewards, "reinforce_pp_baseline")
    assert not torch.allclose(compute_deltas(rewards, "reinforce_pp_baseline", mask=mask), plain)


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
    message = (
        f"delta mode {mode!r} divides by the std over the batch and needs at least 2 "
        "rewards, got rewards of shape [1, 1]"
    )
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
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


def test_build_estimator_wraps_functions_and_builds_classes():
    from pgrl_helpers.registry import ADVANTAGE_ESTIMATORS, build_estimator
    from pgrl_helpers.value import GAEEstimator

    rollout = SimpleNamespace(rewards=torch.tensor(R))
    config = SimpleNamespace(deltas_mode="loo_rewards")
    group = build_estimator("group", None, config)
    assert group.fn is ADVANTAGE_ESTIMATORS["group"] is group_baseline_deltas
    assert torch.equal(group(rollout, config), compute_deltas(rollout.rewards, "loo_rewards"))
    assert group.after_epoch(rollout) is None
    calls = []

    class Recorder:
        def __init__(self, policy, config):
            calls.append((policy, config))

    ADVANTAGE_ESTIMATORS["recorder"] = Recorder
    try:
        built = build_estimator("recorder", "the policy", config)
    finally:
        del ADVANTAGE_ESTIMATORS["recorder"]
    assert isinstance(built, Recorder) and calls == [("the policy", config)]
    assert ADVANTAGE_ESTIMATORS["gae"] is GAEEstimator
    with pytest.raises(KeyError):
        build_estimator("critic", None, config)


def test_token_mask_type_error_names_the_type():
    with pytest.raises(TypeError, match="^mask must be a torch.Tensor or None, got list$"):
        compute_deltas(torch.ones(2, 2), "reinforce_pp_baseline", mask=[[1.0]])


def test_two_masked_tokens_are_enough_for_token_whitening():
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    mask = torch.tensor([[[1.0, 0.0], [0.0, 0.0]], [[0.0, 0.0], [1.0, 0.0]]])
    got = compute_deltas(rewards, "reinforce_pp_baseline", mask=mask)
    # tokens: +0.5 (response 0) and +0.5 (response 3): std 0, floored at 1e-3
    assert torch.isfinite(got).all() and got[0, 0] == got[1, 1]
