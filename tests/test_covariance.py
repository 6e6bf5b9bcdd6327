"""KL-Cov and Clip-Cov (Cui et al. 2025, arXiv 2505.22617), pgrl_helpers.covariance:
the token covariance and the tokens each remedy picks, against hand-written references.
"""

from __future__ import annotations

import math

import pytest
import torch

from pgrl_helpers.config import TrainConfig
from pgrl_helpers.covariance import clip_cov_tokens, kl_cov_tokens, token_covariance
from pgrl_helpers.losses import compute_per_token_loss
from pgrl_helpers.masking import aggregate_loss

#: Other test files whose tests also pin pgrl_helpers/covariance.py (tests/mutation.py).
MUTATION_ALSO = ("test_objective.py", "test_config.py")


def random_batch(seed, shape=(3, 4, 5)):
    g = torch.Generator().manual_seed(seed)
    log_probs = (-3 * torch.rand(shape, generator=g, dtype=torch.float64)).requires_grad_()
    old = log_probs.detach() + 0.3 * torch.randn(shape, generator=g, dtype=torch.float64)
    deltas = torch.randn(shape[:2], generator=g, dtype=torch.float64)
    lengths = torch.randint(1, shape[2] + 1, shape[:2], generator=g)
    mask = torch.arange(shape[2]) < lengths[..., None]
    return log_probs, old, deltas, mask


def reference_loss(log_probs, old, deltas, mask, ratio_k, coef):
    """Token by token in plain Python: -r A on every real token, + coef |log pi - log pi_old|
    on the max(1, floor(k N)) real tokens with the largest (log pi - mean)(A - mean)."""
    batch, trial, pos = log_probs.shape
    real = [
        (b, i, t) for b in range(batch) for i in range(trial) for t in range(pos) if mask[b, i, t]
    ]
    lp = {x: log_probs[x].item() for x in real}
    mean_lp = sum(lp.values()) / len(real)
    mean_a = sum(deltas[b, i].item() for b, i, _ in real) / len(real)
    cov = {x: (lp[x] - mean_lp) * (deltas[x[0], x[1]].item() - mean_a) for x in real}
    count = max(1, math.floor(ratio_k * len(real)))
    chosen = set(sorted(real, key=lambda x: -cov[x])[:count])  # sorted() is stable
    total = 0
    for x in real:
        term = -torch.exp(log_probs[x] - old[x]) * deltas[x[0], x[1]]
        if x in chosen:
            term = term + coef * (log_probs[x] - old[x]).abs()
        total = total + term
    return total / len(real), chosen


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("ratio_k, coef", [(0.002, 1.0), (0.2, 0.5), (1.0, 2.0)])
def test_value_and_gradient_match_the_reference(seed, ratio_k, coef):
    log_probs, old, deltas, mask = random_batch(seed)
    per_token = compute_per_token_loss(log_probs, deltas, "kl_cov", old, mask=mask,
                                       kl_cov_ratio=ratio_k, kl_cov_coef=coef)  # fmt: skip
    ours = aggregate_loss(per_token, mask.double(), "token_mean")
    expected, chosen = reference_loss(log_probs, old, deltas, mask, ratio_k, coef)
    assert abs(ours.item() - expected.item()) < 1e-12
    (g_ours,) = torch.autograd.grad(ours, log_probs)
    (g_ref,) = torch.autograd.grad(expected, log_probs)
    torch.testing.assert_close(g_ours, g_ref, rtol=0, atol=1e-12)
    picked = kl_cov_tokens(log_probs, deltas, ratio_k, mask)
    assert set(map(tuple, picked.nonzero().tolist())) == chosen
    assert not (picked & ~mask).any(), "padding is never chosen"


def test_covariance_ignores_padding_and_is_centred_over_real_tokens():
    log_probs, _, deltas, mask = random_batch(3)
    cov = token_covariance(log_probs, deltas, mask)
    assert torch.isinf(cov[~mask]).all() and torch.isfinite(cov[mask]).all()
    # changing a padded log-prob changes nothing
    other = log_probs.detach().clone()
    other[~mask] = 123.0
    torch.testing.assert_close(token_covariance(other, deltas, mask)[mask], cov[mask])
    # sum over real tokens of (x - mean)(y - mean) = sum x y - N mean_x mean_y
    a = deltas[:, :, None].expand(mask.shape)[mask]
    lp = log_probs.detach()[mask]
    assert abs(cov[mask].sum() - ((lp * a).sum() - len(lp) * lp.mean() * a.mean())) < 1e-10


