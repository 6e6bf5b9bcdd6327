"""Stale and mismatched rollouts, the TIS / MIS corrections, ESS (pgrl_helpers.offpolicy)."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import pytest
import torch

from pgrl_helpers.config import TrainConfig
from pgrl_helpers.masking import aggregate_loss
from pgrl_helpers.models import LectureModel
from pgrl_helpers.objective import surrogate_loss
from pgrl_helpers.offpolicy import (
    MAX_LOG_WEIGHT,
    StaleSource,
    check_off_policy_fields,
    corrected_weights,
    cut_fraction,
    effective_sample_size,
    importance_weights,
    mismatched_sampler,
    weight_units,
)
from pgrl_helpers.registry import ADVANTAGE_ESTIMATORS
from pgrl_helpers.rollout import Rollout
from pgrl_helpers.sort_task import lecture_prompts
from pgrl_helpers.training import run_policy_gradient

#: Other test files whose tests also pin pgrl_helpers/offpolicy.py (tests/mutation.py).
MUTATION_ALSO = ("test_config.py",)

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
    return [p.detach().clone() for p in history.run.model.parameters()]


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


@pytest.mark.parametrize("samples_per_epoch", [1, 3])
def test_the_sampler_lags_k_epochs(samples_per_epoch):
    """Every sample of an epoch (a refill of dynamic sampling too) uses the weights of the
    start of epoch e - k: a version per epoch, not per sample call (code review r4, B4)."""
    config = TrainConfig(rollout_source="stale", staleness=2)
    policy = LectureModel(5, 4, 3, 3, seed=0)
    source = StaleSource(policy, config)
    prompts = torch.tensor([[1, 0, 2]])
    starts = []  # the trainer's weights at the start of each epoch
    for epoch in range(6):
        starts.append([p.detach().clone() for p in policy.parameters()])
        for _ in range(samples_per_epoch):
            source.sample(prompts, 2, torch.Generator().manual_seed(0))
            expected = starts[max(0, epoch - 2)]
            for p, q in zip(source.sampler.parameters(), expected):
                assert torch.equal(p, q), epoch
        for _ in range(2):  # the optimizer steps of this epoch
            with torch.no_grad():
                for p in policy.parameters():
                    p.add_(0.1 * (epoch + 1))
            source.after_optimizer_step()


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
    per_token = rollout.weighted(surrogate_loss(log_probs, rollout, config)[0])
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


# --- two-sided importance-sampling masks (TRL's '*_mask' modes) ---


def test_two_sided_weights_by_hand():
    w = torch.tensor([0.1, 0.5, 1.0, 1.9, 2.0, 3.0])
    mis = corrected_weights(w, "mis", 2.0, cap_low=0.5)
    assert mis.tolist() == [0.0, 0.5, 1.0, 1.899999976158142, 2.0, 0.0]
    tis = corrected_weights(w, "tis", 2.0, cap_low=0.5)
    assert tis.tolist() == [0.5, 0.5, 1.0, 1.899999976158142, 2.0, 2.0]
    assert torch.equal(corrected_weights(w, "mis", 2.0), corrected_weights(w, "mis", 2.0, None))
    assert corrected_weights(w, "mis", 2.0)[0] == 0.1  # one-sided keeps the small weight
    for bad in (-0.1, 2.0, 5.0, True, "0.5"):
        low = r"^correction_cap_low must be a number in \[0, 2\) \(below correction_cap\) or None"
        with pytest.raises(ValueError, match=low):
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


# --- mutants ---
# The cases mutation testing found unchecked (tests/MUTATION.md).
#
# The log-weight clamp on both sides, padding weight 1 at sequence level, the cap's edges
# (w == C is kept by MIS), the metrics StaleSource logs computed by hand, which old
# log-probs each correction returns, every off-policy field check on its own, and error
# messages matched from their start so that they name the offending argument.


TRAIN = torch.tensor([[[-1.0, -2.0, -0.5], [-1.0, -1.0, -3.0]]])  # [1, 2, 3]


SAMPLER = torch.tensor([[[-1.5, -1.0, -7.0], [-2.0, -1.5, -9.0]]])


MASK = torch.tensor([[[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]])


def test_token_level_is_the_default_and_padding_gets_one():
    w = importance_weights(TRAIN, SAMPLER, MASK)
    expected = torch.tensor([[[0.5, -1.0, 0.0], [1.0, 0.5, 6.0]]]).exp()
    torch.testing.assert_close(w, expected)


def test_sequence_weights_multiply_real_tokens_and_leave_padding_at_one():
    w = importance_weights(TRAIN, SAMPLER, MASK, "sequence")
    expected = torch.tensor([[[-0.5, -0.5, 0.0], [7.5, 7.5, 7.5]]]).exp()
    torch.testing.assert_close(w, expected)


def test_log_weights_are_clamped_on_both_sides():
    big = torch.tensor([[[40.0, -40.0, 29.0]]])
    w = importance_weights(big, torch.zeros_like(big), torch.ones_like(big))
    # compared in log space: exp(-30) and exp(-40) are both ~0 on a linear scale
    torch.testing.assert_close(w.log(), torch.tensor([[[MAX_LOG_WEIGHT, -MAX_LOG_WEIGHT, 29.0]]]))
    up, down = torch.tensor([[[20.0, 15.0]]]), torch.tensor([[[-20.0, -15.0]]])
    for log_w, bound in ((up, MAX_LOG_WEIGHT), (down, -MAX_LOG_WEIGHT)):  # sums +-35
        seq = importance_weights(log_w, torch.zeros_like(log_w), torch.ones_like(log_w), "sequence")
        torch.testing.assert_close(seq.log(), torch.full((1, 1, 2), bound))
    assert MAX_LOG_WEIGHT == 30.0


def test_importance_weight_errors_name_the_argument():
    with pytest.raises(
        ValueError,
        match=r"^unknown correction_level 'group'; valid values are: token, sequence$",
    ):
        importance_weights(TRAIN, SAMPLER, MASK, "group")
    shapes = (
        r"^log_p_train \[1, 2, 3\], log_p_sampler \[1, 2, 3\] and mask \[1, 2, 2\] must have one"
    )
    with pytest.raises(ValueError, match=shapes):
        importance_weights(TRAIN, SAMPLER, MASK[..., :2])
    with pytest.raises(ValueError, match=r"^log_p_train \[1, 2, 3\], log_p_sampler \[1, 2, 2\]"):
        importance_weights(TRAIN, SAMPLER[..., :2], MASK)


def test_corrected_weights_at_the_cap_and_for_every_correction():
    w = torch.tensor([0.5, 2.0, 2.5])
    assert corrected_weights(w, "tis", 2).tolist() == [0.5, 2.0, 2.0]
    assert corrected_weights(w, "mis", 2).tolist() == [0.5, 2.0, 0.0]  # w == C is kept
    assert corrected_weights(w, "mis", 1e-3).tolist() == [0.0, 0.0, 0.0]
    for correction in ("none", "recompute"):
        out = corrected_weights(w, correction, 2.0)
        assert out.tolist() == [1.0, 1.0, 1.0] and out.dtype == w.dtype
    assert torch.equal(corrected_weights(w, "mis", math.inf), w)


@pytest.mark.parametrize("cap", [0, 0.0, -1.0, True, "2", None, math.nan])
def test_a_bad_cap_is_named(cap):
    with pytest.raises(
        ValueError,
        match=rf"^correction_cap must be a positive number \(inf allowed\), got {re.escape(repr(cap))}$",
    ):
        corrected_weights(torch.ones(2), "tis", cap)


def test_an_unknown_correction_is_named():
    valid = "valid values are: none, recompute, tis, mis$"
    with pytest.raises(ValueError, match=f"^unknown off_policy_correction 'vtrace'; {valid}"):
        corrected_weights(torch.ones(2), "vtrace", 1.0)


def test_effective_sample_size_by_hand_and_its_errors():
    ess = effective_sample_size(torch.tensor([1.0, 3.0, 0.0]))
    assert isinstance(ess, float) and ess == pytest.approx(16 / 10, rel=1e-12)
    # float64 sums: 1e8 + 1 is exact in float64, not in float32
    assert effective_sample_size(torch.tensor([1e4, 1.0])) == pytest.approx(
        (1e4 + 1) ** 2 / (1e8 + 1), rel=1e-12
    )
    for bad in (torch.ones(2, 2), torch.ones(0)):
        with pytest.raises(
            ValueError,
            match=rf"^weights must be a non-empty 1-D tensor.*{re.escape(str(list(bad.shape)))}",
        ):
            effective_sample_size(bad)
    for bad in (torch.tensor([1.0, -0.5]), torch.tensor([1.0, math.inf]), torch.tensor([math.nan])):
        with pytest.raises(ValueError, match="^weights must be finite and >= 0"):
            effective_sample_size(bad)
    with pytest.raises(ValueError, match="^weights are all zero"):
        effective_sample_size(torch.zeros(2))


def test_weight_units_per_token_and_per_sequence():
    w = torch.tensor([[[2.0, 3.0, 1.0], [5.0, 5.0, 5.0]]])
    assert weight_units(w, MASK, "token").tolist() == [2.0, 3.0, 5.0, 5.0, 5.0]
    assert weight_units(w, MASK, "sequence").tolist() == [2.0, 5.0]


def _config(**fields):
    base = dict(
        staleness=0, sampler_temperature=1.0, sampler_dtype="float32",
        off_policy_correction="none", correction_level="token", correction_cap=2.0,
        correction_cap_low=None, rollout_source="on_policy",
    )  # fmt: skip
    return SimpleNamespace(**{**base, **fields})


def test_defaults_pass_and_the_edges_of_each_field():
    check_off_policy_fields(_config())
    check_off_policy_fields(_config(rollout_source="stale", staleness=0, sampler_temperature=1))
    check_off_policy_fields(
        _config(rollout_source="stale", staleness=3, sampler_temperature=1e-3,
                sampler_dtype="bfloat16", off_policy_correction="mis", correction_level="sequence",
                correction_cap=math.inf)
    )  # fmt: skip


@pytest.mark.parametrize(
    "field, value, pattern",
    [
        ("staleness", -1, r"^staleness .*int >= 0 \(epochs of lag\).*-1"),
        ("staleness", True, "^staleness .*int >= 0.*True"),
        ("staleness", 1.0, "^staleness .*int >= 0.*1.0"),
        ("sampler_temperature", 0, "^sampler_temperature .*positive finite.*0"),
        ("sampler_temperature", True, "^sampler_temperature .*positive finite.*True"),
        ("sampler_temperature", math.inf, "^sampler_temperature .*positive finite.*inf"),
        ("sampler_temperature", "1", "^sampler_temperature .*positive finite.*'1'"),
        ("sampler_dtype", "int8", "^unknown sampler_dtype 'int8'; valid values are: float32, bfloat16, float16$"),
        ("off_policy_correction", "vtrace",
         "^unknown off_policy_correction 'vtrace'; valid values are: none, recompute, tis, mis$"),
        ("correction_level", "batch", "^unknown correction_level 'batch'; valid values are: token, sequence$"),
        ("correction_cap", 0, "^correction_cap must be a positive number.*0$"),
    ],
)  # fmt: skip
def test_each_bad_field_is_named(field, value, pattern):
    with pytest.raises(ValueError, match=pattern):
        check_off_policy_fields(_config(rollout_source="stale", **{field: value}))


@pytest.mark.parametrize(
    "field, value",
    [("staleness", 1), ("sampler_temperature", 2.0), ("sampler_dtype", "float16"),
     ("off_policy_correction", "tis")],
)  # fmt: skip
def test_each_stale_only_field_alone_needs_the_stale_source(field, value):
    pattern = (
        r"^staleness, sampler_temperature, sampler_dtype and off_policy_correction act.*'stale'"
    )
    with pytest.raises(ValueError, match=pattern + ".*'on_policy'"):
        check_off_policy_fields(_config(**{field: value}))


POLICY_ARGS = (5, 4, 3, 3)


PROMPTS = torch.tensor([[1, 0, 2], [4, 4, 0]])


def test_mismatched_sampler_is_a_frozen_copy_with_its_own_logits():
    policy = LectureModel(*POLICY_ARGS, seed=0)
    responses = torch.randint(0, 5, (2, 3, 3), generator=torch.Generator().manual_seed(1))
    both = mismatched_sampler(policy, temperature=0.5, dtype="float16")
    assert all(p.requires_grad for p in policy.parameters())
    assert not any(p.requires_grad for p in both.parameters())
    logits = policy(PROMPTS).detach().to(torch.float16).float() / 0.5
    expected = torch.log_softmax(logits, -1)[:, None].expand(2, 3, 3, 5)
    expected = expected.gather(-1, responses[..., None])[..., 0]
    torch.testing.assert_close(both.log_probs(PROMPTS, responses), expected)
    # the hook sits on the copy only
    assert torch.equal(policy(PROMPTS), LectureModel(*POLICY_ARGS, seed=0)(PROMPTS))


def _stale_rollout(correction, level="token", cap=1.2):
    config = _config(
        rollout_source="stale", sampler_temperature=1.7, off_policy_correction=correction,
        correction_level=level, correction_cap=cap, staleness=0,
    )  # fmt: skip
    policy = LectureModel(*POLICY_ARGS, seed=0)
    source = StaleSource(policy, config)
    responses, mask = source.sample(PROMPTS, 6, torch.Generator().manual_seed(3))
    mask = mask.clone()
    mask[0, 0, 2:] = 0  # a shorter response
    rollout = SimpleNamespace(prompts=PROMPTS, responses=responses, mask=mask, metrics={})
    with torch.no_grad():
        old = source.old_log_probs(rollout)
        behaviour = mismatched_sampler(policy, 1.7).log_probs(PROMPTS, responses)
        proximal = policy.log_probs(PROMPTS, responses)
    return old, rollout, behaviour, proximal


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("correction", ["none", "recompute", "tis", "mis"])
def test_stale_source_metrics_weights_and_old_log_probs_by_hand(correction, level):
    old, rollout, behaviour, proximal = _stale_rollout(correction, level)
    torch.testing.assert_close(old, behaviour if correction == "none" else proximal)
    raw = importance_weights(proximal, behaviour, rollout.mask, level)
    units = raw[..., 0].flatten() if level == "sequence" else raw[rollout.mask > 0]
    ess = units.double().sum() ** 2 / (units.double() ** 2).sum() / units.numel()
    assert rollout.metrics["ess_fraction"] == pytest.approx(ess.item(), rel=1e-9)
    assert rollout.metrics["is_weight_max"] == pytest.approx(units.max().item())
    cut = (units > 1.2).float().mean().item()
    assert 0 < cut < 1
    assert rollout.metrics["is_cut_fraction"] == pytest.approx(cut)
    if correction == "tis":
        torch.testing.assert_close(rollout.loss_weights, raw.clamp(max=1.2))
    elif correction == "mis":
        torch.testing.assert_close(rollout.loss_weights, torch.where(raw <= 1.2, raw, 0.0))
    else:
        assert not hasattr(rollout, "loss_weights")


def test_the_stale_source_keeps_staleness_plus_one_versions():
    policy = LectureModel(*POLICY_ARGS, seed=0)
    source = StaleSource(policy, _config(rollout_source="stale", staleness=2))
    assert source.versions.maxlen == 3 and source.policy is policy
    for _ in range(5):  # epochs of one sample and one optimizer step
        source.sample(PROMPTS, 2, torch.Generator().manual_seed(0))
        assert source.trainer_moved is False  # a refill now would reuse this version
        source.after_optimizer_step()
        assert source.trainer_moved is True
    assert len(source.versions) == 3


def test_a_weight_equal_to_the_cap_is_not_cut():
    _, rollout, behaviour, proximal = _stale_rollout("tis")
    units = importance_weights(proximal, behaviour, rollout.mask)[rollout.mask > 0]
    cap = units.max().item()  # the largest weight (several tokens share it) is not cut
    config = _config(
        rollout_source="stale", sampler_temperature=1.7, off_policy_correction="tis",
        correction_cap=cap,
    )  # fmt: skip
    source = StaleSource(LectureModel(*POLICY_ARGS, seed=0), config)
    source.sample(PROMPTS, 6, torch.Generator().manual_seed(3))
    with torch.no_grad():
        source.old_log_probs(rollout)
    assert (units == cap).sum() > 1 and rollout.metrics["is_cut_fraction"] == 0.0


def test_the_stale_source_samples_with_the_configured_dtype():
    policy = LectureModel(*POLICY_ARGS, seed=0)
    config = _config(rollout_source="stale", sampler_dtype="float16")
    source = StaleSource(policy, config)
    responses, mask = source.sample(PROMPTS, 4, torch.Generator().manual_seed(3))
    rollout = SimpleNamespace(prompts=PROMPTS, responses=responses, mask=mask, metrics={})
    with torch.no_grad():
        old = source.old_log_probs(rollout)  # correction 'none': the sampler's log-probs
        half = mismatched_sampler(policy, dtype="float16").log_probs(PROMPTS, responses)
        assert torch.equal(old, half)
        assert not torch.equal(old, policy.log_probs(PROMPTS, responses))


# ---- two-sided weights (correction_cap_low) ------------------------------------------------


def test_cap_low_zero_is_allowed_and_both_corrections_accept_a_low_cap():
    w = torch.tensor([0.0, 0.5, 3.0])
    assert corrected_weights(w, "mis", 2.0, cap_low=0.0).tolist() == [0.0, 0.5, 0.0]
    assert corrected_weights(w, "tis", 2.0, cap_low=0.0).tolist() == [0.0, 0.5, 2.0]
    for correction in ("tis", "mis"):
        check_off_policy_fields(
            _config(
                rollout_source="stale", off_policy_correction=correction, correction_cap_low=0.5
            )
        )
    with pytest.raises(ValueError, match="^correction_cap_low bounds the weights of 'tis' / 'mis'"):
        check_off_policy_fields(
            _config(
                rollout_source="stale", off_policy_correction="recompute", correction_cap_low=0.5
            )
        )


@pytest.mark.parametrize("correction", ["tis", "mis"])
def test_the_stale_source_applies_the_low_cap(correction):
    config = _config(
        rollout_source="stale", sampler_temperature=1.7, off_policy_correction=correction,
        correction_level="token", correction_cap=1.2, staleness=0, correction_cap_low=0.9,
    )  # fmt: skip
    policy = LectureModel(*POLICY_ARGS, seed=0)
    source = StaleSource(policy, config)
    responses, mask = source.sample(PROMPTS, 6, torch.Generator().manual_seed(3))
    rollout = SimpleNamespace(prompts=PROMPTS, responses=responses, mask=mask, metrics={})
    with torch.no_grad():
        source.old_log_probs(rollout)
        behaviour = mismatched_sampler(policy, 1.7).log_probs(PROMPTS, responses)
        proximal = policy.log_probs(PROMPTS, responses)
    raw = importance_weights(proximal, behaviour, mask, "token")
    assert (raw < 0.9).any()
    expected = corrected_weights(raw, correction, 1.2, cap_low=0.9)
    torch.testing.assert_close(rollout.loss_weights, expected)
    assert not torch.equal(expected, corrected_weights(raw, correction, 1.2))


def _source_with_weights(weights: torch.Tensor, **fields):
    """A StaleSource whose raw token weights pi_prox / pi_samp are ``weights`` [1, 1, pos]."""
    config = _config(rollout_source="stale", **fields)
    source = StaleSource(LectureModel(*POLICY_ARGS, seed=0), config)
    source.policy = SimpleNamespace(log_probs=lambda prompts, responses: weights.log())
    source.sampler = SimpleNamespace(log_probs=lambda prompts, responses: torch.zeros_like(weights))
    return source


@pytest.mark.parametrize("correction", ["tis", "mis"])
def test_is_cut_fraction_counts_both_cuts_of_two_sided_weights(correction):
    """R2 (code review r4): weights [0.1, 0.3, 0.9, 1.0, 1.1, 3.0], C = 2, C_low = 0.5: MIS
    drops 3 of 6 (TIS changes the same 3), and the metric says 0.5, not 1/6."""
    w = torch.tensor([[[0.1, 0.3, 0.9, 1.0, 1.1, 3.0]]])
    rollout = SimpleNamespace(prompts=None, responses=None, mask=torch.ones_like(w), metrics={})
    source = _source_with_weights(
        w, off_policy_correction=correction, correction_cap=2.0, correction_cap_low=0.5
    )
    source.old_log_probs(rollout)
    changed = ~torch.isclose(rollout.loss_weights, w)  # truncated or dropped
    assert changed.sum() == 3 and rollout.metrics["is_cut_fraction"] == 0.5
    one_sided = _source_with_weights(w, off_policy_correction=correction, correction_cap=2.0)
    one_sided.old_log_probs(rollout)
    assert rollout.metrics["is_cut_fraction"] == pytest.approx(1 / 6)


def test_cut_fraction_keeps_the_weights_on_either_bound():
    w = torch.tensor([0.25, 0.5, 1.0, 2.0, 4.0])
    assert cut_fraction(w, 2.0, 0.5) == pytest.approx(2 / 5)  # 0.25 and 4.0; 0.5 and 2.0 kept
    assert cut_fraction(w, 2.0) == pytest.approx(1 / 5)
    assert cut_fraction(w, 2.0, 0.0) == pytest.approx(1 / 5)  # a floor of 0 cuts nothing


def test_the_stale_source_adds_to_the_metrics_a_batch_filter_wrote():
    """B3 (code review r4): the source replaced rollout.metrics, dropping dynamic sampling's."""
    w = torch.tensor([[[0.5, 1.0, 3.0]]])
    written = {"dynamic_sampling_draws": 2, "dynamic_sampling_fill": 1.0}
    rollout = SimpleNamespace(
        prompts=None, responses=None, mask=torch.ones_like(w), metrics=dict(written)
    )
    _source_with_weights(w, off_policy_correction="tis").old_log_probs(rollout)
    assert rollout.metrics.items() >= written.items()
    assert {"ess_fraction", "is_weight_max", "is_cut_fraction"} <= rollout.metrics.keys()
