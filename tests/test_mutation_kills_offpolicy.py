"""offpolicy: the cases mutation testing found unchecked (tests/MUTATION.md).

The log-weight clamp on both sides, padding weight 1 at sequence level, the cap's edges
(w == C is kept by MIS), the metrics StaleSource logs computed by hand, which old
log-probs each correction returns, every off-policy field check on its own, and error
messages matched from their start so that they name the offending argument.
"""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import pytest
import torch

from pgrl_helpers.models import LectureModel
from pgrl_helpers.offpolicy import (
    MAX_LOG_WEIGHT,
    StaleSource,
    check_off_policy_fields,
    corrected_weights,
    effective_sample_size,
    importance_weights,
    mismatched_sampler,
    weight_units,
)

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
        match=re.escape("unknown correction_level 'group'; valid: ('token', 'sequence')"),
    ):
        importance_weights(TRAIN, SAMPLER, MASK, "group")
    shapes = "log_p_train [1, 2, 3], log_p_sampler [1, 2, 3] and mask [1, 2, 2] must have one shape"
    with pytest.raises(ValueError, match="^" + re.escape(shapes) + "$"):
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
        match=re.escape(f"correction_cap must be a number > 0 (inf allowed), got {cap!r}"),
    ):
        corrected_weights(torch.ones(2), "tis", cap)


def test_an_unknown_correction_is_named():
    valid = "('none', 'recompute', 'tis', 'mis')"
    with pytest.raises(
        ValueError, match="^" + re.escape(f"unknown off_policy_correction 'vtrace'; valid: {valid}")
    ):
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
            match=re.escape(f"weights must be a non-empty 1-D tensor, got {list(bad.shape)}"),
        ):
            effective_sample_size(bad)
    for bad in (torch.tensor([1.0, -0.5]), torch.tensor([1.0, math.inf]), torch.tensor([math.nan])):
        with pytest.raises(ValueError, match="^weights must be finite and >= 0$"):
            effective_sample_size(bad)
    with pytest.raises(
        ValueError, match="^weights are all zero: the effective sample size is undefined$"
    ):
        effective_sample_size(torch.zeros(2))


def test_weight_units_per_token_and_per_sequence():
    w = torch.tensor([[[2.0, 3.0, 1.0], [5.0, 5.0, 5.0]]])
    assert weight_units(w, MASK, "token").tolist() == [2.0, 3.0, 5.0, 5.0, 5.0]
    assert weight_units(w, MASK, "sequence").tolist() == [2.0, 5.0]


def _config(**fields):
    base = dict(
        staleness=0, sampler_temperature=1.0, sampler_dtype="float32",
        off_policy_correction="none", correction_level="token", correction_cap=2.0,
        rollout_source="on_policy",
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
    "field, value, message",
    [
        ("staleness", -1, "staleness must be an int >= 0 (epochs of lag), got -1"),
        ("staleness", True, "staleness must be an int >= 0 (epochs of lag), got True"),
        ("staleness", 1.0, "staleness must be an int >= 0 (epochs of lag), got 1.0"),
        ("sampler_temperature", 0, "sampler_temperature must be a positive finite number, got 0"),
        ("sampler_temperature", True, "sampler_temperature must be a positive finite number, got True"),
        ("sampler_temperature", math.inf, "sampler_temperature must be a positive finite number, got inf"),
        ("sampler_temperature", "1", "sampler_temperature must be a positive finite number, got '1'"),
        ("sampler_dtype", "int8", "unknown sampler_dtype 'int8'; valid: ('float32', 'bfloat16', 'float16')"),
        ("off_policy_correction", "vtrace", "unknown off_policy_correction 'vtrace'; valid: ('none', 'recompute', 'tis', 'mis')"),
        ("correction_level", "batch", "unknown correction_level 'batch'; valid: ('token', 'sequence')"),
        ("correction_cap", 0, "correction_cap must be a number > 0 (inf allowed), got 0"),
    ],
)  # fmt: skip
def test_each_bad_field_is_named(field, value, message):
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        check_off_policy_fields(_config(rollout_source="stale", **{field: value}))


@pytest.mark.parametrize(
    "field, value",
    [("staleness", 1), ("sampler_temperature", 2.0), ("sampler_dtype", "float16"),
     ("off_policy_correction", "tis")],
)  # fmt: skip
def test_each_stale_only_field_alone_needs_the_stale_source(field, value):
    message = (
        "staleness, sampler_temperature, sampler_dtype and off_policy_correction act only "
        "with rollout_source 'stale' (got rollout_source 'on_policy')"
    )
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
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
    rollout = SimpleNamespace(prompts=PROMPTS, responses=responses, mask=mask)
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
    source.after_optimizer_step()  # nothing to do: the versions are taken in sample


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
    rollout = SimpleNamespace(prompts=PROMPTS, responses=responses, mask=mask)
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
    rollout = SimpleNamespace(prompts=PROMPTS, responses=responses, mask=mask)
    with torch.no_grad():
        source.old_log_probs(rollout)
        behaviour = mismatched_sampler(policy, 1.7).log_probs(PROMPTS, responses)
        proximal = policy.log_probs(PROMPTS, responses)
    raw = importance_weights(proximal, behaviour, mask, "token")
    assert (raw < 0.9).any()
    expected = corrected_weights(raw, correction, 1.2, cap_low=0.9)
    torch.testing.assert_close(rollout.loss_weights, expected)
    assert not torch.equal(expected, corrected_weights(raw, correction, 1.2))
