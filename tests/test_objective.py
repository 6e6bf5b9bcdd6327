"""The objective's glue (pgrl_helpers.objective): the loop's surrogate loss passes every config
field (the ratio's level among them), picks the old log-probs, apply the token remedies (Clip-Cov, the
high-entropy-token mask); the group-baseline deltas.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from pgrl_helpers.advantages import DELTA_MODES, compute_deltas
from pgrl_helpers.covariance import clip_cov_tokens
from pgrl_helpers.losses import (
    LossOptions,
    clip_mask,
    compute_per_token_loss,
    per_token_loss_and_metrics,
)
from pgrl_helpers.masking import high_entropy_mask
from pgrl_helpers.objective import apply_token_remedies, group_baseline_deltas, surrogate_loss

#: Other test files whose tests also pin pgrl_helpers/objective.py (tests/mutation.py).
MUTATION_ALSO = ("test_offpolicy.py", "test_config.py")

#: The token remedies off: the fields ``apply_token_remedies`` reads (a TrainConfig's defaults).
REMEDIES_OFF = dict(clip_cov_ratio=0.0, clip_cov_lb=1.0, clip_cov_ub=5.0, top_entropy_quantile=1.0)


def _clip_cov_batch():
    log_probs = torch.tensor([[[-0.1, -3.0, -0.2, -2.5], [-0.3, -4.0, -0.05, -1.0]]])
    deltas = torch.tensor([[[2.0, -2.0, 3.0, 0.5], [1.5, -3.0, 2.5, -0.5]]])
    mask = torch.tensor([[[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]]])
    return log_probs, deltas, mask


def test_clip_cov_in_the_objective_zeroes_value_and_gradient_of_the_chosen_tokens():
    log_probs, deltas, mask = _clip_cov_batch()
    old = log_probs + torch.tensor([[[0.0, 0.5, 0.0, 0.0], [0.0, 0.0, -0.4, 0.0]]])
    config = SimpleNamespace(
        clip_cov_ratio=0.3, clip_cov_lb=1.0, clip_cov_ub=5.0, epsilon=0.2, epsilon_high=None,
        seed=3, top_entropy_quantile=1.0,
    )  # fmt: skip
    responses = torch.zeros(1, 2, 4, dtype=torch.long)
    rollout = SimpleNamespace(old_log_probs=old, deltas=deltas, mask=mask, responses=responses)
    lp = log_probs.clone().requires_grad_(True)
    loss = compute_per_token_loss(lp, deltas, "clipped", old_log_probs=old)
    remedied = apply_token_remedies(loss, lp, rollout, config)
    clipped = clip_mask(lp.detach(), old, deltas, 0.2) != 0
    seed = 3 * 1_000_003 + 0 + 8
    chosen = clip_cov_tokens(
        lp, deltas, clipped, 0.3, 1.0, 5.0, mask, torch.Generator().manual_seed(seed)
    )
    assert chosen.sum() == 2 and not (chosen & clipped).any()
    assert (remedied[chosen] == 0).all()
    assert torch.equal(remedied[~chosen], loss[~chosen])
    (grad,) = torch.autograd.grad(remedied.sum(), lp)
    assert (grad[chosen] == 0).all() and (grad[~chosen & (mask > 0) & ~clipped] != 0).all()


# --- mutants ---
# the policy objectives


# ratios exactly representable in float32 (exp(log r) == r), including the clip edges for
# epsilon 0.5 (0.5 and 1.5) and for epsilon_high 0.25 (1.25)
RATIOS = torch.tensor([0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0])


def ratio_batch(deltas=(1.0, -1.0, 0.0)):
    """log_probs with the ratios above for each delta; old_log_probs = 0."""
    trial = len(deltas)
    log_probs = RATIOS.log().reshape(1, 1, -1).repeat(1, trial, 1).requires_grad_(True)
    return log_probs, torch.zeros(1, trial, len(RATIOS)), torch.tensor([list(deltas)])


def test_surrogate_loss_picks_old_log_probs_by_config():
    log_probs, old, deltas = ratio_batch((1.0, -1.0))
    rollout = SimpleNamespace(old_log_probs=old, deltas=deltas, mask=None)

    def config(**kw):
        base = dict(
            loss_mode="clipped", detach_old_log_probs=True, epsilon=0.3, epsilon_high=0.4,
            importance_sampling_level="token", dual_clip_c=3.0, sapo_temperature_pos=1.0,
            sapo_temperature_neg=1.05, kl_cov_ratio=0.002, kl_cov_coef=1.0, **REMEDIES_OFF,
        )  # fmt: skip
        return SimpleNamespace(**{**base, **kw})

    got, metrics = surrogate_loss(log_probs, rollout, config())
    torch.testing.assert_close(
        got, compute_per_token_loss(log_probs, deltas, "clipped", old, 0.3, epsilon_high=0.4)
    )
    assert not torch.equal(got, compute_per_token_loss(log_probs, deltas, "clipped", old))
    # ratios 1.5, 2.0 (delta +1) above 1.4; 0.25, 0.5 (delta -1) below 0.7: 4 of 14 tokens cut
    assert metrics == {"clip_fraction": pytest.approx(4 / 14)}
    # the freeze guard stays on when the config says the old log-probs are detached
    attached = SimpleNamespace(
        old_log_probs=old.clone().requires_grad_(True), deltas=deltas, mask=None
    )
    with pytest.raises(ValueError, match="^old_log_probs requires grad"):
        surrogate_loss(log_probs, attached, config())
    naive, metrics = surrogate_loss(log_probs, rollout, config(loss_mode="naive"))
    torch.testing.assert_close(naive, compute_per_token_loss(log_probs, deltas, "naive"))
    assert metrics == {}
    # the freeze pitfall on purpose: old = log_probs (attached), ratio 1, loss = -delta,
    # nothing clipped
    frozen, metrics = surrogate_loss(log_probs, rollout, config(detach_old_log_probs=False))
    torch.testing.assert_close(frozen, -deltas[:, :, None].expand_as(frozen))
    assert metrics == {"clip_fraction": 0.0}


def _config(**fields):
    base = dict(
        loss_mode="clipped", detach_old_log_probs=True, epsilon=0.2, epsilon_high=None,
        importance_sampling_level="token",
        dual_clip_c=3.0, sapo_temperature_pos=1.0, sapo_temperature_neg=1.05,
        kl_cov_ratio=0.002, kl_cov_coef=1.0, seed=0, **REMEDIES_OFF,
    )  # fmt: skip
    return SimpleNamespace(**{**base, **fields})


def test_the_loop_objectives_pass_every_config_field():
    gen = torch.Generator().manual_seed(0)
    log_probs = -torch.rand(2, 3, 4, generator=gen, dtype=torch.float64) * 2
    old = log_probs + torch.randn(2, 3, 4, generator=gen, dtype=torch.float64)
    mask = torch.tensor([1.0, 1.0, 1.0, 0.0]).expand(2, 3, 4)
    rollout = SimpleNamespace(old_log_probs=old, deltas=torch.randn(2, 3, generator=gen), mask=mask)
    cases = [
        dict(loss_mode="dual_clip", dual_clip_c=1.5, epsilon=0.1, epsilon_high=0.4),
        dict(loss_mode="sapo", sapo_temperature_pos=3.0, sapo_temperature_neg=0.5),
        dict(loss_mode="cispo", epsilon=0.3, epsilon_high=0.05),
        dict(loss_mode="kl_cov", kl_cov_ratio=0.3, kl_cov_coef=2.0),
    ]
    for fields in cases:
        config = _config(**fields)
        options = {k: v for k, v in fields.items() if k != "loss_mode"}
        for level in ("token", "sequence"):
            if config.loss_mode == "kl_cov" and level == "sequence":
                continue  # refused: KL-Cov penalises single tokens (tests/test_covariance.py)
            config.importance_sampling_level = level
            got, metrics = surrogate_loss(log_probs, rollout, config)
            want, want_metrics = per_token_loss_and_metrics(
                log_probs, rollout.deltas, config.loss_mode, old,
                LossOptions(importance_sampling_level=level, **options), mask=mask,
            )  # fmt: skip
            torch.testing.assert_close(got, want)
            assert metrics == want_metrics
            assert ("clip_fraction" in metrics) == (config.loss_mode == "dual_clip")
    # the sequence level averages over the mask's real tokens only
    config = _config(loss_mode="unclipped", importance_sampling_level="sequence")
    seq, _ = surrogate_loss(log_probs, rollout, config)
    unmasked = compute_per_token_loss(
        log_probs, rollout.deltas, "unclipped", old, importance_sampling_level="sequence"
    )
    assert not torch.allclose(seq, unmasked)


def _remedy_batch():
    gen = torch.Generator().manual_seed(1)
    log_probs = -torch.rand(3, 4, 5, generator=gen, dtype=torch.float64) * 3
    old = log_probs - torch.randn(3, 4, 5, generator=gen, dtype=torch.float64) * 0.3
    mask = torch.arange(5) < torch.tensor([[5, 3, 4, 2], [5, 5, 1, 3], [4, 4, 5, 2]])[..., None]
    deltas = torch.randn(3, 4, generator=gen, dtype=torch.float64) * 2
    responses = torch.randint(0, 5, (3, 4, 5), generator=gen)
    entropy = torch.rand(3, 4, 5, generator=gen, dtype=torch.float64)
    rollout = SimpleNamespace(
        old_log_probs=old, deltas=deltas, mask=mask.double(), responses=responses,
        token_entropy=entropy,
    )  # fmt: skip
    return log_probs, rollout


def test_the_objective_applies_clip_cov_with_its_seeded_pick():
    log_probs, rollout = _remedy_batch()
    config = _config(
        clip_cov_ratio=0.1, clip_cov_lb=-100.0, clip_cov_ub=100.0, seed=2, epsilon_high=0.28
    )
    got, _ = surrogate_loss(log_probs, rollout, config)
    plain = compute_per_token_loss(
        log_probs, rollout.deltas, "clipped", old_log_probs=rollout.old_log_probs, epsilon_high=0.28
    )
    clipped = clip_mask(log_probs, rollout.old_log_probs, rollout.deltas, 0.2, 0.28) != 0
    seed = 2 * 1_000_003 + int(rollout.responses.sum()) + rollout.responses.numel()
    chosen = clip_cov_tokens(
        log_probs, rollout.deltas, clipped, 0.1, -100.0, 100.0, rollout.mask,
        torch.Generator().manual_seed(seed),
    )  # fmt: skip
    assert 3 <= chosen.sum() < (rollout.mask > 0).sum() - clipped.sum()
    assert torch.equal(got, torch.where(chosen, torch.zeros_like(plain), plain))
    assert not (chosen & (rollout.mask == 0)).any()


def test_clip_cov_reads_epsilon_high_for_the_already_clipped_tokens():
    log_probs = torch.zeros(1, 1, 4, dtype=torch.float64)
    old = torch.log(torch.tensor([[[1 / 1.25, 1 / 1.25, 1.0, 1.0]]], dtype=torch.float64))
    deltas = torch.tensor([[[1.0, 1.0, 1.0, 1.0]]], dtype=torch.float64)
    # ratio 1.25 on tokens 0, 1: clipped with epsilon 0.2, not with epsilon_high 0.28
    rollout = SimpleNamespace(
        old_log_probs=old, deltas=deltas, mask=torch.ones(1, 1, 4),
        responses=torch.zeros(1, 1, 4, dtype=torch.long),
    )  # fmt: skip
    loss = torch.ones(1, 1, 4, dtype=torch.float64)
    for high, zeroed in ((None, 2), (0.28, 4)):
        config = _config(
            clip_cov_ratio=1.0, clip_cov_lb=-1.0, clip_cov_ub=1.0, seed=0, epsilon_high=high
        )
        assert (apply_token_remedies(loss, log_probs, rollout, config) == 0).sum() == zeroed


def test_the_objective_keeps_only_the_high_entropy_tokens():
    log_probs, rollout = _remedy_batch()
    config = _config(top_entropy_quantile=0.3)
    got, _ = surrogate_loss(log_probs, rollout, config)
    plain = compute_per_token_loss(
        log_probs, rollout.deltas, "clipped", old_log_probs=rollout.old_log_probs
    )
    keep = high_entropy_mask(rollout.token_entropy, rollout.mask, 0.3)
    assert 0 < keep.sum() < (rollout.mask > 0).sum()
    assert got.dtype == torch.float64
    assert torch.equal(got, plain * keep)
    # the remedies off leave the loss as it is
    assert torch.equal(surrogate_loss(log_probs, rollout, _config())[0], plain)


def test_a_config_without_a_remedy_field_raises_instead_of_defaulting():
    """Field access, no getattr default: a missing field is reported, not taken as off."""
    log_probs, rollout = _remedy_batch()
    loss = torch.ones_like(log_probs)
    for field in ("clip_cov_ratio", "top_entropy_quantile"):
        config = SimpleNamespace(**{k: v for k, v in REMEDIES_OFF.items() if k != field})
        with pytest.raises(AttributeError, match=field):
            apply_token_remedies(loss, log_probs, rollout, config)


def test_the_surrogate_loss_reads_the_level_from_the_config():
    log_probs, rollout = _remedy_batch()
    token, _ = surrogate_loss(log_probs, rollout, _config(loss_mode="unclipped"))
    config = _config(loss_mode="unclipped", importance_sampling_level="sequence")
    sequence, _ = surrogate_loss(log_probs, rollout, config)
    assert not torch.allclose(token, sequence)
    ratio = torch.exp(  # GSPO's s_i: the mean log-ratio over each response's real tokens
        ((log_probs - rollout.old_log_probs) * rollout.mask).sum(-1) / rollout.mask.sum(-1)
    )
    torch.testing.assert_close(sequence, (-ratio * rollout.deltas)[..., None].expand_as(sequence))
    with pytest.raises(ValueError, match=r"^unknown importance_sampling_level 'seq'"):
        surrogate_loss(log_probs, rollout, _config(importance_sampling_level="seq"))


# the advantage estimators


R = [[1.0, 2.0, 3.0, 6.0], [0.0, 0.0, 1.0, 1.0]]


def test_group_baseline_deltas_uses_the_rollout_rewards_and_the_config_mode():
    rewards = torch.tensor(R)
    lengths = torch.arange(rewards.numel()).reshape(rewards.shape) % 3 + 1
    mask = (torch.arange(3) < lengths[..., None]).float()  # lengths 1, 2, 3, 1, ...
    for mode in DELTA_MODES:
        got = group_baseline_deltas(
            SimpleNamespace(rewards=rewards, mask=mask), SimpleNamespace(deltas_mode=mode)
        )
        token_mask = mask if mode == "reinforce_pp_baseline" else None
        assert torch.equal(got, compute_deltas(rewards, mode, mask=token_mask)), mode
    plain = compute_deltas(rewards, "reinforce_pp_baseline")
    assert not torch.allclose(compute_deltas(rewards, "reinforce_pp_baseline", mask=mask), plain)
