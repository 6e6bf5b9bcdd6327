"""benchmarks/bench_real_lm.py end to end on a tiny random Llama (seconds, no converted model).

The benchmark's ``--quick`` run: its own code path (SFT, our loop with the chat policy and LoRA, the validation
stopping rule, the test scored once, pass@k, the KL to the base model, the float16 adapter, the
report with its paired comparison) runs on notebook 14's word-level tokenizer and a 2-layer
Llama in place of SmolLM2, with everything made small. What it guarantees: the script runs from
its command line to its JSON on a model of the real architecture, training never sees a
held-out multiset, and the saved adapter is float16 and loads onto the base model.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("peft")

from pgrl_helpers.hf import real_lm_task as T  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_real_lm as B  # noqa: E402


@pytest.fixture()
def tiny_bench(tmp_path, monkeypatch):
    """The benchmark's --quick run (``--model tiny``) into tmp_path; module globals restored."""
    for name in ("RUNS", "OUT", "HELDOUT"):
        monkeypatch.setattr(B, name, getattr(B, name))
    before = torch.get_num_threads()
    yield tmp_path
    torch.set_num_threads(before)


def test_the_benchmark_runs_from_its_command_line_to_its_report(tiny_bench):
    tmp = tiny_bench
    B.main(quick=True, out_dir=tmp)
    run = json.loads((tmp / "real_lm_runs" / "sft_rl_seed0.json").read_text())
    assert run["sft"]["heldout_multisets_in_training"] == 0 and run["sft"]["steps"] == 1
    assert run["rl"]["training_prompts"] == 2 * 2  # 2 steps x 2 prompts
    assert run["rl"]["training_prompts_with_heldout_multiset"] == 0
    assert [p["step"] for p in run["rl"]["validation_curve"]] == [0, 1, 2]
    assert run["rl"]["best_step"] in (0, 1, 2)
    assert len(run["test_sampled"]["correct_per_problem"]) == 8
    assert set(run["test_sampled"]["pass_at_k"]) == {"1", "2"}
    assert run["kl_to_base"]["replies"] == 8 * 2
    # the adapter is saved in float16, trained, and loads onto the base model
    from peft import PeftModel
    from safetensors.torch import load_file

    weights = load_file(str(tmp / "real_lm_adapter" / "adapter_model.safetensors"))
    assert weights and all(v.dtype == torch.float16 for v in weights.values())
    assert any(bool(v.abs().sum() > 0) for k, v in weights.items() if "lora_B" in k)  # trained
    base, _ = B.load_model(argparse.Namespace(model="tiny", device="cpu"))
    PeftModel.from_pretrained(base, str(tmp / "real_lm_adapter"))

    report = json.loads((tmp / "real_lm.json").read_text())
    assert set(report["summary"]) == {"rl", "sft_rl"}
    assert report["summary"]["rl"]["seeds"] == [0, 1]
    comparison = report["comparisons"]["sft_rl_vs_rl_test_exact"]
    assert comparison["paired"] is True and comparison["seeds"] == [0, 1]
    assert report["splits"]["test_scored_by"] and report["splits"]["test_guided_choice"] is None
    assert report["adapter"].endswith("real_lm_adapter")
    text = B.section(report)
    assert "| rl | " in text and "[0, 1]" in text and "sign-flip" in text


def test_an_unknown_arm_is_refused(tiny_bench):
    with pytest.raises(SystemExit, match="--arm must be one of"):
        B.main(part="run", arm="ppo", model="tiny", out_dir=tiny_bench)


def test_sft_refuses_a_batch_with_a_held_out_multiset(tiny_bench):
    """Planted bug: a task whose training prompts are the validation set. The SFT step checks
    the keys it trained on against the held-out ones and stops."""

    model, tok = B.load_model(argparse.Namespace(model="tiny", device="cpu"))
    args = argparse.Namespace(sft_learning_rate=1e-3, sft_steps=1, sft_batch=2)
    task = T.RealLMSortTask(tok)
    held_out = T.encode_numbers([[3, 1, 2], [9, 8, 7, 6, 5]])
    task.training_prompts = lambda n, generator, excluded: held_out  # the planted bug
    with pytest.raises(AssertionError, match="SFT trained on held-out multisets"):
        B.run_sft(model, tok, task, task.prompt_key(held_out), args, 0, "sort {numbers}")


