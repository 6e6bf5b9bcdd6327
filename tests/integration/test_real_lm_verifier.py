"""benchmarks/bench_real_lm_verifier.py (issue 47) on the tiny random Llama (seconds).

What it guarantees: the imperfect teacher makes the stated fraction of realistic mistakes and is
a function of (seed, problem); expert iteration trains only on replies the verifier scores exact
and samples exactly what the rl arm samples (same prompts, G, reply cap, temperature, draws);
GRPO and expert iteration after SFT start from the given adapter and sample alike per step;
no training prompt of expert iteration or SFT has a held-out multiset (a planted leak stops the
run); the report pairs the arms problem by problem on a known table (McNemar, Holm over every
test made, the bootstrap, a learning rate chosen on validation only); the quick path runs from
the command line's entry point to the report and RESULTS.md's section.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

pytest.importorskip("peft")

from pgrl_helpers.autoregressive import response_mask  # noqa: E402
from pgrl_helpers.hf import real_lm as R  # noqa: E402
from pgrl_helpers.hf import real_lm_task as T  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import _real_lm_verifier as V  # noqa: E402
import bench_real_lm as B  # noqa: E402
import bench_real_lm_verifier as M  # noqa: E402


@pytest.fixture()
def restore(monkeypatch):
    """Module globals the benchmarks change (folders, held-out size), restored after."""
    for module, names in ((B, ("RUNS", "OUT", "HELDOUT")), (M, ("RUNS", "OUT"))):
        for name in names:
            monkeypatch.setattr(module, name, getattr(module, name))
    before = torch.get_num_threads()
    yield monkeypatch
    torch.set_num_threads(before)


def random_lists(n: int, seed: int = 7) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return T.decode_numbers(T.RealLMSortTask().random_prompts(n, g))


# ----------------------------------------------------------------------------- the teacher


def test_the_teacher_errs_at_its_rate_in_realistic_ways_and_is_a_function_of_the_problem():
    lists = random_lists(3000)
    for seed in (0, 1):
        answers = [V.teacher_answer(x, seed, 0.3) for x in lists]
        wrong = [(x, a, k) for x, (a, k) in zip(lists, answers) if k is not None]
        assert abs(len(wrong) / len(lists) - 0.3) < 0.03  # SE 0.0084
        assert all((a == sorted(x)) == (k is None) for x, (a, k) in zip(lists, answers))
        kinds = {k: sum(w[2] == k for w in wrong) for k in V.TEACHER_KINDS}
        assert min(kinds.values()) > 100, kinds
        for x, a, kind in wrong:
            gold = sorted(x)
            if kind == "swapped_pair":  # the same numbers, one adjacent pair out of order
                diff = [i for i in range(len(gold)) if a[i] != gold[i]]
                assert len(diff) == 2 and diff[1] == diff[0] + 1
            else:  # one number fewer, still in order
                assert len(a) == len(gold) - 1 and a == sorted(a)
                (gone,) = list((Counter(gold) - Counter(a)).elements())
                assert (gold.count(gone) > 1) == (kind == "dropped_duplicate")
    # deterministic per (seed, problem); another seed errs on other problems
    again = [V.teacher_answer(x, 0, 0.3) for x in lists]
    assert again == [V.teacher_answer(x, 0, 0.3) for x in lists]
    other = [V.teacher_answer(x, 1, 0.3)[1] is None for x in lists]
    assert other != [k is None for _, k in again]
    assert all(V.teacher_answer(x, 0, 0.0)[1] is None for x in lists[:200])
    assert all(V.teacher_answer(x, 0, 1.0)[1] is not None for x in lists[:200])
    record = V.teacher_record(lists, 0, 0.3)
    assert record["exact"] == round(1 - sum(k is not None for _, k in again) / len(lists), 4)


def test_the_lenient_parser_reads_numbers_anywhere():
    assert V.lenient_scores([3, 1, 2], "Sure! The sorted list is 1, 2, 3.") == {
        "exact": 1.0,
        "contains": 1.0,
    }
    assert V.lenient_scores([3, 1, 2], "From 3, 1, 2 we get 1, 2, 3") == {
        "exact": 0.0,
        "contains": 1.0,
    }
    assert V.lenient_scores([3, 1, 2], "1 3 2") == {"exact": 0.0, "contains": 0.0}


# ----------------------------------------------------------------------------- expert iteration


def tiny():
    return B.load_model(argparse.Namespace(model="tiny", device="cpu", dtype="float32"))


def test_expert_iteration_keeps_only_the_replies_the_verifier_scores_exact():
    _, tok = tiny()
    width, pad = 8, R.pad_token_id(tok)

    def ids(numbers):  # the tiny word-level tokenizer writes lists with spaces
        return tok(" ".join(map(str, numbers)), add_special_tokens=False)["input_ids"] + [
            tok.eos_token_id
        ]

    def reply(numbers, eos=True):
        row = ids(numbers)[: None if eos else -1]
        return row + [pad] * (width - len(row))

    lists = [[3, 1, 2], [5, 4, 6, 4]]
    responses = torch.tensor([
        [reply([1, 2, 3]), reply([3, 1, 2]), reply([1, 2, 3], eos=False)],  # right, wrong, no EOS
        [reply([4, 5, 6]), reply([4, 4, 5, 6]), reply([4, 4, 6, 5])],  # dropped, right, swapped
    ])  # fmt: skip
    mask = response_mask(responses, tok.eos_token_id)
    task = T.RealLMSortTask(tok)
    kept_lists, kept_ids = V.select_verified(task, T.encode_numbers(lists), responses, mask)
    assert kept_lists == [[3, 1, 2], [5, 4, 6, 4]]
    assert kept_ids == [ids([1, 2, 3]), ids([4, 4, 5, 6])]


class NoValidation:
    def __call__(self, step):
        pass

    def restore(self):
        return {}


def ei_args(**kw):
    return argparse.Namespace(**{"prompts": 2, "group": 2, "reply_tokens": 6, "ei_steps": 1,
                                 "ei_learning_rate": 1e-3, "val_every": 1, "sft_steps": 1,
                                 "sft_batch": 2, "sft_learning_rate": 1e-3, **kw})  # fmt: skip


def test_a_held_out_multiset_in_expert_iteration_or_sft_data_stops_the_run():
    """Planted leak: a task whose training prompts are held-out ones."""
    from peft import get_peft_model

    model, tok = tiny()
    model = get_peft_model(model, B.lora_config(argparse.Namespace(lora_r=2)))
    template = T.PROMPT_TEMPLATES["issue"]
    held_out = T.encode_numbers([[3, 1, 2], [9, 8, 7, 6, 5]])
    task = T.RealLMSortTask(tok)
    keys = task.prompt_key(held_out)
    task.training_prompts = lambda n, generator, excluded: held_out.clone()  # the planted leak
    with pytest.raises(AssertionError, match="expert iteration trained on held-out"):
        V.run_expert_iteration(model, tok, task, keys, ei_args(), 0, template, NoValidation())
    with pytest.raises(AssertionError, match="SFT trained on held-out"):
        V.run_sft_demos(model, tok, task, keys, ei_args(), 0, template, NoValidation(), 0.3)


def test_sft_trains_on_the_teachers_answers_or_on_gold(monkeypatch):
    model, tok = tiny()
    task = T.RealLMSortTask(tok)
    keys = task.prompt_key(T.encode_numbers([[3, 1, 2]]))
    seen = []
    monkeypatch.setattr(V, "sft_step", lambda m, o, t, lists, answers, tpl: seen.append(
        (lists, answers)) or 0.0)  # fmt: skip
    args = ei_args(sft_batch=6)
    template = T.PROMPT_TEMPLATES["issue"]
    out = V.run_sft_demos(model, tok, task, keys, args, 3, template, NoValidation(), 1.0)
    (lists, answers), *_ = seen
    assert answers == [V.answer_ids(tok, V.teacher_answer(x, 3, 1.0)[0]) for x in lists]
    assert all(V.teacher_answer(x, 3, 1.0)[0] != sorted(x) for x in lists)  # all wrong
    assert out["teacher_on_demonstrations"]["exact"] == 0.0
    seen.clear()
    V.run_sft_demos(model, tok, task, keys, args, 3, template, NoValidation(), None)
    assert seen[0][1] == [V.answer_ids(tok, sorted(x)) for x in seen[0][0]]


def test_an_expert_iteration_step_trains_on_the_kept_replies_and_skips_when_none(monkeypatch):
    """The SFT step runs on what ``select_verified`` kept (here: made to keep the first reply of
    each prompt on step 1, nothing on step 2): one loss, one skipped step, the adapter moved."""
    from peft import get_peft_model

    model, tok = tiny()
    model = get_peft_model(model, B.lora_config(argparse.Namespace(lora_r=2)))
    task = T.RealLMSortTask(tok)
    keys = task.prompt_key(T.encode_numbers([[3, 1, 2]]))
    kept = iter([True, False])

    def first_reply(task, prompts, responses, mask):
        if not next(kept):
            return [], []
        lists = T.decode_numbers(prompts)
        return lists, [responses[i, 0, : int(mask[i, 0].sum())].tolist() for i in range(len(lists))]

    monkeypatch.setattr(V, "select_verified", first_reply)
    out = V.run_expert_iteration(
        model, tok, task, keys, ei_args(ei_steps=2), 0, T.PROMPT_TEMPLATES["issue"], NoValidation()
    )
    assert [("loss" in r, r["kept"]) for r in out["per_step"]] == [(True, 2), (False, 0)]
    assert out["skipped_steps"] == 1 and out["kept_replies"] == 2
    assert any(bool(v.abs().sum() > 0) for k, v in B.lora_state(model).items() if "lora_B" in k)


def record_samples(restore, calls: dict, key: list) -> None:
    """Wrap ``ChatLMPolicy.sample`` so each call appends (prompts, G, cap, temperature,
    replies) to ``calls[key[0]]`` (the test switches ``key[0]`` between arms)."""
    sample = R.ChatLMPolicy.sample

    def spy(self, prompts, num_samples, generator=None):
        out = sample(self, prompts, num_samples, generator)
        calls[key[0]].append((prompts.clone(), num_samples, self.response_length,
                              self.temperature, out[0].clone()))  # fmt: skip
        return out

    restore.setattr(R.ChatLMPolicy, "sample", spy)


def test_expert_iteration_samples_exactly_what_the_rl_arm_samples(restore, tmp_path):
    """At the benchmark's sizes (4 prompts x G = 8, the reply cap, temperature 1) the first
    step of expert iteration draws the same prompts and the same replies as the rl arm's loop
    for the same seed (the same generators), and every step the same number of token slots."""
    calls = {"rl": [], "ei": []}
    key = ["rl"]
    record_samples(restore, calls, key)
    B.HELDOUT = 8
    B.RUNS = tmp_path / "rl"
    B.run_part(B.build_args(part="run", arm="rl", seed=0, model="tiny", rl_steps=2, val_every=2,
                            n_samples=2, lora_r=2))  # fmt: skip
    key[0] = "ei"
    M.main(part="run", arm="expert_iteration", seed=0, model="tiny", ei_steps=2, val_every=2,
           lora_r=2, out_dir=tmp_path / "ei")  # fmt: skip
    assert len(calls["rl"]) == len(calls["ei"]) == 2
    (p_rl, g_rl, cap_rl, t_rl, r_rl), (p_ei, g_ei, cap_ei, t_ei, r_ei) = (
        calls["rl"][0],
        calls["ei"][0],
    )
    assert torch.equal(p_rl, p_ei) and p_rl.shape[0] == B.DEFAULTS["prompts"] == 4
    assert g_rl == g_ei == B.DEFAULTS["group"] == 8 and cap_rl == cap_ei and t_rl == t_ei == 1.0
    assert torch.equal(r_rl, r_ei)
    assert [c[4].numel() for c in calls["rl"]] == [c[4].numel() for c in calls["ei"]]
    ei = json.loads((tmp_path / "ei" / "real_lm_verifier_runs" / "expert_iteration_seed0.json")
                    .read_text())["training"]  # fmt: skip
    assert ei["token_slots"] == 2 * 4 * 8 * cap_rl and ei["sampled_replies"] == 2 * 4 * 8
    assert ei["heldout_multisets_in_training"] == 0


def known_adapter(folder: Path) -> float:
    """Save a LoRA whose every lora_B is 0.01 (a fresh one has lora_B = 0) to ``folder``; the
    sum of its weights' absolute values."""
    from peft import get_peft_model
    from safetensors.torch import load_file

    model, _ = tiny()
    model = get_peft_model(model, B.lora_config(argparse.Namespace(lora_r=2)))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.fill_(0.01)
    model.save_pretrained(str(folder))
    weights = load_file(str(folder / "adapter_model.safetensors"))
    return float(sum(v.abs().sum() for v in weights.values()))


