"""What notebooks 08, 11 and 12 say about their benchmark results, checked against the JSON.

These checks live here, not in the notebooks, so the notebooks keep only the checks of their
own claims. Each reads a results file and recomputes what the prose relies on (labels, splits,
p-values) with the package's own rule and comparison, so a results file that drifts from the
rule, or a split that leaks, fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pgrl_helpers import collapse
from pgrl_helpers.seed_stats import compare_seeds

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
NOTEBOOKS = ROOT / "notebooks"
OURS = ("08_real_lm_details", "11_modern_objectives", "12_rl_infrastructure")


def load(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text())


def markdown(notebook: str) -> str:
    nb = json.loads((NOTEBOOKS / f"{notebook}.ipynb").read_text())
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")


def assert_splits_disjoint(payload: dict) -> None:
    """The held-out keys themselves (``split_keys``) are disjoint, and the issue-27 record
    (``splits``, ``_common.record_splits``) says one recipe scored the test split, guiding
    no choice."""
    keys = payload["split_keys"]
    validation, test = set(keys["validation"]["keys"]), set(keys["test"]["keys"])
    assert validation and test and not validation & test, "validation and test share a key"
    for split in keys.values():
        assert split["distinct_keys"] == len(split["keys"])
        assert split["distinct_keys"] <= split["size"]
    record = payload["splits"]
    assert record["test_guided_choice"] is None and len(record["test_scored_by"]) == 1
    assert record["test"]["sizes"] == {"prompts": keys["test"]["size"], "keys": len(test)}


# ---- notebook 08 / bench_collapse ------------------------------------------------------


def test_collapse_json_uses_the_one_rule():
    bench = load("collapse")
    rule = bench["collapse_definition"]
    assert rule["function"] == "pgrl_helpers.collapse.is_collapsed"
    assert rule["entropy_below_nats"] == collapse.ENTROPY_THRESHOLD
    assert rule["entropy_mean_of_last_epochs"] == collapse.TAIL_EPOCHS
    assert rule["reads_test_set"] is False
    for run in bench["runs"]:
        c = run["curves"]
        assert run["collapsed"] == collapse.is_collapsed(
            c["validation_exact"], c["entropy"], bench["target"]
        )
        assert not (run["collapsed"] and run["reached_target"])


def test_collapse_json_matches_notebook_08_prose():
    # section 7 says: five seeds each, at most 150 epochs, stop at 90% validation exact
    bench = load("collapse")
    assert (bench["max_epochs"], len(bench["seeds"]), bench["target"]) == (150, 5, 0.9)
    assert_splits_disjoint(bench)
    for name, comparison in bench["comparisons"].items():
        first = next(iter(bench["settings"]))
        tests = {
            n: [r["final_test_exact"] for r in bench["runs"] if r["setting"] == n]
            for n in (name, first)
        }
        assert comparison == compare_seeds(tests[name], tests[first], name, first)


def test_length_drift_json_comparisons_recompute():
    bench = load("length_drift")
    first = {
        n: [r["length_per_epoch"][0] for r in bench["runs"] if r["setting"] == n]
        for n in bench["settings"]
    }
    last = {
        n: [r["length_per_epoch"][-1] for r in bench["runs"] if r["setting"] == n]
        for n in bench["settings"]
    }
    for n in bench["settings"]:
        assert len(first[n]) == len(bench["seeds"])
        assert bench["summary"][n]["grew"] == sum(b > a for a, b in zip(first[n], last[n]))
    directions = [c for c in bench["comparisons"] if c["kind"] == "direction"]
    for c, n in zip(directions, bench["settings"]):
        recomputed = compare_seeds(last[n], first[n], f"{n}: last epoch", f"{n}: epoch 0")
        assert {k: c[k] for k in recomputed} == recomputed


# ---- notebook 11 / bench_objectives ----------------------------------------------------


def test_objectives_json_collapsed_column_is_the_one_rule():
    bench = load("objectives")
    assert bench["collapse_rule"]["function"] == "pgrl_helpers.collapse.is_collapsed"
    for name, runs in bench["runs"].items():
        for r in runs:
            label = collapse.is_collapsed(
                r["validation_curve"],
                r["entropy"],
                bench["target"],
                entropy_epochs=r["entropy_epochs"],
            )
            assert r["collapsed"] == label, (name, r["seed"])
            assert not (label and r["reached"]), "a run that reached the target is collapsed"
            # the curve the rule read ends at the validation exact the table reports
            assert r["validation_curve"][-1] == r["validation_exact"]
    summary = {s["objective"]: s for s in bench["summary"]}
    for name, runs in bench["runs"].items():
        assert summary[name]["collapsed"] == sum(r["collapsed"] for r in runs)


def test_objectives_json_splits_and_p_values():
    bench = load("objectives")
    assert_splits_disjoint(bench)
    grpo = [r["test_exact"] for r in bench["runs"]["GRPO"]]
    for name, runs in bench["runs"].items():
        p = compare_seeds([r["test_exact"] for r in runs], grpo)["p_value"]
        assert bench["p_values_test_exact_vs_grpo"][name] == pytest.approx(p)


# ---- notebook 12 / bench_staleness -----------------------------------------------------


def test_staleness_json_is_on_the_content_split():
    bench = load("staleness")
    assert_splits_disjoint(bench)
    # one held-out prompt per multiset: "held out" means an unseen multiset, not a reordering
    for split in bench["split_keys"].values():
        assert split["distinct_keys"] == split["size"]
        assert "multiset" in split["key"]
    assert bench["tuning"]["selected_by"].startswith("final validation")
    assert not any("final_test_exact" in r for r in bench["tuning"]["runs"])


def test_staleness_json_comparisons_recompute():
    bench = load("staleness")
    for c in bench["comparisons"]:
        a = bench["summary"][c["name_a"]]["test_exact"]
        b = bench["summary"][c["name_b"]]["test_exact"]
        assert c == compare_seeds(a, b, c["name_a"], c["name_b"])
    for name, cell in bench["summary"].items():
        runs = [r for r in bench["runs"] if r["cell"] == name]
        assert cell["test_exact"] == [r["final_test_exact"] for r in runs]
        assert len(runs) == len(bench["seeds"])


# ---- all three -------------------------------------------------------------------------


@pytest.mark.parametrize("notebook", OURS)
def test_no_changelog_asides(notebook):
    text = markdown(notebook).lower()
    for phrase in ("an earlier version", "previous version", "this notebook used to"):
        assert phrase not in text, f"{notebook}: changelog aside {phrase!r} in teaching text"
