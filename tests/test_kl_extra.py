"""Closed-form categorical KL, exact per-token policy KL, and k3's exact non-negativity."""

import copy

import pytest
import torch

from pgrl_helpers.kl import categorical_kl, compute_kl_penalty, kl_k1, kl_k3, policy_token_kl
from pgrl_helpers.models import LectureModel
from pgrl_helpers.sampling import compute_log_probs, sample_responses
from pgrl_helpers.sort_task import lecture_prompts


def test_categorical_kl_matches_the_definition_and_is_asymmetric():
    g = torch.Generator().manual_seed(0)
    p_logits, q_logits = torch.randn(2, 4, 7, generator=g)
    log_p, log_q = p_logits.log_softmax(-1), q_logits.log_softmax(-1)
    by_hand = (log_p.exp() * (log_p - log_q)).sum(-1)
    kl = categorical_kl(p_logits, q_logits)
    assert kl.shape == (4,)
    torch.testing.assert_close(kl, by_hand)
    assert (kl > 0).all()
    assert (categorical_kl(q_logits, p_logits) - kl).abs().max() > 1e-3
    # invariant to shifting logits (only the softmax matters); zero for equal inputs
    torch.testing.assert_close(categorical_kl(p_logits + 3.0, q_logits), kl)
    assert torch.equal(categorical_kl(p_logits, p_logits), torch.zeros(4))


def test_categorical_kl_rejects_bad_inputs():
    with pytest.raises(ValueError, match=r"same shape.*\[3\].*\[4\]"):
        categorical_kl(torch.zeros(3), torch.zeros(4))
    with pytest.raises(ValueError, match="non-finite"):
        categorical_kl(torch.tensor([0.0, float("-inf")]), torch.zeros(2))
    with pytest.raises(ValueError, match="vocab axis"):
        categorical_kl(torch.tensor(0.0), torch.tensor(0.0))


def test_k3_is_never_negative_even_for_tiny_log_ratios():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(1000, 50, 3, generator=g)
    b = a + 1e-4 * torch.randn(1000, 50, 3, generator=g)  # round-off regime of exp(u) - 1 - u
    assert (kl_k3(a, b) >= 0).all()
    assert (kl_k3(a, torch.randn(1000, 50, 3, generator=g)) >= 0).all()


def test_k3_gradient_is_one_minus_ratio_times_grad_log_p():
    g = torch.Generator().manual_seed(1)
    log_p = torch.randn(2, 3, 4, generator=g).requires_grad_(True)
    log_q = torch.randn(2, 3, 4, generator=g)
    kl_k3(log_p, log_q).sum().backward()
    torch.testing.assert_close(log_p.grad, 1 - torch.exp(log_q - log_p.detach()))


def test_policy_token_kl_is_zero_for_a_copy_and_matches_the_estimators():
    prompts = lecture_prompts()
    policy = LectureModel(5, 4, 3, 3, seed=0)
    ref = copy.deepcopy(policy).requires_grad_(False)
    assert torch.equal(policy_token_kl(prompts, policy, ref), torch.zeros(3, 3))
    with torch.no_grad():
        for param in policy.parameters():
            param.add_(0.05 * torch.randn(param.shape, generator=torch.Generator().manual_seed(2)))
        exact = policy_token_kl(prompts, policy, ref)
        assert exact.shape == (3, 3) and (exact > 0).all()
        responses = sample_responses(
            policy, prompts, 20000, generator=torch.Generator().manual_seed(3)
        )
        log_probs = compute_log_probs(policy, prompts, responses)
        ref_log_probs = compute_log_probs(ref, prompts, responses)
    target = exact.sum(-1).mean()
    for estimator in (kl_k1, kl_k3):
        per_response = estimator(log_probs, ref_log_probs).sum(-1)  # [batch, trial]
        se = (per_response.var(dim=1) / per_response.shape[1]).sum().sqrt() / 3
        assert abs(per_response.mean() - target) < 4 * se + 1e-6
    k3_penalty = compute_kl_penalty(log_probs, ref_log_probs, "k3")
    assert abs(k3_penalty - kl_k3(log_probs, ref_log_probs).sum(-1).mean()) < 1e-6


