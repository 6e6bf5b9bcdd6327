"""PPO + GAE (a critic) vs GRPO vs RLOO on the autoregressive sort-dedup task (notebook 10).

The same loop and policy; only the advantage estimator (and each method's own settings)
differ. Task: bench_objectives' (prompts of length 4, values 0-5, at most 6 response
tokens); 10 + 10 held-out sets of values, unseen by content: the first 10 prompts
(validation) decide the stop (greedy exact >= TARGET, checked every 5 epochs), the other
10 (test) are read once, at the end of the run (the last evaluation).

Two phases, in one invocation:

1. Tuning (seeds 100, 101, never used below): each method at LEARNING_RATES (3 learning
   rates x 2 seeds = 6 runs per method, 18 in all). PPO's critic uses the policy's learning
   rate; gamma = 1, lambda = 0.95, value clip 0.2 are fixed (the RLHF defaults), so PPO
   gets the same tuning budget as the group methods. The chosen rate per method: most seeds
   reaching the target, then fewest responses to it (a seed that misses counts the whole
   budget), then the highest final validation exact. Validation only; the test set is never
   read to choose.
2. Evaluation: each method at its chosen rate, seeds 0-4 (15 runs).

Per run: responses sampled, wall and CPU seconds to the target (None when missed), final
test exact, final token entropy. Runs go WORKERS at a time in parallel processes (one torch
thread each), interleaved across methods, so wall times share the same load; CPU seconds
(``time.process_time`` of the worker) depend less on the load. Both are recorded with the
load averages at the start and end.

    python benchmarks/bench_ppo_vs_grpo.py                 (tune, evaluate, save)
    python benchmarks/bench_ppo_vs_grpo.py --resummarise   (tables again from the saved runs)
    python benchmarks/bench_ppo_vs_grpo.py --quick         (1 tuning seed, 2 epochs per run)
"""

from __future__ import annotations

import itertools
import json
import math
import os
import statistics
import time
from dataclasses import replace
from multiprocessing import Pool
from pathlib import Path

import torch
from _common import (
    NUM_THREADS,
    RESULTS_DIR,
    loop_splits,
    markdown_table,
    output_dir,
    parse_args,
    record_splits,
    save,
    setup,
)

from pgrl_helpers.config import TrainConfig
from pgrl_helpers.seed_stats import observed_floor, paired_permutation_p_value
from pgrl_helpers.training import run_policy_gradient

NAME = "ppo_vs_grpo"
SEEDS = (0, 1, 2, 3, 4)
TUNING_SEEDS = (100, 101)
LEARNING_RATES = (1e-3, 3e-3, 1e-2)
TARGET = 0.8  # 8 of 10 (a first try, 95% in 50 epochs, was stopped: no tuning run reached it)
MAX_EPOCHS = 70  # 70 x 16 prompts x G = 16: 17,920 responses at most
WORKERS = 2
QUICK_EPOCHS = 1  # a quick run: every run this long, one tuning seed, one seed

BASE = TrainConfig.preset(
    "notebook_08",  # its task, policy and GRPO-style objective; smaller batches
    prompts_per_epoch=16,
    num_epochs=MAX_EPOCHS,
    eval_every=5,
    num_eval_prompts=10,  # 10 + 10 held-out sets of values
    target_validation_exact_sort=TARGET,
)

#: name -> the fields that differ from BASE (each method's own recipe; lr is tuned). PPO's
#: critic makes its deltas: it sets BASE's deltas_mode back to the default, which 'gae' does
#: not read (any other value is refused by ``TrainConfig.validate``).
METHODS: dict[str, dict] = {
    "PPO + GAE": {"advantage_estimator": "gae", "gamma": 1.0, "gae_lambda": 0.95,
                  "value_clip": 0.2, "critic_learning_rate": None,
                  "deltas_mode": "centered_rewards"},
    "GRPO": {"loss_aggregation": "sequence_mean"},
    "RLOO": {"deltas_mode": "loo_rewards"},
}  # fmt: skip