@pytest.mark.parametrize("arm", ["sft_imperfect_grpo", "sft_imperfect_ei"])
def test_the_arms_after_sft_start_from_the_given_adapter(restore, tmp_path, arm):
    """An adapter with known weights is what GRPO and expert iteration after SFT start from:
    their step-0 weights are the file's, and the file name carries the arm's learning rate."""
    total = known_adapter(tmp_path / "known")
    B.HELDOUT = 8
    M.main(part="run", arm=arm, seed=0, model="tiny", rl_steps=1, val_every=1, prompts=2,
           group=2, ei_learning_rate=2e-4, init_adapter=str(tmp_path / "known"),
           out_dir=tmp_path)  # fmt: skip
    name = {"sft_imperfect_grpo": "lr0.0003", "sft_imperfect_ei": "lr0.0002"}[arm]
    run = json.loads((tmp_path / "real_lm_verifier_runs" / f"{arm}_{name}_seed0.json").read_text())
    assert run["init_lora_abs_sum"] == pytest.approx(total, rel=1e-5)
    assert run["init_adapter"].endswith("known")
    assert [p["step"] for p in run["training"]["validation_curve"]] == [0, 1]
    assert run["training"]["heldout_multisets_in_training"] == 0
    assert run["training"]["steps"] == 1  # expert iteration: as many steps as --rl-steps