def test_policy_token_kl_rejects_bad_prompts():
    model = LectureModel(5, 4, 3, 3, seed=0)
    with pytest.raises(ValueError, match=r"prompts must have shape \[batch, prompt_pos\]"):
        policy_token_kl(torch.zeros(3, dtype=torch.long), model, model)


# --------------------------------------------------------------------------------------
# k3 without the clamp, and the bias-corrected k3 (DeepSeek-V3.2, TRL use_bias_correction_kl)
# --------------------------------------------------------------------------------------


def test_unclamped_k3_is_non_negative_up_to_round_off_and_the_clamp_removes_only_that():
    from pgrl_helpers.kl import kl_k3_unclamped

    g = torch.Generator().manual_seed(0)
    a = torch.randn(200_000, generator=g)
    # log-ratios from large down to tiny (where exp(u) - 1 - u suffers most from round-off)
    b = a + torch.randn(200_000, generator=g) * torch.logspace(-8, 1, 200_000)
    raw = kl_k3_unclamped(a, b)
    clamped = kl_k3(a, b)
    assert raw.min() > -1e-6, "t - 1 - log t >= 0 must hold on the raw values, up to round-off"
    assert (clamped - raw).abs().max() <= 1e-6, "the clamp may only remove round-off"
    # in float64 the raw values are >= 0 to ~1e-16: the inequality, not the clamp, makes k3 >= 0
    assert kl_k3_unclamped(a.double(), b.double()).min() > -1e-15


def test_bias_corrected_k3_gradient_is_grad_of_reverse_kl():
    from pgrl_helpers.kl import kl_k3_bias_corrected

    g = torch.Generator().manual_seed(5)
    theta0 = torch.randn(6, generator=g, dtype=torch.float64)
    ref_logits = theta0 + 1.5 * torch.randn(6, generator=g, dtype=torch.float64)
    log_ref = torch.log_softmax(ref_logits, -1)
    for move in (0.0, 0.4):  # pi_old == pi (first inner step) and pi_old != pi (later steps)
        old_logits = theta0 - move * torch.randn(6, generator=g, dtype=torch.float64)
        log_old = torch.log_softmax(old_logits, -1)

        def grad_of(objective):
            theta = theta0.clone().requires_grad_(True)
            objective(theta).backward()
            return theta.grad

        def expected_loss(theta, corrected: bool, log_old=log_old):
            # E_{y ~ pi_old}[term(y)], by enumeration; pi_old's weights carry no gradient
            log_pi = torch.log_softmax(theta, -1)
            if corrected:
                term = kl_k3_bias_corrected(log_pi, log_old, log_ref)
                return (log_old.exp() * term).sum()
            return (log_pi.exp().detach() * kl_k3(log_pi, log_ref)).sum()

        reverse = grad_of(lambda th: categorical_kl(th, ref_logits))  # grad KL(pi || pi_ref)
        forward = grad_of(lambda th: categorical_kl(ref_logits, th))  # grad KL(pi_ref || pi)
        assert (reverse - forward).abs().max() > 0.05, "the test needs distinct directions"
        corrected = grad_of(lambda th: expected_loss(th, True))
        torch.testing.assert_close(corrected, reverse, rtol=1e-9, atol=1e-12)
        if move == 0.0:
            plain = grad_of(lambda th: expected_loss(th, False))
            torch.testing.assert_close(plain, forward, rtol=1e-9, atol=1e-12)


def test_bias_corrected_k3_value_and_bad_inputs():
    from pgrl_helpers.kl import kl_k3_bias_corrected

    lp = torch.log_softmax(torch.randn(2, 3, 4), -1)
    ref = torch.log_softmax(torch.randn(2, 3, 4), -1)
    # at pi_old == pi the ratio is 1: the value equals plain k3
    torch.testing.assert_close(kl_k3_bias_corrected(lp, lp, ref), kl_k3(lp, ref))
    with pytest.raises(ValueError, match="old_log_probs requires grad"):
        kl_k3_bias_corrected(lp, lp.clone().requires_grad_(True), ref)
    with pytest.raises(ValueError, match="old_log_probs"):
        kl_k3_bias_corrected(lp, lp[:, :2], ref)