def config_for(name: str, learning_rate: float, seed: int, epochs: int = MAX_EPOCHS) -> TrainConfig:
    config = replace(BASE, learning_rate=learning_rate, seed=seed, **METHODS[name])
    return replace(config, num_epochs=epochs)


def run(config: TrainConfig) -> dict:
    """One seed until the validation target or MAX_EPOCHS; the test set read at the end."""
    wall, cpu = time.perf_counter(), time.process_time()
    history = run_policy_gradient(config)
    seconds, cpu_seconds = time.perf_counter() - wall, time.process_time() - cpu
    evals = history.evals()
    reached = history.stop_reason == "target"
    assert history.train_prompts_with_heldout_key == 0  # held out by content
    return {
        "seed": config.seed,
        "learning_rate": config.learning_rate,
        "reached": reached,
        "responses_to_target": evals[-1]["responses_sampled"] if reached else None,
        "seconds_to_target": seconds if reached else None,  # the run stops at the target
        "cpu_seconds_to_target": cpu_seconds if reached else None,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "responses_sampled": evals[-1]["responses_sampled"],
        "validation_exact": evals[-1]["validation_exact_sort"],
        "test_exact": evals[-1]["test_exact_sort"],
        "final_entropy": history.steps()[-1]["entropy"],
        "curve": [(e["responses_sampled"], e["validation_exact_sort"]) for e in evals],
    }


def _job(job: tuple[str, float, int, int]) -> tuple[str, float, dict]:
    name, lr, seed, epochs = job
    torch.set_num_threads(NUM_THREADS)
    result = run(config_for(name, lr, seed, epochs))
    print(
        f"{name} lr={lr:g} seed {seed}: reached={result['reached']} "
        f"responses={result['responses_sampled']} validation={result['validation_exact']:.2f} "
        f"test={result['test_exact']:.2f} "
        f"({result['seconds']:.0f} s wall, {result['cpu_seconds']:.0f} s CPU)",
        flush=True,
    )
    return name, lr, result


def budget_responses(epochs: int = MAX_EPOCHS) -> int:
    return epochs * BASE.prompts_per_epoch * BASE.num_responses


def tuning_score(runs: list[dict], epochs: int = MAX_EPOCHS) -> tuple:
    """Higher is better: (seeds reaching, -mean responses to target, mean final validation)."""
    responses = [r["responses_to_target"] or budget_responses(epochs) for r in runs]
    return (
        sum(r["reached"] for r in runs),
        -statistics.mean(responses),
        statistics.mean(r["validation_exact"] for r in runs),
    )


