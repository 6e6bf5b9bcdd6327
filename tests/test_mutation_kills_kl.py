"""kl: the cases mutation testing found unchecked (tests/MUTATION.md).

k2's value pinned, the default estimator, the log-ratio clamp on both sides, and error
messages that name the offending argument.
"""

from __future__ import annotations

import math

import pytest
import torch

from pgrl_helpers.kl import (
    categorical_kl,
    compute_kl_penalty,
    kl_estimate,
    kl_k1,
    kl_k2,
    kl_k3,
    policy_token_kl,
)
from pgrl_helpers.losses import MAX_LOG_RATIO

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


def test_log_ratio_is_clamped_on_both_sides():
    # log r = ref - log_probs = -100 and +100, clamped to -+MAX_LOG_RATIO like compute_ratio
    log_probs = torch.tensor([[[100.0, -100.0]]])
    ref = torch.zeros(1, 1, 2)
    torch.testing.assert_close(kl_k1(log_probs, ref)[0, 0], torch.tensor([20.0, -20.0]))
    torch.testing.assert_close(kl_k2(log_probs, ref)[0, 0], torch.tensor([200.0, 200.0]))
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