def test_expert_iteration_after_sft_samples_what_grpo_after_sft_samples(restore, tmp_path):
    """From the same adapter and seed, at the benchmark's sizes (4 prompts x G = 8, the reply
    cap, temperature 1, --ei-steps defaulting to --rl-steps): the same number of sampling calls,
    each of the same prompts-by-replies shape, cap and temperature, and on the first step (the
    same weights) the same prompts and the same replies."""
    calls = {"sft_imperfect_grpo": [], "sft_imperfect_ei": []}
    key = [None]
    record_samples(restore, calls, key)
    known_adapter(tmp_path / "known")
    B.HELDOUT = 8
    for arm in calls:
        key[0] = arm
        M.main(part="run", arm=arm, seed=0, model="tiny", rl_steps=2, val_every=2, lora_r=2,
               init_adapter=str(tmp_path / "known"), out_dir=tmp_path / arm)  # fmt: skip
    grpo, ei = calls["sft_imperfect_grpo"], calls["sft_imperfect_ei"]
    assert len(grpo) == len(ei) == 2
    for g, e in zip(grpo, ei):
        assert g[0].shape == e[0].shape and g[0].shape[0] == B.DEFAULTS["prompts"] == 4
        assert g[1] == e[1] == B.DEFAULTS["group"] == 8 and g[2] == e[2] and g[3] == e[3] == 1.0
        assert g[4].shape == e[4].shape
    assert torch.equal(grpo[0][0], ei[0][0]) and torch.equal(grpo[0][4], ei[0][4])
    runs = {arm: json.loads(next((tmp_path / arm / "real_lm_verifier_runs").glob("*.json"))
                            .read_text())["training"] for arm in calls}  # fmt: skip
    assert runs["sft_imperfect_ei"]["sampled_replies"] == runs["sft_imperfect_grpo"][
        "sampled_replies"] == 2 * 4 * 8  # fmt: skip
    assert runs["sft_imperfect_ei"]["token_slots"] == runs["sft_imperfect_grpo"]["token_slots"]


