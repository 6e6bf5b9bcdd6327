"""The notebook 14 checkpoint: built with tokenizers + a chat template, saved, loaded by path."""

import dataclasses
import random

import pytest
import torch

pytest.importorskip("transformers")
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from pgrl_helpers.hf import checkpoint as ck  # noqa: E402


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

        def forward(self, input_ids, past_key_values=None, use_cache=True):
            cache = past_key_values
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
            return type("Out", (), {"past_key_values": cache, "logits": logits})()

    tokenizer = ck.build_tokenizer()
    problems = [(0, 1, 5), (2, 2, 3, 4)]
    r = ck.count_correct(Oracle(tokenizer), tokenizer, problems, n=3, seed=0)
    assert r["c"] == [3, 3] and r["mean_entropy"] < 1e-6
    r = ck.count_correct(Oracle(tokenizer, truncate=True), tokenizer, problems, n=3, seed=0)
    assert r["c"] == [0, 0]
    assert ck.pass_at_k_curve([3, 0], 3, [1, 3]) == [0.5, 0.5]


def byte_level_bpe_tokenizer(pad: bool = True):
    """A GPT-2 / Qwen / Llama-3 style byte-level BPE tokenizer, trained here in milliseconds:
    its tokens carry the space marker (``Ġ2``); ``pad`` False: no pad token (Llama-3 style)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=[ck.EOS, ck.START, ck.PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    core.train_from_iterator(["sort 3 1 2", "1 2 3", "0 4 5"] * 50, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token=ck.EOS, pad_token=ck.PAD if pad else None
    )
    tokenizer.chat_template = ck.CHAT_TEMPLATE
    return tokenizer


class TextOracle(torch.nn.Module):
    """A causal LM stand-in that replies ``reply(numbers)`` then EOS, for any tokenizer.

    It reads the numbers off the decoded prompt, keeps its one parameter on ``device`` and
    records the device of every input it gets. On the meta device (no data) it stops at its
    first forward, raising ``ReachedTheModel``: far enough to see where the prompt was put."""

    class ReachedTheModel(Exception):
        pass

    def __init__(self, tokenizer, reply=ck.answer_text, device="cpu"):
        super().__init__()
        self.tok, self.reply = tokenizer, reply
        self.anchor = torch.nn.Parameter(torch.zeros(1, device=device))
        self.input_devices = []

    def forward(self, input_ids, past_key_values=None, use_cache=True):
        cache = past_key_values
        self.input_devices.append(input_ids.device)
        if self.anchor.device.type == "meta":
            raise self.ReachedTheModel
        if cache is None:
            text = self.tok.decode(input_ids[0].tolist())
            numbers = [int(w) for w in text.split("sort", 1)[1].split() if w.isdigit()]
            plan = self.tok(self.reply(numbers), add_special_tokens=False)["input_ids"]
            cache = {"plan": plan + [self.tok.eos_token_id], "i": 0}
        plan, step = cache["plan"], cache["i"]
        cache["i"] += 1
        logits = torch.full((input_ids.shape[0], 1, len(self.tok)), -1e9)
        logits[:, :, plan[min(step, len(plan) - 1)]] = 0.0
        return type(
            "Out", (), {"past_key_values": cache, "logits": logits.to(self.anchor.device)}
        )()


def test_count_correct_reads_a_byte_level_bpe_tokenizer():
    """B1 (code review r4): the replies are decoded as TRL decodes them, so a right answer
    in a BPE tokenizer's tokens ('1', 'Ġ2', 'Ġ3') counts; joining the tokens did not."""
    tokenizer = byte_level_bpe_tokenizer()
    answer = tokenizer("1 2 3", add_special_tokens=False)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(answer) == ["1", "Ġ2", "Ġ3"]
    problems = [(1, 2, 3), (0, 4, 5)]
    r = ck.count_correct(TextOracle(tokenizer), tokenizer, problems, n=3, seed=0)
    assert r["c"] == [3, 3]
    reversed_reply = TextOracle(tokenizer, reply=lambda nums: ck.answer_text(nums)[::-1])
    assert ck.count_correct(reversed_reply, tokenizer, problems, n=3, seed=0)["c"] == [0, 0]
    # the same oracle and counts with the word-level tokenizer of the local checkpoint
    words = ck.build_tokenizer()
    assert ck.count_correct(TextOracle(words), words, problems, n=3, seed=0)["c"] == [3, 3]


def test_a_tokenizer_without_a_pad_token_pads_with_eos():
    """B2's related risk (code review r4): pad_token_id None (Llama-3) crashed the sampler."""
    tokenizer = byte_level_bpe_tokenizer(pad=False)
    assert tokenizer.pad_token_id is None
    r = ck.count_correct(TextOracle(tokenizer), tokenizer, [(1, 2, 3)], n=2, seed=0)
    assert r["c"] == [2] and r["mean_length"] == 4.0  # three answer tokens and EOS


def test_completion_answer_needs_the_end_of_turn():
    tokenizer = byte_level_bpe_tokenizer()
    ids = tokenizer("0 4 5", add_special_tokens=False)["input_ids"]
    assert ck.completion_answer(tokenizer, ids + [tokenizer.eos_token_id]) == [0, 4, 5]
    assert ck.completion_answer(tokenizer, ids) is None  # cut off before EOS
    assert ck.completion_answer(tokenizer, []) is None


def test_the_sampler_sends_its_prompt_to_the_models_device():
    """B2 (code review r4): a GPU model got a CPU prompt. No GPU here, so the model sits on
    the meta device, and the check is where its first input arrives."""
    tokenizer = ck.build_tokenizer()
    model = TextOracle(tokenizer, device="meta")
    with pytest.raises(TextOracle.ReachedTheModel):
        ck.sample_completions(model, tokenizer, [3, 1, 2], 2, torch.Generator().manual_seed(0))
    assert model.input_devices == [torch.device("meta")]
    assert ck.model_device(model) == torch.device("meta")


def test_count_correct_seeds_a_generator_on_the_models_device(monkeypatch):
    """B2: the generator follows the model (here the CPU; the device is what is checked)."""
    made = []
    real = torch.Generator

    def spy(*args, **kwargs):
        made.append(kwargs.get("device", args[0] if args else None))
        return real(*args, **kwargs)

    tokenizer = ck.build_tokenizer()
    model = TextOracle(tokenizer)
    monkeypatch.setattr(torch, "Generator", spy)
    assert ck.count_correct(model, tokenizer, [(1, 2)], n=2, seed=0)["c"] == [2]
    assert made == [torch.device("cpu")]
    assert ck.model_device(torch.nn.ReLU()) == torch.device("cpu")  # no parameters: the CPU


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
