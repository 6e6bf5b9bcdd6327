"""KL estimators: sign, zero at equality, expectations by enumeration, penalty reduction."""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import pytest
import torch

from pgrl_helpers._validate import MAX_LOG_RATIO
from pgrl_helpers.config import TrainConfig
from pgrl_helpers.kl import (
    KL_ESTIMATORS,
    AdaptiveKLController,
    FixedKLController,
    build_kl_controller,
    categorical_kl,
    compute_kl_penalty,
    kl_estimate,
    kl_k1,
    kl_k2,
    kl_k3,
    kl_k3_bias_corrected,
    kl_per_response,
    policy_token_kl,
)
from pgrl_helpers.masking import masked_normalize
from pgrl_helpers.models import LectureModel
from pgrl_helpers.sampling import compute_log_probs, sample_responses
from pgrl_helpers.sort_task import lecture_prompts
from pgrl_helpers.training import run_policy_gradient

#: Other test files whose tests also pin pgrl_helpers/kl.py (tests/mutation.py).
MUTATION_ALSO = ("integration/test_framework_agreement.py", "test_config.py")


def test_k3_is_non_negative_and_zero_only_at_equality():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(4, 5, 6, generator=g)
    b = torch.randn(4, 5, 6, generator=g)
    assert (kl_k3(a, b) >= 0).all()
    assert torch.all(kl_k3(a, a) == 0)
    assert torch.all(kl_k3(a, b)[a != b] > 0)
    assert (kl_k2(a, b) >= 0).all()
    assert (kl_k1(a, b) < 0).any()  # k1 can be negative per sample


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_k1_and_k3_expectations_equal_the_closed_form_kl(seed):
    g = torch.Generator().manual_seed(seed)
    log_p = torch.log_softmax(torch.randn(7, generator=g), -1)
    log_q = torch.log_softmax(torch.randn(7, generator=g), -1)
    p = log_p.exp()
    closed_form = (p * (log_p - log_q)).sum()  # KL(p || q), samples from p
    for name in ("k1", "k3"):
        expectation = (p * kl_estimate(log_p, log_q, name)).sum()  # enumeration, no sampling
        torch.testing.assert_close(expectation, closed_form, rtol=1e-5, atol=1e-6)
    # k2 is biased: its expectation differs from the KL for these far-apart distributions
    assert abs((p * kl_k2(log_p, log_q)).sum() - closed_form) > 1e-3
    # and the direction matters: KL(q || p) is a different number
    reverse = (log_q.exp() * (log_q - log_p)).sum()
    assert abs(reverse - closed_form) > 1e-3


def test_penalty_sums_positions_and_averages_the_rest():
    g = torch.Generator().manual_seed(3)
    a = torch.randn(2, 3, 4, generator=g)
    b = torch.randn(2, 3, 4, generator=g)
    expected = kl_k3(a, b).sum(-1).mean()
    torch.testing.assert_close(compute_kl_penalty(a, b), expected)
    torch.testing.assert_close(compute_kl_penalty(a, b, "k1"), kl_k1(a, b).sum(-1).mean())
    assert compute_kl_penalty(a, a) == 0


def test_extreme_values_stay_finite():
    a = torch.full((1, 1, 2), -1e4, requires_grad=True)
    b = torch.zeros(1, 1, 2)
    for name in KL_ESTIMATORS:
        value = compute_kl_penalty(a, b, name)
        (grad,) = torch.autograd.grad(value, a)
        assert torch.isfinite(value) and torch.isfinite(grad).all(), name


def test_bad_inputs():
    a = torch.zeros(2, 3, 4)
    with pytest.raises(ValueError, match="unknown KL estimator 'k4'.*k1, k2, k3"):
        compute_kl_penalty(a, a, "k4")
    with pytest.raises(ValueError, match=r"same shape.*\[2, 3, 4\] and \[2, 3, 5\]"):
        compute_kl_penalty(a, torch.zeros(2, 3, 5))
    with pytest.raises(ValueError, match=r"batch, trial, pos"):
        compute_kl_penalty(a[0], a[0])
    with pytest.raises(ValueError, match="ref_log_probs contains"):
        compute_kl_penalty(a, torch.full((2, 3, 4), float("nan")))


