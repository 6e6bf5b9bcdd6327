"""Notebook 16 ("A real language model") against the results it reads and the rules it states.

The notebook reads ``benchmarks/results/real_lm.json`` (``benchmarks/bench_real_lm.py``) and
loads the committed adapter ``benchmarks/results/real_lm_adapter/``. These tests keep its prose
in line with the stored results (the goal met or not, the median and the worst seed, every number
of section 4's summary and of "What you learned", the per-list tests recomputed from the runs,
sft_rl's lists at cap 14 equal to sft_gold's at cap 16, no verdict read off the 3-seed test's
floor, no unmatched speed ratio and the matched one quoted with its load, the reply budget counted from the tokenizer) and check two rules the notebook states: the
weights are said to be SmolLM2's quantized to 4 bits, and no live cell reads the test split
(the test split is scored once, by the benchmark; the notebook reads its stored replies).
Each check has a planted-fault twin that shows it can fail.
"""

from __future__ import annotations

import ast
import copy
import json
import re
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
NOTEBOOK = ROOT / "notebooks" / "16_a_real_language_model.ipynb"
ADAPTER = RESULTS / "real_lm_adapter"
ARMS = ("rl", "sft_rl")


def notebook() -> dict:
    return json.loads(NOTEBOOK.read_text())


def results() -> dict:
    path = RESULTS / "real_lm.json"
    if not path.exists():
        pytest.skip(f"{path.name} not found: run benchmarks/bench_real_lm.py (report)")
    return json.loads(path.read_text())


def markdown(nb: dict) -> str:
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")


def flat(text: str) -> str:
    return " ".join(text.split())


# ---------------------------------------------------------------- the weights, said plainly


def quantization_problems(nb: dict) -> list[str]:
    text = flat(markdown(nb))
    problems = []
    if "quantized to 4 bits (Q4_1)" not in text:
        problems.append("the prose must say the weights are quantized to 4 bits (Q4_1)")
    if "not the original bf16 weights" not in text:
        problems.append("the prose must say the weights are not the original bf16 ones")
    check = "".join(next(c for c in nb["cells"] if c["cell_type"] == "code")["source"])
    if "python3 tasks.py real-model" not in check or "is_converted" not in check:
        problems.append("the environment check must test the model folder and name the command")
    return problems


def test_the_weights_are_called_quantized_and_the_setup_command_is_named():
    assert not quantization_problems(notebook())


def test_planted_missing_quantization_statement_fails():
    nb = copy.deepcopy(notebook())
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            cell["source"] = [
                "".join(cell["source"]).replace("quantized to 4 bits (Q4_1)", "converted")
            ]
    assert quantization_problems(nb)


# ---------------------------------------------------------------- no live cell reads the test split


def live_test_reads(nb: dict) -> list[str]:
    """Code that uses the name ``test`` (the benchmark's test prompts) other than to collect the
    held-out keys, ``torch.cat([validation, test])``, or to print its ``.shape``: any other use
    would score or show the test split live (the notebook reads it only through the stored
    results)."""
    found = []
    for index, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        tree = ast.parse(source)
        allowed = set()
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and ast.unparse(node.func) == "torch.cat"
                and node.args
                and isinstance(node.args[0], ast.List)
                and [ast.unparse(e) for e in node.args[0].elts] == ["validation", "test"]
            ):
                allowed.add(id(node.args[0].elts[1]))
            if isinstance(node, ast.Attribute) and node.attr == "shape":
                allowed.add(id(node.value))  # its size, not its lists
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id == "test" and id(node) not in allowed:
                if isinstance(node.ctx, ast.Store):
                    continue  # `validation, test = bench.splits(ARGS)`
                found.append(
                    f"cell {index}, line {node.lineno}: {ast.get_source_segment(source, node)}"
                )
    return found


def test_no_live_cell_scores_the_test_split():
    assert not live_test_reads(notebook())


def test_planted_live_test_evaluation_is_found():
    nb = copy.deepcopy(notebook())
    bad = "r = R.evaluate(model, tokenizer, test[:8], TEMPLATE)\n"
    nb["cells"].append({"cell_type": "code", "source": [bad], "outputs": [], "metadata": {}})
    assert live_test_reads(nb) == [f"cell {len(nb['cells']) - 1}, line 1: test"]


