"""kl: the cases mutation testing found unchecked (tests/MUTATION.md).

k2's value pinned, the default estimator, the log-ratio clamp on both sides, and error
messages that name the offending argument.
"""

from __future__ import annotations

import math

import pytest
import torch

from pgrl_helpers._validate import MAX_LOG_RATIO
from pgrl_helpers.kl import (
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
        match=r"^p_logits and q_logits need a vocab axis \(at least 1 dim\), got scalars$",
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
        match=r"^old_log_probs requires grad: the ratio pi/pi_old would be exactly 1 with zero "
        r"gradient \(the freeze pitfall\); compute them under torch.no_grad\(\) or .detach\(\)$",
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
        ValueError, match=r"^mask must match log_probs: got \[3, 4, 4\] and \[3, 4, 5\]$"
    ):
        kl_per_response(a, b, "k3", ones[..., :4])


def test_adaptive_kl_controller_refuses_bools_and_accepts_horizon_1():
    from pgrl_helpers.kl import AdaptiveKLController

    with pytest.raises(ValueError, match="^init_kl_coef must be a positive number, got True$"):
        AdaptiveKLController(True, 6.0, 10)
    with pytest.raises(ValueError, match="^kl_target must be a positive number, got True$"):
        AdaptiveKLController(0.1, True, 10)
    with pytest.raises(ValueError, match="^kl_horizon must be a positive int, got True$"):
        AdaptiveKLController(0.1, 6.0, True)
    controller = AdaptiveKLController(0.1, 6.0, 1)  # the smallest horizon
    assert controller.update(12.0, 1) == pytest.approx(0.1 * 1.2)
    with pytest.raises(ValueError, match="^n_steps must be a positive int, got True$"):
        controller.update(1.0, True)
    with pytest.raises(ValueError, match="^current_kl must be finite, got inf$"):
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
    "fields, message",
    [
        (dict(kl_coef=-1e-9), "kl_coef must be a finite number >= 0, got -1e-09"),
        (dict(kl_coef=math.inf), "kl_coef must be a finite number >= 0, got inf"),
        (dict(kl_coef=True), "kl_coef must be a finite number >= 0, got True"),
        (dict(kl_estimator="k4"), "unknown kl_estimator 'k4'; valid values are: k1, k2, k3"),
        (dict(compute_ref_model_period=0), "compute_ref_model_period must be a positive int, got 0"),
        (dict(compute_ref_model_period=2.0),
         "compute_ref_model_period must be a positive int, got 2.0"),
        (dict(kl_horizon=0), "kl_horizon must be a positive int, got 0"),
        (dict(kl_horizon=True, kl_target=1.0, kl_coef=0.1),
         "kl_horizon must be a positive int, got True"),
        (dict(kl_target=1.0, kl_coef=0.0),
         "kl_target adapts the KL term's coefficient, starting from kl_coef: it needs kl_coef > 0 "
         "and kl_in_reward False, got 0.0 and False"),
        (dict(kl_target=1.0, kl_coef=0.1, kl_in_reward=True),
         "kl_target adapts the KL term's coefficient, starting from kl_coef: it needs kl_coef > 0 "
         "and kl_in_reward False, got 0.1 and True"),
        (dict(kl_target=0.0, kl_coef=0.1), "kl_target must be a positive number, got 0.0"),
        (dict(kl_target=math.inf, kl_coef=0.1), "kl_target must be finite, got inf"),
    ],
)  # fmt: skip
def test_check_kl_fields_names_each_bad_field(fields, message):
    import re

    from pgrl_helpers.kl import check_kl_fields

    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        check_kl_fields(_kl_fields(**fields))
