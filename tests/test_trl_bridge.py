"""Tests of pgrl_helpers.hf.trl_bridge: the TrainConfig -> GRPOConfig mapping, the word-level
tokenizer, the reward wrapper, and the cross-check of TRL's loss against ours.

The mapping tests need nothing but the core package; the others skip only when the
optional extra (requirements-scale.txt) is not installed.
"""

from __future__ import annotations

import importlib.util
import math
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from pgrl_helpers.advantages import DELTA_MODES, compute_deltas  # noqa: E402
from pgrl_helpers.config import TrainConfig  # noqa: E402
from pgrl_helpers.hf import trl_bridge as tb  # noqa: E402
from pgrl_helpers.hf import trl_config as tc  # noqa: E402
from pgrl_helpers.kl import compute_kl_penalty  # noqa: E402
from pgrl_helpers.losses import (
    compute_loss,  # noqa: E402
)
from pgrl_helpers.sort_task import compute_reward, make_prompts, sort_distance_reward  # noqa: E402


def config(**overrides) -> TrainConfig:
    settings = dict(
        deltas_mode="normalized_rewards",
        loss_mode="clipped",
        epsilon=0.2,
        kl_coef=0.0,
        num_epochs=5,
        num_steps_per_epoch=2,
        num_responses=4,
        prompt_source="random",
        prompts_per_epoch=3,
        prompt_length=3,
        vocab_size=5,
        learning_rate=1e-3,
    )
    settings.update(overrides)
    return TrainConfig(**settings)


# --------------------------------------------------------------------------------------
# The mapping (no TRL needed)
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mode, scale", [("centered_rewards", "none"), ("normalized_rewards", "group")]
)
def test_supported_delta_modes_map_to_scale_rewards(mode, scale):
    assert tc.grpo_config_kwargs(config(deltas_mode=mode))["scale_rewards"] == scale


def test_every_delta_mode_is_either_supported_or_explained():
    assert set(tc.DELTA_MODE_TO_SCALE_REWARDS) | set(tc.UNSUPPORTED_DELTA_MODES) == set(DELTA_MODES)
    assert not set(tc.DELTA_MODE_TO_SCALE_REWARDS) & set(tc.UNSUPPORTED_DELTA_MODES)


@pytest.mark.parametrize("mode", sorted(tc.UNSUPPORTED_DELTA_MODES))
def test_unsupported_delta_modes_raise_naming_the_mode(mode):
    with pytest.raises(ValueError, match=f"deltas_mode '{mode}' has no GRPOTrainer equivalent"):
        tc.grpo_config_kwargs(config(deltas_mode=mode))


def test_unknown_delta_mode_lists_the_valid_ones():
    with pytest.raises(ValueError, match="normalized_rewards"):
        tc.scale_rewards_for("zscore")


def test_loss_modes():
    clipped = tc.grpo_config_kwargs(config(loss_mode="clipped", epsilon=0.3))
    assert (clipped["loss_type"], clipped["epsilon"], clipped["epsilon_high"]) == ("dapo", 0.3, 0.3)
    unclipped = tc.grpo_config_kwargs(config(loss_mode="unclipped"))
    assert unclipped["epsilon"] == 1.0 and unclipped["epsilon_high"] == math.inf
    naive = tc.grpo_config_kwargs(config(loss_mode="naive", num_steps_per_epoch=1))
    assert naive["num_iterations"] == 1 and naive["epsilon_high"] == math.inf
    with pytest.raises(ValueError, match="'naive' with num_steps_per_epoch > 1"):
        tc.grpo_config_kwargs(config(loss_mode="naive", num_steps_per_epoch=3))
    with pytest.raises(ValueError, match="does not aggregate like loss_aggregation"):
        tc.grpo_config_kwargs(config(), loss_type="sapo")


def test_counts_and_schedule():
    kw = tc.grpo_config_kwargs(config(num_steps_per_epoch=3, num_responses=6, num_epochs=7))
    assert kw["num_iterations"] == 3 and kw["num_generations"] == 6
    assert kw["per_device_train_batch_size"] == 3 * 6  # prompts x G completions
    assert kw["max_steps"] == 7 * 3 and kw["max_completion_length"] == 3
    assert kw["max_grad_norm"] == 0.0 and kw["lr_scheduler_type"] == "constant"
    lecture = tc.grpo_config_kwargs(config(prompt_source="lecture", prompts_per_epoch=None))
    assert lecture["per_device_train_batch_size"] == 3 * 4