# ---------------------------------------------------------------- the stored results


def test_the_stored_runs_never_trained_on_a_held_out_multiset():
    data = results()
    for arm in ARMS:
        assert data["runs"].get(arm), f"no runs of arm {arm}"
    for rows in data["runs"].values():  # ours and the matched TRL arm
        for run in rows:
            assert run["rl"]["training_prompts_with_heldout_multiset"] == 0
            assert run.get("sft", {}).get("heldout_multisets_in_training", 0) == 0


def test_the_committed_adapter_is_the_one_the_results_name():
    data = results()
    assert data["adapter"] == "benchmarks/results/real_lm_adapter"
    assert (ADAPTER / "adapter_config.json").exists()
    from safetensors import safe_open

    with safe_open(str(ADAPTER / "adapter_model.safetensors"), "pt") as f:
        dtypes = {str(f.get_tensor(k).dtype) for k in f.keys()}
    assert dtypes == {"torch.float16"}, dtypes
    config = json.loads((ADAPTER / "adapter_config.json").read_text())
    seed0 = next(r for r in data["runs"]["sft_rl"] if r["seed"] == 0)
    assert config["r"] == seed0["settings"]["lora_r"]


def summary_problems(text: str, data: dict) -> list[str]:
    """What the prose says about the goal and the seed-level comparison against the JSON."""
    text = flat(text)
    problems = []
    for arm in ARMS:
        s = data["summary"][arm]
        median, worst = s["median_gain_points"], s["worst_gain_points"]
        for value, what in ((median, "median"), (worst, "worst")):
            if f"{value:+.1f} points" not in text:
                problems.append(f"{arm}: the {what} seed's gain {value:+.1f} points is not quoted")
    met = {arm: data["summary"][arm]["goal_30_points_on_median_seed"] for arm in ARMS}
    says_met = re.search(r"goal[^.]*\bis met\b|\bmet the goal\b|\bmeets the goal\b", text)
    says_missed = re.search(r"goal[^.]*\bnot met\b|\bmissed the goal\b|\bmisses the goal\b", text)
    if any(met.values()) and not says_met:
        problems.append("an arm met the goal of 30 points, and the prose does not say so")
    if not all(met.values()) and not says_missed:
        problems.append("an arm missed the goal of 30 points, and the prose does not say so")
    comparison = data["comparisons"].get("sft_rl_vs_rl_test_exact")
    if comparison:
        floor = 2 / 2 ** len(comparison["seeds"])
        if comparison["p_value"] <= floor and "within seed noise" in text:
            problems.append(
                "the seed-level test sits at its floor: 'within seed noise' would report the "
                "design's resolution, not the data (review 16-3)"
            )
        if f"{floor:.3f}" not in text:
            problems.append(f"the seed-level test's floor {floor:.3f} is not stated")
    return problems


def test_the_prose_quotes_the_stored_summary():
    data = results()
    assert not summary_problems(markdown(notebook()), data)


def test_planted_wrong_summary_fails():
    data = copy.deepcopy(results())
    text = markdown(notebook())
    for arm in ARMS:
        data["summary"][arm]["median_gain_points"] += 7.3
    assert summary_problems(text, data)
    flipped = copy.deepcopy(results())
    for arm in ARMS:
        flipped["summary"][arm]["goal_30_points_on_median_seed"] = True
    planted = re.sub(r"\bis met\b|\bmet the goal\b|\bmeets the goal\b", "x", text)
    assert summary_problems(planted, flipped)
    floor_verdict = text + " The paired comparison is within seed noise."
    assert any("within seed noise" in p for p in summary_problems(floor_verdict, results()))


# ---------------------------------------------------------------- every number of the prose


def outputs(nb: dict) -> str:
    """Every code cell's printed output, flattened."""
    out = []
    for cell in nb["cells"]:
        for o in cell.get("outputs", []):
            text = o.get("text") or o.get("data", {}).get("text/plain", "")
            out.append("".join(text) if isinstance(text, list) else text)
    return flat("\n".join(out))


