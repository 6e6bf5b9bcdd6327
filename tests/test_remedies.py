"""The default-off remedies, each against its paper's formula and, where
TRL 1.16 has it, against TRL's code on a fixed batch.

* Clip-Cov (Cui et al. 2025, arXiv 2505.22617): ``covariance.clip_cov_tokens``, loop option
  ``clip_cov_ratio``;
* the high-entropy-token mask (Wang et al. 2025, arXiv 2506.01939): ``masking.high_entropy_mask``,
  loop option ``top_entropy_quantile`` (TRL's name and ``get_high_entropy_mask``);
* the adaptive KL controller (Ziegler et al. 2019, arXiv 1909.08593):
  ``kl.AdaptiveKLController``, loop option ``kl_target``;
* two-sided token and sequence importance-sampling masks: ``offpolicy.corrected_weights``
  with ``cap_low``, loop option ``correction_cap_low`` (TRL's ``*_mask`` modes with
  ``vllm_importance_sampling_clip_min``).
"""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from pgrl_helpers.config import TrainConfig
from pgrl_helpers.covariance import clip_cov_tokens, token_covariance
from pgrl_helpers.kl import AdaptiveKLController, FixedKLController, build_kl_controller
from pgrl_helpers.losses import clip_mask, compute_per_token_loss
from pgrl_helpers.masking import high_entropy_mask
from pgrl_helpers.offpolicy import corrected_weights, importance_weights
from pgrl_helpers.registry import apply_token_remedies

# ---- Clip-Cov ---------------------------------------------------------------------------------


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


# ---- the high-entropy-token mask ----------------------------------------------------------------


def test_high_entropy_mask_by_hand():
    entropy = torch.tensor([[[0.1, 0.9, 0.5, 7.0], [0.3, 0.7, 0.2, 0.8]]])
    mask = torch.tensor([[[1, 1, 1, 0], [1, 1, 1, 1]]])
    # 7 real entropies; quantile 1 - 0.2 = 0.8 by linear interpolation: 0.74
    keep = high_entropy_mask(entropy, mask, 0.2)
    assert keep.tolist() == [[[False, True, False, False], [False, False, False, True]]]
    assert high_entropy_mask(entropy, mask, 1.0).tolist() == (mask > 0).tolist()
    for bad in (0, 1.5, True, math.nan):
        with pytest.raises(ValueError, match="^top_entropy_quantile must be a number in"):
            high_entropy_mask(entropy, mask, bad)
    with pytest.raises(ValueError, match="mask selects no token"):
        high_entropy_mask(entropy, torch.zeros_like(mask), 0.5)


@pytest.mark.parametrize("quantile", [0.2, 0.5, 0.8])
def test_high_entropy_mask_equals_trl(quantile):
    trl_grpo = pytest.importorskip("trl.trainer.grpo_trainer")
    identity = SimpleNamespace(pad_across_processes=lambda t, dim, pad_index: t, gather=lambda t: t)
    fake_trainer = SimpleNamespace(accelerator=identity)
    generator = torch.Generator().manual_seed(0)
    entropy = torch.rand(6, 9, generator=generator) * 2
    mask = (torch.arange(9) < torch.tensor([9, 3, 7, 1, 5, 8])[:, None]).long()
    theirs = trl_grpo.GRPOTrainer.get_high_entropy_mask(fake_trainer, entropy, mask, 1 - quantile)
    ours = high_entropy_mask(entropy[None], mask[None], quantile)[0]
    assert torch.equal(ours, theirs)
    assert 0 < ours.sum() < mask.sum()


# ---- adaptive KL ---------------------------------------------------------------------------------


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
        ((0.0, 6.0, 10), "^init_kl_coef must be a positive number"),
        ((0.1, -1.0, 10), "^kl_target must be a positive number"),
        ((0.1, math.inf, 10), "^kl_target must be finite"),
        ((0.1, 6.0, 0), "^kl_horizon must be a positive int"),
    ):
        with pytest.raises(ValueError, match=match):
            AdaptiveKLController(*args)
    with pytest.raises(ValueError, match="^current_kl must be finite"):
        controller.update(math.nan, 1)
    with pytest.raises(ValueError, match="^n_steps must be a positive int"):
        controller.update(1.0, 0)


def test_build_kl_controller():
    assert isinstance(build_kl_controller(TrainConfig(kl_coef=0.2)), FixedKLController)
    assert build_kl_controller(TrainConfig(kl_coef=0.2)).value == 0.2
    in_reward = SimpleNamespace(kl_loss_coef=0.0, kl_coef=0.2)
    assert build_kl_controller(in_reward).value == 0.0
    adaptive = build_kl_controller(TrainConfig(kl_coef=0.2, kl_target=1.0, kl_horizon=50))
    assert isinstance(adaptive, AdaptiveKLController)
    assert (adaptive.value, adaptive.target, adaptive.horizon) == (0.2, 1.0, 50)


