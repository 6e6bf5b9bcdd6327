"""benchmarks/real_lm_trl.py on a tiny random Llama (seconds, no converted model): the matched
TRL arm of bench_real_lm.py (``run --arm trl``), ``matched_settings`` and the interleaved speed
comparison (``speed``).

What it guarantees: the TRL arm runs from bench_real_lm's ``run`` part to a run file in the rl
arm's schema and into the report beside the rl arm; its recorded settings equal the rl arm's
(and a TRL setting changed in the code is caught, naming it); it trains on the loop's own
prompts, step by step, and never on a held-out multiset (a planted leak is refused); the speed
comparison alternates ours / TRL one step at a time.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")
pytest.importorskip("peft")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_real_lm as B  # noqa: E402
import real_lm_trl as L  # noqa: E402

from pgrl_helpers.hf import real_lm_task as T  # noqa: E402


@pytest.fixture()
def tiny(tmp_path, monkeypatch):
    """bench_real_lm's globals pointed at tmp_path with the quick held-out size; restored."""
    monkeypatch.setattr(B, "RUNS", tmp_path / "real_lm_runs")
    monkeypatch.setattr(B, "OUT", tmp_path / "real_lm.json")
    monkeypatch.setattr(B, "HELDOUT", 8)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield tmp_path
    torch.set_num_threads(before)


def run(part, **options):
    args = B.build_args(quick=True, part=part, **options)
    B.run_part(args)
    return args


def test_the_trl_arm_runs_into_the_rl_arms_schema_and_the_report(tiny):
    for arm in ("rl", "trl"):
        run("run", arm=arm, seed=0, rl_steps=2)
    run("base")
    rl = json.loads((B.RUNS / "rl_seed0.json").read_text())
    trl = json.loads((B.RUNS / "trl_seed0.json").read_text())
    for key in ("test_greedy", "test_sampled", "kl_to_base", "reply_budget", "settings",
                "wall_and_cpu"):  # fmt: skip
        assert set(trl[key]) == set(rl[key]), key
    assert trl["peak_rss_mib"] > 0
    for key in ("steps", "validation_curve", "best_step", "time", "train_scores",
                "training_prompts", "training_prompts_with_heldout_multiset"):  # fmt: skip
        assert key in trl["rl"], key
    assert [p["step"] for p in trl["rl"]["validation_curve"]] == [0, 1, 2]
    assert trl["rl"]["training_prompts"] == 2 * 2
    assert trl["rl"]["training_prompts_with_heldout_multiset"] == 0
    assert len(trl["rl"]["train_scores"]) == 2
    assert trl["matched"]["compute_dtype"] == "float32"
    assert trl["matched"]["gradient_checkpointing"] is False
    assert set(trl["versions"]) == {"trl", "transformers", "torch", "peft"}
    rows = L.matched_settings(L.ours_settings(rl), trl["matched"])  # no mismatch
    assert {"optimizer", "loss", "advantage", "lora", "reply_tokens", "sampling"} <= {
        k for k, _, _ in rows
    }
    payload = B.part_report(B.build_args(quick=True, part="report"))
    side = payload["trl"]["side_by_side"]
    assert side["rl"]["seeds"] == side["trl"]["seeds"] == [0]
    assert side["trl"]["test_exact"] == [trl["test_greedy"]["exact"]]
    assert payload["trl"]["seeds_present"] == 1 and payload["summary"]["trl"]["seeds"] == [0]
    made = [(t["a"], t["b"], t["seed"]) for t in payload["paired_tests"]["mcnemar"]]
    assert made == [("rl", "trl", 0), ("rl", "base", 0), ("trl", "base", 0)]
    assert payload["paired_tests"]["differences"]["rl - trl"]["sign_flip"]["floor"] == 1.0
    assert "Matched TRL arm" in B.section(payload) and "TRL seeds present: 1" in B.section(payload)