# ----------------------------------------------------------------------------- the report


def fake_run(arm, seed, outcomes, lr, validation, teacher=False, **training) -> dict:
    record = {
        "part": "run", "arm": arm, "seed": seed, "settings": {"teacher_error_rate": 0.3,
                                                                   "reply_tokens": 14},
        "training": {"learning_rate": lr, "best_step": 10, "heldout_multisets_in_training": 0,
                     "validation_curve": [{"step": 10, "exact": validation, "partial": 0.0,
                                           "format": 1.0}], **training},
        "test_greedy": {"exact": sum(outcomes) / len(outcomes), "format": 1.0,
                        "exact_per_problem": outcomes},
        "wall_and_cpu": {"seconds": 60.0, "cpu_seconds": 30.0}, "peak_rss_mib": 100.0,
    }  # fmt: skip
    if teacher:
        record["teacher_on_test"] = {}
        record["training"]["teacher_on_demonstrations"] = {"exact": 0.7}
    return record


def fake_rl(seed, outcomes) -> dict:
    return {
        "arm": "rl", "seed": seed, "settings": {"reply_tokens": 14},
        "rl": {"steps": 60, "prompts": 4, "group": 8, "learning_rate": 3e-4, "best_step": 60,
               "validation_curve": [{"step": 60, "exact": 0.5, "partial": 0.0, "format": 1.0}],
               "training_prompts_with_heldout_multiset": 0},
        "test_greedy": {"exact": sum(outcomes) / len(outcomes), "format": 1.0,
                        "exact_per_problem": outcomes},
    }  # fmt: skip