# ---- two-sided importance-sampling masks ---------------------------------------------------------


def test_two_sided_weights_by_hand():
    w = torch.tensor([0.1, 0.5, 1.0, 1.9, 2.0, 3.0])
    mis = corrected_weights(w, "mis", 2.0, cap_low=0.5)
    assert mis.tolist() == [0.0, 0.5, 1.0, 1.899999976158142, 2.0, 0.0]
    tis = corrected_weights(w, "tis", 2.0, cap_low=0.5)
    assert tis.tolist() == [0.5, 0.5, 1.0, 1.899999976158142, 2.0, 2.0]
    assert torch.equal(corrected_weights(w, "mis", 2.0), corrected_weights(w, "mis", 2.0, None))
    assert corrected_weights(w, "mis", 2.0)[0] == 0.1  # one-sided keeps the small weight
    for bad in (-0.1, 2.0, 5.0, True, "0.5"):
        with pytest.raises(ValueError, match="^correction_cap_low must be None or a number"):
            corrected_weights(w, "mis", 2.0, cap_low=bad)


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_two_sided_masks_equal_trls_mask_modes(level):
    """TRL 1.16 grpo_trainer.py, _generate_and_score_completions, the '*_mask' branch:
    ratio = exp(sum or per-token (old - sampling) * mask); ratios < clip_min or > clip_max
    are set to 0; the per-token loss is then multiplied by the ratio."""
    generator = torch.Generator().manual_seed(1)
    mask = (torch.arange(5) < torch.tensor([[5, 2, 4], [1, 5, 3]])[..., None]).float()
    train = -torch.rand(2, 3, 5, generator=generator) * 2
    sampler = train + torch.randn(2, 3, 5, generator=generator) * 0.6
    clip_min, clip_max = 0.7, 1.6
    # TRL's lines, on rows = responses
    diff = ((train - sampler) * mask).reshape(6, 5)
    if level == "sequence":
        diff = diff.sum(dim=-1, keepdim=True)
    ratio = torch.exp(diff)
    ratio = ratio.masked_fill((ratio < clip_min) | (ratio > clip_max), 0.0)
    theirs = ratio.expand(6, 5).reshape(2, 3, 5)
    raw = importance_weights(train, sampler, mask, level)
    ours = corrected_weights(raw, "mis", clip_max, cap_low=clip_min)
    real = mask > 0
    torch.testing.assert_close(ours[real], theirs[real])
    assert (ours[real] == 0).any() and (ours[real] > 0).any()


BASE = dict(
    model="transformer", prompt_source="random", prompt_length=3, vocab_size=5,
    embedding_dim=8, num_layers=1, num_heads=2, prompts_per_epoch=6, num_responses=3,
    num_epochs=3, num_steps_per_epoch=2, loss_mode="clipped", eval_every=3, kl_coef=0.1,
    compute_ref_model_period=2,
)  # fmt: skip


def test_remedy_validation_names_the_field():
    config = TrainConfig(**BASE)
    for overrides, error, match in (
        (dict(clip_cov_ratio=1.5), ValueError, "^clip_cov_ratio must be a number in"),
        (dict(clip_cov_ratio=0.1, clip_cov_lb=5.0), ValueError, "^clip_cov_lb must be <"),
        (dict(clip_cov_lb=math.nan), ValueError, "^clip_cov_lb must be a number"),
        (dict(clip_cov_ratio=0.1, loss_mode="naive"), ValueError, "needs loss_mode 'clipped'"),
        (dict(top_entropy_quantile=0.0), ValueError, "^top_entropy_quantile must be"),
        (dict(kl_target=1.0, kl_coef=0.0), ValueError, "needs kl_coef > 0"),
        (dict(kl_target=-1.0), ValueError, "^kl_target must be a positive number"),
        (dict(kl_target=1.0, kl_horizon=0), ValueError, "^kl_horizon must be a positive int"),
        (dict(kl_horizon=0), ValueError, "^kl_horizon must be a positive int"),
        (dict(correction_cap_low=0.5), ValueError, "set off_policy_correction to one of"),
        (dict(correction_cap_low=3.0), ValueError, "^correction_cap_low must be None"),
    ):
        with pytest.raises(error, match=match):
            replace(config, **overrides).validate()


def test_penalty_uses_this_beta_then_updates():
    controller = AdaptiveKLController(0.5, target=1.0, horizon=10)
    term = controller.penalty(torch.tensor(3.0), 5)
    assert term.item() == 1.5  # beta_t = 0.5 times KL 3
    assert controller.value == pytest.approx(0.5 * (1 + 0.2 * 5 / 10))
    fixed = FixedKLController(0.25)
    assert fixed.penalty(torch.tensor(2.0), 5).item() == 0.5 and fixed.value == 0.25
