"""The code review's probes (issue 50; ``shared/reviews/r5/code_review_probes``), each refused early.

Every setting the review found accepted and then ignored, or accepted and then crashing
mid-run, is refused here at construction or by ``TrainConfig.validate()`` /
``grpo_config_kwargs``, with a message that names the setting and what to do:

* p1 (B3): GSPO with overlong filtering, and every filter that can empty a mask row against
  every setting that reads one (run for real: refused, or it trains over emptied rows);
* p2 (B1): the TRL bridge is an allow-list; ``top_entropy_quantile`` is mapped, not dropped;
* p3 (B5): ``RealLMSortTask`` weights that are empty, NaN, negative or all zero;
* p4 (B4): the config fields that were never type-checked (every field: ``test_config.py``);
* p5 (B9): ``max_rewards`` with rewards that can be negative;
* B8: ``kl_estimator`` under ``kl_in_reward``, never read (``deltas_mode`` under 'gae', never read
  either: ``tests/test_config.py``);
* B10: Clip-Cov at GSPO's sequence level.
"""

from __future__ import annotations

import math

import pytest
import torch

from pgrl_helpers import registry
from pgrl_helpers.advantages import compute_deltas
from pgrl_helpers.config import TrainConfig
from pgrl_helpers.rollout import NEEDS_EVERY_ROW, ROW_EMPTYING_FILTERS
from pgrl_helpers.training import run_policy_gradient

#: p1's run: the variable-length task with responses short enough that many are cut off.
P1 = dict(
    task="sort_dedup", model="autoregressive", prompt_source="random", prompt_length=3,
    vocab_size=5, reward_fn="dedup_position_reward", embedding_dim=16, num_heads=2,
    prompts_per_epoch=8, num_responses=4, num_epochs=3, num_steps_per_epoch=2,
    loss_mode="clipped", loss_aggregation="token_mean", num_eval_prompts=4,
    max_response_length=4, eval_every=3,
)  # fmt: skip

#: The variable-length task and its policy, nothing else of P1.
DEDUP = {
    k: P1[k] for k in ("task", "model", "reward_fn", "prompt_source", "embedding_dim", "num_heads")
}


def test_p1_gspo_with_overlong_filtering_is_refused_by_validate():
    config = TrainConfig(
        **P1, importance_sampling_level="sequence", batch_filter="overlong_filtering"
    )
    with pytest.raises(ValueError, match=r"overlong_filtering.*importance_sampling_level 'sequence'.*use importance_sampling_level 'token'"):  # fmt: skip
        config.validate()


STALE_SEQUENCE = dict(rollout_source="stale", staleness=1, correction_level="sequence")

#: Every setting that reads a response's mask row in its own way, and its value here.
ROW_READERS = {
    "GSPO's sequence ratio": dict(importance_sampling_level="sequence"),
    "sequence_mean": dict(loss_aggregation="sequence_mean"),
    "constant_normalizer": dict(loss_aggregation="constant_normalizer"),
    "REINFORCE++ token whitening": dict(deltas_mode="reinforce_pp_baseline"),
    "PPO critic (GAE)": dict(advantage_estimator="gae"),
    "KL in the reward": dict(advantage_estimator="gae", kl_in_reward=True, kl_coef=0.1),
    "stale + sequence TIS": dict(STALE_SEQUENCE, off_policy_correction="tis"),
    "stale + sequence MIS": dict(STALE_SEQUENCE, off_policy_correction="mis"),
    "KL k1 per response": dict(kl_coef=0.1, kl_estimator="k1"),
    "KL k3, adaptive": dict(kl_coef=0.1, kl_target=0.05),
    "entropy bonus": dict(entropy_coef=0.1),
    "Clip-Cov": dict(clip_cov_ratio=0.2),
    "high-entropy tokens": dict(top_entropy_quantile=0.5),
    "KL-Cov": dict(loss_mode="kl_cov"),
    "CISPO": dict(loss_mode="cispo"),
    "SAPO": dict(loss_mode="sapo"),
    "dual-clip": dict(loss_mode="dual_clip"),
}