def test_quick_sets_defaults_only_and_bad_options_are_refused_before_loading(monkeypatch):
    def no_model(args):
        raise AssertionError("a model was loaded before the options were checked")

    monkeypatch.setattr(B, "load_model", no_model)
    args = B.build_args(quick=True, group=3, model="tiny", val_every=5)
    assert (args.group, args.val_every, args.prompts) == (3, 5, B.QUICK["prompts"])
    assert B.build_args().group == B.DEFAULTS["group"]
    for bad, match in (
        (dict(val_every=0), "--val-every must be an int >= 1"),
        (dict(group=1), "--group must be >= 2"),
        (dict(part="run", seed=5, seeds=[7]), "not both"),
        (dict(device="cuda:x"), "cuda:N or mps"),
        (dict(part="base", resume=True), "go with the part `run`"),
    ):
        seeds = bad.pop("seeds", None)
        with pytest.raises(SystemExit, match=match):
            B.main(seeds=seeds, **bad)
    with pytest.raises(SystemExit):  # the command line: argparse refuses 0 at once
        B.parse_args(B.add_options, ["run", "--val-every", "0"])


def test_a_paused_run_resumes_to_the_uninterrupted_result(tiny_bench):
    """Issue 46, item 6: ``run --stop-after 2`` saves adapter, Adam state, RNG states, step and
    history; ``run --resume`` continues; the record equals an uninterrupted run's."""
    common = dict(part="run", arm="rl", model="tiny", rl_steps=4, val_every=2, prompts=2,
                  group=2, lora_r=2, n_samples=2, out_dir=tiny_bench)  # fmt: skip
    B.main(name="whole", **common)
    B.main(name="paused", stop_after=3, **common)
    runs = tiny_bench / "real_lm_runs"
    paused = json.loads((runs / "paused.json").read_text())
    assert paused["paused_after_steps"] == 3 and (runs / "paused.state.pt").exists()
    B.main(name="paused", resume=True, **common)
    whole = json.loads((runs / "whole.json").read_text())
    resumed = json.loads((runs / "paused.json").read_text())
    assert resumed["resumed_at_steps"] == [3] and not (runs / "paused.state.pt").exists()
    for key in ("train_reward", "train_scores", "validation_curve", "best_step"):
        assert resumed["rl"][key] == whole["rl"][key], key
    assert resumed["test_greedy"]["exact_per_problem"] == whole["test_greedy"]["exact_per_problem"]
    assert (
        resumed["test_sampled"]["correct_per_problem"]
        == (whole["test_sampled"]["correct_per_problem"])
    )
    same = {k: v for k, v in whole["settings"].items() if k not in ("name", "stop_after", "resume")}
    assert {k: resumed["settings"][k] for k in same} == same and "peak_rss_mib" in resumed
    assert 0 <= resumed["rl"]["train_replies_at_cap"] <= 1
    assert resumed["reply_budget"]["used"] == T.MAX_NUMBERS + 1  # the word-level tokenizer's


# ---------------------------------------------------------------- the report's statistics (issue 46)


def _run(arm: str, seed: int, per_list: list[int]) -> dict:
    return {"arm": arm, "seed": seed, "test_greedy": {"exact_per_problem": per_list}}