def span(values, fmt=".3f", sep=" to "):
    """'low to high' as the prose writes a range; one value when they are equal."""
    low, high = format(min(values), fmt), format(max(values), fmt)
    return low if low == high else f"{low}{sep}{high}"


def expected_numbers(data: dict) -> dict[str, str]:
    """The numbers the prose quotes (section 4's summary, "What you learned"), computed from
    ``real_lm.json`` (review 16-a)."""
    from pgrl_helpers.paired_tests import bootstrap_mean_difference
    from pgrl_helpers.passk import pass_at_k

    runs, base, summary = data["runs"], data["base"], data["summary"]

    def passk(run, k):
        s = run["test_sampled"]
        return sum(pass_at_k(s["n"], c, k) for c in s["correct_per_problem"]) / len(
            s["correct_per_problem"]
        )

    exact = {a: [r["test_greedy"]["exact"] for r in runs[a]] for a in ARMS}
    seeds = sorted(r["seed"] for r in runs["rl"])
    pp = {a: {r["seed"]: r["test_greedy"]["exact_per_problem"] for r in runs[a]} for a in ARMS}
    diffs = [exact_mean(pp["sft_rl"][s]) - exact_mean(pp["rl"][s]) for s in seeds]
    boot = bootstrap_mean_difference([pp["sft_rl"][s] for s in seeds], [pp["rl"][s] for s in seeds])
    ours = [r for a in ARMS for r in runs[a]]
    gap = [r["kl_to_base"]["k1_per_reply"] - r["kl_to_base"]["k3_per_reply"] for r in ours]
    rl = summary["rl"]
    base_solved = sum(c > 0 for c in base["test_sampled"]["correct_per_problem"])
    gained = {a: [r["per_problem_vs_base"]["gained_at_n"] for r in runs[a]] for a in ARMS}
    interval = f"{boot['low']:.3f} to {boot['high']:.3f}"
    out = {
        "rl median": f"`rl` reaches a median of {statistics.median(exact['rl']):.3f}",
        "sft_rl median": f"`sft_rl` {statistics.median(exact['sft_rl']):.3f}",
        "rl test exact spread": span(exact["rl"], sep="-"),
        "sft_rl test exact spread": span(exact["sft_rl"], sep="-"),
        "CPU budget": f"at most {max(m for a in ARMS for m in summary[a]['training_cpu_minutes']):.1f} CPU-minutes",
        "rl stop steps": "Validation kept RL step "
        + ", ".join(str(r["rl"]["best_step"]) for r in runs["rl"][:-1])
        + f" and {runs['rl'][-1]['rl']['best_step']} of {runs['rl'][0]['rl']['steps']}",
        "per-seed differences": ", ".join(f"{d:.3f}" for d in diffs[:-1]) + f" and {diffs[-1]:.3f}",
        "mean difference and interval": f"{boot['mean']:.3f} (95 % bootstrap interval {interval})",
        "learned: difference": f"by {boot['mean']:.3f} over seeds and lists (95 % interval {interval})",
        "base format": f"(base: {base['test_greedy']['format']:.3f})",
        "reply length": f"replies of {span([r['test_greedy']['mean_length'] for r in ours], '.1f')} tokens",
        "base length": f"(base: {base['test_greedy']['mean_length']:.1f}, "
        f"{base['test_greedy']['at_cap']:.3f} of its replies cut off at the cap",
        "k1": f"{span([r['kl_to_base']['k1_per_reply'] for r in ours], '.2f')} nats",
        "k1 - k3": f"{span(gap, '.1f')} nats lower",
        "base solved": f"solved {base_solved} of the 64 test lists at least once in 16 samples "
        f"(pass@16 {passk(base, 16):.3f}",
        "learned: base solved": f"The base model solved {base_solved} test lists in 16 samples",
        "per-list base": f"The base model solved {base_solved} of the 64 test lists at least once",
        "rl pass@16": f"{span([passk(r, 16) for r in runs['rl']])} for `rl`",
        "pass@1": f"pass@1 {span([passk(r, 1) for r in runs['rl']])} and {span([passk(r, 1) for r in runs['sft_rl']])}",
        "lists gained": f"added {span(gained['rl'], 'd')} lists for `rl` and {span(gained['sft_rl'], 'd')} for `sft_rl`",
        "learned: lists gained": f"training added {span(gained['rl'], 'd')} for `rl`",
        "rl CPU": f"about {span(rl['training_cpu_minutes'], '.0f')} CPU-minutes of training and validation",
        "rl memory": f"peaked at {span([m / 1024 for m in rl['peak_rss_mib']], '.1f')} GiB",
        "rl at cap": f"{span([100 * x for x in rl['replies_at_cap']['training']], '.1f', ' % to ')} % of its training replies hit the cap",
    }
    if not any(rl["replies_at_cap"]["test_greedy"]):
        out["rl at cap, test"] = "none of its greedy test replies did"
    trl = summary.get("trl")
    if trl is not None:  # the matched TRL arm's reading (section 4), on the seeds both arms have
        tests = [t for t in data["paired_tests"]["mcnemar"] if (t["a"], t["b"]) == ("rl", "trl")]
        more = sum(t["b_only"] > t["a_only"] for t in tests)
        tb = data["paired_tests"]["differences"]["rl - trl"]["bootstrap"]
        cost = [trl["training_cpu_minutes"][i] / rl["training_cpu_minutes"][rl["seeds"].index(s)]
                for i, s in enumerate(trl["seeds"])]  # fmt: skip
        out["trl more lists"] = (
            f"solved more test lists than `rl`'s on {more} of {len(tests)} seeds"
        )
        out["rl - trl"] = (
            f"`rl` - `trl` is {tb['mean']:.3f} (95 % bootstrap interval {tb['low']:.3f} to {tb['high']:.3f})"
        )
        if not any(t["p_holm"] < 0.05 for t in tests):
            out["trl Holm"] = (
                "no single seed's per-list test stays below 0.05 after Holm's correction"
            )
        out["trl cost"] = f"at {span(cost, '.1f')} times our loop's CPU minutes per run"
    return out