def test_a_planted_bug_choosing_the_lowest_covariance_is_caught():
    log_probs, old, deltas, mask = random_batch(5)
    per_token = compute_per_token_loss(
        log_probs, -deltas, "kl_cov", old, mask=mask, kl_cov_ratio=0.2
    )  # the sign flip reverses the ranking
    ours = aggregate_loss(per_token, mask.double(), "token_mean")
    expected, _ = reference_loss(log_probs, old, -deltas, mask, 0.2, 1.0)
    assert abs(ours.item() - expected.item()) < 1e-12
    wrong = compute_per_token_loss(log_probs, deltas, "kl_cov", old, mask=mask, kl_cov_ratio=0.2)
    assert abs(aggregate_loss(wrong, mask.double(), "token_mean").item() - expected.item()) > 1e-6


def test_bad_inputs_raise_naming_the_argument():
    log_probs, old, deltas, mask = random_batch(6)
    for bad in (0, -0.1, 1.5, float("nan"), True):
        with pytest.raises(ValueError, match="kl_cov_ratio"):
            compute_per_token_loss(log_probs, deltas, "kl_cov", old, mask=mask, kl_cov_ratio=bad)
    for bad in (-1.0, float("inf"), False):
        with pytest.raises(ValueError, match="kl_cov_coef"):
            compute_per_token_loss(log_probs, deltas, "kl_cov", old, mask=mask, kl_cov_coef=bad)
    with pytest.raises(ValueError, match="needs old_log_probs"):
        compute_per_token_loss(log_probs, deltas, "kl_cov", None, mask=mask)
    with pytest.raises(ValueError, match="importance_sampling_level 'token'"):
        compute_per_token_loss(log_probs, deltas, "kl_cov", old, mask=mask,
                               importance_sampling_level="sequence")  # fmt: skip
    with pytest.raises(ValueError, match="mask selects no tokens"):
        token_covariance(log_probs, deltas, torch.zeros_like(mask))
    with pytest.raises(ValueError, match="kl_cov_ratio"):
        TrainConfig(loss_mode="kl_cov", kl_cov_ratio=0).validate()
    with pytest.raises(ValueError, match="kl_cov_coef"):
        TrainConfig(loss_mode="kl_cov", kl_cov_coef=-1).validate()
    with pytest.raises(ValueError, match="importance_sampling_level 'token'"):
        TrainConfig(loss_mode="kl_cov", importance_sampling_level="sequence").validate()


# --- Clip-Cov's candidate band ---


def _clip_cov_batch():
    log_probs = torch.tensor([[[-0.1, -3.0, -0.2, -2.5], [-0.3, -4.0, -0.05, -1.0]]])
    deltas = torch.tensor([[[2.0, -2.0, 3.0, 0.5], [1.5, -3.0, 2.5, -0.5]]])
    mask = torch.tensor([[[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]]])
    return log_probs, deltas, mask


def test_clip_cov_candidates_follow_the_paper_band():
    log_probs, deltas, mask = _clip_cov_batch()
    real = mask > 0
    # Cov(y_t) = (log pi - mean log pi)(A - mean A) over the real tokens, by hand
    lp, ad = log_probs[real], deltas[real]
    cov = (log_probs - lp.mean()) * (deltas - ad.mean())
    torch.testing.assert_close(token_covariance(log_probs, deltas, mask)[real], cov[real])
    band = real & (cov > 1.0) & (cov < 5.0)
    none_clipped = torch.zeros_like(real)
    # ratio 1: every candidate in the band (and only those)
    got = clip_cov_tokens(log_probs, deltas, none_clipped, 1.0, 1.0, 5.0, mask)
    assert torch.equal(got, band) and band.sum() >= 3
    # already clipped tokens are never candidates
    first = band.flatten().nonzero()[0, 0]
    clipped = torch.zeros_like(real).flatten()
    clipped[first] = True
    got = clip_cov_tokens(log_probs, deltas, clipped.view_as(real), 1.0, 1.0, 5.0, mask)
    assert not got.flatten()[first] and got.sum() == band.sum() - 1
    # a small ratio: max(1, floor(r N)) of them, at random (N = 7 real tokens)
    for seed in range(5):
        generator = torch.Generator().manual_seed(seed)
        got = clip_cov_tokens(log_probs, deltas, none_clipped, 0.3, 1.0, 5.0, mask, generator)
        assert got.sum() == 2 and (got <= band).all()
    assert clip_cov_tokens(log_probs, deltas, none_clipped, 0.01, 1.0, 5.0, mask).sum() == 1
    assert clip_cov_tokens(log_probs, deltas, none_clipped, 0.0, 1.0, 5.0, mask).sum() == 0
    empty_band = clip_cov_tokens(log_probs, deltas, none_clipped, 1.0, 50.0, 60.0, mask)
    assert empty_band.sum() == 0