def test_the_report_pairs_the_arms_problem_by_problem_on_a_known_table(restore, tmp_path):
    B.HELDOUT = 8
    runs, grpo = tmp_path / "real_lm_verifier_runs", tmp_path / "grpo"
    runs.mkdir()
    grpo.mkdir()
    files = {
        "sft_imperfect_seed0": fake_run("sft_imperfect", 0, [1, 1, 0, 0, 0, 0, 0, 0], 5e-4, 0.3,
                                        teacher=True),
        # two learning rates after SFT: validation prefers 1e-4, whose test is the worse one
        "a": fake_run("sft_imperfect_grpo", 0, [1, 1, 1, 1, 1, 1, 1, 0], 1e-4, 0.6),
        "b": fake_run("sft_imperfect_grpo", 0, [1] * 8, 3e-4, 0.5),
        "expert_iteration_seed0": fake_run("expert_iteration", 0, [0, 0, 0, 0, 0, 0, 0, 1], 5e-4,
                                           0.1),
        # expert iteration after SFT at two rates: validation prefers 3e-5, the worse on test
        "c": fake_run("sft_imperfect_ei", 0, [1, 0, 1, 0, 0, 0, 0, 1], 3e-5, 0.5,
                      kept_replies=37, skipped_steps=2),
        "d": fake_run("sft_imperfect_ei", 0, [1] * 8, 1e-4, 0.4, kept_replies=90),
    }  # fmt: skip
    for name, record in files.items():
        (runs / f"{name}.json").write_text(json.dumps(record))
    (grpo / "rl_seed0.json").write_text(json.dumps(fake_rl(0, [1, 0, 1, 0, 1, 0, 1, 0])))
    r = M.main(part="report", out_dir=tmp_path, grpo_runs=str(grpo))
    assert r["learning_rate_choice"]["sft_imperfect_grpo"]["chosen"] == 1e-4
    assert r["arms"]["sft_imperfect_grpo"]["learning_rate"] == 1e-4
    by = {(c["a"], c["b"]): c for c in r["comparisons"]}
    first = by[("sft_imperfect_grpo", "sft_imperfect")]["mcnemar"][0]
    assert (first["a_only"], first["b_only"], first["p_value"]) == (5, 0, 2 / 2**5)
    second = by[("grpo", "expert_iteration")]["mcnemar"][0]
    assert (second["a_only"], second["b_only"], second["p_value"]) == (4, 1, 2 * 6 / 32)
    _, test = B.splits(M.build_args(model="tiny"))
    teacher = V.teacher_record(T.decode_numbers(test), 0, 0.3)["exact_per_problem"]
    third = by[("sft_imperfect_grpo", "teacher")]["mcnemar"][0]
    a_only = sum(x > y for x, y in zip([1] * 7 + [0], teacher))
    b_only = sum(y > x for x, y in zip([1] * 7 + [0], teacher))
    assert (third["a_only"], third["b_only"]) == (a_only, b_only)
    # expert iteration after SFT, at the rate validation chose (3e-5)
    assert r["learning_rate_choice"]["sft_imperfect_ei"]["chosen"] == 3e-5
    fourth = by[("sft_imperfect_grpo", "sft_imperfect_ei")]["mcnemar"][0]
    assert (fourth["a_only"], fourth["b_only"], fourth["p_value"]) == (5, 1, 2 * 7 / 64)
    fifth = by[("sft_imperfect_ei", "sft_imperfect")]["mcnemar"][0]
    assert (fifth["a_only"], fifth["b_only"], fifth["p_value"]) == (2, 1, 1.0)
    boot = by[("sft_imperfect_ei", "sft_imperfect")]["bootstrap"]
    assert boot["mean"] == round(1 / 8, 4) and boot["low"] <= boot["mean"] <= boot["high"]
    # Holm over the five tests made (no base run: no "vs base" test)
    assert r["holm"]["tests"] == 5 and "base (part base)" in r["not_run"]
    tests = [first, second, third, fourth, fifth]
    assert len(by) == 5 and [t for c in r["comparisons"] for t in c["mcnemar"]] == [
        by[k]["mcnemar"][0] for k in by
    ]
    ps = [t["p_value"] for t in tests]
    order = sorted(range(5), key=lambda i: ps[i])
    expected, running = [0.0] * 5, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (5 - rank) * ps[i]))
        expected[i] = running
    assert [t["p_holm"] for t in tests] == pytest.approx(expected)
    boot = by[("sft_imperfect_grpo", "sft_imperfect")]["bootstrap"]
    assert boot["mean"] == round(5 / 8, 4) and 0 < boot["low"] <= boot["mean"] <= boot["high"]
    sign = by[("grpo", "expert_iteration")]["sign_flip"]
    assert sign["floor"] == 1.0 and "cannot reach 0.05 with 1 seed " in sign["verdict"]
    assert first["floor"] == 2 / 2**5 and second["floor"] == 2 / 2**5
    assert "sft_gold seed 0" in r["not_run"] and "passk base_issue" in r["not_run"]
    assert "sft_imperfect_ei seed 1" in r["not_run"] and "sft_imperfect_ei seed 0" not in r[
        "not_run"] and "passk sft_imperfect_ei_seed0" in r["not_run"]  # fmt: skip
    text = M.section(r)
    assert "Holm over all 5 tests" in text and "5/0 p 0.062" in text
    assert "| SFT imperfect teacher, then expert iteration | 3e-05 | [0] | 0.375 |" in text
    assert "; kept 37 |" in text
    assert "- sft_imperfect_grpo vs sft_imperfect_ei: seed 0: 5/1 p 0.22" in text
    assert "- sft_imperfect_ei vs sft_imperfect: seed 0: 2/1 p 1" in text


