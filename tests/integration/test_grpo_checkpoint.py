"""scale/grpo_checkpoint.py: TRL's GRPOTrainer on a checkpoint loaded by path, end to end."""

import inspect
import json
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scale"))

import grpo_checkpoint  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from pgrl_helpers.hf import checkpoint as ck  # noqa: E402

EOS = 1  # id of <|im_end|> in ck.build_tokenizer()


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return ck.build_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny", ck.TINY)


def small_run(path, out, *extra):
    return grpo_checkpoint.train(
        [
            "--model",
            str(path),
            "--output-dir",
            str(out),
            "--max-steps",
            "2",
            "--prompts-per-step",
            "2",
            "--num-generations",
            "2",
            "--eval-every",
            "1",
            "--eval-samples",
            "1",
            "--quiet",
            *extra,
        ]
    )


def test_script_runs_end_to_end_and_saves_a_loadable_model(tiny_path, tmp_path):
    summary = small_run(tiny_path, tmp_path)
    assert summary["steps"] == 2
    assert summary["validation"]["validation_step"] == [0, 1, 2]
    assert summary["chosen_step"] in (0, 1, 2)
    assert summary["heldout_keys_in_training"] == 0
    assert len(summary["reward"]) == len(summary["entropy"]) == 2
    assert summary["use_vllm"] == "no" and summary["bf16"] is False  # CPU defaults
    assert json.loads((tmp_path / "summary.json").read_text())["steps"] == 2
    model = AutoModelForCausalLM.from_pretrained(summary["final_dir"])
    tokenizer = AutoTokenizer.from_pretrained(summary["final_dir"])
    assert model.config.model_type == "llama" and tokenizer.eos_token == "<|im_end|>"


def test_lora_run_merges_into_a_plain_model(tiny_path, tmp_path):
    pytest.importorskip("peft")
    summary = small_run(tiny_path, tmp_path, "--lora", "--lora-r", "2", "--eval-every", "0")
    model = AutoModelForCausalLM.from_pretrained(summary["final_dir"])
    assert not any("lora" in name for name, _ in model.named_parameters())


def scripted_validation(monkeypatch, scores):
    """Make validation score ``scores[i]`` (pass@1) at its i-th evaluation, without sampling."""
    calls = iter(scores)

    def count_correct(model, tokenizer, multisets, n, seed, **kwargs):
        c = round(next(calls) * n)
        return {"c": [c] * len(multisets), "n": n, "mean_length": 1.0, "mean_entropy": 0.0}

    monkeypatch.setattr(grpo_checkpoint.ck, "count_correct", count_correct)


def test_validation_that_never_scores_keeps_the_last_step_and_says_so(
    tiny_path, tmp_path, monkeypatch, capsys
):
    """B1 (code review r4): when validation scored 0 everywhere (a reply format the parser
    never read), step 0 won by default and the UNTRAINED weights were saved, silently."""
    pytest.importorskip("peft")
    scripted_validation(monkeypatch, [0.0, 0.0, 0.0])
    summary = small_run(tiny_path, tmp_path, "--lora", "--lora-r", "2")
    assert summary["validation"]["validation_pass1"] == [0.0, 0.0, 0.0]
    assert summary["chosen_step"] == summary["steps"] == 2
    assert "was 0 at all 3 evaluations" in summary["validation_warning"]
    assert "WARNING: validation pass@1 was 0" in capsys.readouterr().err  # even with --quiet


def test_when_validation_prefers_step_0_the_initial_weights_are_saved_and_flagged(
    tiny_path, tmp_path, monkeypatch
):
    """The LoRA snapshot of step 0 is restored (adapters B = 0: the merged model is the
    checkpoint, weight for weight), and the summary says the saved model is untrained."""
    pytest.importorskip("peft")
    scripted_validation(monkeypatch, [1.0, 0.0, 0.0])

    def varied(completions, numbers, **kwargs):  # rewards that differ within a group, so the
        return [sum(map(ord, ck.completion_text(c))) % 7.0 for c in completions]  # step moves

    monkeypatch.setattr(grpo_checkpoint, "make_reward_funcs", lambda eos: [varied, varied])
    summary = small_run(tiny_path, tmp_path, "--lora", "--lora-r", "2", "--learning-rate", "1e-2")
    assert summary["chosen_step"] == 0
    assert "UNTRAINED" in summary["validation_warning"]
    saved = AutoModelForCausalLM.from_pretrained(summary["final_dir"]).state_dict()
    initial = AutoModelForCausalLM.from_pretrained(tiny_path).state_dict()
    assert saved.keys() == initial.keys()
    assert all(torch.equal(saved[k], initial[k]) for k in initial)