def test_matched_settings_names_every_mismatch(tiny, monkeypatch):
    """A setting changed in TRL's config (here weight decay and bf16-free checkpointing) is
    read back from the trainer TRL built and named by matched_settings."""
    args = B.build_args(quick=True, part="run", arm="trl", seed=0, rl_steps=2)
    _, tokenizer = B.load_model(args)
    B.reply_tokens(args, tokenizer)
    task = T.RealLMSortTask(tokenizer, B.WEIGHTS)
    validation, test = B.splits(args)
    prompts = L.training_prompts(args, 0, task, task.prompt_key(torch.cat([validation, test])))
    trainer, _, _ = L.build_trainer(args, 0, prompts, str(tiny / "a"))
    trl = L.trl_settings(args, trainer)
    rl = {"settings": B.recorded_settings(args) | {"arm": "rl"}, "seed": 0,
          "rl": {"steps": 2}, "test_greedy": {"exact_per_problem": [0] * 8}}  # fmt: skip
    ours = L.ours_settings(rl)
    L.matched_settings(ours, trl)  # matched as built
    mapped = L.TC.grpo_config_kwargs
    monkeypatch.setattr(
        L.TC, "grpo_config_kwargs",
        lambda *a, **k: mapped(*a, **k) | {"weight_decay": 0.01, "top_p": 0.9},
    )  # fmt: skip
    trainer, _, _ = L.build_trainer(args, 0, prompts, str(tiny / "b"))
    with pytest.raises(ValueError, match=r"optimizer: .*'weight_decay': 0\.01.*; sampling"):
        L.matched_settings(ours, L.trl_settings(args, trainer))
    with pytest.raises(ValueError, match=r"compute_dtype: ours 'float32', TRL 'bfloat16'"):
        L.matched_settings(ours, trl | {"compute_dtype": "bfloat16"})
    with pytest.raises(ValueError, match=r"kl_coef: recorded by ours only"):
        L.matched_settings(ours, {k: v for k, v in trl.items() if k != "kl_coef"})


def test_the_trl_arm_trains_on_the_loops_prompts_and_refuses_a_held_out_one(tiny, monkeypatch):
    from pgrl_helpers.training import run_policy_gradient

    args = B.build_args(quick=True, part="run", arm="rl", seed=3, rl_steps=3)
    model, tokenizer = B.load_model(args)
    B.reply_tokens(args, tokenizer)
    from peft import get_peft_model

    model = get_peft_model(model, B.lora_config(args))
    seen = []

    class Logged(B.ScoredTask):
        def reward(self, prompts, responses):
            if responses.shape[1] > 1:
                seen.append(prompts.clone())
            return super().reward(prompts, responses)

    task = Logged(tokenizer, B.WEIGHTS)
    policy = B.R.ChatLMPolicy(model, tokenizer, T.PROMPT_TEMPLATES[B.TEMPLATE_NAME],
                              max_new_tokens=args.reply_tokens)  # fmt: skip
    run_policy_gradient(B.train_config(args, 3), policy=policy, task=task, score_test=False)
    validation, test = B.splits(args)
    keys = task.prompt_key(torch.cat([validation, test]))
    ours = L.training_prompts(args, 3, task, keys)
    assert len(seen) == 3 and all(torch.equal(a, b) for a, b in zip(seen, ours))
    # a leak: the task hands out held-out prompts; the trl arm refuses before training
    monkeypatch.setattr(
        T.RealLMSortTask, "training_prompts", lambda self, n, g, k: validation[:n].clone()
    )
    with pytest.raises(AssertionError, match="held-out multiset"):
        run("run", arm="trl", seed=0, rl_steps=2)


def test_the_speed_comparison_interleaves_the_two_sides(tiny):
    run("speed", speed_steps=2)
    speed = json.loads((B.RUNS / "speed.json").read_text())
    assert speed["order"] == ["ours", "trl"] * 4  # warm-up, 2 timed, 1 more: alternating
    for side in ("ours", "trl"):
        assert len(speed[side]["steps"]) == 2
        assert all(s["cpu_seconds"] > 0 and "load_before" in s for s in speed[side]["steps"])
    assert speed["ours_dtype"] == speed["trl_dtype"] == "float32"
    assert speed["trl_settings"]["gradient_checkpointing"] is False
    assert speed["trl_settings"]["compute_dtype"] == "float32"
    assert set(speed["ratio_trl_over_ours"]) == {"cpu_seconds", "seconds"}
    assert "interleaved" in L.speed_lines(speed)[0]