def exact_mean(values) -> float:
    return sum(values) / len(values)


def number_problems(text: str, data: dict) -> list[str]:
    text = flat(text)
    return [
        f"{what}: '{quoted}' not in the prose"
        for what, quoted in expected_numbers(data).items()
        if quoted not in text
    ]


def test_every_number_of_the_summary_matches_the_results():
    assert not number_problems(markdown(notebook()), results())


def test_planted_changed_results_fail_the_numbers():
    data = copy.deepcopy(results())
    run = data["runs"]["rl"][1]
    run["test_greedy"]["exact_per_problem"][run["test_greedy"]["exact_per_problem"].index(0)] = 1
    run["kl_to_base"]["k1_per_reply"] += 0.5
    data["summary"]["rl"]["peak_rss_mib"][0] += 300
    data["base"]["test_sampled"]["correct_per_problem"][0] += 1 - min(
        1, data["base"]["test_sampled"]["correct_per_problem"][0]
    )
    found = number_problems(markdown(notebook()), data)
    for what in ("per-seed differences", "k1", "rl memory"):
        assert any(f.startswith(what) for f in found), (what, found)
    changed = copy.deepcopy(results())
    changed["base"]["test_sampled"]["correct_per_problem"] = [0] * 64
    assert any(f.startswith("base solved") for f in number_problems(markdown(notebook()), changed))


# ---------------------------------------------------------------- the reply budget (review 16-2)


