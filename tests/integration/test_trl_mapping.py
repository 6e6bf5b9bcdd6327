"""The TrainConfig -> GRPOConfig mapping checked on TRL itself.

Each test builds a real ``GRPOTrainer`` from ``grpo_config_kwargs(config)`` and runs its
``compute_loss`` on one fixed batch, against the loss our loop minimises for ``config``
(built from the same package functions ``training.run_policy_gradient`` uses: per-token
loss, ``aggregate_loss`` over the response mask, KL summed per response and averaged over
responses, minus ``entropy_coef`` x the mean entropy over real tokens). Variable-length
batches have completions of different lengths (EOS, then padding) and some cut off
without EOS, as the autoregressive sort_dedup task produces.

Skipped when the optional extra (requirements-scale.txt) is not installed.
"""

from __future__ import annotations

import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from pgrl_helpers.config import TrainConfig  # noqa: E402
from pgrl_helpers.hf import trl_bridge as tb  # noqa: E402
from pgrl_helpers.hf import trl_config as tc  # noqa: E402
from pgrl_helpers.kl import kl_estimate  # noqa: E402
from pgrl_helpers.losses import compute_per_token_loss  # noqa: E402
from pgrl_helpers.masking import (  # noqa: E402
    aggregate_loss,
    high_entropy_mask,
    masked_mean,
    masked_normalize,
)
from pgrl_helpers.sort_task import make_prompts  # noqa: E402

pytest.importorskip("trl")

V, L, B, G = 5, 3, 4, 6
MAX_LEN = 6  # sort_dedup: most tokens per response, EOS included (> L + 1)
TOL = 1e-6


def fixed_config(**overrides) -> TrainConfig:
    settings = dict(
        deltas_mode="centered_rewards",
        loss_mode="clipped",
        epsilon=0.2,
        num_epochs=1,
        num_steps_per_epoch=2,
        num_responses=G,
        prompt_source="random",
        prompts_per_epoch=B,
        prompt_length=L,
        vocab_size=V,
        reward_fn="sort_distance_reward",
    )
    settings.update(overrides)
    return TrainConfig(**settings)


def dedup_config(**overrides) -> TrainConfig:
    settings = dict(
        task="sort_dedup",
        model="autoregressive",
        reward_fn="dedup_position_reward",
        max_response_length=MAX_LEN,
        embedding_dim=16,
    )
    settings.update(overrides)
    return fixed_config(**settings)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("trl-map")
    tok = tb.build_sort_tokenizer(V)
    # TRL loads the policy (and, with beta > 0, its reference) from this path
    tb.build_tiny_gpt2(tok, seed=0).save_pretrained(tmp / "model")
    return tmp


def make_trainer(cfg: TrainConfig, model_dir):
    """A real GRPOTrainer built from the mapping; use it before building another config."""
    import transformers
    from trl import GRPOConfig, GRPOTrainer

    transformers.logging.set_verbosity_error()
    kwargs = tc.grpo_config_kwargs(
        cfg, output_dir=str(model_dir / "out"), report_to="none", save_strategy="no", use_cpu=True
    )
    tok = tb.build_sort_tokenizer(V)
    return GRPOTrainer(
        model=str(model_dir / "model"),
        reward_funcs=tb.sort_reward_func("sort_distance_reward", V),
        args=GRPOConfig(**kwargs),
        train_dataset=tb.make_sort_dataset(make_prompts(8, L, V, generator=0)),
        processing_class=tok,
    )


def fixed_batch(tok, pos: int, variable: bool, seed: int = 2):
    """(prompt_ids [B, G, prompt_pos], completion_ids [B, G, pos], mask [B, G, pos], g)."""
    g = torch.Generator().manual_seed(seed)
    prompts = make_prompts(B, L, V, generator=1)
    prompt_ids = torch.tensor([tok(tb.format_prompt(p))["input_ids"] for p in prompts.tolist()])
    prompt_ids = prompt_ids[:, None, :].expand(B, G, -1)
    completion_ids = torch.randint(0, V, (B, G, pos), generator=g) + len(tb.SPECIAL_TOKENS)
    mask = torch.ones(B, G, pos)
    if variable:
        # lengths 1 .. pos counting EOS; a quarter of the rows never emit EOS (cut off)
        lengths = torch.randint(1, pos + 1, (B, G), generator=g)
        cut = torch.rand(B, G, generator=g) < 0.25
        slots = torch.arange(pos)
        eos_at = (slots == (lengths - 1)[..., None]) & ~cut[..., None]
        after = (slots > (lengths - 1)[..., None]) & ~cut[..., None]
        completion_ids = torch.where(eos_at, tok.eos_token_id, completion_ids)
        completion_ids = torch.where(after, tok.pad_token_id, completion_ids)
        mask = (~after).float()
        assert mask.sum(-1).unique().numel() > 2, "the batch must have several lengths"
    return prompt_ids, completion_ids, mask, g