def test_kl_penalty_maps_to_beta_times_length_and_reference_sync():
    kw = tc.grpo_config_kwargs(
        config(kl_coef=0.1, prompt_length=4, compute_ref_model_period=5, num_steps_per_epoch=2)
    )
    assert kw["beta"] == pytest.approx(0.4)
    assert kw["use_bias_correction_kl"] is False
    assert kw["sync_ref_model"] is True and kw["ref_model_mixup_alpha"] == 1.0
    assert kw["ref_model_sync_steps"] == 10
    off = tc.grpo_config_kwargs(config(kl_coef=0.0, kl_estimator="k1"))
    assert off["beta"] == 0.0 and off["sync_ref_model"] is False


@pytest.mark.parametrize("estimator", ["k1", "k2"])
def test_kl_estimators_other_than_k3_raise(estimator):
    with pytest.raises(ValueError, match=f"kl_estimator '{estimator}' has no GRPOTrainer"):
        tc.grpo_config_kwargs(config(kl_coef=0.1, kl_estimator=estimator))


def test_other_settings_that_do_not_map_raise():
    with pytest.raises(ValueError, match="freeze pitfall"):
        tc.grpo_config_kwargs(config(detach_old_log_probs=False))
    with pytest.raises(ValueError, match="G\\) >= 2"):
        tc.grpo_config_kwargs(config(num_responses=1, deltas_mode="centered_rewards"))
    with pytest.raises(ValueError, match="lacks the field"):
        tc.grpo_config_kwargs({"deltas_mode": "centered_rewards"})


def test_plain_dict_config_gives_the_same_kwargs():
    cfg = config()
    as_dict = {f: getattr(cfg, f) for f in cfg.__dataclass_fields__}
    assert tc.grpo_config_kwargs(as_dict) == tc.grpo_config_kwargs(cfg)
    # a dict from before the rename must not silently run at token level
    old = {**as_dict, "policy_objective": "sequence"}
    del old["importance_sampling_level"]
    with pytest.raises(ValueError, match="policy_objective was renamed importance_sampling_level"):
        tc.grpo_config_kwargs(old)


def test_mapping_table_has_a_row_per_setting():
    rows = tc.mapping_table(config(kl_coef=0.05))
    assert all(len(row) == 3 for row in rows)
    text = " ".join(" ".join(row) for row in rows)
    for arg in (
        "scale_rewards",
        "loss_type",
        "beta=0.15",
        "epsilon_high",
        "entropy_coef",
        "max_completion_length",
        "num_iterations",
        "num_generations",
    ):
        assert arg in text


@pytest.mark.parametrize("loss_mode", ["clipped", "unclipped"])
def test_trl_grpo_config_accepts_every_supported_mapping(tmp_path, loss_mode):
    pytest.importorskip("trl")
    from trl import GRPOConfig

    for deltas_mode in tc.DELTA_MODE_TO_SCALE_REWARDS:
        cfg = config(deltas_mode=deltas_mode, loss_mode=loss_mode, kl_coef=0.1)
        kw = tc.grpo_config_kwargs(cfg, output_dir=str(tmp_path), use_cpu=True)
        args = GRPOConfig(**kw)
        for name, value in kw.items():
            assert getattr(args, name) == value, name


# --------------------------------------------------------------------------------------
# Text form of the task (parsing needs nothing; the tokenizer needs the extra)
# --------------------------------------------------------------------------------------


def test_parse_numbers_never_raises_on_malformed_text():
    assert tb.parse_numbers(" 1 2  3", 3, 5) == [1, 2, 3]
    for bad in ["", "1 2", "1 2 3 4", "a b c", "1 2 9", "1 2 -3", "1 : 2", "1.0 2 3", "１ 2 3"]:
        assert tb.parse_numbers(bad, 3, 5) is None, bad
    assert tb.parse_prompt(tb.format_prompt([3, 1, 4])) == [3, 1, 4]
    with pytest.raises(ValueError, match="not a sort prompt"):
        tb.parse_prompt("hello :")