def budget_problems(nb: dict) -> list[str]:
    """The prose's token counts against the counting cell's output: a bare five-number list and
    EOS, the forms cut off at the old cap, the budget, the longest answer, the slack."""
    out, text = outputs(nb), flat(markdown(nb))
    problems = []
    m = re.search(r"'0, 0, 0, 0, 0' +(\d+) tokens \+ EOS = (\d+)", out)
    cut = re.search(
        r"accepted forms of one five-number answer: (\d+); cut off at a cap of 14: (\d+)", out
    )
    budget = re.search(
        r"T\.reply_budget: (\d+) tokens \(the longest accepted answer, '(.+?)', is (\d+) tokens",
        out,
    )
    slack = re.search(r"slack over a bare five-number list and its EOS \(\d+\): (\d+) tokens", out)
    if not (m and cut and budget and slack):
        return ["the counting cell's output lacks a count"]
    five, eos = m.groups()
    for needed in (f"{five} tokens + EOS = {eos}", f"{cut[2]} of the {cut[1]} forms above",
                   f"(`{budget[2]}`, {budget[3]} tokens)", f"EOS, {budget[1]} tokens",
                   f"{slack[1]} tokens of slack", f"`ARGS.reply_tokens` = {budget[1]}"):  # fmt: skip
        if needed not in text:
            problems.append(f"the prose lacks '{needed}' (from the counting cell)")
    if re.search(r"EOS need 10|need 10\b", text):
        problems.append("the old token count (10) is stated")
    cell = "".join(next(c for c in nb["cells"] if c.get("id") == "nb16-04")["source"])
    if 'reply_tokens=BUDGET["tokens"]' not in cell or "T.reply_budget(tokenizer)" not in cell:
        problems.append("ARGS.reply_tokens is not the tokenizer's budget")
    return problems


def test_the_reply_budget_is_counted_and_quoted():
    assert not budget_problems(notebook())


def test_planted_wrong_budget_prose_fails():
    nb = copy.deepcopy(notebook())
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            cell["source"] = [
                "".join(cell["source"]).replace("2 tokens of slack", "4 tokens of slack")
            ]
    assert budget_problems(nb) == ["the prose lacks '2 tokens of slack' (from the counting cell)"]
    nb = copy.deepcopy(notebook())
    cell = next(c for c in nb["cells"] if c.get("id") == "nb16-04")
    cell["source"] = [
        "".join(cell["source"]).replace('reply_tokens=BUDGET["tokens"]', "reply_tokens=14")
    ]
    assert budget_problems(nb) == ["ARGS.reply_tokens is not the tokenizer's budget"]


# ---------------------------------------------------------------- sft_rl at cap 14 = sft_gold at 16


def cap_identity_problems(data: dict) -> list[str]:
    """sft_rl's runs (cap 14) and bench_real_lm_verifier.py's sft_gold runs (cap 16): the same
    greedy test outcome on every list, seed by seed, read from the files themselves."""
    same = data.get("sft_rl_at_cap_16") or {}
    if not same.get("found"):
        return ["the report found no sft_gold runs to compare sft_rl with"]
    problems = []
    runs = {r["seed"]: r for r in data["runs"]["sft_rl"]}
    if sorted(same["seeds"]) != sorted(runs):
        problems.append(f"sft_gold seeds {same['seeds']}, sft_rl seeds {sorted(runs)}")
    for seed, name in zip(same["seeds"], same["files"]):
        gold = json.loads((ROOT / name).read_text())
        if gold["settings"]["reply_tokens"] != 16 or runs[seed]["settings"]["reply_tokens"] != 14:
            problems.append(f"seed {seed}: the caps are not 16 (sft_gold) and 14 (sft_rl)")
        if (
            gold["test_greedy"]["exact_per_problem"]
            != runs[seed]["test_greedy"]["exact_per_problem"]
        ):
            problems.append(f"seed {seed}: sft_rl and sft_gold differ on some test list")
    if not same["all_identical"] and not problems:
        problems.append("the report says the lists differ")
    return problems


def test_sft_rl_solves_the_same_lists_as_sft_gold_at_cap_16():
    assert not cap_identity_problems(results())
    assert "solve exactly the same test lists" in flat(markdown(notebook()))


def test_planted_sft_rl_difference_is_found():
    data = copy.deepcopy(results())
    lists = data["runs"]["sft_rl"][2]["test_greedy"]["exact_per_problem"]
    lists[0] = 1 - lists[0]
    assert cap_identity_problems(data) == ["seed 2: sft_rl and sft_gold differ on some test list"]


# ---------------------------------------------------------------- the per-list tests (review 16-3)