def our_loss(cfg, log_probs, entropy, deltas, old, ref, mask):
    """What run_policy_gradient minimises for cfg on this batch (training.py, step 4)."""
    per_token = compute_per_token_loss(
        log_probs, deltas, cfg.loss_mode, old, cfg.epsilon, epsilon_high=cfg.epsilon_high,
        importance_sampling_level=cfg.importance_sampling_level, mask=mask,
    )  # fmt: skip
    if cfg.top_entropy_quantile < 1:  # objective.apply_token_remedies
        per_token = per_token * high_entropy_mask(entropy, mask, cfg.top_entropy_quantile)
    loss = aggregate_loss(per_token, mask, cfg.loss_aggregation)
    if cfg.kl_coef > 0:  # KL per response (sum over real tokens), mean over responses
        kl = masked_normalize(kl_estimate(log_probs, ref, "k3"), mask, float(B * G))
        loss = loss + cfg.kl_coef * kl
    if cfg.entropy_coef > 0:
        loss = loss - cfg.entropy_coef * masked_mean(entropy, mask)
    return loss


def compare(cfg, model_dir, variable: bool, ratio: float | None = None, seed: int = 2):
    """(TRL's loss, our loss, max |gradient difference|) for cfg on one fixed batch."""
    trainer = make_trainer(cfg, model_dir)
    tok, model = trainer.processing_class, trainer.model
    pos = trainer.args.max_completion_length
    prompt_ids, completion_ids, mask, g = fixed_batch(tok, pos, variable, seed)
    rows = B * G

    def forward():
        lp, ent = tb.completion_log_probs(
            model, prompt_ids.reshape(rows, -1), completion_ids.reshape(rows, -1), True
        )
        return lp.reshape(B, G, pos), ent.reshape(B, G, pos)

    with torch.no_grad():
        log_probs0, _ = forward()
    if ratio is None:
        old = log_probs0 + 0.3 * torch.randn(log_probs0.shape, generator=g)
    else:  # every token's ratio pi / pi_old is exactly `ratio`
        old = log_probs0 - math.log(ratio)
    ref = log_probs0 + 0.3 * torch.randn(log_probs0.shape, generator=g)
    deltas = torch.randn(B, G, generator=g)
    params = [p for p in model.parameters() if p.requires_grad]

    inputs = tb.trl_loss_inputs(prompt_ids, completion_ids, deltas, old, ref, mask=mask)
    trl = tb.trl_loss(trainer, inputs)
    trl_grads = torch.autograd.grad(trl, params)
    log_probs, entropy = forward()
    ours = our_loss(cfg, log_probs, entropy, deltas, old, ref, mask)
    our_grads = torch.autograd.grad(ours, params)
    grad_diff = max((a - b).abs().max().item() for a, b in zip(trl_grads, our_grads))
    return trl.item(), ours.item(), grad_diff


def our_value(cfg, model_dir, variable, ratio=None, seed=2):
    return compare(cfg, model_dir, variable, ratio, seed)[1]


# --------------------------------------------------------------------------------------
# 1. clip-higher
# --------------------------------------------------------------------------------------


def test_clip_higher_maps_to_trl_epsilon_high(model_dir):
    cfg = fixed_config(epsilon=0.2, epsilon_high=0.28)
    kw = tc.grpo_config_kwargs(cfg)
    assert (kw["epsilon"], kw["epsilon_high"]) == (0.2, 0.28)
    # every ratio is 1.24: inside [0.8, 1.28], outside the symmetric [0.8, 1.2]
    trl, ours, grad_diff = compare(cfg, model_dir, variable=False, ratio=1.24)
    assert abs(trl - ours) < TOL and grad_diff < TOL
    symmetric = our_value(fixed_config(epsilon=0.2), model_dir, variable=False, ratio=1.24)
    assert abs(ours - symmetric) > 1e-3, "the batch must tell the two clip ranges apart"


def test_gspo_maps_to_trl_importance_sampling_level(model_dir):
    cfg = fixed_config(importance_sampling_level="sequence", loss_aggregation="sequence_mean")
    kw = tc.grpo_config_kwargs(cfg)
    assert (kw["importance_sampling_level"], kw["loss_type"]) == ("sequence", "grpo")
    assert "importance_sampling_level" not in tc.grpo_config_kwargs(fixed_config())
    trl, ours, grad_diff = compare(cfg, model_dir, variable=False)
    assert abs(trl - ours) < TOL and grad_diff < TOL
    token = fixed_config(loss_aggregation="sequence_mean")
    assert abs(ours - our_value(token, model_dir, variable=False)) > 1e-3, "levels must differ"