def test_reward_func_scores_good_and_malformed_completions():
    reward = tb.sort_reward_func("sort_distance_reward", vocab_size=5, malformed_reward=-1.0)
    assert reward.__name__ == "sort_distance_reward"
    prompts = [tb.format_prompt([2, 0, 1])] * 4
    scores = reward(prompts, ["0 1 2", "2 1 0", "0 1", "x y z"])
    assert scores == [sort_distance_reward([2, 0, 1], [0, 1, 2]), 1.0, -1.0, -1.0]
    with pytest.raises(ValueError, match="valid names"):
        tb.sort_reward_func("length_reward")


def test_tokenizer_round_trip():
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    tok = tb.build_sort_tokenizer(10)
    assert len(tok) == 4 + 10
    assert tok.convert_tokens_to_ids(list(tb.SPECIAL_TOKENS)) == [0, 1, 2, 3]
    prompts = make_prompts(50, 5, 10, generator=0).tolist()
    for prompt in prompts:
        text = tb.format_prompt(prompt)
        ids = tok(text)["input_ids"]
        assert ids == [4 + d for d in prompt] + [3]
        assert tok.decode(ids) == text
        response = " ".join(map(str, sorted(prompt)))
        assert tok.decode(
            tok(response)["input_ids"] + [tok.eos_token_id], skip_special_tokens=True
        ) == (response)
    assert tok("7 banana")["input_ids"] == [4 + 7, tok.unk_token_id]
    with pytest.raises(ValueError, match="vocab_size"):
        tb.build_sort_tokenizer(0)


# --------------------------------------------------------------------------------------
# Cross-check against TRL itself
# --------------------------------------------------------------------------------------

V, L, B, G = 5, 3, 4, 6
KL_COEF, EPSILON = 0.05, 0.2


@pytest.fixture(autouse=True)
def _accelerate_state():
    """accelerate keeps one process-wide state; a GRPOTrainer built by another test of this
    module and then dropped can leave it reset, and the module's shared ``trainer`` then fails
    with "initialize your accelerator" (seen under pytest-randomly, seed 3). Re-create it."""
    if importlib.util.find_spec("accelerate") is not None:
        from accelerate import Accelerator
        from accelerate.state import AcceleratorState

        if not AcceleratorState._shared_state:
            Accelerator(cpu=True)


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    pytest.importorskip("trl")
    import transformers
    from trl import GRPOConfig, GRPOTrainer

    transformers.logging.set_verbosity_error()
    tmp = tmp_path_factory.mktemp("trl")
    tok = tb.build_sort_tokenizer(V)
    # with beta > 0 TRL loads its reference model from the policy's path: save it first
    tb.build_tiny_gpt2(tok, seed=0).save_pretrained(tmp / "model")
    cfg = config(
        kl_coef=KL_COEF, epsilon=EPSILON, num_responses=G, prompts_per_epoch=B, num_epochs=1
    )
    kwargs = tc.grpo_config_kwargs(
        cfg, output_dir=str(tmp), report_to="none", save_strategy="no", use_cpu=True
    )
    return GRPOTrainer(
        model=str(tmp / "model"),
        reward_funcs=tb.sort_reward_func("sort_distance_reward", V),
        args=GRPOConfig(**kwargs),
        train_dataset=tb.make_sort_dataset(make_prompts(8, L, V, generator=0)),
        processing_class=tok,
    )


def fixed_batch(tok):
    prompts = make_prompts(B, L, V, generator=1)  # [batch, prompt_pos]
    g = torch.Generator().manual_seed(2)
    responses = torch.randint(0, V, (B, G, L), generator=g)  # [batch, trial, pos]
    prompt_ids = torch.tensor([tok(tb.format_prompt(p))["input_ids"] for p in prompts.tolist()])
    prompt_ids = prompt_ids[:, None, :].expand(B, G, -1)  # [batch, trial, prompt_pos]
    completion_ids = responses + len(tb.SPECIAL_TOKENS)  # digit d has id 4 + d
    return prompts, responses, prompt_ids, completion_ids, g


def test_trl_grpo_config_accepts_the_kwargs(trainer):
    args = trainer.args
    assert (args.scale_rewards, args.loss_type, args.beta) == ("group", "dapo", KL_COEF * L)
    assert trainer.epsilon_low == EPSILON and trainer.epsilon_high == EPSILON
    assert trainer.ref_model is not None