def test_the_report_refuses_a_run_scored_on_another_test_split(restore, tmp_path):
    B.HELDOUT = 8
    runs = tmp_path / "real_lm_verifier_runs"
    runs.mkdir()
    record = fake_run("sft_gold", 0, [1, 0, 1], 5e-4, 0.5)  # 3 problems, not 8
    (runs / "sft_gold_seed0.json").write_text(json.dumps(record))
    with pytest.raises(SystemExit, match="scored 3 test problems.*has 8"):
        M.main(part="report", out_dir=tmp_path, grpo_runs=str(tmp_path))


def test_the_report_refuses_rl_runs_of_another_reply_cap(restore, tmp_path):
    """bench_real_lm's old rl runs (cap 14) beside runs at cap 16 are not compared."""
    B.HELDOUT = 8
    runs, grpo = tmp_path / "real_lm_verifier_runs", tmp_path / "grpo"
    runs.mkdir()
    grpo.mkdir()
    record = fake_run("sft_gold", 0, [1] * 8, 5e-4, 0.5)
    record["settings"]["reply_tokens"] = 16
    (runs / "sft_gold_seed0.json").write_text(json.dumps(record))
    (grpo / "rl_seed0.json").write_text(json.dumps(fake_rl(0, [1, 0] * 4)))
    with pytest.raises(SystemExit, match=r"different reply caps: \{.*14: .*rl_seed0.*16: "):
        M.main(part="report", out_dir=tmp_path, grpo_runs=str(grpo))