def statistics_problems(nb: dict, data: dict) -> list[str]:
    """real_lm.json's per-list tests recomputed from its runs (bench_real_lm.paired_statistics:
    McNemar per seed, Holm over all), and the notebook printing their count."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_real_lm

    again = bench_real_lm.paired_statistics(data["runs"], data["base"])
    stored = data["paired_tests"]
    problems = []
    if again["mcnemar"] != stored["mcnemar"] or again["count"] != stored["count"]:
        problems.append("the stored McNemar tests differ from the runs' lists")
    for name, d in again["differences"].items():
        if d != stored["differences"].get(name):
            problems.append(f"the stored difference {name} differs from the runs' lists")
    if f"Holm over the {stored['count']} comparisons made" not in outputs(nb):
        problems.append(f"the notebook does not print Holm over the {stored['count']} comparisons")
    return problems


def test_the_per_list_tests_are_the_runs_and_are_printed():
    assert not statistics_problems(notebook(), results())


def test_planted_changed_list_fails_the_statistics():
    data = copy.deepcopy(results())
    lists = data["runs"]["rl"][0]["test_greedy"]["exact_per_problem"]
    lists[lists.index(1)] = 0
    assert statistics_problems(notebook(), data)


# ---------------------------------------------------------------- speed (review 16-1)


def speed_problems(nb: dict, data: dict) -> list[str]:
    """No unmatched speed ratio anywhere; a matched one only with both sides float32 without
    checkpointing, printed by the notebook; no target called met."""
    text, out = flat(markdown(nb)), outputs(nb)
    problems = []
    old = json.loads((RESULTS / "real_lm_runs" / "speed.json").read_text())
    old_ratio = old.get("cpu_seconds_per_step", {}).get("ratio_trl_over_ours")
    if old_ratio is not None and not old.get("matched"):
        for where, body in (("prose", text), ("outputs", out)):
            if f"{old_ratio:.2f}" in body:
                problems.append(
                    f"the unmatched speed ratio {old_ratio:.2f} is quoted in the {where}"
                )
    if re.search(r"target[^.]*\bmet\b", text):
        problems.append("a speed target is called met")
    speed = data.get("speed")
    if speed is None:
        if not data.get("speed_not_reported"):
            problems.append("real_lm.json has no speed and does not say why")
        elif "matched speed against TRL: not in real_lm.json" not in out:
            problems.append("the notebook does not print why there is no matched speed")
        for needed in ("not like-for-like", "bench_real_lm.py speed"):
            if needed not in text:
                problems.append(f"the speed caveat lacks '{needed}'")
    else:
        if speed["trl_settings"]["compute_dtype"] != "float32" or speed["ours_dtype"] != "float32":
            problems.append("the speed record is not float32 on both sides")
        if speed["trl_settings"]["gradient_checkpointing"] is not False:
            problems.append("TRL ran with gradient checkpointing in the speed record")
        if f"{speed['ratio_trl_over_ours']['cpu_seconds']:.2f}" not in out:
            problems.append("the notebook does not print the matched ratio")
    return problems


def test_speed_is_quoted_only_when_matched():
    assert not speed_problems(notebook(), results())


def test_planted_old_speed_ratio_fails():
    nb = copy.deepcopy(notebook())
    old = json.loads((RESULTS / "real_lm_runs" / "speed.json").read_text())
    ratio = old.get("cpu_seconds_per_step", {}).get("ratio_trl_over_ours", 2.29)
    nb["cells"].append({"cell_type": "markdown", "metadata": {},
                        "source": [f"TRL / ours = {ratio:.2f}, the target met."]})  # fmt: skip
    found = speed_problems(nb, results())
    assert any("target" in f for f in found)
    if "matched" not in old:
        assert any("unmatched speed ratio" in f for f in found)
    bf16 = copy.deepcopy(results())
    bf16["speed"] = {"trl_settings": {"compute_dtype": "bfloat16", "gradient_checkpointing": True},
                     "ours_dtype": "float32", "ratio_trl_over_ours": {"cpu_seconds": 9.87}}  # fmt: skip
    assert len(speed_problems(notebook(), bf16)) == 3


def speed_prose_problems(text: str, data: dict) -> list[str]:
    """The matched speed as the prose quotes it (section 4's summary, the Evidence section and
    "What you learned"): the ratio of the CPU medians, both medians, the steps per side and the
    load the steps ran under, all from ``real_lm.json``'s ``speed`` (review r7, F1/F4)."""
    speed = data.get("speed")
    if speed is None:
        return []
    text = flat(text)
    ours, trl = speed["ours"], speed["trl"]
    loads = [s["load_before"] for side in (ours, trl) for s in side["steps"]]
    ratio = f"{speed['ratio_trl_over_ours']['cpu_seconds']:.2f} times our loop's CPU seconds"
    needed = {
        "ratio": ratio,
        "medians": f"medians {trl['cpu_seconds']['median']:.1f} and "
        f"{ours['cpu_seconds']['median']:.1f} s over {speed['timed_steps_per_side']} steps each",
        "load": f"a 1-minute load average of {min(loads):.1f} to {max(loads):.1f} on 2 cores",
    }
    problems = [
        f"speed {what}: '{q}' not in the prose" for what, q in needed.items() if q not in text
    ]
    if text.count(ratio) < 2:
        problems.append("speed: the matched ratio is not in both section 4 and 'What you learned'")
    return problems


