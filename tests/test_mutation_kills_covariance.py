"""Tests that pin `pgrl_helpers.covariance` (KL-Cov's token covariance and token choice) down to
the error messages, so that mutation testing (tests/mutation.py) finds no silent change."""

from __future__ import annotations

import math

import pytest
import torch

from pgrl_helpers.covariance import kl_cov_tokens, token_covariance


def _tied_batch():
    """log_probs [1, 2, 10] and deltas [1, 2] whose 20 token covariances all equal 0.5."""
    log_probs = torch.stack([torch.full((10,), -1.0), torch.full((10,), -2.0)])[None]
    deltas = torch.tensor([[1.0, -1.0]])
    return log_probs, deltas


def test_ties_go_to_the_earlier_token_in_row_major_order():
    log_probs, deltas = _tied_batch()
    cov = token_covariance(log_probs, deltas)
    torch.testing.assert_close(cov, torch.full((1, 2, 10), 0.5))
    chosen = kl_cov_tokens(log_probs, deltas, 0.45)  # floor(0.45 * 20) = 9 tokens
    want = torch.zeros(1, 2, 10, dtype=torch.bool)
    want[0, 0, :9] = True
    assert torch.equal(chosen, want)


def test_per_token_deltas_are_used_as_given():
    gen = torch.Generator().manual_seed(0)
    log_probs = -torch.rand(2, 3, 4, generator=gen)
    deltas = torch.randn(2, 3, 4, generator=gen)
    want = (log_probs - log_probs.mean()) * (deltas - deltas.mean())
    torch.testing.assert_close(token_covariance(log_probs, deltas), want)


def test_a_ratio_that_is_not_a_number_raises_value_error_naming_it():
    log_probs, deltas = _tied_batch()
    for bad in ("0.1", 0.0, 1.5, float("nan"), True):
        with pytest.raises(ValueError, match=r"^kl_cov_ratio must be .*1"):
            kl_cov_tokens(log_probs, deltas, bad)


def test_error_messages_name_the_argument_and_its_shape():
    log_probs = torch.zeros(2, 3, 4)
    with pytest.raises(ValueError, match=r"^log_probs must have shape \[batch, trial, pos\] "):
        token_covariance(torch.zeros(2, 3), torch.zeros(2, 3))
    with pytest.raises(TypeError, match=r"^deltas must be a torch.Tensor, got list$"):
        token_covariance(log_probs, [[0.0] * 3] * 2)
    with pytest.raises(
        ValueError,
        match=r"^deltas must be \[batch, trial\] or \[batch, trial, pos\] matching log_probs: "
        r"deltas \[2, 4\], log_probs \[2, 3, 4\]$",
    ):
        token_covariance(log_probs, torch.zeros(2, 4))
    with pytest.raises(
        ValueError,
        match=r"^log_probs and mask must have the same shape, got \[2, 3, 4\] and \[2, 3\]$",
    ):
        token_covariance(log_probs, torch.zeros(2, 3), mask=torch.ones(2, 3))
    with pytest.raises(
        ValueError, match=r"^mask selects no tokens: the covariance needs at least one$"
    ):
        token_covariance(log_probs, torch.zeros(2, 3), mask=torch.zeros(2, 3, 4))


# ---- Clip-Cov -----------------------------------------------------------------------------


def _band_batch(b: float):
    """Tokens 0, 1 have covariance exactly b (means are 0), tokens 2, 3 have 0."""
    log_probs = torch.tensor([[[1.0, -1.0, 0.0, 0.0]]])
    deltas = torch.tensor([[[b, -b, 0.5, -0.5]]])
    return log_probs, deltas, torch.zeros(1, 1, 4, dtype=torch.bool)