# --- exact KL ---
# Closed-form categorical KL, exact per-token policy KL, and k3's exact non-negativity.


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


# --- the adaptive KL controller (Ziegler et al. 2019, arXiv 1909.08593) ---


def test_adaptive_kl_controller_follows_ziegler_et_al():
    controller = AdaptiveKLController(0.1, target=6.0, horizon=10000)
    n = 64
    expected = 0.1
    for kl, error in ((12.0, 0.2), (3.0, -0.2), (6.6, 0.1), (6.0, 0.0), (5.4, -0.1)):
        expected *= 1 + error * n / 10000  # e_t = clip(KL/target - 1, -0.2, 0.2)
        assert controller.update(kl, n) == pytest.approx(expected, rel=1e-12)
        assert controller.value == pytest.approx(expected, rel=1e-12)
    fixed = FixedKLController(0.3)
    assert fixed.update(100.0, 5) == 0.3 and fixed.value == 0.3
    for args, match in (
        ((0.0, 6.0, 10), "^init_kl_coef must be a positive finite number, got 0.0$"),
        ((0.1, -1.0, 10), "^kl_target must be a positive finite number, got -1.0$"),
        ((0.1, math.inf, 10), "^kl_target must be a positive finite number, got inf$"),
        ((0.1, 6.0, 0), "^kl_horizon must be a positive int"),
    ):
        with pytest.raises(ValueError, match=match):
            AdaptiveKLController(*args)
    with pytest.raises(ValueError, match="^current_kl must be a finite number, got nan$"):
        controller.update(math.nan, 1)
    with pytest.raises(ValueError, match="^n_steps must be a positive int"):
        controller.update(1.0, 0)


def test_build_kl_controller():
    assert isinstance(build_kl_controller(TrainConfig(kl_coef=0.2)), FixedKLController)
    assert build_kl_controller(TrainConfig(kl_coef=0.2)).value == 0.2
    in_reward = SimpleNamespace(kl_loss_coef=0.0, kl_coef=0.2, kl_target=None)
    assert build_kl_controller(in_reward).value == 0.0
    adaptive = build_kl_controller(TrainConfig(kl_coef=0.2, kl_target=1.0, kl_horizon=50))
    assert isinstance(adaptive, AdaptiveKLController)
    assert (adaptive.value, adaptive.target, adaptive.horizon) == (0.2, 1.0, 50)


def test_penalty_is_beta_times_kl_and_leaves_beta_alone():
    controller = AdaptiveKLController(0.5, target=1.0, horizon=10)
    assert controller.penalty(torch.tensor(3.0)).item() == 1.5  # beta_t = 0.5 times KL 3
    assert controller.value == 0.5  # only update() moves beta
    fixed = FixedKLController(0.25)
    assert fixed.penalty(torch.tensor(2.0)).item() == 0.5 and fixed.value == 0.25


