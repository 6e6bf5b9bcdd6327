"""Exact enumeration: probabilities, exact gradients, and the Monte Carlo estimates they check."""

import pytest
import torch

from pgrl_helpers.exact import (
    BASELINES,
    all_responses,
    enumerated_rewards,
    exact_expected_reward,
    exact_policy_gradient,
    flat_grad,
    num_params,
    reinforce_gradient_estimate,
    response_log_probs,
    response_probs,
    reward_to_go,
    score_functions,
    tabular_token_log_probs,
    tabular_token_scores,
)
from pgrl_helpers.models import LectureModel
from pgrl_helpers.sampling import compute_log_probs

REWARD = "sort_inclusion_ordering_reward"


@pytest.fixture
def setup():
    model = LectureModel(3, 4, 3, 3, seed=0).double()
    prompts = torch.tensor([[1, 0, 2], [2, 2, 0], [0, 1, 1]])
    return model, prompts


def test_all_responses_enumerates_each_response_once():
    responses = all_responses(3, 4)
    assert responses.shape == (81, 4)
    assert responses.dtype == torch.int64
    assert len({tuple(r) for r in responses.tolist()}) == 81
    assert responses[0].tolist() == [0, 0, 0, 0] and responses[-1].tolist() == [2, 2, 2, 2]
    assert responses[5].tolist() == [0, 0, 1, 2]  # 5 = 1*3 + 2, lexicographic order


def test_all_responses_refuses_huge_enumerations():
    with pytest.raises(ValueError, match="10\\*\\*8"):
        all_responses(10, 8)
    for bad in [(0, 3), (3, 0), (3.0, 3), (True, 3)]:
        with pytest.raises(ValueError, match="positive int"):
            all_responses(*bad)


def test_enumerated_probabilities_sum_to_one_and_match_sampling_log_probs(setup):
    model, prompts = setup
    probs = response_probs(model, prompts)
    assert probs.shape == (3, 27)
    torch.testing.assert_close(probs.sum(dim=-1), torch.ones(3, dtype=probs.dtype))
    responses = all_responses(3, 3)
    per_token = compute_log_probs(model, prompts, responses.expand(3, 27, 3))
    torch.testing.assert_close(response_log_probs(model, prompts), per_token.sum(-1))


def test_exact_gradient_matches_finite_differences(setup):
    model, prompts = setup
    grad = exact_policy_gradient(model, prompts, REWARD)
    assert grad.shape == (num_params(model),)
    direction = torch.randn(num_params(model), generator=torch.Generator().manual_seed(1))
    direction = direction.double() / direction.norm()
    params = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    step = 1e-5
    values = []
    with torch.no_grad():
        for sign in (1, -1):
            torch.nn.utils.vector_to_parameters(
                params + sign * step * direction, model.parameters()
            )
            values.append(exact_expected_reward(model, prompts, REWARD).mean())
        torch.nn.utils.vector_to_parameters(params, model.parameters())
    finite_difference = (values[0] - values[1]) / (2 * step)
    torch.testing.assert_close(grad @ direction, finite_difference, rtol=1e-6, atol=1e-8)


def test_score_function_has_zero_mean_so_baselines_add_no_bias(setup):
    """E_a[b(s) grad log pi(a|s)] = b(s) grad sum_a pi(a|s) = 0, exactly by enumeration."""
    model, prompts = setup
    scores = score_functions(model, prompts)  # [batch, N, P]
    assert scores.shape == (3, 27, num_params(model))
    probs = response_probs(model, prompts).detach()
    baseline = torch.tensor([7.0, -3.0, 100.0], dtype=torch.float64)
    bias = torch.einsum("bn,bnp,b->bp", probs, scores, baseline)
    assert bias.abs().max() < 1e-10
    # and the score table reproduces the exact gradient: E[grad log pi * R]
    rewards = enumerated_rewards(prompts, 3, 3, REWARD).double()
    via_scores = torch.einsum("bn,bnp,bn->p", probs, scores, rewards) / 3
    torch.testing.assert_close(via_scores, exact_policy_gradient(model, prompts, REWARD))


