"""Exact baseline moments of notebook 03 (pgrl_helpers.baselines): unbiased, b* minimises the
variance, RLOO vs GRPO's group mean.
"""

from __future__ import annotations

import pytest
import torch

from pgrl_helpers.baselines import estimate_moments, optimal_baselines
from pgrl_helpers.exact import (
    enumerated_rewards,
    exact_policy_gradient,
    response_probs,
    score_functions,
)
from pgrl_helpers.models import LectureModel


@pytest.fixture(scope="module")
def tables():
    model = LectureModel(3, embedding_dim=4, prompt_length=3, response_length=3, seed=1).double()
    prompts = torch.tensor([[1, 0, 2], [2, 0, 1]])
    probs = response_probs(model, prompts).detach()
    scores = score_functions(model, prompts)
    rewards = enumerated_rewards(prompts, 3, 3, "sort_distance_reward").double()
    exact = exact_policy_gradient(model, prompts, "sort_distance_reward")
    return probs, scores, rewards, exact


def test_baselines_are_unbiased_and_b_star_minimises_the_variance(tables):
    probs, scores, rewards, exact = tables
    best = optimal_baselines(probs, scores, rewards)
    mean0, var0 = estimate_moments(probs, scores, rewards, torch.tensor(0.0).double(), 3)
    torch.testing.assert_close(mean0, exact)
    _, var_star = estimate_moments(probs, scores, rewards, best["b_star"][None, None, :], 3)
    for c in torch.linspace(-1, 4, 11, dtype=torch.float64):
        mean_c, var_c = estimate_moments(probs, scores, rewards, c, 3)
        torch.testing.assert_close(mean_c, exact)
        assert (var_star <= var_c + 1e-12).all()
    # Monte Carlo-free sanity: variance scales as 1/G
    _, var6 = estimate_moments(probs, scores, rewards, torch.tensor(0.0).double(), 6)
    torch.testing.assert_close(var6 * 2, var0)
    with pytest.raises(ValueError, match="group_size"):
        estimate_moments(probs, scores, rewards, 0.0, 0)


def test_group_moments_rloo_unbiased_and_grpo_shrunk_by_g_minus_1_over_g(tables):
    from pgrl_helpers.baselines import group_moments

    probs, scores, rewards, exact = tables
    mean_loo, var_loo = group_moments(probs, scores, rewards, 2, "leave_one_out")
    mean_grpo, var_grpo = group_moments(probs, scores, rewards, 2, "group_mean")
    torch.testing.assert_close(mean_loo, exact)
    torch.testing.assert_close(mean_grpo, exact / 2)
    torch.testing.assert_close(var_grpo, var_loo / 4)
