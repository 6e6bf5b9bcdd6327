"""The 2025 objective family: GSPO, CISPO, SAPO, dual-clip, REINFORCE++ / TRL delta modes,
DAPO's dynamic sampling and overlong shaping / filtering.

Each mode is checked against a hand-written reference (Python loops over responses and
tokens, gradients from the closed-form derivative, not autograd) on random masked
batches, plus the identities: on-policy every ratio loss has the naive gradient, GSPO
with one token per response is GRPO, dynamic sampling drops exactly the tied groups.
"""

from __future__ import annotations

import math

import pytest
import torch

from pgrl_helpers.advantages import compute_deltas
from pgrl_helpers.config import TrainConfig
from pgrl_helpers.losses import compute_loss, compute_per_token_loss, sequence_log_ratio
from pgrl_helpers.masking import aggregate_loss
from pgrl_helpers.models import LectureModel
from pgrl_helpers.registry import BATCH_FILTERS
from pgrl_helpers.rollout import (
    Rollout,
    dynamic_sampling,
    overlong_filtering,
    overlong_penalty,
    overlong_shaping,
    tied_groups,
)
from pgrl_helpers.training import run_policy_gradient
from pgrl_helpers.trl_config import TRL_SCALE_REWARDS

EPS, EPS_HIGH, C, TAU_POS, TAU_NEG = 0.2, 0.28, 3.0, 1.0, 1.05


def batch(seed, shape=(3, 4, 5), spread=0.5):
    """Random log_probs (leaf, grad), old_log_probs, deltas and a ragged mask (>= 1 token)."""
    g = torch.Generator().manual_seed(seed)
    b, t, p = shape
    log_probs = (-torch.rand(shape, generator=g, dtype=torch.float64) * 2).requires_grad_()
    old = log_probs.detach() + spread * torch.randn(shape, generator=g, dtype=torch.float64)
    deltas = torch.randn((b, t), generator=g, dtype=torch.float64)
    lengths = torch.randint(1, p + 1, (b, t), generator=g)
    mask = (torch.arange(p) < lengths[..., None]).to(torch.float64)
    return log_probs, old, deltas, mask


def clip(x, lo, hi):
    return min(max(x, lo), hi)


def reference_token(mode, lp, old, a):
    """(loss, d loss / d lp) of one token, by hand (closed-form derivative)."""
    r = math.exp(lp - old)
    if mode == "cispo":
        w = clip(r, 1 - EPS, 1 + EPS_HIGH)
        return -w * a * lp, -w * a
    if mode == "sapo":
        tau = TAU_POS if a > 0 else TAU_NEG
        sig = 1 / (1 + math.exp(-tau * (r - 1)))
        return -(4 / tau) * sig * a, -4 * sig * (1 - sig) * r * a
    # clipped / dual_clip: which branch is active decides value and gradient
    unclipped, clipped = r * a, clip(r, 1 - EPS, 1 + EPS_HIGH) * a
    value, grad = (unclipped, -r * a) if unclipped <= clipped else (clipped, 0.0)
    if mode == "dual_clip" and a < 0 and C * a > value:
        value, grad = C * a, 0.0
    return -value, grad