def test_reinforce_estimate_converges_to_exact_gradient(setup):
    model, prompts = setup
    exact = exact_policy_gradient(model, prompts, REWARD)

    def rel_error(num_samples, baseline):
        generator = torch.Generator().manual_seed(0)
        estimate = reinforce_gradient_estimate(
            model, prompts, num_samples, REWARD, baseline=baseline, generator=generator
        )
        return ((estimate - exact).norm() / exact.norm()).item()

    for baseline in BASELINES:
        small, large = rel_error(20, baseline), rel_error(50_000, baseline)
        assert large < 0.1, (baseline, large)
        assert large < small, (baseline, small, large)


def test_group_mean_is_rloo_scaled_by_g_minus_one_over_g(setup):
    model, prompts = setup
    group = 5
    estimates = {
        baseline: reinforce_gradient_estimate(
            model, prompts, group, REWARD, baseline, torch.Generator().manual_seed(3)
        )
        for baseline in ("group_mean", "leave_one_out")
    }
    torch.testing.assert_close(
        estimates["group_mean"], estimates["leave_one_out"] * (group - 1) / group
    )


def test_constant_and_per_prompt_baselines(setup):
    model, prompts = setup
    a = reinforce_gradient_estimate(
        model, prompts, 8, REWARD, 2.0, torch.Generator().manual_seed(4)
    )
    b = reinforce_gradient_estimate(
        model, prompts, 8, REWARD, torch.full((3,), 2.0), torch.Generator().manual_seed(4)
    )
    torch.testing.assert_close(a, b)


def test_bad_inputs_raise(setup):
    model, prompts = setup
    with pytest.raises(ValueError, match="valid names are: none, value"):
        reinforce_gradient_estimate(model, prompts, 4, REWARD, baseline="mean")
    with pytest.raises(ValueError, match="float\\[batch\\]"):
        reinforce_gradient_estimate(model, prompts, 4, REWARD, baseline=torch.zeros(2))
    with pytest.raises(TypeError, match="baseline must be"):
        reinforce_gradient_estimate(model, prompts, 4, REWARD, baseline=[1.0])
    with pytest.raises(ValueError, match="at least 2 samples"):
        reinforce_gradient_estimate(model, prompts, 1, REWARD, baseline="leave_one_out")
    with pytest.raises(ValueError, match="num_samples"):
        reinforce_gradient_estimate(model, prompts, 0, REWARD)
    with pytest.raises(ValueError, match="shape \\[batch, prompt_pos\\]"):
        exact_expected_reward(model, prompts[0], REWARD)
    with pytest.raises(TypeError, match="nn.Module"):
        response_probs("model", prompts)
    with pytest.raises(ValueError, match="scalar"):
        flat_grad(torch.zeros(2), model)
    with pytest.raises(ValueError, match="more than max_responses"):
        response_probs(LectureModel(20, 2, 3, 5, seed=0), prompts)
    with pytest.raises(ValueError, match="score table"):
        score_functions(LectureModel(9, 32, 3, 5, seed=0), prompts)


def test_group_estimate_moments_exact_bias_and_variance(setup):
    from pgrl_helpers.exact import group_estimate_moments

    model, prompts = setup
    prompt = prompts[:1]
    probs = response_probs(model, prompt).detach()[0]
    scores = score_functions(model, prompt)[0]
    rewards = enumerated_rewards(prompt, 3, 3, REWARD)[0].double()
    exact = exact_policy_gradient(model, prompt, REWARD)
    group = 3
    mean_none, var_none = group_estimate_moments(probs, scores, rewards, group, "none")
    single = scores * rewards[:, None]
    single_var = probs @ single**2 - (probs @ single) ** 2
    torch.testing.assert_close(mean_none, exact)
    torch.testing.assert_close(var_none, single_var / group)  # i.i.d. average: variance / G
    mean_loo, var_loo = group_estimate_moments(probs, scores, rewards, group, "leave_one_out")
    mean_grpo, var_grpo = group_estimate_moments(probs, scores, rewards, group, "group_mean")
    torch.testing.assert_close(mean_loo, exact)  # RLOO is unbiased
    torch.testing.assert_close(mean_grpo, exact * (group - 1) / group)  # GRPO's mean: (G-1)/G
    torch.testing.assert_close(var_grpo, var_loo * ((group - 1) / group) ** 2)
    mean_const, _ = group_estimate_moments(probs, scores, rewards, group, 5.0)
    torch.testing.assert_close(mean_const, exact)  # a constant baseline adds no bias
    with pytest.raises(ValueError, match="more than max_groups"):
        group_estimate_moments(probs, scores, rewards, 6)
    with pytest.raises(ValueError, match="share N"):
        group_estimate_moments(probs[:5], scores, rewards, 2)
    with pytest.raises(ValueError, match="valid names are: none, group_mean"):
        group_estimate_moments(probs, scores, rewards, 2, "value")
    with pytest.raises(TypeError, match="name or a number"):
        group_estimate_moments(probs, scores, rewards, 2, None)