@pytest.mark.parametrize(
    "scores, chosen, warns",
    [
        ([0.5, 0.75, 0.75, 0.25], 10, None),  # the best, the earliest on a tie
        ([0.5, 0.25, 0.5, 0.25], 0, "UNTRAINED"),
        ([0.0, 0.0, 0.0, 0.0], 30, "was 0 at all 4"),  # validation cannot choose: the last
        ([], 30, None),
    ],
)
def test_choose_step(scores, chosen, warns):
    steps = [0, 10, 20, 30][: len(scores)]
    step, warning = grpo_checkpoint.choose_step(steps, scores, last_step=30)
    assert step == chosen
    assert (warning is None) if warns is None else (warns in warning)


def test_snapshots_hold_only_what_training_changes():
    """B2's LoRA note (code review r4): a snapshot copied the frozen base weights too."""
    peft = pytest.importorskip("peft")
    tokenizer = ck.build_tokenizer()
    base = ck.build_model(tokenizer, ck.TINY)
    full = grpo_checkpoint.trainable_state(base)
    assert full.keys() == dict(base.named_parameters()).keys()
    lora = peft.get_peft_model(
        base, peft.LoraConfig(r=2, target_modules="all-linear", task_type="CAUSAL_LM")
    )
    state = grpo_checkpoint.trainable_state(lora)
    assert state and all("lora_" in name for name in state)
    assert len(state) == sum(p.requires_grad for p in lora.parameters())
    before = {k: v.clone() for k, v in state.items()}
    with torch.no_grad():
        for p in lora.parameters():
            if p.requires_grad:
                p.add_(1.0)
    grpo_checkpoint.restore_state(lora, state)
    assert all(torch.equal(p, before[n]) for n, p in lora.named_parameters() if p.requires_grad)
    with pytest.raises(RuntimeError, match="keys the model lacks"):
        grpo_checkpoint.restore_state(lora, {"no.such.weight": torch.zeros(1)})


class ConfigBuilt(Exception):
    """Raised by the GRPOConfig spy, so the script stops before training."""


def test_the_scripts_grpo_config_is_dr_grpo_with_plain_k3(tiny_path, tmp_path, monkeypatch):
    """R4 (code review r4): Dr. GRPO (Liu et al. 2025, arXiv 2503.20783) divides by neither
    the response length nor the group's reward std; with beta > 0 the KL term is TRL's plain
    k3, as pgrl_helpers.hf.trl_config sets it (TRL 1.16 defaults: 'group', bias-corrected)."""
    import trl

    real = trl.GRPOConfig

    def spy(**kwargs):
        raise ConfigBuilt(real(**kwargs))  # built by TRL: the kwargs are valid

    monkeypatch.setattr(trl, "GRPOConfig", spy)
    with pytest.raises(ConfigBuilt) as built:
        small_run(tiny_path, tmp_path, "--beta", "0.04")
    config = built.value.args[0]
    assert config.loss_type == "dr_grpo"
    assert config.scale_rewards == "none"
    assert config.use_bias_correction_kl is False and config.beta == 0.04
    with pytest.raises(ConfigBuilt) as built:
        small_run(tiny_path, tmp_path, "--scale-rewards", "group")
    assert built.value.args[0].scale_rewards == "group"


def test_reward_functions_have_trl_signature_and_score_right():
    correctness, fmt = grpo_checkpoint.make_reward_funcs(eos_token_id=EOS)
    for fn in (correctness, fmt):
        params = inspect.signature(fn).parameters
        assert "completions" in params
        assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    completions = [
        [{"role": "assistant", "content": "1 2 3"}],  # right, ended its turn
        [{"role": "assistant", "content": "1 2 3"}],  # right text but truncated (no EOS)
        [{"role": "assistant", "content": "3 2 1"}],  # wrong order, right format
        [{"role": "assistant", "content": "sort 1"}],  # malformed
    ]
    numbers = [[3, 1, 2]] * 4
    ids = [[9, 10, 11, EOS], [9, 10, 11, 11], [11, 10, 9, EOS], [7, 9, EOS]]
    extra = {"prompts": [None] * 4, "completion_ids": ids, "trainer_state": None}
    assert correctness(completions=completions, numbers=numbers, **extra) == [1.0, 0.0, 0.0, 0.0]
    assert fmt(completions=completions, numbers=numbers, **extra) == [1.0, 0.0, 1.0, 0.0]
    # standard (non-chat) completions are plain strings
    assert correctness(completions=["1 2 3"], numbers=[[2, 3, 1]]) == [1.0]


def test_dataset_is_conversational_and_draws_only_given_multisets():
    ds = grpo_checkpoint.make_dataset([(1, 2), (0, 4, 4)], 10, seed=0)
    assert ds[0]["prompt"][0]["role"] == "user"
    assert {ck.key(r) for r in ds["numbers"]} <= {(1, 2), (0, 4, 4)}
    with pytest.raises(ValueError, match="multisets"):
        grpo_checkpoint.make_dataset([], 3, seed=0)


@pytest.mark.parametrize(
    "flag, value", [("--num-generations", "1"), ("--max-steps", "0"), ("--train-regions", "x")]
)
def test_bad_arguments_raise(flag, value):
    with pytest.raises(ValueError, match=flag.lstrip("-")):
        grpo_checkpoint.parse_args(["--model", "m", flag, value])