@pytest.mark.parametrize("batch_filter", ROW_EMPTYING_FILTERS)
@pytest.mark.parametrize("reader", ROW_READERS)
def test_p1_every_row_emptying_filter_against_every_row_reader(batch_filter, reader, monkeypatch):
    """validate() refuses the pair, or the run trains over batches with emptied rows."""
    config = TrainConfig(**{**P1, "batch_filter": batch_filter, **ROW_READERS[reader]})
    refused = [f for f, (value, _) in NEEDS_EVERY_ROW.items() if getattr(config, f) == value]
    if refused:
        with pytest.raises(ValueError, match=f"{batch_filter}.*{refused[0]}"):
            config.validate()
        return
    emptied = []
    original = registry.BATCH_FILTERS[batch_filter]

    def spy(rollout, cfg):
        out = original(rollout, cfg)
        emptied.append(int((out.mask.sum(-1) == 0).sum()))
        return out

    monkeypatch.setitem(registry.BATCH_FILTERS, batch_filter, spy)
    history = run_policy_gradient(config)
    assert history.stop_reason == "max_epochs"
    assert sum(emptied) > 0, "the run must have met emptied rows"


def test_p1_the_row_readers_cover_the_refused_settings():
    for field, (value, _) in NEEDS_EVERY_ROW.items():
        assert any(r.get(field) == value for r in ROW_READERS.values()), field


@pytest.mark.parametrize(
    "settings, field",
    [
        (
            dict(DEDUP, advantage_estimator="gae", loss_aggregation="constant_normalizer"),
            "advantage_estimator",
        ),
        (dict(clip_cov_ratio=0.01), "clip_cov_ratio"),
        (dict(batch_filter="dynamic_sampling"), "batch_filter"),
        (dict(rollout_source="stale", staleness=2, off_policy_correction="tis"), "rollout_source"),
        (dict(kl_coef=0.04, kl_target=0.1), "kl_target"),
        (dict(dual_clip_c=5.0), "dual_clip_c"),  # not read by 'clipped' either: still refused
        (dict(gamma=0.9), "gamma"),
    ],
)
def test_p2_the_trl_bridge_refuses_every_unmapped_non_default_field(settings, field):
    from pgrl_helpers.hf.trl_config import grpo_config_kwargs

    config = TrainConfig(loss_mode="clipped", num_steps_per_epoch=1, **settings)
    with pytest.raises(ValueError, match=rf"^{field}=.* has no GRPOConfig equivalent.*leave {field} at its default"):  # fmt: skip
        grpo_config_kwargs(config)


def test_p2_top_entropy_quantile_is_mapped_not_dropped():
    from pgrl_helpers.hf.trl_config import grpo_config_kwargs

    config = TrainConfig(loss_mode="clipped", num_steps_per_epoch=1, top_entropy_quantile=0.2)
    assert grpo_config_kwargs(config)["top_entropy_quantile"] == 0.2


def test_p2_a_dict_config_is_checked_the_same_way():
    from pgrl_helpers.hf.trl_config import grpo_config_kwargs

    base = {f: getattr(TrainConfig(loss_mode="clipped"), f) for f in (
        "deltas_mode", "loss_mode", "epsilon", "kl_coef", "entropy_coef", "kl_estimator",
        "compute_ref_model_period", "num_epochs", "num_steps_per_epoch", "num_responses",
        "prompt_length", "learning_rate", "seed",
    )}  # fmt: skip
    assert grpo_config_kwargs(base)["loss_type"] == "dapo"
    with pytest.raises(ValueError, match=r"^batch_filter='dapo' has no GRPOConfig"):
        grpo_config_kwargs({**base, "batch_filter": "dapo"})
    with pytest.raises(ValueError, match=r"no field 'learnin_rate'; did you mean learning_rate"):
        grpo_config_kwargs({**base, "learnin_rate": 0.1})


@pytest.mark.parametrize(
    "weights, match",
    [
        ({}, r"weights is empty"),
        ({"exact": math.nan}, r"weights\['exact'\] must be"),
        ({"exact": -1.0}, r"weights\['exact'\] must be .*>= 0"),
        ({"exact": 0.0, "format": 0}, r"weights are all 0"),
        ({"exact": True}, r"weights\['exact'\] must be"),
    ],
)
def test_p3_real_lm_task_refuses_meaningless_weights(weights, match):
    from pgrl_helpers.hf.real_lm_task import RealLMSortTask

    with pytest.raises(ValueError, match=match):
        RealLMSortTask(None, weights=weights)


