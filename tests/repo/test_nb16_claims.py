"""Notebook 16 ("A real language model") against the results it reads and the rules it states.

The notebook reads ``benchmarks/results/real_lm.json`` (``benchmarks/bench_real_lm.py``) and
loads the committed adapter ``benchmarks/results/real_lm_adapter/``. These tests keep its prose
in line with the stored results (the goal met or not, the median and the worst seed, every number
of section 4's summary, no verdict read off the 3-seed test's floor, no unmatched speed ratio, the
reply budget counted) and check two rules the notebook states: the
weights are said to be SmolLM2's quantized to 4 bits, and no live cell reads the test split
(the test split is scored once, by the benchmark; the notebook reads its stored replies).
Each check has a planted-fault twin that shows it can fail.
"""

from __future__ import annotations

import ast
import copy
import json
import re
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
        for run in data["runs"][arm]:
            assert run["rl"]["training_prompts_with_heldout_multiset"] == 0
            assert run.get("sft", {}).get("heldout_multisets_in_training", 0) == 0
    assert data["splits"]["test_guided_choice"] is None


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


# ---------------------------------------------------------------- every number of section 4's summary


def expected_numbers(data: dict) -> dict[str, str]:
    """The numbers the prose quotes, computed from ``real_lm.json`` (review 16-a)."""
    from pgrl_helpers.paired_tests import bootstrap_mean_difference
    from pgrl_helpers.passk import pass_at_k

    runs, base = data["runs"], data["base"]

    def span(values, fmt=".3f", sep=" to "):
        return f"{min(values):{fmt}}{sep}{max(values):{fmt}}"

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
    every = [r for a in ARMS for r in runs[a]]
    gap = [r["kl_to_base"]["k1_per_reply"] - r["kl_to_base"]["k3_per_reply"] for r in every]
    return {
        "rl test exact spread": span(exact["rl"], sep="-"),
        "sft_rl test exact spread": span(exact["sft_rl"], sep="-"),
        "CPU budget": f"at most {max(m for a in ARMS for m in data['summary'][a]['training_cpu_minutes']):.1f} CPU-minutes",
        "per-seed differences": ", ".join(f"{d:.3f}" for d in diffs[:-1]) + f" and {diffs[-1]:.3f}",
        "mean difference and interval": f"{boot['mean']:.3f} (95 % bootstrap interval {boot['low']:.3f} to {boot['high']:.3f})",
        "base format": f"(base: {base['test_greedy']['format']:.3f})",
        "reply length": f"replies of {span([r['test_greedy']['mean_length'] for r in every], '.1f')} tokens",
        "base length": f"(base: {base['test_greedy']['mean_length']:.1f}",
        "k1": f"{span([r['kl_to_base']['k1_per_reply'] for r in every], '.2f')} nats",
        "k1 - k3": f"{span(gap, '.1f')} nats lower",
        "rl pass@16": f"{span([passk(r, 16) for r in runs['rl']])} for `rl`",
        "pass@1": f"pass@1 {span([passk(r, 1) for r in runs['rl']])} and {span([passk(r, 1) for r in runs['sft_rl']])}",
        "lists gained": f"added {span([r['per_problem_vs_base']['gained_at_n'] for r in runs['rl']], 'd')} lists",
    }


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
    found = number_problems(markdown(notebook()), data)
    assert any("per-seed differences" in f for f in found) and any("k1" in f for f in found)


# ---------------------------------------------------------------- speed and tokens (review 16-1, 16-2)


def speed_and_token_problems(nb: dict, data: dict) -> list[str]:
    text = flat(markdown(nb))
    problems = []
    speed = data.get("speed") or {}
    ratio = speed.get("cpu_seconds_per_step", {}).get("ratio_trl_over_ours")
    if ratio is not None and not speed.get("matched") and f"{ratio:.2f}" in text:
        problems.append(f"the unmatched speed ratio {ratio:.2f} is quoted")
    if re.search(r"target[^.]*\bmet\b", text):
        problems.append("a speed target is called met")
    for needed in ("not like-for-like", "bench_real_lm.py speed", "has not been run"):
        if needed not in text:
            problems.append(f"the speed caveat lacks '{needed}'")
    if re.search(r"EOS need 10|need 10\b", text):
        problems.append("the old token count (10) is stated")
    if "13 tokens + EOS" not in text or "T.reply_budget" not in text:
        problems.append("the reply budget (13 tokens + EOS; T.reply_budget) is not explained")
    return problems


def test_speed_is_not_claimed_and_tokens_are_counted():
    assert not speed_and_token_problems(notebook(), results())


def test_planted_old_speed_and_token_prose_fails():
    nb = copy.deepcopy(notebook())
    data = results()
    ratio = data["speed"]["cpu_seconds_per_step"]["ratio_trl_over_ours"]
    nb["cells"].append(
        {
            "cell_type": "markdown",
            "metadata": {},
            "source": [
                f"TRL / ours = {ratio:.2f}, the target met; five digits with commas and EOS need 10."
            ],
        }
    )
    found = speed_and_token_problems(nb, data)
    assert len(found) == 3, found