# ---- the tabular autoregressive policy of notebook 03, section 6


def _tabular(seed=0):
    logits = torch.randn(
        3, 4, 3, generator=torch.Generator().manual_seed(seed), dtype=torch.float64
    )
    return logits, all_responses(3, 3)


def test_tabular_policy_is_a_distribution_that_conditions_on_the_previous_token():
    logits, responses = _tabular()
    token_log_probs = tabular_token_log_probs(logits, responses)  # [27, pos]
    assert token_log_probs.shape == (27, 3)
    torch.testing.assert_close(
        token_log_probs.sum(-1).exp().sum(), torch.tensor(1.0, dtype=torch.float64)
    )
    # position 0 reads the start row; position t the row of token t - 1
    table = torch.log_softmax(logits, -1)
    y = torch.tensor([[2, 0, 1]])
    expected = torch.stack([table[0, 3, 2], table[1, 2, 0], table[2, 0, 1]])
    torch.testing.assert_close(tabular_token_log_probs(logits, y)[0], expected)
    # changing the first token changes the second token's probability (autoregressive)
    other = tabular_token_log_probs(logits, torch.tensor([[1, 0, 1]]))[0]
    assert other[1] != tabular_token_log_probs(logits, y)[0, 1]


def test_tabular_token_scores_sum_to_the_response_score():
    logits, responses = _tabular(1)
    scores = tabular_token_scores(logits, responses)  # [27, pos, P]
    assert scores.shape == (27, 3, logits.numel())
    theta = logits.clone().requires_grad_(True)
    for y in responses[[0, 5, 26]]:
        (grad,) = torch.autograd.grad(tabular_token_log_probs(theta, y[None]).sum(), theta)
        index = int((responses == y).all(-1).nonzero())
        torch.testing.assert_close(scores[index].sum(0), grad.flatten())
        # token t's score is the gradient of its own log-prob only
        (grad_last,) = torch.autograd.grad(tabular_token_log_probs(theta, y[None])[0, -1], theta)
        torch.testing.assert_close(scores[index, -1], grad_last.flatten())


def test_reward_to_go():
    rewards = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 5.0]])
    torch.testing.assert_close(
        reward_to_go(rewards), torch.tensor([[6.0, 5.0, 3.0], [5.0, 5.0, 5.0]])
    )
    torch.testing.assert_close(
        reward_to_go(torch.ones(2, 2, 4))[0, 0], torch.tensor([4.0, 3.0, 2.0, 1.0])
    )
    with pytest.raises(ValueError, match="scalar"):
        reward_to_go(torch.tensor(1.0))


def test_tabular_bad_inputs_raise():
    logits, responses = _tabular()
    with pytest.raises(ValueError, match=r"\[pos, vocab \+ 1, vocab\]"):
        tabular_token_log_probs(logits[:, :3], responses)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tabular_token_log_probs(logits, responses + 1)
    with pytest.raises(TypeError, match="integer token ids"):
        tabular_token_log_probs(logits, responses.double())
    with pytest.raises(ValueError, match=r"\[N, pos\]"):
        tabular_token_log_probs(logits, responses[0])
