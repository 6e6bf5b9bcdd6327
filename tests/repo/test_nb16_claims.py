"""Notebook 16 ("A real language model") against the results it reads and the rules it states.

The notebook reads ``benchmarks/results/real_lm.json`` (``benchmarks/bench_real_lm.py``) and
loads the committed adapter ``benchmarks/results/real_lm_adapter/``. These tests keep its prose
in line with the stored results (the goal met or not, a paired comparison within seed noise
called that, the median and the worst seed) and check two rules the notebook states: the
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
    """What the prose says about the goal and the comparison against what the JSON holds."""
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
    if comparison and comparison["p_value"] >= 0.05 and "within seed noise" not in text:
        problems.append(
            "the paired comparison has p >= 0.05: the prose must say 'within seed noise'"
        )
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