def test_collect_rerecords_the_run_machines_folders_and_keeps_every_number(restore, tmp_path):
    B.HELDOUT = 8
    source = tmp_path / "machine"
    source.mkdir()
    record = fake_run("sft_imperfect_grpo", 0, [1, 0, 1, 1, 0, 1, 1, 1], 1e-4, 0.5)
    inside = str(M.RESULTS / "real_lm_verifier_runs" / "adapters" / "x")  # in the repository
    record |= {"adapter": "/elsewhere/runs47/adapters/sft_imperfect_grpo_lr0.0001_seed0",
               "init_adapter": "/elsewhere/runs47/adapters/sft_imperfect_seed0"}  # fmt: skip
    record["settings"] |= {"save_adapter": inside, "model": "models/SmolLM2-135M-Instruct"}
    (source / "sft_imperfect_grpo_lr0.0001_seed0.json").write_text(json.dumps(record))
    (source / "notes.json").write_text(json.dumps({"part": "something else"}))
    r = M.main(part="report", out_dir=tmp_path, grpo_runs=str(tmp_path),
               collect_from=str(source))  # fmt: skip
    copied = json.loads((tmp_path / "real_lm_verifier_runs" /
                         "sft_imperfect_grpo_lr0.0001_seed0.json").read_text())  # fmt: skip
    assert not (tmp_path / "real_lm_verifier_runs" / "notes.json").exists()
    assert copied["adapter"] == V.NOT_COMMITTED.format("sft_imperfect_grpo_lr0.0001_seed0")
    assert copied["init_adapter"] == V.NOT_COMMITTED.format("sft_imperfect_seed0")
    assert (
        copied["settings"]["save_adapter"] == "benchmarks/results/real_lm_verifier_runs/adapters/x"
    )
    assert "/elsewhere" not in json.dumps(copied) and "/elsewhere" not in json.dumps(r)
    for key in ("test_greedy", "training", "wall_and_cpu", "peak_rss_mib", "seed", "arm"):
        assert copied[key] == record[key]
    assert r["arms"]["sft_imperfect_grpo"]["runs"][0]["test_exact"] == 0.75
    assert "sft_imperfect_grpo: a second learning rate (tried only 0.0001)" in r["not_run"]


# ----------------------------------------------------------------------------- options, quick


def test_bad_options_are_refused_before_a_model_loads(restore):
    def no_model(args):
        raise AssertionError("a model was loaded before the options were checked")

    restore.setattr(B, "load_model", no_model)
    for bad, match in (
        (dict(part="run"), "run needs --arm"),
        (dict(part="run", arm="grpo"), "invalid choice|run needs --arm"),
        (dict(group=1), "--group must be >= 2"),
        (dict(teacher_error_rate=1.5), "--teacher-error-rate must lie in"),
        (dict(part="passk", adapter="/nonexistent"), "--adapter and --label together"),
        (dict(ei_learning_rate=0.0), "--ei-learning-rate must be > 0"),
    ):
        with pytest.raises(SystemExit, match=match):
            M.main(model="tiny", **bad)


def test_the_quick_path_runs_every_part_to_the_report(restore, tmp_path):
    import report

    M.main(quick=True, out_dir=tmp_path)
    runs = tmp_path / "real_lm_verifier_runs"
    base = json.loads((runs / "base.json").read_text())
    assert set(base["strict"]) == set(base["lenient"]) == {"issue", "example"}
    assert len(base["strict"]["example"]["exact_per_problem"]) == 8
    for arm in M.RUN_ARMS:
        name = M.run_name(M.build_args(True, part="run", arm=arm, seed=1, model="tiny"))
        run = json.loads((runs / f"{name}.json").read_text())
        assert run["training"]["heldout_multisets_in_training"] == 0
        assert len(run["test_greedy"]["exact_per_problem"]) == 8
        assert (tmp_path / run["adapter"]).exists() or Path(run["adapter"]).exists()
    imperfect = json.loads((runs / "sft_imperfect_seed0.json").read_text())
    assert imperfect["teacher_on_test"]["problems"] == 8
    assert "teacher_on_demonstrations" in imperfect["training"]
    for name in ("sft_imperfect_grpo_lr0.0003_seed0", "sft_imperfect_ei_lr0.0005_seed0"):
        after = json.loads((runs / f"{name}.json").read_text())
        assert after["init_adapter"].endswith("adapters/sft_imperfect_seed0")
        assert after["training"]["validation_curve"][0]["step"] == 0
    r = json.loads((tmp_path / "real_lm_verifier.json").read_text())
    assert list(r["arms"]) == list(M.ARMS) and r["n_samples"] == M.QUICK["n_samples"]
    assert {"base_issue", "base_example", "grpo_seed0", "sft_imperfect_ei_seed0"} <= set(
        r["passk"]["curves"])  # fmt: skip
    assert {("sft_imperfect_grpo", "sft_imperfect_ei"), ("sft_imperfect_ei", "sft_imperfect")} <= {
        (c["a"], c["b"]) for c in r["comparisons"]}  # fmt: skip
    assert r["splits"]["test_guided_choice"] is None and r["holm"]["tests"] > 0
    assert "grpo seed 2" in r["not_run"]
    text = report.render(tmp_path)
    assert "What RL adds with only a verifier" in text and "Not run yet" in text
