"""The claims notebooks 09, 10 and 13 make about their benchmarks' saved results.

The notebooks read ``benchmarks/results/*.json`` and print; the sentences around those prints
say things about the numbers ("cannot rank", "every seed meets the goal by a margin of ...",
"the validation curves move within a few points"). These tests pin each such sentence to the
JSON, so that a re-run benchmark whose numbers no longer support the prose fails here, not
silently in a notebook.
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
from pathlib import Path

import pytest

from pgrl_helpers import diagnose as dg
from pgrl_helpers.seed_stats import paired_permutation_p_value, permutation_p_value

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


def load(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text())


def markdown(notebook: str) -> str:
    cells = json.loads((ROOT / "notebooks" / notebook).read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


# ---- notebook 09: TRL ----------------------------------------------------------------------


def test_09_the_final_recipe_is_scored_once_on_a_fresh_test_set():
    bench = load("trl")
    first = {load(n)["splits"]["test"]["id"] for n in ("trl_v1_final_recipe", "trl_no_weight_decay",
                                                       "trl_4_steps", "trl_constant_lr",
                                                       "trl_900_steps", "trl_stop_at_validation")}  # fmt: skip
    assert len(first) == 1 and bench["splits"]["test"]["id"] not in first
    assert (
        len(bench["splits"]["test_scored_by"]) == 1
        and bench["splits"]["test_guided_choice"] is None
    )
    assert all(r["train_prompts_with_heldout_key"] == 0 for r in bench["runs"])
    # the recipe itself did not change between the first test set and the fresh one
    v1 = load("trl_v1_final_recipe")
    assert v1["config"] == bench["config"] and v1["weight_decay"] == bench["weight_decay"]
    assert v1["lr_schedule"] == bench["lr_schedule"] == "linear"


def test_09_goal_and_margin_as_the_prose_states():
    bench = load("trl")
    worst = min(r["test"]["exact_sort"] for r in bench["runs"])
    assert bench["worst_test_exact_sort"] == worst
    assert bench["goal_met"] == (worst >= bench["goal"])
    text = markdown("09_scaling_up_with_trl.ipynb")
    n = bench["split"]["test"]
    margin = round(worst * n) - math.ceil(bench["goal"] * n)
    if bench["goal_met"]:
        # "a margin of a few prompts is about one multiset": at most 6 orderings a multiset
        assert 0 <= margin <= 6, margin
        assert "worst seed is above 95%" in text and "falls short" not in text
    else:
        assert "falls short of 95%" in text and "does not reach the" in text


FIRST_TEST_SET_RECIPES = (
    "trl_constant_lr",
    "trl_4_steps",
    "trl_no_weight_decay",
    "trl_v1_final_recipe",
)


def test_09_the_first_test_set_is_a_record_not_a_ranking():
    # every recipe ran the same seeds, so two recipes compare seed by seed (paired); 3 paired
    # seeds give a sign-flip p of at least 2/2^3 = 0.25, so no ranking claim can stand
    runs = {name: load(name)["runs"] for name in FIRST_TEST_SET_RECIPES}
    seeds = {name: [r["seed"] for r in rs] for name, rs in runs.items()}
    assert all(s == [0, 1, 2] for s in seeds.values()), seeds
    for a, b in itertools.combinations(FIRST_TEST_SET_RECIPES, 2):
        pa = [r["test"]["exact_sort"] for r in runs[a]]
        pb = [r["test"]["exact_sort"] for r in runs[b]]
        assert paired_permutation_p_value(pa, pb) >= 0.25, (a, b)
    text = " ".join(markdown("09_scaling_up_with_trl.ipynb").split())
    assert "not a ranking" in text and "cannot give a sign-flip p below 0.25" in text


def late_validation(run: dict) -> float:
    """Mean validation exact-sort over the last quarter of a run (notebook 09, section 6)."""
    late = [c["exact_sort"] for c in run["validation_curve"] if c["step"] > 0.75 * run["steps"]]
    return statistics.fmean(late)


def test_09_weight_decay_cannot_be_told_apart_on_validation():
    # item 4 of section 6: kept with the first test set in view; validation cannot separate it
    with_decay = [late_validation(r) for r in load("trl_v1_final_recipe")["runs"]]
    without = [late_validation(r) for r in load("trl_no_weight_decay")["runs"]]
    assert paired_permutation_p_value(with_decay, without) >= 0.05
    text = " ".join(markdown("09_scaling_up_with_trl.ipynb").split())
    assert "first test set's* scores in view" in text and "cannot be told apart" in text
    assert "chosen on the validation set" not in text


def first_code_cell(notebook: str) -> str:
    cells = json.loads((ROOT / "notebooks" / notebook).read_text())["cells"]
    return next("".join(c["source"]) for c in cells if c["cell_type"] == "code")


def test_09_environment_check_comes_first_and_names_the_setup_command(monkeypatch, capsys):
    import importlib.util

    source = first_code_cell("09_scaling_up_with_trl.ipynb")
    exec(compile(source, "nb09-cell", "exec"), {})  # the extra is installed here: no error
    printed = capsys.readouterr().out
    assert all(name in printed for name in ("transformers", "trl", "peft"))
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "trl" else real(name, *a)
    )
    with pytest.raises(ModuleNotFoundError, match=r"needs trl .*python3 tasks\.py lab"):
        exec(compile(source, "nb09-cell", "exec"), {})


def spread(run: dict) -> float:
    late = [c["exact_sort"] for c in run["validation_curve"] if c["step"] > run["steps"] / 2]
    return max(late) - min(late)


def test_09_validation_moves_a_few_points_where_the_constant_rate_swung_tens():
    constant, runs = load("trl_constant_lr")["runs"], load("trl")["runs"]
    assert max(spread(r) for r in runs) < 0.1 and min(spread(r) for r in constant) > 0.2


def test_09_stopping_early_on_validation_cost_test_exact_sort():
    full = {r["seed"]: r for r in load("trl_v1_final_recipe")["runs"]}  # the same test set
    for r in load("trl_stop_at_validation")["runs"]:
        assert r["test"]["exact_sort"] < full[r["seed"]]["test"]["exact_sort"] - 0.05
    longer = load("trl_900_steps")["runs"]
    fooled = [r for r in longer if r["selected_validation_exact_sort"] >= 0.99]
    assert sum(r["test"]["exact_sort"] < 0.8 for r in fooled) == 2


# ---- notebook 10: PPO vs GRPO --------------------------------------------------------------


def test_10_tuning_choices_and_p_values_recomputed():
    bench = load("ppo_vs_grpo")
    budget = bench["budget_responses"]

    def score(runs):
        spent = [r["responses_to_target"] or budget for r in runs]
        return (sum(r["reached"] for r in runs), -statistics.mean(spent),
                statistics.mean(r["validation_exact"] for r in runs))  # fmt: skip

    for name, grid in bench["tuning"].items():
        best = max(grid, key=lambda lr: score(grid[lr]["runs"]))
        assert float(best) == bench["chosen_learning_rates"][name]
    read = {"responses to target": lambda r: r["responses_to_target"] or budget,
            "test exact": lambda r: r["test_exact"]}  # fmt: skip
    for c in bench["comparisons"]:
        a = [read[c["metric"]](r) for r in bench["runs"][c["a"]]]
        b = [read[c["metric"]](r) for r in bench["runs"][c["b"]]]
        # the stored p under the design the benchmark records (unpaired unless it says paired)
        test = paired_permutation_p_value if c.get("paired") else permutation_p_value
        assert abs(test(a, b) - c["p_value"]) < 1e-9


def test_10_cannot_rank_and_ppo_costs_more_per_epoch():
    bench = load("ppo_vs_grpo")
    assert len(set(bench["chosen_learning_rates"].values())) == 1  # "chose the same rate"
    reached = {n: sum(r["reached"] for r in runs) for n, runs in bench["runs"].items()}
    assert max(reached.values()) <= 2  # "none reaches ... on more than 2 of 5 seeds"
    # "cannot rank": the notebook compares seed k with seed k (paired sign-flip test)
    read = {"responses to target": lambda r: r["responses_to_target"] or bench["budget_responses"],
            "test exact": lambda r: r["test_exact"]}  # fmt: skip
    for c in bench["comparisons"]:
        runs_a, runs_b = bench["runs"][c["a"]], bench["runs"][c["b"]]
        assert [r["seed"] for r in runs_a] == [r["seed"] for r in runs_b]  # paired by seed
        a, b = [read[c["metric"]](r) for r in runs_a], [read[c["metric"]](r) for r in runs_b]
        assert paired_permutation_p_value(a, b) >= 0.05, c
    # and five paired seeds could not show a difference at 5% whatever the runs did
    assert 2 / 2 ** len(bench["seeds"]) > 0.05
    per_epoch = bench["base"]["prompts_per_epoch"] * bench["base"]["num_responses"]
    cpu = {
        n: statistics.median(r["cpu_seconds"] / (r["responses_sampled"] / per_epoch) for r in runs)
        for n, runs in bench["runs"].items()
    }
    assert cpu["PPO + GAE"] > max(cpu["GRPO"], cpu["RLOO"])
    text = markdown("10_ppo_vs_grpo.ipynb")
    assert "**cannot rank**" in text and "could not have at 5%" in " ".join(text.split())


def seeds_needed(level: float) -> int:
    """The fewest paired seeds whose exact sign-flip test can give p < level (all d_k > 0)."""
    n = 1
    while paired_permutation_p_value([1.0] * n, [0.0] * n) >= level:
        n += 1
    return n


def test_10_seeds_needed_follow_from_the_test_and_the_number_of_comparisons():
    # "one comparison at 5% needs six paired seeds, the six comparisons here at the Bonferroni
    # level need eight": 2/2^8 = 0.0078 < 0.05/6 = 0.0083 <= 2/2^7
    bench = load("ppo_vs_grpo")
    alpha = 0.05 / len(bench["comparisons"])
    assert len(bench["comparisons"]) == 6 and (seeds_needed(0.05), seeds_needed(alpha)) == (6, 8)
    assert all(c["p_value"] >= alpha for c in bench["comparisons"])  # "0 of 6 ... exceed"
    text = " ".join(markdown("10_ppo_vs_grpo.ipynb").split())
    assert "comparison at 5% needs six paired seeds" in text
    assert "at the Bonferroni level need eight" in text and "better ten" not in text


def test_10_median_responses_to_target_count_every_seed():
    # more than half of every method's seeds missed the target, so the all-seed median is
    # censored (> the budget); a median over the seeds that reached it is not the method's median
    bench = load("ppo_vs_grpo")
    for name, runs in bench["runs"].items():
        assert sum(not r["reached"] for r in runs) > len(runs) / 2, name
        assert any(not r["reached"] for r in runs), name  # the worst seed missed
    text = " ".join(markdown("10_ppo_vs_grpo.ipynb").split())
    assert f"(> {bench['budget_responses']}, printed)" in text
    cells = json.loads((ROOT / "notebooks" / "10_ppo_vs_grpo.ipynb").read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    assert 'bench["table"]' not in code  # its median counts only the seeds that reached


# ---- notebook 13: detectors ----------------------------------------------------------------


@pytest.fixture(scope="module")
def detectors() -> dict:
    return load("detectors")


def test_13_every_finding_measured_on_disjoint_seeds(detectors):
    assert set(detectors["rates"]["report"]) == set(dg.CATALOGUE)
    assert not set(detectors["tuning_seeds"]) & set(detectors["report_seeds"])
    assert len(detectors["report_seeds"]) >= 10 and len(detectors["tuning_seeds"]) >= 10
    for r in detectors["rates"]["report"].values():
        assert r["planted_runs"] == r["healthy_runs"] == len(detectors["report_seeds"])


def test_13_the_rates_are_recomputed_from_the_runs(detectors):
    report = set(detectors["report_seeds"])
    for name, rate in detectors["rates"]["report"].items():
        planted = [r for r in detectors["runs"] if r["finding"] == name
                   and r["kind"] == "planted" and r["seed"] in report]  # fmt: skip
        healthy = [r for r in detectors["runs"] if r["kind"] == "healthy" and r["seed"] in report]
        assert rate["hits"] == sum(name in r["findings"] for r in planted)
        assert rate["false_alarms_healthy"] == sum(name in r["findings"] for r in healthy)


def test_13_prose_about_plateau_and_hacking_matches_the_rates(detectors):
    report = detectors["rates"]["report"]
    text = markdown("13_troubleshooting.ipynb")
    # the notebook calls the stuck lecture run "stuck" and the healthy run healthy
    assert report["plateau"]["hits"] >= len(detectors["report_seeds"]) // 2
    assert report["plateau"]["false_alarms_healthy"] == 0
    # "a detector with a low hit rate (the gradient spike ...)": grad_spike is the weakest one
    assert report["grad_spike"]["hits"] == min(r["hits"] for r in report.values())
    assert "the gradient spike" in text
    # a healthy run gets no warning (section 0) on any reported seed
    warnings = [n for n, r in report.items() if n != "loss_near_zero" and r["false_alarms_healthy"]]
    assert warnings == [] or "false alarms" in text


def test_13_length_drift_misses_are_threshold_misses(detectors):
    """Section 7 and the table's reading: every reported seed where length_drift missed started
    so long that +LENGTH_DRIFT_REL was beyond the cap of 10 tokens, and still drifted close to
    the cap (a miss of the threshold, not of the drift)."""
    text = markdown("13_troubleshooting.ipynb")
    missed = detectors["rates"]["report"]["length_drift"]["missed_seeds"]
    runs = {
        r["seed"]: r
        for r in detectors["runs"]
        if (r["finding"], r["kind"]) == ("length_drift", "planted")
    }
    for seed in missed:
        first, last = runs[seed]["response_length_first"], runs[seed]["response_length_last"]
        assert (1 + dg.LENGTH_DRIFT_REL) * first > 10 and last >= 9.5, (seed, first, last)
    assert "misses of the threshold, not of the drift" in " ".join(text.split()) or not missed


def test_13_reward_hacking_goal_is_compared_paired(detectors):
    """Section 3: the fix is compared with the loophole seed by seed (both rewards ran on the
    same seeds); the paired test still puts the fix ahead."""
    from pgrl_helpers.seed_stats import compare_seeds

    goal = detectors["reward_hacking_goal"]
    assert goal["seeds"] == sorted(goal["seeds"]) and len(goal["seeds"]) >= 10
    paired = compare_seeds(goal["fixed"], goal["loophole"], "fix", "loophole", paired=True)
    assert paired["p_value"] < 0.05 and paired["verdict"].startswith("fix better")


def test_09_trl_costs_more_per_step_and_where():
    """Section 7's prose: TRL takes about 1.6x our CPU per step; dearer in every phase it names."""
    vs = load("trl_vs_loop")
    pairs = vs["pairs"]
    assert vs["config"]["num_steps_per_epoch"] == load("trl")["config"]["num_steps_per_epoch"] == 1
    ratios = [p["trl"]["cpu_seconds_per_step"] / p["ours"]["cpu_seconds_per_step"] for p in pairs]
    assert all(1.5 <= r <= 1.7 for r in ratios), ratios  # "about 1.6 times"
    per_step = {
        name: {
            k: sum(p[name]["profile_cpu_seconds"][k] for p in pairs)
            / sum(p[name]["steps"] for p in pairs)
            for k in pairs[0][name]["profile_cpu_seconds"]
        }
        for name in ("ours", "trl")
    }
    ours, trl = per_step["ours"], per_step["trl"]
    assert trl["generation"] > ours["generation"] and trl["reward"] > ours["reward"]
    assert trl["backward"] > ours["backward"]  # the fused LM head
    assert trl["overhead"] > 3 * ours["overhead"]  # "several times"
    text = markdown("09_scaling_up_with_trl.ipynb")
    assert "about 1.6 times" in text
    # the summary says what the timers measured: phases, not the fused head
    assert "likely, not measured" in " ".join(text.split())
    extra = {k: trl[k] - ours[k] for k in ours if k != "evaluation"}
    share = {k: v / sum(extra.values()) for k, v in extra.items()}
    assert max(share, key=share.get) in ("generation", "overhead") and share["backward"] > 0.15


def test_09_worst_seed_validation_never_again_reached_its_checkpoint_score():
    worst = min(load("trl")["runs"], key=lambda r: r["test"]["exact_sort"])
    curve = worst["validation_curve"]
    later = [c["exact_sort"] for c in curve if c["step"] > worst["selected_step"]]
    assert later and max(later) < worst["selected_validation_exact_sort"]
    text = " ".join(markdown("09_scaling_up_with_trl.ipynb").split())
    assert "validation never reached that score again" in text
    assert "far more than the values-0-4 runs" not in text  # no run of values 0-4 is printed