# --- mutants ---
# Tests that pin `pgrl_helpers.covariance` (KL-Cov's token covariance and token choice) down to
# the error messages, so that mutation testing (tests/mutation.py) finds no silent change.


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
    with pytest.raises(TypeError, match=r"^deltas must be a torch\.Tensor.*list"):
        token_covariance(log_probs, [[0.0] * 3] * 2)
    with pytest.raises(
        ValueError,
        match=r"^deltas must be \[batch, trial\] or \[batch, trial, pos\].*\[2, 4\]",
    ):
        token_covariance(log_probs, torch.zeros(2, 4))
    with pytest.raises(
        ValueError,
        match=r"^log_probs and mask .*same shape.*\[2, 3, 4\] and \[2, 3\]",
    ):
        token_covariance(log_probs, torch.zeros(2, 3), mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"^mask selects no tokens"):
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
        match=r"^log_probs and already_clipped .*same shape.*\[1, 1, 4\] and \[1, 4\]",
    ):
        clip_cov_tokens(log_probs, deltas, clipped[0], 1.0)


def test_check_clip_cov_messages():
    from pgrl_helpers.covariance import check_clip_cov

    for bad in ("0.1", True, -0.1, 1.5, math.nan):
        with pytest.raises(
            ValueError, match=r"^clip_cov_ratio must be a number in \[0, 1\] \(0: off\)"
        ):
            check_clip_cov(bad, 1.0, 5.0)
    with pytest.raises(ValueError, match="^clip_cov_lb .*number.*True"):
        check_clip_cov(0.1, True, 5.0)
    with pytest.raises(ValueError, match="^clip_cov_ub .*number.*nan"):
        check_clip_cov(0.1, 1.0, math.nan)
    with pytest.raises(ValueError, match="^clip_cov_ub .*number.*'5'"):
        check_clip_cov(0.1, 1.0, "5")
    check_clip_cov(0.0, -math.inf, math.inf)  # off, with an unbounded band


def test_check_clip_cov_fields_needs_the_clipped_token_loss():
    import re
    from types import SimpleNamespace

    from pgrl_helpers.covariance import check_clip_cov_fields

    def config(**fields):
        base = dict(clip_cov_ratio=0.1, clip_cov_lb=1.0, clip_cov_ub=5.0, loss_mode="clipped",
                    importance_sampling_level="token")  # fmt: skip
        return SimpleNamespace(**{**base, **fields})

    check_clip_cov_fields(config())  # Clip-Cov on the clipped per-token loss
    off = config(clip_cov_ratio=0.0, loss_mode="naive", importance_sampling_level="x")
    check_clip_cov_fields(off)
    for fields, got in (
        (dict(loss_mode="naive"), "'naive' and 'token'"),
        (dict(importance_sampling_level="sequence"), "'clipped' and 'sequence'"),
    ):
        needs = r"^clip_cov_ratio > 0 \(Clip-Cov\).*'clipped' and importance_sampling_level 'token'"
        with pytest.raises(ValueError, match=needs + ".*" + re.escape(got)):
            check_clip_cov_fields(config(**fields))
    with pytest.raises(ValueError, match="^clip_cov_ratio must be a number in"):
        check_clip_cov_fields(config(clip_cov_ratio=1.5))