def test_the_report_compares_the_arms_list_by_list_on_shared_seeds_with_holm_over_all():
    """rl has 3 seeds, trl 2: rl vs trl is tested on the 2 shared seeds only; every McNemar test
    made (pairs of arms, each arm vs the base) is in one Holm family whose size is stated; the
    seed-level sign-flip test carries its floor 2/2^seeds and no verdict."""
    from pgrl_helpers.paired_tests import holm, mcnemar_exact

    lists = 20
    base = {"test_greedy": {"exact_per_problem": [0] * lists}}
    rl = [_run("rl", s, [1] * (8 + s) + [0] * (12 - s)) for s in range(3)]
    trl = [_run("trl", s, [1] * (2 + s) + [0] * (18 - s)) for s in range(2)]
    sft = [_run("sft_rl", s, [1] * (18 + s % 2) + [0] * (2 - s % 2)) for s in range(3)]
    stats = B.paired_statistics({"rl": rl, "sft_rl": sft, "trl": trl}, base)
    pairs = [(t["a"], t["b"], t["seed"]) for t in stats["mcnemar"]]
    assert [p for p in pairs if p[:2] == ("rl", "trl")] == [("rl", "trl", 0), ("rl", "trl", 1)]
    assert len([p for p in pairs if p[:2] == ("sft_rl", "rl")]) == 3
    assert len([p for p in pairs if p[1] == "base"]) == 3 + 3 + 2
    assert stats["count"] == len(pairs) == 13 and "13" in stats["holm_over"]
    raw = [t["p_value"] for t in stats["mcnemar"]]
    assert [t["p_holm"] for t in stats["mcnemar"]] == holm(raw)
    first = stats["mcnemar"][0]
    assert first["p_value"] == mcnemar_exact(sft[0]["test_greedy"]["exact_per_problem"],
                                             rl[0]["test_greedy"]["exact_per_problem"])["p_value"]  # fmt: skip
    d = stats["differences"]["rl - trl"]
    assert d["seeds"] == [0, 1] and d["sign_flip"]["floor"] == 0.5
    assert d["per_seed"] == [0.3, 0.3]
    assert d["bootstrap"]["seeds"] == 2 and d["bootstrap"]["low"] <= 0.3 <= d["bootstrap"]["high"]
    assert "cannot reject at 0.05" in d["sign_flip"]["reading"]
    assert "verdict" not in d["sign_flip"]


def test_the_report_keeps_only_the_matched_speed_record():
    old = json.loads((B.RESULTS / "real_lm_runs" / "speed.json").read_text())
    speed, why = B.matched_speed_or_reason(old if "timed_steps_per_side" not in old else {})
    assert speed is None and why
    matched = {"matched": True, "timed_steps_per_side": 10, "ours_dtype": "float32",
               "trl_settings": {"compute_dtype": "float32", "gradient_checkpointing": False}}  # fmt: skip
    assert B.matched_speed_or_reason(matched) == (matched, None)
    for change in ({"ours_dtype": "bfloat16"},
                   {"trl_settings": {"compute_dtype": "bfloat16", "gradient_checkpointing": False}},
                   {"trl_settings": {"compute_dtype": "float32", "gradient_checkpointing": True}},
                   {"matched": False}):  # fmt: skip
        speed, why = B.matched_speed_or_reason(matched | change)
        assert speed is None and why, change
    assert B.matched_speed_or_reason(None)[0] is None


def test_adopt_re_records_paths_outside_the_repository(tmp_path, monkeypatch):
    monkeypatch.setattr(B, "RUNS", tmp_path / "runs")
    src = tmp_path / "elsewhere"
    src.mkdir()
    inside = str(B.ROOT / "benchmarks" / "results" / "real_lm_adapter")
    record = {"adapter": str(tmp_path / "adapters" / "rl_seed0"), "seed": 0,
              "settings": {"save_adapter": str(tmp_path / "adapters" / "rl_seed0"),
                           "model": "models/SmolLM2-135M-Instruct", "other": inside}}  # fmt: skip
    (src / "rl_seed0.json").write_text(json.dumps(record))
    (src / "rl_seed1.json").write_text(json.dumps({"paused_after_steps": 2}))
    assert B.adopt(src) == ["rl_seed0.json"]
    out = json.loads((B.RUNS / "rl_seed0.json").read_text())
    assert out["adapter"] is None and out["settings"]["save_adapter"] is None
    assert out["settings"]["other"] == "benchmarks/results/real_lm_adapter"
    assert out["settings"]["model"] == "models/SmolLM2-135M-Instruct"
    assert set(out["re_recorded"]) == {"adapter", "settings.save_adapter", "settings.other"}
    assert out["re_recorded"]["adapter"].startswith("not committed")
    assert not (B.RUNS / "rl_seed1.json").exists()
