"""KL estimators: sign, zero at equality, expectations by enumeration, penalty reduction."""

import pytest
import torch

from pgrl_helpers.kl import KL_ESTIMATORS, compute_kl_penalty, kl_estimate, kl_k1, kl_k2, kl_k3


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
