"""Notebook 07's prose against the results files it reads (the checks moved out of the notebook).

The notebook keeps the checks of its own claims that could fail; these tests keep its numbers in
sync with ``benchmarks/results/*.json`` and its rankings in line with the exact permutation test
(``seed_stats.compare_seeds``): a comparison within seed noise must be called that, and the
section on stability may not name a cause it has not isolated.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pgrl_helpers.seed_stats import compare_seeds

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
NOTEBOOK = ROOT / "notebooks" / "07_grpo_training.ipynb"


def load(name: str) -> dict:
    path = RESULTS / f"{name}.json"
    if not path.exists():
        pytest.skip(f"{path.name} not found: run the benchmark")
    return json.loads(path.read_text())


def markdown() -> list[str]:
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]


def section(heading: str) -> str:
    """The markdown of one section: from the cell holding ``heading`` to the next heading cell."""
    cells = markdown()
    start = next(i for i, text in enumerate(cells) if heading in text)
    out = [cells[start]]
    for text in cells[start + 1 :]:
        if re.match(r"#{2,3} ", text):
            break
        out.append(text)
    return "\n".join(out)


def test_unseen_regime_numbers_the_prose_quotes():
    regime = load("unseen_regime")
    assert regime["num_multisets"] == 2_220_075  # "C(27, 8) = 2,220,075"
    assert regime["config"]["num_steps_per_epoch"] == 1  # "with section 4b's fix"
    for run in regime["runs"]:
        assert run["fraction_of_multisets_trained_on"] < 0.1  # "a few percent of the space"
    drops = [run["largest_drop_after_target"] for run in regime["runs"]]
    at_goal = [run["at_0.99"]["test"] for run in regime["runs"]]
    ends = [run["test_exact_sort_end"] for run in regime["runs"]]
    assert 0.05 < max(drops) < 0.12  # "drift down by up to about ten points"
    assert min(ends) < min(at_goal)  # "a drift, not a collapse": quote the number at 99%
    text = " ".join(section("### 4c").split())
    assert "2{,}220{,}075" in text and "ten points" in text


def stability_comparisons() -> dict[str, dict]:
    stability = load("stability")
    variants, before = stability["variants"], stability["before"]
    drops = {n: [r["largest_drop_after_target"] for r in v["runs"]] for n, v in variants.items()}
    return {
        name: compare_seeds(drops[name], drops[before], name, before, higher_is_better=False)
        for name in variants
        if name != before
    }


def test_stability_prose_ranks_only_what_the_permutation_test_shows():
    text = section("### 4b")
    assert "the cause is" not in text.lower(), "a cause needs an ablation changing only it"
    for name, result in stability_comparisons().items():
        bullet = next((line for line in text.splitlines() if f"**{name}**" in line), None)
        assert bullet is not None, f"the prose does not discuss {name!r}"
        if result["verdict"] == "within seed noise":
            assert "within seed noise" in bullet, (name, result["p_value"])
        else:
            assert "within seed noise" not in bullet, (name, result["p_value"])
            assert f"p = {result['p_value']:.3f}" in bullet, (name, result["p_value"])


def test_stability_runs_share_seeds_and_samples_claim():
    stability = load("stability")
    variants, before, after = stability["variants"], stability["before"], stability["after"]
    assert [r["seed"] for r in variants[after]["runs"]] == [
        r["seed"] for r in variants[before]["runs"]
    ]
    median = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    cost = {
        n: median([r["responses_sampled"] for r in variants[n]["runs"]]) for n in (before, after)
    }
    assert cost[after] > cost[before]  # "it samples more responses to reach the target"


def test_the_notebook_says_how_long_it_takes_without_a_stale_figure():
    first = markdown()[0]
    assert "minute or two" not in first
    assert "tasks.py timings" in first
