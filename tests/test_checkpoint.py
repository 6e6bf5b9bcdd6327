"""The notebook 14 checkpoint: built with tokenizers + a chat template, saved, loaded by path."""

import dataclasses
import random

import pytest
import torch

pytest.importorskip("transformers")
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from pgrl_helpers import checkpoint as ck  # noqa: E402


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return ck.build_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny", ck.TINY)


def test_loads_by_path_with_the_auto_classes(tiny_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_path)
    tokenizer = AutoTokenizer.from_pretrained(tiny_path)
    assert model.config.model_type == "llama"
    text = tokenizer.apply_chat_template(
        ck.prompt_messages([3, 1, 2]), add_generation_prompt=True, tokenize=False
    )
    assert text.split() == [
        "<|im_start|>",
        "user",
        "sort",
        "3",
        "1",
        "2",
        "<|im_end|>",
        "<|im_start|>",
        "assistant",
    ]
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    # every word survives the round trip (a tokenizer class that drops words fails here)
    assert tokenizer.convert_ids_to_tokens(ids) == text.split()
    assert tokenizer.eos_token == "<|im_end|>"
    logits = model(input_ids=torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), len(tokenizer))


def test_cache_is_reused_and_config_change_rebuilds(tiny_path):
    weights = tiny_path / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    ck.build_checkpoint(tiny_path, ck.TINY)
    assert weights.stat().st_mtime_ns == stamp
    ck.build_checkpoint(tiny_path, dataclasses.replace(ck.TINY, sft_steps=1))
    assert weights.stat().st_mtime_ns != stamp


def test_splits_hold_out_by_content():
    s = ck.make_splits()
    heldout = set().union(*(set(v) for k, v in s.items() if not k.startswith("train_")))
    trained = set(s["train_in"]) | set(s["train_longer"])
    assert heldout and not heldout & trained
    assert all(len(m) in ck.SFT_LENGTHS and max(m) <= 5 for m in s["test_in"] + s["train_in"])
    assert all(len(m) in ck.LONGER_LENGTHS for m in s["test_longer"] + s["train_longer"])
    assert all(any(x >= 6 for x in m) for m in s["test_unseen"])
    assert s == ck.make_splits()  # fixed split seed: every run tests the same problems


def test_sft_batch_masks_the_prompt_and_ends_with_eos():
    tokenizer = ck.build_tokenizer()
    ids, mask, labels = ck.sft_batch(tokenizer, [(1, 2, 3)], 1, random.Random(0))
    kept = [t for t in labels[0].tolist() if t != -100]
    assert tokenizer.convert_ids_to_tokens(kept) == ["1", "2", "3", "<|im_end|>"]
    assert mask.sum() == len(ids[0])


def test_answer_parsing():
    assert ck.is_correct([3, 1, 2], "1 2 3")
    assert not ck.is_correct([3, 1, 2], "1 2")
    assert not ck.is_correct([3, 1, 2], "1 2 3 3")
    assert ck.parse_answer("1 x 2") is None
    assert ck.parse_answer("12 3") is None
    assert ck.completion_text([{"role": "assistant", "content": "1 2"}]) == "1 2"
    with pytest.raises(ValueError, match="completion"):
        ck.completion_text(3)


def test_sampler_with_kv_cache_matches_greedy_generate(tiny_path):
    # near-zero temperature = greedy; a sampler that dropped its KV cache (positions restart at
    # 0) would disagree with generate()
    model, tokenizer = ck.load(tiny_path)
    numbers = [4, 0, 2]
    r = ck.sample_completions(
        model,
        tokenizer,
        numbers,
        2,
        torch.Generator().manual_seed(0),
        temperature=1e-4,
        max_new_tokens=6,
    )
    prompt = torch.tensor([ck.prompt_ids(tokenizer, numbers)])
    out = model.generate(
        prompt, max_new_tokens=6, do_sample=False, pad_token_id=tokenizer.pad_token_id
    )[0, prompt.shape[1] :].tolist()
    eos = tokenizer.eos_token_id
    out = out[: out.index(eos) + 1] if eos in out else out
    assert r["tokens"][0] == out == r["tokens"][1]


def test_count_correct_counts_only_correct_terminated_answers():
    class Oracle(torch.nn.Module):
        """Emits the sorted prompt then EOS (reads the prompt off its input ids)."""

        def __init__(self, tokenizer, truncate=False):
            super().__init__()
            self.tok, self.truncate = tokenizer, truncate

        def forward(self, input_ids, cache=None, use_cache=True):
            if cache is None:
                words = self.tok.convert_ids_to_tokens(input_ids[0].tolist())
                digits = [int(w) for w in words if w.isdigit()]
                plan = [str(d) for d in sorted(digits)]
                plan = plan[:-1] if self.truncate else plan + ["<|im_end|>"]
                cache = {"plan": [self.tok.convert_tokens_to_ids(w) for w in plan], "i": 0}
            step = cache["i"]
            tok = cache["plan"][step] if step < len(cache["plan"]) else self.tok.pad_token_id
            cache["i"] += 1
            logits = torch.full((input_ids.shape[0], 1, len(self.tok)), -1e9)
            logits[:, :, tok] = 0.0
            return type("Out", (), {"cache": cache, "logits": logits})()

    tokenizer = ck.build_tokenizer()
    problems = [(0, 1, 5), (2, 2, 3, 4)]
    r = ck.count_correct(Oracle(tokenizer), tokenizer, problems, n=3, seed=0)
    assert r["c"] == [3, 3] and r["mean_entropy"] < 1e-6
    r = ck.count_correct(Oracle(tokenizer, truncate=True), tokenizer, problems, n=3, seed=0)
    assert r["c"] == [0, 0]
    assert ck.pass_at_k_curve([3, 0], 3, [1, 3]) == [0.5, 0.5]


def test_bad_config_raises():
    with pytest.raises(ValueError, match="hidden_size"):
        dataclasses.replace(ck.TINY, hidden_size=15).validate()
    with pytest.raises(ValueError, match="num_test"):
        ck.make_splits(num_test=0)
    with pytest.raises(ValueError, match="num_test \\+ num_validation"):
        ck.make_splits(num_test=150, num_validation=60)


def test_tasks_checkpoint_command_builds_a_loadable_checkpoint(tmp_path, monkeypatch, capsys):
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "tasks", Path(__file__).resolve().parents[1] / "tasks.py"
    )
    tasks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tasks)
    assert "checkpoint" in tasks.COMMANDS
    monkeypatch.setattr(ck, "FULL", ck.TINY)  # the command's code path, at test size
    ck.main([str(tmp_path / "ckpt")])
    assert "checkpoint in" in capsys.readouterr().out
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt")
    assert model.config.hidden_size == ck.TINY.hidden_size
