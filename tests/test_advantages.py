"""compute_deltas: every mode's invariant, ties, one-sample groups and bad input."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pgrl_helpers.advantages import DELTA_MODES, compute_deltas


def random_rewards(seed, batch=6, group=8):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 6, (batch, group), generator=g).float()


def test_rewards_mode_is_identity_and_a_copy():
    r = random_rewards(0)
    d = compute_deltas(r, "rewards")
    assert torch.equal(d, r) and d.data_ptr() != r.data_ptr()


def test_hand_case():
    r = torch.tensor([[1.0, 2.0, 3.0, 6.0]])  # mean 3, sample std sqrt(14/3)
    std = (14 / 3) ** 0.5
    torch.testing.assert_close(compute_deltas(r, "centered_rewards"), r - 3)
    torch.testing.assert_close(
        compute_deltas(r, "normalized_rewards"), (r - 3) / (std + 1e-6), rtol=1e-6, atol=1e-6
    )
    assert compute_deltas(r, "max_rewards").tolist() == [[0.0, 0.0, 0.0, 6.0]]
    # leave-one-out: 1 - (2+3+6)/3, ...
    torch.testing.assert_close(
        compute_deltas(r, "loo_rewards"), torch.tensor([[1 - 11 / 3, 2 - 10 / 3, 3 - 3.0, 6 - 2.0]])
    )


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), group=st.integers(2, 12))
def test_group_invariants(seed, group):
    r = random_rewards(seed, group=group)
    centered = compute_deltas(r, "centered_rewards")
    torch.testing.assert_close(centered.sum(-1), torch.zeros(r.shape[0]), atol=1e-5, rtol=0)
    varies = r.std(-1) > 0
    normalized = compute_deltas(r, "normalized_rewards")
    torch.testing.assert_close(
        normalized[varies].std(-1), torch.ones(int(varies.sum())), atol=1e-4, rtol=0
    )
    torch.testing.assert_close(normalized[~varies], torch.zeros_like(normalized[~varies]))
    loo = compute_deltas(r, "loo_rewards")
    torch.testing.assert_close(loo, centered * group / (group - 1), atol=1e-5, rtol=1e-5)
    best = compute_deltas(r, "max_rewards")
    is_max = r == r.max(-1, keepdim=True).values
    assert torch.equal(best[is_max], r[is_max]) and torch.all(best[~is_max] == 0)


def test_tied_groups():
    r = torch.full((3, 5), 2.0)
    for mode in ("centered_rewards", "normalized_rewards", "loo_rewards"):
        assert torch.all(compute_deltas(r, mode) == 0), mode
    # documented: with a tie every response is a winner, so max_rewards keeps them all
    assert torch.equal(compute_deltas(r, "max_rewards"), r)
    assert torch.equal(compute_deltas(r, "rewards"), r)


def test_near_equal_rewards_do_not_blow_up():
    r = torch.tensor([[1.0, 1.0 + 1e-6, 1.0, 1.0]])
    d = compute_deltas(r, "normalized_rewards")
    assert torch.isfinite(d).all() and d.abs().max() < 1e-2
    # the lecture's form (r - mean) / (std + 1e-5) turns a 1e-6 wobble into ~0.05-sized deltas
    lecture = (r - r.mean(-1, keepdim=True)) / (r.std(-1, keepdim=True) + 1e-5)
    assert lecture.abs().max() > 10 * d.abs().max()


def test_bad_inputs():
    r = random_rewards(1)
    with pytest.raises(ValueError, match="unknown delta mode 'centred'.*centered_rewards"):
        compute_deltas(r, "centred")
    for mode in ("normalized_rewards", "loo_rewards"):
        with pytest.raises(ValueError, match="at least 2 samples per prompt"):
            compute_deltas(r[:, :1], mode)
    with pytest.raises(ValueError, match=r"\[batch, trial\].*\[6, 8, 1\]"):
        compute_deltas(r[..., None], "rewards")
    bad = r.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        compute_deltas(bad, "centered_rewards")
    with pytest.raises(TypeError, match="torch.Tensor"):
        compute_deltas([[1.0, 2.0]], "rewards")


def test_every_mode_is_listed():
    r = random_rewards(2)
    for mode in DELTA_MODES:
        assert compute_deltas(r, mode).shape == r.shape