def test_trl_loss_and_gradient_equal_ours_on_a_fixed_batch(trainer):
    tok, model = trainer.processing_class, trainer.model
    prompts, responses, prompt_ids, completion_ids, g = fixed_batch(tok)
    rows = B * G
    deltas = compute_deltas(
        compute_reward(prompts, responses, "sort_distance_reward"), "normalized_rewards"
    )
    with torch.no_grad():
        log_probs0 = tb.completion_log_probs(
            model, prompt_ids.reshape(rows, -1), completion_ids.reshape(rows, -1)
        ).reshape(B, G, L)
    old = log_probs0 + 0.3 * torch.randn(log_probs0.shape, generator=g)
    ref = log_probs0 + 0.3 * torch.randn(log_probs0.shape, generator=g)
    params = [p for p in model.parameters() if p.requires_grad]

    trl = tb.trl_loss(trainer, tb.trl_loss_inputs(prompt_ids, completion_ids, deltas, old, ref))
    trl_grads = torch.autograd.grad(trl, params)
    log_probs = tb.completion_log_probs(
        model, prompt_ids.reshape(rows, -1), completion_ids.reshape(rows, -1)
    ).reshape(B, G, L)
    # exactly what training.run_policy_gradient minimises
    ours = compute_loss(log_probs, deltas, "clipped", old, EPSILON) + KL_COEF * compute_kl_penalty(
        log_probs, ref, "k3"
    )
    our_grads = torch.autograd.grad(ours, params)

    ratio = (log_probs0 - old).exp()
    assert ((ratio > 1 + EPSILON) | (ratio < 1 - EPSILON)).any(), "the batch must exercise the clip"
    assert abs(trl.item() - ours.item()) < 1e-6
    assert max((a - b).abs().max().item() for a, b in zip(trl_grads, our_grads)) < 1e-6
    # a wrong mapping is caught: beta without the factor L changes the loss
    wrong = compute_loss(log_probs, deltas, "clipped", old, EPSILON) + KL_COEF / L * (
        compute_kl_penalty(log_probs, ref, "k3")
    )
    assert abs(trl.item() - wrong.item()) > 1e-4


def test_trl_unclipped_mapping_equals_our_unclipped_loss(trainer):
    # (no new GRPOConfig here: creating one resets accelerate's global state under the trainer)
    kw = tc.grpo_config_kwargs(config(loss_mode="unclipped"))
    tok, model = trainer.processing_class, trainer.model
    prompts, responses, prompt_ids, completion_ids, g = fixed_batch(tok)
    rows = B * G
    deltas = compute_deltas(
        compute_reward(prompts, responses, "sort_distance_reward"), "centered_rewards"
    )
    with torch.no_grad():
        log_probs = tb.completion_log_probs(
            model, prompt_ids.reshape(rows, -1), completion_ids.reshape(rows, -1)
        ).reshape(B, G, L)
    old = log_probs + 0.5 * torch.randn(log_probs.shape, generator=g)
    saved = trainer.epsilon_low, trainer.epsilon_high, trainer.beta
    trainer.epsilon_low, trainer.epsilon_high, trainer.beta = kw["epsilon"], kw["epsilon_high"], 0.0
    try:
        with torch.no_grad():
            trl = tb.trl_loss(trainer, tb.trl_loss_inputs(prompt_ids, completion_ids, deltas, old))
    finally:
        trainer.epsilon_low, trainer.epsilon_high, trainer.beta = saved
    ours = compute_loss(log_probs, deltas, "unclipped", old)
    clipped = compute_loss(log_probs, deltas, "clipped", old, EPSILON)
    assert abs(trl.item() - ours.item()) < 1e-6
    assert abs(ours.item() - clipped.item()) > 1e-3  # the clip would have mattered


@pytest.mark.parametrize("mode, atol", [("centered_rewards", 1e-6), ("normalized_rewards", 2e-3)])
def test_trl_advantages_equal_our_deltas(trainer, mode, atol):
    tok = trainer.processing_class
    prompts = make_prompts(B, L, V, generator=3).tolist()
    rows = [{"prompt": tb.format_prompt(p)} for p in prompts for _ in range(G)]
    trainer.scale_rewards = tc.scale_rewards_for(mode)
    torch.manual_seed(0)
    out = trainer._generate_and_score_completions(rows)
    texts = tok.batch_decode(out["completion_ids"], skip_special_tokens=True)
    rewards = trainer.reward_funcs[0]([r["prompt"] for r in rows], texts)
    rewards = torch.tensor(rewards).reshape(B, G)
    assert rewards.std(dim=-1).gt(0).any(), "need groups whose rewards differ"
    ours = compute_deltas(rewards, mode)
    torch.testing.assert_close(out["advantages"].reshape(B, G), ours, atol=atol, rtol=0)


