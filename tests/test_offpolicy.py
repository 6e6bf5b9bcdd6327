"""Stale and mismatched rollouts, the TIS / MIS corrections, ESS (pgrl_helpers.offpolicy)."""

from __future__ import annotations

import math

import pytest
import torch

from pgrl_helpers.config import TrainConfig
from pgrl_helpers.masking import aggregate_loss
from pgrl_helpers.models import LectureModel
from pgrl_helpers.offpolicy import (
    StaleSource,
    corrected_weights,
    effective_sample_size,
    importance_weights,
    mismatched_sampler,
)
from pgrl_helpers.registry import ADVANTAGE_ESTIMATORS, POLICY_OBJECTIVES
from pgrl_helpers.rollout import Rollout
from pgrl_helpers.sort_task import lecture_prompts
from pgrl_helpers.training import run_policy_gradient

CONFIGS = {
    "lecture_clipped": dict(loss_mode="clipped", num_epochs=4, num_steps_per_epoch=3),
    "transformer_kl": dict(
        model="transformer", prompt_source="random", prompts_per_epoch=8, embedding_dim=8,
        num_heads=2, num_layers=1, loss_mode="clipped", kl_coef=0.1, num_epochs=3,
        num_steps_per_epoch=2, eval_every=2,
    ),
    "autoregressive": dict(
        model="autoregressive", task="sort_dedup", prompt_source="random", prompts_per_epoch=8,
        embedding_dim=8, num_heads=2, num_layers=1, reward_fn="dedup_position_reward",
        loss_mode="clipped", num_epochs=3, num_steps_per_epoch=2, num_responses=4,
    ),
}  # fmt: skip


def _params(history):
    return [p.detach().clone() for p in history.model.parameters()]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_staleness_zero_is_on_policy_exactly(name):
    on = run_policy_gradient(TrainConfig(**CONFIGS[name]))
    stale = run_policy_gradient(TrainConfig(**CONFIGS[name], rollout_source="stale"))
    assert len(on) == len(stale)
    for a, b in zip(on, stale):
        assert {k: b[k] for k in a} == a  # every on-policy metric, bit for bit
    for p, q in zip(_params(on), _params(stale)):
        assert torch.equal(p, q)
    assert all(s["ess_fraction"] == 1.0 for s in stale.steps())  # sampler == trainer
    # the check can fail: one epoch of lag changes the run
    lagged = run_policy_gradient(TrainConfig(**CONFIGS[name], rollout_source="stale", staleness=1))
    assert any(not torch.equal(p, q) for p, q in zip(_params(on), _params(lagged)))


def test_the_sampler_lags_k_epochs():
    config = TrainConfig(rollout_source="stale", staleness=2)
    policy = LectureModel(5, 4, 3, 3, seed=0)
    source = StaleSource(policy, config)
    prompts = torch.tensor([[1, 0, 2]])
    starts = []  # the trainer's weights at the start of each epoch
    for epoch in range(6):
        starts.append([p.detach().clone() for p in policy.parameters()])
        source.sample(prompts, 2, torch.Generator().manual_seed(0))
        expected = starts[max(0, epoch - 2)]
        for p, q in zip(source.sampler.parameters(), expected):
            assert torch.equal(p, q), epoch
        with torch.no_grad():  # the "optimizer steps" of this epoch
            for p in policy.parameters():
                p.add_(0.1 * (epoch + 1))


def test_mismatched_sampler_log_probs():
    policy = LectureModel(5, 4, 3, 3, seed=0)
    prompts = torch.tensor([[1, 0, 2], [4, 4, 0]])
    responses = torch.randint(0, 5, (2, 3, 3), generator=torch.Generator().manual_seed(1))
    logits = policy(prompts)
    hot = mismatched_sampler(policy, temperature=2.0)
    expected = torch.log_softmax(logits / 2.0, -1)[:, None].expand(2, 3, 3, 5)
    expected = expected.gather(-1, responses[..., None])[..., 0]
    torch.testing.assert_close(hot.log_probs(prompts, responses), expected)
    bf16 = mismatched_sampler(policy, dtype="bfloat16")
    gap = (bf16.log_probs(prompts, responses) - policy.log_probs(prompts, responses)).abs()
    # bf16 keeps 8 significant bits (unit roundoff 2^-8): each logit moves by <= |logit| 2^-8,
    # a log-prob (logit minus logsumexp) by at most twice the largest move
    assert 0 < gap.max() <= 2 * logits.abs().max() * 2**-8
    same = mismatched_sampler(policy)
    assert torch.equal(same.log_probs(prompts, responses), policy.log_probs(prompts, responses))


def _one_step(correction, cap, loss_mode="unclipped", level="token"):
    config = TrainConfig(
        rollout_source="stale", sampler_temperature=1.7, off_policy_correction=correction,
        correction_cap=cap, correction_level=level, loss_mode=loss_mode, num_epochs=1,
        num_steps_per_epoch=1,
    )  # fmt: skip
    history = run_policy_gradient(config)
    return history.steps()[0], _params(history)