def test_clip_cov_default_band_is_verls_open_interval_1_to_5():
    from pgrl_helpers.covariance import clip_cov_tokens

    inside = _band_batch(1.5)
    assert clip_cov_tokens(*inside, 1.0).tolist() == [[[True, True, False, False]]]
    assert clip_cov_tokens(*inside, 1.0, 2.0, 6.0).sum() == 0
    high = _band_batch(5.5)
    assert clip_cov_tokens(*high, 1.0).sum() == 0
    assert clip_cov_tokens(*high, 1.0, 2.0, 6.0).sum() == 2
    for edge in (1.0, 5.0):  # the bounds themselves are outside
        assert clip_cov_tokens(*_band_batch(edge), 1.0).sum() == 0


def test_clip_cov_pick_is_the_generators_permutation():
    from pgrl_helpers.covariance import clip_cov_tokens, token_covariance

    generator = torch.Generator().manual_seed(0)
    log_probs = torch.randn(2, 5, 6, generator=generator)
    deltas = torch.randn(2, 5, 6, generator=generator) * 3
    none = torch.zeros(2, 5, 6, dtype=torch.bool)
    cov = token_covariance(log_probs, deltas)
    where = ((cov > 0.1) & (cov < 50.0)).flatten().nonzero().squeeze(-1)
    assert where.numel() >= 10
    expected = torch.zeros(60, dtype=torch.bool)
    expected[
        where[torch.randperm(where.numel(), generator=torch.Generator().manual_seed(7))[:6]]
    ] = True
    got = clip_cov_tokens(
        log_probs, deltas, none, 0.1, 0.1, 50.0, None, torch.Generator().manual_seed(7)
    )
    assert torch.equal(got.flatten(), expected)


def test_clip_cov_shape_error_names_both_arguments():
    from pgrl_helpers.covariance import clip_cov_tokens

    log_probs, deltas, clipped = _band_batch(1.5)
    with pytest.raises(
        ValueError,
        match=r"^log_probs and already_clipped must have the same shape, got \[1, 1, 4\] and \[1, 4\]$",
    ):
        clip_cov_tokens(log_probs, deltas, clipped[0], 1.0)


def test_check_clip_cov_messages():
    from pgrl_helpers.covariance import check_clip_cov

    for bad in ("0.1", True, -0.1, 1.5, math.nan):
        with pytest.raises(ValueError, match=r"^clip_cov_ratio must be a number in \[0, 1\]"):
            check_clip_cov(bad, 1.0, 5.0)
    with pytest.raises(ValueError, match="^clip_cov_lb must be a number, got True$"):
        check_clip_cov(0.1, True, 5.0)
    with pytest.raises(ValueError, match="^clip_cov_ub must be a number, got nan$"):
        check_clip_cov(0.1, 1.0, math.nan)
    with pytest.raises(ValueError, match="^clip_cov_ub must be a number, got '5'$"):
        check_clip_cov(0.1, 1.0, "5")
    check_clip_cov(0.0, -math.inf, math.inf)  # off, with an unbounded band


def test_check_clip_cov_fields_needs_the_clipped_token_loss():
    import re
    from types import SimpleNamespace

    from pgrl_helpers.covariance import check_clip_cov_fields

    def config(**fields):
        base = dict(clip_cov_ratio=0.1, clip_cov_lb=1.0, clip_cov_ub=5.0, loss_mode="clipped",
                    policy_objective="token")  # fmt: skip
        return SimpleNamespace(**{**base, **fields})

    check_clip_cov_fields(config())  # Clip-Cov on the clipped per-token loss
    check_clip_cov_fields(config(clip_cov_ratio=0.0, loss_mode="naive", policy_objective="x"))
    for fields, got in (
        (dict(loss_mode="naive"), "'naive' and 'token'"),
        (dict(policy_objective="sequence"), "'clipped' and 'sequence'"),
    ):
        message = (
            "clip_cov_ratio > 0 (Clip-Cov) detaches tokens of the clipped PPO loss: it needs "
            f"loss_mode 'clipped' and policy_objective 'token', got {got}"
        )
        with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
            check_clip_cov_fields(config(**fields))
    with pytest.raises(ValueError, match="^clip_cov_ratio must be a number in"):
        check_clip_cov_fields(config(clip_cov_ratio=1.5))