def test_the_loop_adapts_beta_once_per_batch_from_its_first_steps_kl(monkeypatch):
    """R1 (code review r4): lm-human-preferences updates beta once per rollout batch with
    n_steps = the batch size; the loop updated it at every optimizer step (here 4x per batch).
    A spy logs each update and the beta of each penalty."""
    updates, betas = [], []
    real_update, real_penalty = AdaptiveKLController.update, AdaptiveKLController.penalty

    def update(self, current_kl, n_steps):
        updates.append((current_kl, n_steps))
        return real_update(self, current_kl, n_steps)

    def penalty(self, kl, *args):
        betas.append(self.value)
        return real_penalty(self, kl, *args)

    monkeypatch.setattr(AdaptiveKLController, "update", update)
    monkeypatch.setattr(AdaptiveKLController, "penalty", penalty)
    epochs, inner, horizon, target, beta = 3, 4, 60, 1e-3, 0.1
    config = TrainConfig(
        kl_coef=beta, kl_target=target, kl_horizon=horizon, num_epochs=epochs,
        num_steps_per_epoch=inner, eval_every=epochs,
    )  # fmt: skip
    steps = run_policy_gradient(config).steps()
    first_kl = [s["kl"] for s in steps if s["inner_step"] == 0]
    assert updates == [(kl, 3 * 10) for kl in first_kl]  # 3 lecture prompts x G = 10
    expected = []
    for kl in first_kl:  # Ziegler et al.: beta_{t+1} = beta_t (1 + clip(KL/target - 1) n / H)
        expected += [beta] * inner
        beta *= 1 + min(max(kl / target - 1, -0.2), 0.2) * 30 / horizon
    assert betas == pytest.approx(expected, rel=1e-12)
    assert len(set(betas)) == epochs  # beta moved after each batch, and only then


# --- mutants ---
# The cases mutation testing found unchecked (tests/MUTATION.md).
#
# k2's value pinned, the default estimator, the log-ratio clamp on both sides, and error
# messages that name the offending argument.


LOG_P = torch.tensor([[[-1.0, -2.0, -0.5]]])


LOG_Q = torch.tensor([[[-2.0, -0.5, -0.5]]])  # log r = log q - log p = [-1, 1.5, 0]


def test_each_estimator_by_hand():
    log_r = [-1.0, 1.5, 0.0]
    torch.testing.assert_close(kl_k1(LOG_P, LOG_Q)[0, 0], torch.tensor([1.0, -1.5, 0.0]))
    torch.testing.assert_close(kl_k2(LOG_P, LOG_Q)[0, 0], torch.tensor([0.5, 1.125, 0.0]))
    k3 = [math.exp(u) - 1 - u for u in log_r]
    torch.testing.assert_close(kl_k3(LOG_P, LOG_Q)[0, 0], torch.tensor(k3))


def test_default_estimator_is_k3():
    assert torch.equal(kl_estimate(LOG_P, LOG_Q), kl_k3(LOG_P, LOG_Q))
    assert torch.equal(compute_kl_penalty(LOG_P, LOG_Q), kl_k3(LOG_P, LOG_Q).sum(-1).mean())
    assert torch.equal(kl_estimate(LOG_P, LOG_Q, "k2"), kl_k2(LOG_P, LOG_Q))


def test_k1_k2_are_not_capped_and_k3_clamps_its_log_ratio_on_both_sides():
    # log r = ref - log_probs = -100 and +100: k1 and k2 take them as they are (no exp),
    # k3 clamps to -+MAX_LOG_RATIO before exp, like compute_ratio
    log_probs = torch.tensor([[[100.0, -100.0]]], requires_grad=True)
    ref = torch.zeros(1, 1, 2)
    torch.testing.assert_close(kl_k1(log_probs, ref)[0, 0], torch.tensor([100.0, -100.0]))
    torch.testing.assert_close(kl_k2(log_probs, ref)[0, 0], torch.tensor([5000.0, 5000.0]))
    (grad,) = torch.autograd.grad(kl_k2(log_probs, ref).sum(), log_probs)
    torch.testing.assert_close(grad[0, 0], torch.tensor([100.0, -100.0]))
    assert MAX_LOG_RATIO == 20.0
    k3 = kl_k3(log_probs, ref)[0, 0]
    torch.testing.assert_close(k3[0], torch.tensor(math.expm1(-20.0) + 20.0))
    assert torch.isfinite(k3).all()


