"""Each notebook family's check (pgrl_helpers.claims) passes on the package and fails on a bug.

Notebooks 01-03: wrong sign of the REINFORCE loss; token weights that leave out the token's own
reward, keep only the past rewards, or put the return on the last token only (notebook 03). 04: old log-probs not detached. 05: KL
estimator of the wrong direction or sign; a k3 whose clamp hides a real negative value. 06:
deltas over the wrong axis, a biased (population) std, a mean that includes other prompts.
"""

import pytest
import torch

from pgrl_helpers.advantages import DELTA_MODES, compute_deltas
from pgrl_helpers.claims import (
    check_deltas,
    check_k3_round_off,
    check_kl_estimator,
    check_policy_gradient,
    check_ratio_gradient,
    check_reward_to_go,
)
from pgrl_helpers.exact import reward_to_go
from pgrl_helpers.kl import kl_k1, kl_k3, kl_k3_unclamped
from pgrl_helpers.models import LectureModel


def reinforce(log_probs, rewards):
    return -log_probs * rewards


@pytest.fixture(scope="module")
def small_policy():
    model = LectureModel(3, embedding_dim=4, prompt_length=3, response_length=3, seed=1)
    return model, torch.tensor([[1, 0, 2], [2, 0, 1]])


def test_policy_gradient_check_passes_and_catches_a_wrong_sign(small_policy):
    model, prompts = small_policy
    assert check_policy_gradient(reinforce, model, prompts, "sort_distance_reward") < 1e-5
    with pytest.raises(AssertionError, match="-grad E"):
        check_policy_gradient(lambda lp, r: lp * r, model, prompts, "sort_distance_reward")
    with pytest.raises(AssertionError, match="-grad E"):  # pi where log pi belongs
        check_policy_gradient(lambda lp, r: -lp.exp() * r, model, prompts, "sort_distance_reward")


def test_ratio_check_passes_and_catches_a_missing_detach():
    assert check_ratio_gradient(lambda lp: lp.detach()) < 1e-9
    with pytest.raises(AssertionError, match="ratio loss gradient"):
        check_ratio_gradient(lambda lp: lp)  # the freeze pitfall: gradient exactly 0


def test_kl_check_passes_and_catches_wrong_direction_and_sign():
    assert check_kl_estimator(kl_k1) < 1e-9
    assert check_kl_estimator(kl_k3) < 1e-9
    with pytest.raises(AssertionError, match="KL"):
        check_kl_estimator(lambda lp, ref: kl_k3(ref, lp))  # arguments swapped
    with pytest.raises(AssertionError, match="KL"):
        check_kl_estimator(lambda lp, ref: -kl_k1(lp, ref))  # wrong sign
    with pytest.raises(AssertionError, match="KL"):
        check_kl_estimator(lambda lp, ref: 0.5 * (ref - lp) ** 2)  # k2 is biased


def test_k3_round_off_check_passes_and_catches_a_clamp_hiding_a_bug():
    lowest, change = check_k3_round_off(kl_k3_unclamped, kl_k3)
    assert lowest > -1e-6 and change <= 1e-6
    buggy_raw = lambda lp, ref: torch.exp(ref - lp) - 1 + (ref - lp)  # noqa: E731 (sign of log)
    with pytest.raises(AssertionError, match="unclamped k3"):
        check_k3_round_off(buggy_raw, lambda lp, ref: buggy_raw(lp, ref).clamp_min(0))


def test_delta_check_passes_and_catches_axis_std_and_mean_bugs():
    g = torch.Generator().manual_seed(0)
    rewards = torch.randint(0, 4, (5, 8), generator=g).float()
    rewards[2] = 1.0  # a tied group
    diffs = check_deltas(compute_deltas, rewards, DELTA_MODES)
    assert max(diffs.values()) < 1e-5

    def wrong_axis(r, mode):
        return r - r.mean(dim=0, keepdim=True) if mode == "centered_rewards" else None

    def biased_std(r, mode):
        c = r - r.mean(-1, keepdim=True)
        return c / (r.std(-1, keepdim=True, unbiased=False).clamp_min(1e-3) + 1e-6)

    def batch_mean(r, mode):
        return r - r.mean()

    with pytest.raises(AssertionError, match="centered_rewards"):
        check_deltas(wrong_axis, rewards, ["centered_rewards"])
    with pytest.raises(AssertionError, match="normalized_rewards"):
        check_deltas(biased_std, rewards, ["normalized_rewards"])
    with pytest.raises(AssertionError, match="centered_rewards"):
        check_deltas(batch_mean, rewards, ["centered_rewards"])


def test_reward_to_go_check_passes_and_catches_wrong_token_weights():
    full_variance, rtg_variance = check_reward_to_go(reward_to_go)
    assert rtg_variance < full_variance  # measured on this policy (notebook 03 prints 0.59x)
    full = check_reward_to_go(lambda r: r.sum(-1, keepdim=True).expand_as(r))
    assert full == (full_variance, full_variance)
    planted = {
        "strict future": lambda r: reward_to_go(r) - r,  # the token's own reward left out
        "past only": lambda r: r.cumsum(-1),  # the rewards up to the token, not from it
        "last token only": lambda r: torch.cat(
            [torch.zeros_like(r[:, :-1]), r.sum(-1, keepdim=True)], dim=-1
        ),
    }
    for weights in planted.values():
        with pytest.raises(AssertionError, match="differs from grad E"):
            check_reward_to_go(weights)
        with pytest.raises(AssertionError, match="differs from grad E"):
            check_reward_to_go(weights, seed=3)
    with pytest.raises(ValueError, match="float\\[N, pos\\]"):
        check_reward_to_go(lambda r: r.sum(-1))