def test_p3_real_lm_task_keeps_valid_weights():
    from pgrl_helpers.hf.real_lm_task import RealLMSortTask

    assert RealLMSortTask(None, weights={"exact": 1.0, "format": 0.0}).weights["exact"] == 1.0


@pytest.mark.parametrize(
    "settings, match",
    [
        (dict(detach_old_log_probs=0), r"^detach_old_log_probs must be True or False, got 0"),
        (dict(detach_old_log_probs="False"), r"^detach_old_log_probs must be True or False"),
        (dict(progress="no"), r"^progress must be True or False"),
        (dict(profile_time=1), r"^profile_time must be True or False"),
        (dict(seed=-1), r"^seed must be an int >= 0"),
        (dict(eval_seed=2.5), r"^eval_seed must be an int >= 0"),
        (dict(seed=True), r"^seed must be an int >= 0"),
        (dict(num_threads=True), r"^num_threads must be a positive int"),
    ],
)
def test_p4_untyped_fields_are_refused_by_validate(settings, match):
    with pytest.raises((TypeError, ValueError), match=match):
        TrainConfig(**settings).validate()


def test_p4_an_unknown_field_names_the_closest():
    with pytest.raises(TypeError, match=r"^TrainConfig has no field 'learnin_rate'; did you mean learning_rate\?"):  # fmt: skip
        TrainConfig(learnin_rate=1e-3)
    with pytest.raises(TypeError, match=r"no field 'xyzzy'; config_fields\(\) lists them"):
        TrainConfig(xyzzy=1)


def test_p5_max_rewards_refuses_negative_rewards():
    with pytest.raises(ValueError, match=r"^rewards: deltas_mode 'max_rewards' needs rewards >= 0.*minimum of -3"):  # fmt: skip
        compute_deltas(torch.tensor([[-1.0, -2.0, -3.0]]), "max_rewards")
    # decided and documented: a tied group keeps its rewards (plain REINFORCE on that group)
    tied = torch.tensor([[1.0, 1.0, 1.0]])
    assert compute_deltas(tied, "max_rewards").tolist() == [[1.0, 1.0, 1.0]]
    assert compute_deltas(torch.tensor([[0.0, 2.0, 1.0]]), "max_rewards").tolist() == [
        [0.0, 2.0, 0.0]
    ]


@pytest.mark.parametrize(
    "settings, field",
    [
        (dict(reward_fn="dedup_position_reward"), "reward_fn 'dedup_position_reward'"),
        (dict(reward_fn="dedup_exact_reward", batch_filter="overlong_shaping"), "batch_filter"),
        (dict(reward_fn="dedup_exact_reward", batch_filter="dapo"), "batch_filter 'dapo'"),
    ],
)
def test_p5_max_rewards_with_a_reward_that_can_be_negative_is_refused(settings, field):
    dedup = {k: v for k, v in DEDUP.items() if k != "reward_fn"}
    config = TrainConfig(**dedup, deltas_mode="max_rewards", **settings)
    with pytest.raises(ValueError, match=rf"^deltas_mode 'max_rewards' .* {field}.*use deltas_mode 'centered_rewards'"):  # fmt: skip
        config.validate()
    TrainConfig(**{**dedup, **settings, "reward_fn": "dedup_exact_reward"}).validate()


def test_b8_a_kl_estimator_kl_in_reward_never_reads_is_refused():
    gae = dict(P1, advantage_estimator="gae", loss_aggregation="token_mean")
    with pytest.raises(ValueError, match=r"^kl_estimator 'k2' would be ignored.*set kl_estimator 'k1'"):  # fmt: skip
        TrainConfig(**gae, kl_in_reward=True, kl_coef=0.1, kl_estimator="k2").validate()
    for estimator in ("k1", "k3"):  # k1: what is used; k3: the default
        TrainConfig(**gae, kl_in_reward=True, kl_coef=0.1, kl_estimator=estimator).validate()


def test_b10_clip_cov_is_refused_at_the_sequence_level():
    config = TrainConfig(
        loss_mode="clipped", clip_cov_ratio=0.1, importance_sampling_level="sequence"
    )
    with pytest.raises(
        ValueError, match=r"^clip_cov_ratio > 0 .*importance_sampling_level 'token'"
    ):
        config.validate()