@pytest.mark.parametrize("mode", ["clipped", "dual_clip", "cispo", "sapo"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_token_modes_match_a_hand_written_reference(mode, seed):
    log_probs, old, deltas, mask = batch(seed, spread=1.0)  # wide spread: every branch occurs
    loss = compute_per_token_loss(
        log_probs, deltas, mode, old, EPS, epsilon_high=EPS_HIGH, dual_clip_c=C,
        sapo_temperature_pos=TAU_POS, sapo_temperature_neg=TAU_NEG,
    )  # fmt: skip
    total = aggregate_loss(loss, mask, "token_mean")
    (grad,) = torch.autograd.grad(total, log_probs)
    count = mask.sum().item()
    b, t, p = log_probs.shape
    for i in range(b):
        for j in range(t):
            for k in range(p):
                args = (log_probs[i, j, k].item(), old[i, j, k].item(), deltas[i, j].item())
                value, dvalue = reference_token(mode, *args)
                assert loss[i, j, k].item() == pytest.approx(value, abs=1e-12)
                expected = dvalue / count if mask[i, j, k] else 0.0
                assert grad[i, j, k].item() == pytest.approx(expected, abs=1e-12)


def test_the_batches_exercise_every_branch():
    log_probs, old, deltas, _ = batch(0, spread=1.0)
    r = (log_probs.detach() - old).exp()
    a = deltas[:, :, None].expand_as(r)
    assert ((r > 1 + EPS_HIGH) & (a > 0)).any() and ((r < 1 - EPS) & (a < 0)).any()
    assert ((r > C) & (a < 0)).any()  # the dual clip binds somewhere


def reference_gspo(log_probs, old, deltas, mask):
    """GSPO eq. 5 by loops: (1/N) sum_i -min(s_i A_i, clip(s_i) A_i), and its gradient."""
    b, t, p = log_probs.shape
    total, grad = 0.0, torch.zeros(log_probs.shape, dtype=torch.float64)
    for i in range(b):
        for j in range(t):
            tokens = [k for k in range(p) if mask[i, j, k]]
            log_s = sum(log_probs[i, j, k].item() - old[i, j, k].item() for k in tokens)
            s = math.exp(log_s / len(tokens))
            a = deltas[i, j].item()
            unclipped, clipped = s * a, clip(s, 1 - EPS, 1 + EPS_HIGH) * a
            total -= min(unclipped, clipped)
            if unclipped <= clipped:  # d s / d lp_k = s / |y| for every real token
                for k in tokens:
                    grad[i, j, k] = -a * s / len(tokens)
    return total / (b * t), grad / (b * t)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_gspo_matches_a_hand_written_reference(seed):
    log_probs, old, deltas, mask = batch(seed, spread=0.3)
    loss = compute_per_token_loss(
        log_probs, deltas, "clipped", old, EPS, epsilon_high=EPS_HIGH,
        importance_sampling_level="sequence", mask=mask,
    )  # fmt: skip
    value = aggregate_loss(loss, mask, "sequence_mean")
    (grad,) = torch.autograd.grad(value, log_probs)
    ref_value, ref_grad = reference_gspo(log_probs, old, deltas, mask)
    assert value.item() == pytest.approx(ref_value, abs=1e-12)
    torch.testing.assert_close(grad, ref_grad, atol=1e-12, rtol=0)
    s = sequence_log_ratio(log_probs.detach(), old, mask).exp()
    assert ((s > 1 + EPS_HIGH) | (s < 1 - EPS)).any(), "the batch must exercise the clip"


def test_gspo_padding_cannot_leak():
    log_probs, old, deltas, mask = batch(5)
    poisoned = old.clone()
    poisoned[mask == 0] = float("nan")
    with pytest.raises(ValueError, match="old_log_probs"):  # the finite check comes first
        compute_per_token_loss(log_probs, deltas, "clipped", poisoned, mask=mask,
                               importance_sampling_level="sequence")  # fmt: skip
    far = old.clone()
    far[mask == 0] = 1e3  # a huge value in padding changes nothing
    args = dict(importance_sampling_level="sequence", mask=mask)
    a = compute_per_token_loss(log_probs, deltas, "clipped", old, **args)
    b = compute_per_token_loss(log_probs, deltas, "clipped", far, **args)
    torch.testing.assert_close(a, b)


ON_POLICY_MODES = [
    ("clipped", "token"),  # GRPO
    ("clipped", "sequence"),  # GSPO
    ("cispo", "token"),
    ("cispo", "sequence"),
    ("sapo", "token"),
    ("dual_clip", "token"),
    ("unclipped", "sequence"),
]


@pytest.mark.parametrize("aggregation", ["sequence_mean", "token_mean", "constant_normalizer"])
@pytest.mark.parametrize(("mode", "level"), ON_POLICY_MODES)
def test_on_policy_every_loss_has_the_naive_gradient(mode, level, aggregation):
    log_probs, _, deltas, mask = batch(7)
    old = log_probs.detach()

    def grad(m, lvl):
        loss = compute_per_token_loss(
            log_probs, deltas, m, None if m == "naive" else old, EPS, epsilon_high=EPS_HIGH,
            importance_sampling_level=lvl, mask=mask,
        )  # fmt: skip
        return torch.autograd.grad(aggregate_loss(loss, mask, aggregation), log_probs)[0]

    naive = grad("naive", "token")
    torch.testing.assert_close(grad(mode, level), naive, atol=1e-12, rtol=0)
    assert naive.abs().max() > 0


def test_a_wrong_sequence_ratio_breaks_the_on_policy_identity():
    # planted bug: the summed (not averaged) log-ratio gives |y| times the naive gradient
    log_probs, _, deltas, mask = batch(8)
    old = log_probs.detach()
    s = torch.exp(((log_probs - old) * mask).sum(-1, keepdim=True))
    wrong = torch.autograd.grad(
        aggregate_loss((-s * deltas[..., None]).expand_as(mask), mask, "sequence_mean"), log_probs
    )[0]
    naive = torch.autograd.grad(
        aggregate_loss(-log_probs * deltas[..., None], mask, "sequence_mean"), log_probs
    )[0]
    assert (wrong - naive).abs().max() > 1e-3


def test_gspo_with_one_token_per_response_is_grpo():
    log_probs, old, deltas, mask = batch(9, shape=(4, 6, 1), spread=0.5)
    args = dict(epsilon=EPS, epsilon_high=EPS_HIGH, mask=mask)
    grpo = compute_per_token_loss(log_probs, deltas, "clipped", old, **args)
    gspo = compute_per_token_loss(
        log_probs, deltas, "clipped", old, importance_sampling_level="sequence", **args
    )
    torch.testing.assert_close(gspo, grpo, atol=1e-15, rtol=0)
    g1 = torch.autograd.grad(grpo.sum(), log_probs)[0]
    g2 = torch.autograd.grad(gspo.sum(), log_probs)[0]
    torch.testing.assert_close(g1, g2, atol=1e-15, rtol=0)
    # ... and with longer responses it is not
    log_probs, old, deltas, mask = batch(9, shape=(4, 6, 5), spread=0.5)
    grpo = compute_per_token_loss(log_probs, deltas, "clipped", old, **{**args, "mask": mask})
    gspo = compute_per_token_loss(
        log_probs, deltas, "clipped", old, importance_sampling_level="sequence", mask=mask
    )
    assert (grpo - gspo)[mask > 0].abs().max() > 1e-3


# --------------------------------------------------------------------------------------
# Input checks
# --------------------------------------------------------------------------------------


def test_bad_inputs_raise_naming_the_argument():
    log_probs, old, deltas, mask = batch(0)
    with pytest.raises(ValueError, match="dual_clip_c"):
        compute_per_token_loss(log_probs, deltas, "dual_clip", old, dual_clip_c=1.0)
    with pytest.raises(ValueError, match="sapo_temperature_neg"):
        compute_per_token_loss(log_probs, deltas, "sapo", old, sapo_temperature_neg=0)
    with pytest.raises(ValueError, match="sapo_temperature_pos"):
        compute_per_token_loss(log_probs, deltas, "sapo", old, sapo_temperature_pos=float("nan"))
    with pytest.raises(ValueError, match="importance_sampling_level"):
        compute_per_token_loss(log_probs, deltas, "clipped", old, importance_sampling_level="seq")
    empty = mask.clone()
    empty[0, 0] = 0
    with pytest.raises(ValueError, match="mask: .*all-zero mask row"):
        compute_per_token_loss(log_probs, deltas, "clipped", old, mask=empty,
                               importance_sampling_level="sequence")  # fmt: skip
    with pytest.raises(ValueError, match="log_probs and mask"):
        compute_per_token_loss(log_probs, deltas, "clipped", old, mask=mask[..., :2])
    with pytest.raises(ValueError, match="mask must hold only 0 and 1"):
        compute_per_token_loss(log_probs, deltas, "clipped", old, mask=mask * 2)
    with pytest.raises(TypeError, match="return_clip_mask"):  # gone: clip_mask(...) instead
        compute_per_token_loss(log_probs, deltas, "cispo", old, return_clip_mask=True)
    with pytest.raises(ValueError, match="epsilon must"):
        compute_per_token_loss(log_probs, deltas, "cispo", old, epsilon=0)
    with pytest.raises(ValueError, match="needs old_log_probs"):
        compute_per_token_loss(log_probs, deltas, "sapo")
    with pytest.raises(ValueError, match="compute_per_token_loss"):
        compute_loss(log_probs, deltas, "clipped", old, mask=mask)
    with pytest.raises(ValueError, match="unknown loss mode 'gspo'"):
        compute_loss(log_probs, deltas, "gspo", old)


def test_config_refuses_bad_objective_settings():
    """Each message names the field and its bound (not the whole sentence)."""
    from pgrl_helpers.recipes import RECIPES

    dedup = RECIPES["notebook_08"]  # a valid sort-dedup run: response_length 6
    for kwargs, match in [
        ({"dual_clip_c": 0.5}, "dual_clip_c must be .*> 1,"),
        ({"dual_clip_c": True}, "dual_clip_c must be .*> 1,"),
        ({"sapo_temperature_pos": -1.0}, "sapo_temperature_pos must be a positive"),
        ({"sapo_temperature_neg": math.nan}, "sapo_temperature_neg must be a positive"),
        ({"epsilon_high": 0.0}, "epsilon_high must be a positive .* or None"),
        ({"epsilon": math.inf}, "epsilon must be a positive finite"),
        ({"kl_cov_ratio": 1.5}, r"kl_cov_ratio must be a number in \(0, 1\]"),
        ({"kl_cov_coef": -1.0}, "kl_cov_coef must be .*>= 0"),
        ({"loss_mode": "kl_cov", "policy_objective": "sequence"}, "policy_objective 'token'"),
        ({"policy_objective": "seq"}, "unknown policy_objective 'seq'; valid values are: token"),
        ({"loss_aggregation": "sum"}, "unknown loss_aggregation 'sum'"),
        ({"batch_filter": "dapo"}, "batch_filter 'dapo' .* needs task 'sort_dedup'"),
        ({**dedup, "batch_filter": "dapo", "overlong_buffer": 0}, r"overlong_buffer .* \[1, 6\]"),
        ({**dedup, "batch_filter": "overlong_shaping", "overlong_buffer": 7}, r"\[1, 6\]"),
        ({**dedup, "batch_filter": "dapo", "overlong_buffer": 2.0}, "overlong_buffer must be an"),
        ({"overlong_penalty_factor": -1}, "overlong_penalty_factor must be .*>= 0"),
        ({"overlong_penalty_factor": math.inf}, "overlong_penalty_factor must be a finite"),
        ({"dynamic_sampling_max_draws": -1}, "dynamic_sampling_max_draws must be an int >= 0"),
        ({"dynamic_sampling_max_draws": 2}, "needs batch_filter 'dynamic_sampling' or 'dapo'"),
        (
            {**dedup, "batch_filter": "overlong_filtering", "loss_aggregation": "sequence_mean"},
            "overlong_filtering.*sequence_mean",
        ),
    ]:
        with pytest.raises(ValueError, match=match):
            TrainConfig(**kwargs).validate()
    for edge in (dict(dual_clip_c=1.0 + 1e-9, kl_cov_ratio=1.0, kl_cov_coef=0.0),
                 dict(dedup, batch_filter="dapo", overlong_buffer=6, overlong_penalty_factor=0),
                 dict(dedup, batch_filter="dapo", overlong_buffer=1, dynamic_sampling_max_draws=1)):  # fmt: skip
        TrainConfig(**edge).validate()  # the bounds themselves are allowed


# --------------------------------------------------------------------------------------
# Delta modes
# --------------------------------------------------------------------------------------


def test_reinforce_pp_baseline_by_hand():
    g = torch.Generator().manual_seed(0)
    rewards = torch.rand((5, 4), generator=g, dtype=torch.float64)
    deltas = compute_deltas(rewards, "reinforce_pp_baseline", eps=0.0)
    rows = rewards.tolist()
    centered = [r - sum(row) / len(row) for row in rows for r in row]
    mean = sum(centered) / len(centered)
    std = math.sqrt(sum((c - mean) ** 2 for c in centered) / (len(centered) - 1))
    expected = torch.tensor([c / std for c in centered], dtype=torch.float64).reshape(5, 4)
    torch.testing.assert_close(deltas, expected)


def test_batch_normalized_rewards_is_trls_scale_rewards_batch():
    g = torch.Generator().manual_seed(1)
    rewards = torch.rand((5, 4), generator=g, dtype=torch.float64)
    ours = compute_deltas(rewards, TRL_SCALE_REWARDS["batch"], eps=1e-4, std_floor=1e-12)
    trl = (rewards - rewards.mean(-1, keepdim=True)) / (rewards.std() + 1e-4)  # TRL's formula
    torch.testing.assert_close(ours, trl)
    # and it is not the REINFORCE++ variant (std of the *centred* rewards)
    assert (ours - compute_deltas(rewards, "reinforce_pp_baseline")).abs().max() > 1e-3
    assert TRL_SCALE_REWARDS == {
        "group": "normalized_rewards",
        "batch": "batch_normalized_rewards",
        "none": "centered_rewards",
    }


def test_batch_delta_modes_need_two_rewards():
    for mode in ("reinforce_pp_baseline", "batch_normalized_rewards"):
        with pytest.raises(ValueError, match=f"delta mode '{mode}' .* at least 2 rewards"):
            compute_deltas(torch.ones(1, 1), mode)


# --------------------------------------------------------------------------------------
# Batch filters
# --------------------------------------------------------------------------------------


def lecture_rollout(seed=0, batch_size=6, group=4):
    policy = LectureModel(5, 6, 3, 3, seed=seed)
    prompts = torch.randint(0, 5, (batch_size, 3), generator=torch.Generator().manual_seed(seed))
    responses, mask = policy.sample(prompts, group, torch.Generator().manual_seed(seed + 1))
    g = torch.Generator().manual_seed(seed + 2)
    rewards = torch.randint(0, 3, (batch_size, group), generator=g).float()
    rewards[1] = 1.0  # two groups tie
    rewards[4] = 0.0
    return policy, Rollout(prompts, responses, mask, rewards)


@pytest.mark.parametrize("deltas_mode", ["centered_rewards", "normalized_rewards"])
def test_dynamic_sampling_drops_exactly_the_tied_groups(deltas_mode):
    policy, rollout = lecture_rollout()
    tied = tied_groups(rollout.rewards)
    assert tied.tolist() == [r.unique().numel() == 1 for r in rollout.rewards]
    assert tied.sum() == 2
    kept = dynamic_sampling(rollout)
    torch.testing.assert_close(kept.prompts, rollout.prompts[~tied])
    torch.testing.assert_close(kept.responses, rollout.responses[~tied])
    assert not tied_groups(kept.rewards).any()

    def loss_grad(r):
        deltas = compute_deltas(r.rewards, deltas_mode)
        per_token = compute_per_token_loss(
            policy.log_probs(r.prompts, r.responses), deltas, "naive"
        )
        loss = aggregate_loss(per_token, r.mask, "sequence_mean", num_sequences=24)
        grads = torch.autograd.grad(loss, list(policy.parameters()))
        return torch.cat([x.flatten() for x in grads])

    # with the same normaliser (the full batch's 24 responses) the gradient is unchanged
    full, filtered = loss_grad(rollout), loss_grad(kept)
    torch.testing.assert_close(filtered, full, atol=1e-7, rtol=1e-5)
    assert full.abs().max() > 0


def test_dynamic_sampling_keeps_an_all_tied_batch():
    _, rollout = lecture_rollout()
    rollout.rewards[:] = 0.5
    assert dynamic_sampling(rollout) is rollout


def test_overlong_penalty_is_dapo_eq_13_and_trls():
    lengths = torch.arange(0, 12)
    got = overlong_penalty(lengths, max_length=10, buffer=4)
    expected = [0.0 if y <= 6 else (-1.0 if y > 10 else (6 - y) / 4) for y in range(12)]
    assert got.tolist() == pytest.approx(expected)
    rewards = pytest.importorskip("trl.rewards")
    trl = rewards.get_soft_overlong_punishment(max_completion_len=10, soft_punish_cache=4)
    assert trl([[1] * y for y in range(1, 11)]) == pytest.approx(expected[1:11])
    with pytest.raises(ValueError, match="buffer"):
        overlong_penalty(lengths, 10, 11)
    with pytest.raises(ValueError, match="factor"):
        overlong_penalty(lengths, 10, 2, factor=-1)


def dedup_rollout():
    eos = 5  # vocab_size 5: EOS is token 5
    responses = torch.tensor(
        [[[0, 1, 5, 5, 5], [0, 1, 2, 3, 4], [2, 2, 2, 2, 5]], [[1, 5, 5, 5, 5], [3, 3, 3, 3, 3],
         [4, 5, 5, 5, 5]]]
    )  # fmt: skip
    mask = ((responses == eos).long().cumsum(-1) - (responses == eos).long() == 0).float()
    rewards = torch.tensor([[1.0, 0.2, 0.5], [0.0, 0.3, 0.1]])
    prompts = torch.zeros((2, 3), dtype=torch.long)
    return Rollout(prompts, responses, mask, rewards)


def test_overlong_shaping_and_filtering_on_the_dedup_task():
    config = TrainConfig(model="autoregressive", task="sort_dedup", prompt_source="random",
                         overlong_buffer=2, batch_filter="dapo")  # fmt: skip
    assert config.response_length == 5
    rollout = dedup_rollout()
    shaped = overlong_shaping(rollout, config)
    # lengths 3, 5, 5 / 2, 5, 2; the buffer starts above 5 - 2 = 3 tokens
    penalty = torch.tensor([[0.0, -1.0, -1.0], [0.0, -1.0, 0.0]])
    torch.testing.assert_close(shaped.rewards, rollout.rewards + penalty)
    filtered = overlong_filtering(rollout, config)
    truncated = torch.tensor([[False, True, False], [False, True, False]])
    assert (filtered.mask.sum(-1) == 0).eq(truncated).all()
    torch.testing.assert_close(filtered.mask[~truncated], rollout.mask[~truncated])
    torch.testing.assert_close(filtered.rewards, rollout.rewards)
    assert BATCH_FILTERS["dapo"](rollout, config).rewards.shape == (2, 3)


@pytest.mark.parametrize(
    "overrides",
    [
        {"loss_mode": "clipped", "policy_objective": "sequence", "epsilon": 3e-3,
         "epsilon_high": 4e-3, "loss_aggregation": "sequence_mean"},
        {"loss_mode": "cispo", "epsilon": 1.0, "epsilon_high": 4.0},
        {"loss_mode": "sapo", "deltas_mode": "reinforce_pp_baseline"},
        {"loss_mode": "dual_clip", "batch_filter": "dapo", "epsilon_high": 0.28, "kl_coef": 0.1},
        {"loss_mode": "clipped", "batch_filter": "overlong_filtering"},
        {"loss_mode": "clipped", "batch_filter": "dynamic_sampling",
         "deltas_mode": "batch_normalized_rewards"},
    ],
)  # fmt: skip
def test_the_loop_runs_every_new_mode(overrides):
    config = TrainConfig(
        model="autoregressive", task="sort_dedup", prompt_source="random", embedding_dim=8,
        num_heads=2, num_layers=1, num_epochs=2, num_steps_per_epoch=2, prompts_per_epoch=8,
        num_responses=4, reward_fn="dedup_position_reward", num_eval_prompts=16, eval_every=2,
        **overrides,
    )  # fmt: skip
    history = run_policy_gradient(config)
    steps = history.steps()
    assert len(steps) == 4 and all(math.isfinite(s["loss"]) for s in steps)
    assert any(s["grad_norm"] > 0 for s in steps)


def test_clip_family_formulas_match_autograd_and_a_wrong_one_does_not():
    from pgrl_helpers import clip_family

    points = [0.3, 0.79, 0.81, 1.0, 1.0001, 1.19, 1.21, 1.29, 1.99, 2.01, 2.9, 3.1, 5.0]
    for name in clip_family.CLIP_FAMILY:
        for sign in (1, -1):
            for r in points:
                formula = clip_family.weight_formula(name, r, sign)
                assert clip_family.autograd_weight(name, r, sign) == pytest.approx(formula)
    # planted bug: PPO-clip without the zero beyond the clip is caught at r = 1.5, A > 0
    assert clip_family.autograd_weight("PPO-clip", 1.5, 1) != pytest.approx(1.5)