# --------------------------------------------------------------------------------------
# scale/: the launch configs parse, the script runs a few steps on CPU
# --------------------------------------------------------------------------------------

SCALE = Path(__file__).resolve().parents[1] / "scale"


@pytest.mark.parametrize(
    "name, kind",
    [("accelerate_deepspeed_zero2.yaml", "DEEPSPEED"), ("accelerate_fsdp2.yaml", "FSDP")],
)
def test_accelerate_configs_load(name, kind):
    pytest.importorskip("accelerate")
    from accelerate.commands.config.config_args import load_config_from_file

    loaded = load_config_from_file(str(SCALE / name))
    assert loaded.distributed_type.value == kind and loaded.num_processes == 8


def test_scale_script_smoke_run(tmp_path):
    pytest.importorskip("trl")
    spec = importlib.util.spec_from_file_location("train_sort_grpo", SCALE / "train_sort_grpo.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    summary = script.main(["--epochs", "2", "--output-dir", str(tmp_path)])
    assert summary["steps"] == 2 * 2
    assert -1.0 <= summary["last_reward"] <= 3.0
    assert (tmp_path / "init-model" / "config.json").exists()


def test_evaluate_greedy_lm_scores_a_random_model():
    pytest.importorskip("transformers")
    tok = tb.build_sort_tokenizer(V)
    model = tb.build_tiny_gpt2(tok, seed=0)
    prompts = make_prompts(6, L, V, generator=4)
    scores = tb.evaluate_greedy_lm(model, tok, prompts)
    assert set(scores) == {"mean_reward", "exact_sort", "malformed"}
    assert -1.0 <= scores["mean_reward"] <= L and 0 <= scores["exact_sort"] <= 1
    assert model.training  # restored
    with pytest.raises(ValueError, match="batch, prompt_pos"):
        tb.evaluate_greedy_lm(model, tok, prompts[0])


def test_content_split_is_disjoint_by_multiset_and_complete():
    split = tb.content_split(3, 5, seed=0, n_test=7, n_val=7)
    keys = {name: {tuple(sorted(p)) for p in prompts.tolist()} for name, prompts in split.items()}
    assert len(keys["test"]) == len(keys["val"]) == 7 and len(keys["train"]) == 35 - 14
    assert not keys["test"] & keys["train"] and not keys["val"] & keys["train"]
    assert not keys["test"] & keys["val"]
    assert sum(len(p) for p in split.values()) == 5**3  # every prompt, once
    with pytest.raises(ValueError, match="no training content"):
        tb.content_split(2, 2, n_test=2, n_val=1)


def test_fresh_test_split_is_disjoint_from_train_val_and_the_old_test_set():
    split = tb.fresh_test_split(3, 10, seed=0, n_test=22, n_val=22, fresh_seed=1)
    keys = {name: {tuple(sorted(p)) for p in prompts.tolist()} for name, prompts in split.items()}
    old = tb.content_split(3, 10, seed=0, n_test=22, n_val=22)
    old_keys = {name: {tuple(sorted(p)) for p in prompts.tolist()} for name, prompts in old.items()}
    assert len(keys["test"]) == 22 and keys["val"] == old_keys["val"]
    assert keys["old_test"] == old_keys["test"]
    assert not keys["test"] & (keys["train"] | keys["val"] | keys["old_test"])
    assert keys["test"] <= old_keys["train"]  # drawn from content nobody scored
    assert keys["old_test"] <= keys["train"] and len(keys["train"]) == len(old_keys["train"])
    total = sum(len(split[n]) for n in ("train", "val", "test"))
    assert total == 10**3  # every prompt, once
    with pytest.raises(ValueError, match="n_test"):
        tb.fresh_test_split(2, 3, n_test=2, n_val=2)


# --- what the mapping refuses ---


def test_the_trl_bridge_refuses_kl_cov_naming_it():
    from pgrl_helpers.hf import trl_config

    config = TrainConfig(loss_mode="kl_cov", num_responses=4, prompt_source="random")
    with pytest.raises(ValueError, match="loss_mode 'kl_cov' .KL-Cov"):
        trl_config.grpo_config_kwargs(config)
