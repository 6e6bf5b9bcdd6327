"""scale/grpo_checkpoint.py: TRL's GRPOTrainer on a checkpoint loaded by path, end to end."""

import inspect
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scale"))

import grpo_checkpoint  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from pgrl_helpers import checkpoint as ck  # noqa: E402

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