def test_error_messages_name_the_argument():
    a = torch.zeros(1, 2, 3)
    with pytest.raises(ValueError, match="^log_probs and ref_log_probs must have the same shape"):
        kl_k1(a, torch.zeros(1, 2, 4))
    bad = a.clone()
    bad[0, 0, 0] = float("inf")
    with pytest.raises(ValueError, match="^log_probs contains 1 non-finite"):
        kl_k3(bad, a)
    with pytest.raises(ValueError, match="^ref_log_probs contains 1 non-finite"):
        kl_k3(a, bad)
    with pytest.raises(ValueError, match=r"^log_probs must have shape \[batch, trial, pos\] \("):
        compute_kl_penalty(a[0], a[0])


def test_categorical_kl_messages_name_the_argument():
    with pytest.raises(ValueError, match="^p_logits and q_logits must have the same shape"):
        categorical_kl(torch.zeros(3), torch.zeros(4))
    with pytest.raises(
        ValueError,
        match=r"^p_logits and q_logits need a vocab axis.*scalars",
    ):
        categorical_kl(torch.tensor(0.0), torch.tensor(0.0))
    bad = torch.tensor([0.0, float("nan")])
    with pytest.raises(ValueError, match="^p_logits contains 1 non-finite"):
        categorical_kl(bad, torch.zeros(2))
    with pytest.raises(ValueError, match="^q_logits contains 1 non-finite"):
        categorical_kl(torch.zeros(2), bad)


def test_policy_token_kl_names_the_model_whose_output_is_wrong():
    prompts = torch.zeros(2, 3, dtype=torch.long)

    def good(p):
        return torch.zeros(p.shape[0], p.shape[1], 5)

    def flat(p):  # forgot the vocab axis
        return torch.zeros(p.shape[0], p.shape[1])

    assert torch.equal(policy_token_kl(prompts, good, good), torch.zeros(2, 3))
    shape = r"must have shape \[batch, pos, vocab\] \(3 dims\)"
    with pytest.raises(ValueError, match=r"^model output \(logits\) " + shape):
        policy_token_kl(prompts, flat, good)
    with pytest.raises(ValueError, match=r"^ref_model output \(logits\) " + shape):
        policy_token_kl(prompts, good, flat)


def test_kl_k3_bias_corrected_value_clamp_and_messages():
    old = torch.zeros(1, 1, 3)
    log_probs = torch.tensor([[[-100.0, 0.0, 100.0]]])
    ref = torch.zeros(1, 1, 3)
    ratio = torch.exp(torch.tensor([-MAX_LOG_RATIO, 0.0, MAX_LOG_RATIO]))
    torch.testing.assert_close(
        kl_k3_bias_corrected(log_probs, old, ref)[0, 0], ratio * kl_k3(log_probs, ref)[0, 0]
    )
    with pytest.raises(ValueError, match="^log_probs and old_log_probs must have the same shape"):
        kl_k3_bias_corrected(log_probs, old[..., :2], ref)
    bad = old.clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="^old_log_probs contains 1 non-finite"):
        kl_k3_bias_corrected(log_probs, bad, ref)
    with pytest.raises(
        ValueError,
        match=r"^old_log_probs requires grad.*freeze pitfall",
    ):
        kl_k3_bias_corrected(log_probs, old.requires_grad_(True), ref)


def test_kl_per_response_masks_padding_and_is_exactly_the_penalty_when_all_real():
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(3, 4, 5, generator=g), torch.randn(3, 4, 5, generator=g)
    ones = torch.ones(3, 4, 5)
    for estimator in ("k1", "k2", "k3"):
        assert torch.equal(
            kl_per_response(a, b, estimator, ones), compute_kl_penalty(a, b, estimator)
        )
    assert not torch.equal(
        masked_normalize(kl_estimate(a, b, "k3"), ones, 12.0), compute_kl_penalty(a, b, "k3")
    )  # the general path sums in another order: the exact path is observable
    mask = ones.clone()
    mask[:, :, 3:] = 0
    expected = kl_estimate(a, b, "k1")[:, :, :3].sum() / 12
    got = kl_per_response(a, b, "k1", mask)
    torch.testing.assert_close(got, expected)
    with pytest.raises(ValueError, match=r"^log_probs must have shape \[batch, trial, pos\] \("):
        kl_per_response(a[0], b[0], "k3", ones[0])
    with pytest.raises(
        ValueError, match=r"^mask must match log_probs.*\[3, 4, 4\] and \[3, 4, 5\]"
    ):
        kl_per_response(a, b, "k3", ones[..., :4])