def censored_median(values: list[float]) -> float | None:
    """The median over every seed, a missed target counting as infinity (``math.inf``): None
    when the middle seed(s) missed, i.e. the median is only known to exceed the budget."""
    ordered = sorted(values)
    middle = ordered[(len(ordered) - 1) // 2 : len(ordered) // 2 + 1]
    return None if math.inf in middle else statistics.mean(middle)


def summarise(name: str, learning_rate: float, runs: list[dict]) -> dict:
    """One method's row. Medians to target are over ALL seeds (a missed seed counts as
    beyond the budget), so None means the median seed missed: "> budget"."""
    reached = [r for r in runs if r["reached"]]

    def med(key):
        return censored_median([r[key] if r["reached"] else math.inf for r in runs])

    return {
        "method": name,
        "learning_rate": learning_rate,
        "seeds_reached": len(reached),
        "median_responses_to_target": med("responses_to_target"),
        "worst_responses_to_target": (
            max(r["responses_to_target"] for r in runs) if len(reached) == len(runs) else None
        ),
        "median_seconds_to_target": med("seconds_to_target"),
        "median_cpu_seconds_to_target": med("cpu_seconds_to_target"),
        "median_test_exact": statistics.median(r["test_exact"] for r in runs),
        "worst_test_exact": min(r["test_exact"] for r in runs),
    }


def table(summary: list[dict], num_seeds: int = len(SEEDS), epochs: int = MAX_EPOCHS) -> str:
    def fmt(x, spec, missed="> budget"):
        return missed if x is None else format(x, spec)

    headers = ["method", "lr (tuned)", f"seeds reaching {TARGET:.0%} (validation)",
               "median responses to target (all seeds)", "worst-seed responses to target",
               "median wall s to target (all seeds)", "median CPU s to target (all seeds)",
               "median test exact", "worst-seed test exact"]  # fmt: skip
    rows = [[s["method"], f"{s['learning_rate']:g}", f"{s['seeds_reached']}/{num_seeds}",
             fmt(s["median_responses_to_target"], ".0f", f"> {budget_responses(epochs)}"),
             fmt(s["worst_responses_to_target"], ".0f") if s["seeds_reached"] == num_seeds
             else f"> {budget_responses(epochs)} (missed)",
             fmt(s["median_seconds_to_target"], ".1f"),
             fmt(s["median_cpu_seconds_to_target"], ".1f"),
             f"{s['median_test_exact']:.2f}", f"{s['worst_test_exact']:.2f}"]
            for s in summary]  # fmt: skip
    return markdown_table(headers, rows)


#: What the seed-noise comparison reads per run (and the run length): a missed target counts
#: the whole budget.
COMPARED = {
    "responses to target": lambda r, epochs: r["responses_to_target"] or budget_responses(epochs),
    "test exact": lambda r, epochs: r["test_exact"],
}


def comparisons(runs: dict[str, list[dict]], epochs: int = MAX_EPOCHS) -> list[dict]:
    """Every pair of methods, per COMPARED metric: the means and the exact paired sign-flip
    p-value (every method ran the same seeds, and seed k gives each the same initial weights,
    split and prompt stream: the runs are paired by seed)."""
    rows = []
    for (name_a, runs_a), (name_b, runs_b) in itertools.combinations(runs.items(), 2):
        for metric, read in COMPARED.items():
            assert [r["seed"] for r in runs_a] == [r["seed"] for r in runs_b]  # seed k vs seed k
            a, b = [read(r, epochs) for r in runs_a], [read(r, epochs) for r in runs_b]
            rows.append({"a": name_a, "b": name_b, "metric": metric,
                         "mean_a": statistics.mean(a), "mean_b": statistics.mean(b),
                         "p_value": paired_permutation_p_value(a, b), "paired": True})  # fmt: skip
    return rows


def run_jobs(jobs: list[tuple[str, float, int]]) -> list[tuple[str, float, dict]]:
    with Pool(WORKERS) as pool:
        return list(pool.imap(_job, jobs))


def main(quick: bool = False, seeds=None, out_dir=RESULTS_DIR, *, resummarise=False) -> dict:
    """Tune each method's lr on ``TUNING_SEEDS``, then run ``seeds`` (default ``SEEDS``) at
    the chosen rates; ``quick``: one tuning seed, seed 0, ``QUICK_EPOCHS`` epochs per run.
    ``resummarise``: only recompute the tables of out_dir/ppo_vs_grpo.json."""
    if resummarise:
        return resummarise_stored(out_dir)
    out_dir = output_dir(out_dir, quick)
    setup()
    seeds = tuple(seeds) if seeds else (SEEDS[:1] if quick else SEEDS)
    tuning_seeds = TUNING_SEEDS[:1] if quick else TUNING_SEEDS
    epochs = QUICK_EPOCHS if quick else MAX_EPOCHS
    load_start = list(os.getloadavg())
    start = time.perf_counter()
    # 1. tuning: interleave methods so that they share the load
    jobs = [(n, lr, s, epochs) for s in tuning_seeds for lr in LEARNING_RATES for n in METHODS]
    tuning_runs = run_jobs(jobs)
    tuning, chosen = {}, {}
    for name in METHODS:
        grid = {}
        for lr in LEARNING_RATES:
            runs = [r for n, x, r in tuning_runs if n == name and x == lr]
            grid[f"{lr:g}"] = {"score": tuning_score(runs, epochs), "runs": runs}
        tuning[name] = grid
        chosen[name] = max(LEARNING_RATES, key=lambda lr: grid[f"{lr:g}"]["score"])
        print(f"{name}: chosen lr {chosen[name]:g}", flush=True)
    # 2. evaluation at the chosen rates, seeds 0-4
    final = run_jobs([(n, chosen[n], s, epochs) for s in seeds for n in METHODS])
    runs = {name: [r for n, _, r in final if n == name] for name in METHODS}
    summary = [summarise(name, chosen[name], runs[name]) for name in METHODS]
    cpu_total = sum(r["cpu_seconds"] for _, _, r in tuning_runs + final)
    print(table(summary, len(seeds), epochs))
    print(f"CPU seconds, all {len(tuning_runs) + len(final)} runs: {cpu_total:.0f}")
    return save(
        NAME,
        {
            "validation_target": TARGET,
            "max_epochs": epochs,
            "budget_responses": budget_responses(epochs),
            "seeds": list(seeds),
            "tuning_seeds": list(tuning_seeds),
            "learning_rates": list(LEARNING_RATES),
            "parallel_workers": WORKERS,
            "num_validation": BASE.num_eval_prompts,
            "num_test": BASE.num_eval_prompts,
            "base": {k: v for k, v in vars(BASE).items() if not k.startswith("_")},
            "methods": METHODS,
            "chosen_learning_rates": chosen,
            "tuning": tuning,
            "summary": summary,
            "table": table(summary, len(seeds), epochs),
            "runs": runs,
            "comparisons": comparisons(runs, epochs),
            "cpu_seconds_total": cpu_total,
            "wall_seconds_total": time.perf_counter() - start,
            "load_average_at_start": [round(x, 2) for x in load_start],
            **split_payload(),
        },
        out_dir,
    )


def add_options(parser) -> None:
    parser.add_argument(
        "--resummarise", action="store_true", help="recompute the tables from the saved runs"
    )


#: What the test split is scored by: the three arms side by side, once.
RECIPE = (
    "PPO + GAE, GRPO and RLOO side by side, each at the learning rate picked on validation "
    "(tuning seeds only), 5 seeds, test read once at the end; no arm chosen by its test score"
)


def split_payload() -> dict:
    """The splits record of this benchmark (``_common.record_splits``)."""
    splits = loop_splits(BASE, "bench_ppo_vs_grpo")
    return record_splits(
        {},
        validation=splits["validation"],
        test=splits["test"],
        recipe=RECIPE,
        benchmark="bench_ppo_vs_grpo.py",
    )


def resummarise_stored(out_dir=RESULTS_DIR) -> dict:
    """Recompute summary, table and comparisons of out_dir/ppo_vs_grpo.json from its runs
    (no training; the machine record of the measuring run is kept)."""
    path = Path(out_dir) / f"{NAME}.json"
    data = json.loads(path.read_text())
    chosen = data["chosen_learning_rates"]
    data["summary"] = [summarise(n, chosen[n], data["runs"][n]) for n in METHODS]
    data["table"] = table(data["summary"], len(data["seeds"]), data["max_epochs"])
    data["comparisons"] = comparisons(data["runs"], data["max_epochs"])
    data.update(split_payload())
    path.write_text(json.dumps(data, indent=2) + "\n")
    print(data["table"])
    return data


def section(r: dict, results_dir=RESULTS_DIR) -> str:
    """The tuned methods' table, the setting, and every difference against seed noise."""
    title = "## PPO + GAE vs GRPO vs RLOO (`bench_ppo_vs_grpo.py`, notebook 10)"
    b, lrs = r["base"], ", ".join(f"{x:g}" for x in r["learning_rates"])
    chosen = "; ".join(f"{k} {v:g}" for k, v in r["chosen_learning_rates"].items())
    n_runs = len(r["methods"]) * (
        len(r["learning_rates"]) * len(r["tuning_seeds"]) + len(r["seeds"])
    )
    ppo = r["methods"]["PPO + GAE"]
    seeds = len(r["seeds"])
    note = (
        f"Sort-dedup with the autoregressive policy (prompts of length {b['prompt_length']}, "
        f"values 0-{b['vocab_size'] - 1}), G = {b['num_responses']}, "
        f"{b['prompts_per_epoch']} prompts and {b['num_steps_per_epoch']} optimizer steps per "
        f"epoch, entropy bonus {b['entropy_coef']:g}, at most {r['max_epochs']} epochs "
        f"({r['budget_responses']} responses). {r['num_validation']} validation + "
        f"{r['num_test']} test prompts held out by content (sets of values never trained on): "
        f"validation decides the stop (greedy exact >= {r['validation_target']:.0%}, every "
        f"{b['eval_every']} epochs), test is read once at the end. Per-method tuning: learning "
        f"rates {lrs} x tuning seeds {r['tuning_seeds']} "
        f"({len(r['learning_rates']) * len(r['tuning_seeds'])} runs per method, chosen on "
        f"validation only): {chosen}. PPO: separate critic at the policy's rate, gamma "
        f"{ppo['gamma']:g}, lambda {ppo['gae_lambda']:g}, value clip {ppo['value_clip']:g}, "
        f"whitened advantages (not tuned). Then seeds "
        f"{r['seeds']}. CPU for all {n_runs} runs: {r['cpu_seconds_total'] / 60:.1f} "
        f"CPU-minutes; {r['parallel_workers']} runs at a time on a shared "
        f"{r['machine']['logical_cores']}-core CPU (load "
        f"average {r['load_average_at_start']} at the start, "
        f"{r['machine']['load_average_1_5_15_min']} at the end): wall times are "
        "inflated; compare only within this table."
    )

    def fmt(x):
        return f"{x:.0f}" if x > 1 else f"{x:.2f}"

    level = 0.05 / len(r["comparisons"])  # Bonferroni: every comparison at 5% / their number

    def floor(c):  # the smallest p the test could give on these runs (seed_stats.observed_floor)
        read = COMPARED[c["metric"]]
        a, b = ([read(x, r["max_epochs"]) for x in r["runs"][m]] for m in (c["a"], c["b"]))
        return observed_floor(a, b, paired=True)

    def word(c):  # three cases: shown; undecided (the floor cannot reach the level); not detected
        if c["p_value"] < level:
            return " (exceeds seed noise)"
        if floor(c) >= level:
            return (
                f" (undecided: its smallest possible p, {floor(c):.3g}, is not below {level:.4f})"
            )
        return f" (no difference detected at {level:.4f})"

    noise = [
        f"{c['a']} vs {c['b']}, {c['metric']}: means {fmt(c['mean_a'])} vs {fmt(c['mean_b'])}, "
        f"exact paired p = {c['p_value']:.3f}" + word(c)
        for c in r["comparisons"]
    ]
    exceed = sum(c["p_value"] < level for c in r["comparisons"])
    undecided = sum(c["p_value"] >= level and floor(c) >= level for c in r["comparisons"])
    most = max(sum(x["reached"] for x in runs) for runs in r["runs"].values())
    verdict = (
        f"{exceed} of {len(noise)} differences exceed seed noise at the Bonferroni level "
        f"0.05 / {len(noise)} = {level:.4f}; {undecided} of the {len(noise)} tests are "
        "undecided: they could not reach that level whatever the runs did."
    )
    if exceed == 0:
        verdict += (f" With at most {most} of {seeds} seeds reaching the target per "
                    "method, this budget does not rank the three methods.")  # fmt: skip
    rows = [  # rebuilt from the runs, so the medians follow ``summarise``'s rule
        summarise(name, r["chosen_learning_rates"][name], runs) for name, runs in r["runs"].items()
    ]
    lines = [title, "", note, "", table(rows, seeds, r["max_epochs"]), "", "Differences against seed noise (exact "
             f"paired sign-flip test over the {seeds} shared seeds, smallest possible p = "
             f"2/{2 ** seeds}; a missed target counts the whole budget):", ""] + [f"- {x}" for x in noise] + ["", verdict]  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    main(**parse_args(add_options))