@pytest.mark.parametrize("variable", [False, True])
def test_top_entropy_quantile_maps_to_trl(model_dir, variable):
    """The high-entropy-token mask (arXiv 2506.01939) is TRL's own field, with one step per
    batch (then the sampling policy's entropies are the step's) and no entropy bonus."""
    make = dedup_config if variable else fixed_config
    cfg = make(top_entropy_quantile=0.2, num_steps_per_epoch=1)
    assert tc.grpo_config_kwargs(cfg)["top_entropy_quantile"] == 0.2
    trl, ours, grad_diff = compare(cfg, model_dir, variable)
    assert abs(trl - ours) < TOL and grad_diff < TOL
    without = our_value(make(num_steps_per_epoch=1), model_dir, variable)
    assert abs(ours - without) > 1e-3, "the mask must change the loss"
    for refused in (dict(num_steps_per_epoch=2), dict(num_steps_per_epoch=1, entropy_coef=0.1)):
        with pytest.raises(ValueError, match=r"^top_entropy_quantile=0.2 maps to TRL's only"):
            tc.grpo_config_kwargs(make(top_entropy_quantile=0.2, **refused))


# --------------------------------------------------------------------------------------
# 2. entropy bonus
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("variable", [False, True])
def test_entropy_bonus_maps_to_trl_entropy_coef(model_dir, variable):
    make = dedup_config if variable else fixed_config
    cfg = make(entropy_coef=0.05)
    assert tc.grpo_config_kwargs(cfg)["entropy_coef"] == 0.05
    trl, ours, grad_diff = compare(cfg, model_dir, variable)
    assert abs(trl - ours) < TOL and grad_diff < TOL
    without = compare(make(), model_dir, variable)[1]
    assert abs(ours - without) > 1e-3, "the bonus must change the loss"


# --------------------------------------------------------------------------------------
# 3. loss aggregation, 4. variable-length responses (max_completion_length, beta)
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "aggregation, loss_type, kl_coef",
    [
        ("token_mean", "dapo", 0.0),
        ("sequence_mean", "grpo", 0.0),
        ("constant_normalizer", "dr_grpo", 0.0),
        ("constant_normalizer", "dr_grpo", 0.05),
    ],
)
def test_loss_aggregation_on_variable_length_batch(model_dir, aggregation, loss_type, kl_coef):
    cfg = dedup_config(loss_aggregation=aggregation, kl_coef=kl_coef)
    kw = tc.grpo_config_kwargs(cfg)
    assert kw["loss_type"] == loss_type
    assert kw["max_completion_length"] == cfg.response_length == MAX_LEN
    assert kw["beta"] == pytest.approx(kl_coef * MAX_LEN)
    trl, ours, grad_diff = compare(cfg, model_dir, variable=True)
    assert abs(trl - ours) < TOL and grad_diff < TOL


def test_the_aggregations_differ_on_the_variable_length_batch(model_dir):
    """The batch is a real test: each aggregation gives a different loss on it."""
    values = [
        our_value(dedup_config(loss_aggregation=a), model_dir, variable=True)
        for a in tc.AGGREGATION_TO_LOSS_TYPE
    ]
    assert min(abs(a - b) for i, a in enumerate(values) for b in values[i + 1 :]) > 1e-3


@pytest.mark.parametrize("aggregation", ["token_mean", "sequence_mean"])
def test_kl_on_variable_length_without_constant_normaliser_raises(aggregation):
    cfg = dedup_config(loss_aggregation=aggregation, kl_coef=0.05)
    with pytest.raises(ValueError, match="no constant beta matches.*constant_normalizer"):
        tc.grpo_config_kwargs(cfg)


def test_fixed_length_beta_and_completion_length():
    for aggregation, loss_type in tc.AGGREGATION_TO_LOSS_TYPE.items():
        kw = tc.grpo_config_kwargs(fixed_config(loss_aggregation=aggregation, kl_coef=0.1))
        assert kw["loss_type"] == loss_type
        assert kw["max_completion_length"] == L and kw["beta"] == pytest.approx(0.1 * L)


def test_explicit_loss_type_must_aggregate_the_same():
    # fixed length: every loss type is the token mean
    for loss_type in tc.LOSS_TYPES:
        assert tc.grpo_config_kwargs(fixed_config(), loss_type)["loss_type"] == loss_type
    assert tc.grpo_config_kwargs(dedup_config(), "bnpo")["loss_type"] == "bnpo"
    with pytest.raises(ValueError, match="does not aggregate like loss_aggregation 'token_mean'"):
        tc.grpo_config_kwargs(dedup_config(), "grpo")
    with pytest.raises(ValueError, match="loss_type 'cispo'"):
        tc.grpo_config_kwargs(fixed_config(), "cispo")


def test_overriding_max_completion_length_under_dr_grpo_raises():
    cfg = dedup_config(loss_aggregation="constant_normalizer")
    with pytest.raises(ValueError, match="max_completion_length=9 overrides"):
        tc.grpo_config_kwargs(cfg, max_completion_length=9)
    # harmless when nothing depends on it (token mean, no KL)
    assert tc.grpo_config_kwargs(dedup_config(), max_completion_length=9)