def test_adaptive_kl_controller_refuses_bools_and_accepts_horizon_1():
    from pgrl_helpers.kl import AdaptiveKLController

    with pytest.raises(ValueError, match="^init_kl_coef .*positive.*True"):
        AdaptiveKLController(True, 6.0, 10)
    with pytest.raises(ValueError, match="^kl_target .*positive.*True"):
        AdaptiveKLController(0.1, True, 10)
    with pytest.raises(ValueError, match="^kl_horizon .*positive int.*True"):
        AdaptiveKLController(0.1, 6.0, True)
    controller = AdaptiveKLController(0.1, 6.0, 1)  # the smallest horizon
    assert controller.update(12.0, 1) == pytest.approx(0.1 * 1.2)
    with pytest.raises(ValueError, match="^n_steps .*positive int.*True"):
        controller.update(1.0, True)
    with pytest.raises(ValueError, match="^current_kl .*finite.*inf"):
        controller.update(math.inf, 1)


# --- check_kl_fields: kl_coef, the estimator, the refresh period, the adaptive controller --


def _kl_fields(**fields):
    from types import SimpleNamespace

    base = dict(kl_coef=0.0, kl_estimator="k3", compute_ref_model_period=10, kl_horizon=10000,
                kl_target=None, kl_in_reward=False)  # fmt: skip
    return SimpleNamespace(**{**base, **fields})


def test_check_kl_fields_passes_the_edges():
    from pgrl_helpers.kl import check_kl_fields

    for edge in (dict(kl_coef=0), dict(kl_estimator="k1"), dict(compute_ref_model_period=1),
                 dict(kl_horizon=1), dict(kl_target=1e-9, kl_coef=1e-9)):  # fmt: skip
        check_kl_fields(_kl_fields(**edge))


@pytest.mark.parametrize(
    "fields, pattern",
    [
        (dict(kl_coef=-1e-9), "^kl_coef .*>= 0.*-1e-09"),
        (dict(kl_coef=math.inf), "^kl_coef .*finite.*inf"),
        (dict(kl_coef=True), "^kl_coef .*number.*True"),
        (dict(kl_estimator="k4"), "^unknown kl_estimator 'k4'.*k1, k2, k3"),
        (dict(compute_ref_model_period=0), "^compute_ref_model_period .*positive int.*0"),
        (dict(compute_ref_model_period=2.0), "^compute_ref_model_period .*int.*2.0"),
        (dict(kl_horizon=0), "^kl_horizon .*positive int.*0"),
        (dict(kl_horizon=True, kl_target=1.0, kl_coef=0.1), "^kl_horizon .*int.*True"),
        (dict(kl_target=1.0, kl_coef=0.0),
         "^kl_target adapts the KL term.*kl_coef > 0 and kl_in_reward False, got 0.0 and False"),
        (dict(kl_target=1.0, kl_coef=0.1, kl_in_reward=True),
         "^kl_target adapts the KL term.*kl_coef > 0 and kl_in_reward False, got 0.1 and True"),
        (dict(kl_target=0.0, kl_coef=0.1), "^kl_target .*positive.*0.0"),
        (dict(kl_target=math.inf, kl_coef=0.1), "^kl_target .*finite.*inf"),
    ],
)  # fmt: skip
def test_check_kl_fields_names_each_bad_field(fields, pattern):
    from pgrl_helpers.kl import check_kl_fields

    with pytest.raises(ValueError, match=pattern):
        check_kl_fields(_kl_fields(**fields))