def _loss_and_grads(correction, cap, level="token", loss_mode="unclipped"):
    """One loss of the loop's pieces on a stale, hot (T = 1.7) batch, and its gradients."""
    config = TrainConfig(
        rollout_source="stale", sampler_temperature=1.7, off_policy_correction=correction,
        correction_cap=cap, correction_level=level, loss_mode=loss_mode,
    )  # fmt: skip
    policy = config.build_policy()
    source = StaleSource(policy, config)
    prompts = lecture_prompts()
    responses, mask = source.sample(prompts, 10, torch.Generator().manual_seed(3))
    rollout = Rollout(prompts, responses, mask, config.build_task().reward(prompts, responses))
    rollout.deltas = ADVANTAGE_ESTIMATORS["group"](rollout, config)
    with torch.no_grad():
        rollout.old_log_probs = source.old_log_probs(rollout)
    log_probs = policy.log_probs(prompts, responses)
    per_token = rollout.weighted(POLICY_OBJECTIVES["token"](log_probs, rollout, config)[0])
    loss = aggregate_loss(per_token, mask, "token_mean")
    loss.backward()
    return loss.item(), [p.grad.clone() for p in policy.parameters()], rollout


def test_tis_with_infinite_cap_equals_plain_importance_sampling():
    plain, plain_grads, _ = _loss_and_grads("none", math.inf)
    tis, tis_grads, rollout = _loss_and_grads("tis", math.inf)
    assert rollout.metrics["is_weight_max"] > 1.2  # the sampler really is off-policy
    assert tis == pytest.approx(plain, rel=1e-5)
    for g, h in zip(plain_grads, tis_grads):
        torch.testing.assert_close(g, h)
    # the check can fail: a finite cap, or ignoring the sampler, changes the gradient
    for correction, cap in (("tis", 1.0), ("recompute", math.inf)):
        _, other, _ = _loss_and_grads(correction, cap)
        assert any(not torch.allclose(g, h, rtol=1e-3) for g, h in zip(plain_grads, other))
    # and in the full loop the first step's loss agrees too
    assert _one_step("tis", math.inf)[0]["loss"] == pytest.approx(
        _one_step("none", math.inf)[0]["loss"], rel=1e-5
    )


def test_mis_drops_exactly_the_weights_over_c():
    w = torch.tensor([[[0.5, 1.0, 2.0], [2.5, 3.0, 1.999]]])
    mis = corrected_weights(w, "mis", 2.0)
    assert mis.tolist() == [[[0.5, 1.0, 2.0], [0.0, 0.0, pytest.approx(1.999)]]]
    assert torch.equal(mis == 0, w > 2.0)
    assert corrected_weights(w, "tis", 2.0).max() == 2.0
    assert torch.equal(corrected_weights(w, "tis", math.inf), w)


def test_mis_in_the_loop_matches_masking_the_dropped_tokens():
    # naive loss: MIS = the weighted REINFORCE loss with the tokens over C masked out
    cap = 1.1
    mis, mis_grads, rollout = _loss_and_grads("mis", cap, loss_mode="naive")
    assert 0 < rollout.metrics["is_cut_fraction"] < 1
    tis, _, _ = _loss_and_grads("tis", math.inf, loss_mode="naive")
    w = rollout.loss_weights
    keep = (w > 0).float()
    log_probs = rollout.old_log_probs  # 'mis' freezes the trainer's own log-probs
    per_token = -log_probs * rollout.deltas[..., None] * w
    assert mis == pytest.approx((per_token * keep).mean().item(), rel=1e-5)
    assert tis != pytest.approx(mis, rel=1e-3)  # dropping changed the loss
    with torch.no_grad():  # exactly the tokens whose pi_train / pi_sampler exceeds C
        sampler = mismatched_sampler(TrainConfig().build_policy(), temperature=1.7)
        raw = torch.exp(log_probs - sampler.log_probs(rollout.prompts, rollout.responses))
    assert torch.equal(w == 0, raw > cap)


def test_importance_weights_per_sequence_multiply_over_real_tokens():
    log_train = torch.tensor([[[-1.0, -1.0, -2.0]]])
    log_samp = torch.tensor([[[-1.5, -0.5, -9.0]]])
    mask = torch.tensor([[[1.0, 1.0, 0.0]]])
    tok = importance_weights(log_train, log_samp, mask, "token")
    torch.testing.assert_close(tok, torch.tensor([[[math.exp(0.5), math.exp(-0.5), 1.0]]]))
    seq = importance_weights(log_train, log_samp, mask, "sequence")
    torch.testing.assert_close(seq, torch.tensor([[[1.0, 1.0, 1.0]]]))  # exp(0.5 - 0.5)
    with pytest.raises(ValueError, match="correction_level"):
        importance_weights(log_train, log_samp, mask, "group")


def test_effective_sample_size():
    assert effective_sample_size(torch.full((37,), 0.3)) == pytest.approx(37)
    assert effective_sample_size(torch.tensor([1.0, 0.0, 0.0])) == pytest.approx(1)
    assert effective_sample_size(torch.tensor([1.0, 2.0])) == pytest.approx(9 / 5)
    with pytest.raises(ValueError, match="all zero"):
        effective_sample_size(torch.zeros(3))
    with pytest.raises(ValueError, match="1-D"):
        effective_sample_size(torch.ones(2, 2))


@pytest.mark.parametrize(
    "fields, match",
    [
        (dict(rollout_source="stale", staleness=-1), "staleness"),
        (dict(rollout_source="stale", sampler_temperature=0.0), "sampler_temperature"),
        (dict(rollout_source="stale", sampler_dtype="int8"), "sampler_dtype"),
        (dict(rollout_source="stale", off_policy_correction="vtrace"), "off_policy_correction"),
        (dict(rollout_source="stale", correction_level="batch"), "correction_level"),
        (dict(rollout_source="stale", correction_cap=0), "correction_cap"),
        (dict(staleness=2), "only with rollout_source 'stale'"),
    ],
)
def test_bad_off_policy_fields_are_named(fields, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig(**fields).validate()