def test_the_prose_quotes_the_matched_speed():
    assert not speed_prose_problems(markdown(notebook()), results())


def test_planted_changed_speed_fails_the_prose():
    data = copy.deepcopy(results())
    if data.get("speed") is None:
        pytest.skip("real_lm.json holds no matched speed")
    data["speed"]["ratio_trl_over_ours"]["cpu_seconds"] += 0.4
    data["speed"]["ours"]["cpu_seconds"]["median"] -= 1.0
    data["speed"]["trl"]["steps"][3]["load_before"] = 7.5
    found = speed_prose_problems(markdown(notebook()), data)
    for what in ("speed ratio", "speed medians", "speed load", "speed: the matched ratio"):
        assert any(f.startswith(what) for f in found), (what, found)


# ---------------------------------------------------------------- the matched TRL arm (issue 46)


def trl_problems(nb: dict, data: dict) -> list[str]:
    """The notebook prints the TRL arm that real_lm.json holds (executed after the report): its
    seeds present and every seed's test exact, with the settings checked equal (float32 without
    checkpointing); or, with no TRL run, says so."""
    out = outputs(nb)
    rows = data["runs"].get("trl")
    if not rows:
        if "the matched TRL arm: no finished run in real_lm.json yet" not in out:
            return ["real_lm.json has no TRL run and the notebook does not say so"]
        return []
    problems = []
    side = data["trl"]["side_by_side"]
    settings = {k: v for k, v, _ in side["matched_settings"]}
    if settings.get("compute_dtype") != "float32" or settings.get("gradient_checkpointing"):
        problems.append("the TRL arm is not float32 without checkpointing")
    if f"the matched TRL arm: {len(rows)} of {len(data['runs']['rl'])} seeds present" not in out:
        problems.append(f"the notebook does not print the {len(rows)} TRL seeds present")
    exact = str([round(r["test_greedy"]["exact"], 3) for r in rows])
    if f"trl on seeds {[r['seed'] for r in rows]}: test exact {exact}" not in out:
        problems.append(f"the notebook does not print TRL's test exact {exact}")
    return problems


def test_the_notebook_prints_the_trl_arm_the_results_hold():
    assert not trl_problems(notebook(), results())


def test_planted_trl_arm_out_of_sync_is_found():
    data = copy.deepcopy(results())
    if data["runs"].get("trl"):  # the notebook printed them: drop one seed
        data["runs"]["trl"] = data["runs"]["trl"][:-1] or [dict(data["runs"]["trl"][0], seed=9)]
        assert trl_problems(notebook(), data)
    else:  # the notebook says none: give the results one
        run = copy.deepcopy(data["runs"]["rl"][0]) | {"arm": "trl"}
        data["runs"]["trl"] = [run]
        data["trl"] = {"seeds_present": 1, "side_by_side": {"matched_settings": [
            ["compute_dtype", "float32", "float32"], ["gradient_checkpointing", False, False]]}}  # fmt: skip
        assert len(trl_problems(notebook(), data)) == 2
