"""How often ``diagnose()`` names each planted cause, and how often it cries wolf.

For every finding of ``pgrl_helpers.diagnose``: the planted run of ``symptoms.planted_run``
(one cause changed in a small healthy run) and its fixed run, and the healthy run itself,
each on every seed. Reported per finding, over ``REPORT_SEEDS``:

* hit rate: seeds whose planted run gets the finding;
* false alarms on healthy runs: seeds whose healthy run (``symptoms.healthy_config``) gets it;
* on the fixed run: seeds whose fixed run still gets it.

Thresholds (the module constants of ``diagnose``) were set looking only at ``TUNING_SEEDS``
(0-9, which include the seeds notebook 13 used to show the detectors before); the reported
seeds 10-19 were run once, after. Both sets are saved, so the tuning rates can be compared
with the reported ones. Runs are tiny (about a CPU second each).

    nice -n 10 .venv/bin/python benchmarks/bench_detectors.py --jobs 2
    .venv/bin/python benchmarks/bench_detectors.py --seeds 10 11   # some seeds only
    .venv/bin/python benchmarks/bench_detectors.py --quick   # seeds 0 and 10, 2 epochs per run
    .venv/bin/python benchmarks/bench_detectors.py --findings held_at_reference --out /tmp/d
        # one finding's planted and fixed runs plus the healthy runs (never into results/)
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

from _common import RESULTS_DIR, markdown_table, output_dir, parse_args, record_splits, save, setup

from pgrl_helpers import symptoms
from pgrl_helpers.diagnose import CATALOGUE, diagnose
from pgrl_helpers.seed_stats import compare_seeds

NAME = "detectors"
TUNING_SEEDS = tuple(range(0, 10))
REPORT_SEEDS = tuple(range(10, 20))
QUICK_EPOCHS = 2  # a quick run: every run cut to this many epochs


def one_run(job: tuple[str, str, int, bool]) -> dict:
    """(finding, 'planted' | 'fixed' | 'healthy', seed, quick) -> what diagnose said and the
    goal."""
    from pgrl_helpers.training import run_policy_gradient

    setup()
    finding, kind, seed, quick = job
    if kind == "healthy":
        config = symptoms.healthy_config(seed)
    else:
        planted, fixed = symptoms.planted_run(finding, seed)
        config = planted if kind == "planted" else fixed
        if config == symptoms.healthy_config(seed):
            return {"finding": finding, "kind": kind, "seed": seed, "same_as_healthy": True}
    if quick:
        config = replace(config, num_epochs=min(config.num_epochs, QUICK_EPOCHS))
    start = time.process_time()
    history = run_policy_gradient(config)
    evals = history.evals()
    steps = history.steps()
    findings = diagnose(history)
    return {
        "finding": finding,
        "kind": kind,
        "seed": seed,
        "findings": [f.name for f in findings],
        "warnings": [f.name for f in findings if f.severity == "warning"],
        "cpu_seconds": time.process_time() - start,
        "validation_exact_first": evals[0]["validation_exact_sort"],
        "validation_exact_final": evals[-1]["validation_exact_sort"],
        "validation_reward_first": evals[0]["validation_mean_reward"],
        "validation_reward_final": evals[-1]["validation_mean_reward"],
        "train_exact_final": evals[-1].get("train_exact_sort"),
        "reward_first_epoch": steps[0]["mean_reward"],
        "reward_last_step": steps[-1]["mean_reward"],
        "response_length_first": steps[0]["response_length"],
        "response_length_last": steps[-1]["response_length"],
    }


def rates(runs: list[dict], seeds: tuple[int, ...], findings=tuple(CATALOGUE)) -> dict:
    """Per finding: hits on its planted runs, false alarms on healthy and on its fixed runs."""
    out = {}
    healthy = [r for r in runs if r["kind"] == "healthy" and r["seed"] in seeds]
    for name in findings:
        planted = [r for r in runs if r["finding"] == name and r["kind"] == "planted"]
        fixed = [r for r in runs if r["finding"] == name and r["kind"] == "fixed"]
        planted = [r for r in planted if r["seed"] in seeds]
        fixed = [r for r in fixed if r["seed"] in seeds]
        out[name] = {
            "hits": sum(name in r["findings"] for r in planted),
            "planted_runs": len(planted),
            "missed_seeds": [r["seed"] for r in planted if name not in r["findings"]],
            "false_alarms_healthy": sum(name in r["findings"] for r in healthy),
            "healthy_runs": len(healthy),
            "false_alarm_seeds_healthy": [r["seed"] for r in healthy if name in r["findings"]],
            "fires_on_fixed": sum(name in r["findings"] for r in fixed),
            "fixed_runs": len(fixed),
        }
    return out


#: Findings of severity 'info': notes whose place is the healthy run, never false alarms.
INFO_NOTES = ("loss_near_zero",)


def table(rate: dict) -> str:
    """Markdown table of ``rates``; an info note's healthy-run count is labelled as a note."""

    def on_healthy(name: str, r: dict) -> str:
        count = f"{r['false_alarms_healthy']}/{r['healthy_runs']}"
        return f"{count} (info note, not an alarm)" if name in INFO_NOTES else count

    rows = [
        [
            name,
            symptoms.PLANTED[name],
            f"{r['hits']}/{r['planted_runs']}",
            on_healthy(name, r),
            f"{r['fires_on_fixed']}/{r['fixed_runs']}",
        ]
        for name, r in rate.items()
    ]
    head = ["finding", "planted cause", "hit rate", "false alarms (healthy)", "fires on the fix"]
    return markdown_table(head, rows)


def goal_comparison(runs: list[dict], seeds: tuple[int, ...]) -> dict:
    """Reward hacking: held-out exact-sort at the end, loophole reward vs the fix, per seed."""
    pick = {
        kind: {
            r["seed"]: r["validation_exact_final"]
            for r in runs
            if r["finding"] == "reward_hacking" and r["kind"] == kind and r["seed"] in seeds
        }
        for kind in ("planted", "fixed")
    }
    common = sorted(set(pick["planted"]) & set(pick["fixed"]))
    loophole = [pick["planted"][s] for s in common]
    fixed = [pick["fixed"][s] for s in common]
    # seed k of both rewards starts from the same weights and prompts: paired by seed
    result = compare_seeds(
        fixed, loophole, "sort_distance (fix)", "inclusion+ordering", True, paired=True
    )
    return {"seeds": common, "loophole": loophole, "fixed": fixed, "comparison": result}


def main(
    quick: bool = False, seeds=None, out_dir=RESULTS_DIR, *, jobs: int = 2, findings=None
) -> dict:
    """Healthy, planted and fixed runs of every finding on ``seeds`` (default: the tuning and
    the report seeds; ``quick``: one of each, ``QUICK_EPOCHS`` epochs per run), ``jobs``
    processes. ``findings``: only these findings' planted and fixed runs (the healthy runs
    always run); such a partial run never writes to results/."""
    findings = tuple(findings) if findings else tuple(CATALOGUE)
    unknown = sorted(set(findings) - set(CATALOGUE))
    if unknown:
        raise SystemExit(f"unknown findings {unknown}; choose from {sorted(CATALOGUE)}")
    partial = set(findings) != set(CATALOGUE)
    if partial and not quick and Path(out_dir).resolve() == RESULTS_DIR:
        raise SystemExit("--findings runs only some detectors: write it elsewhere with --out DIR")
    out_dir = output_dir(out_dir, quick)
    setup()
    seeds = tuple(seeds) if seeds else ((0, 10) if quick else TUNING_SEEDS + REPORT_SEEDS)
    tuning_seeds = tuple(s for s in seeds if s in TUNING_SEEDS)
    report_seeds = tuple(s for s in seeds if s not in TUNING_SEEDS)
    work = [("healthy", "healthy", s, quick) for s in seeds]
    work += [
        (name, kind, s, quick) for s in seeds for name in findings for kind in ("planted", "fixed")
    ]
    start = time.perf_counter()
    with ProcessPoolExecutor(jobs) as pool:
        runs = list(pool.map(one_run, work))
    healthy = {r["seed"]: r for r in runs if r["kind"] == "healthy"}
    runs = [  # a fixed run that is the healthy run itself: its results, trained once
        {**healthy[r["seed"]], "finding": r["finding"], "kind": r["kind"], "same_as_healthy": True}
        if r.get("same_as_healthy")
        else r
        for r in runs
    ]
    wall = time.perf_counter() - start
    result = {
        "tuning": rates(runs, tuning_seeds, findings),
        "report": rates(runs, report_seeds, findings),
    }
    print("reported seeds", report_seeds)
    print(table(result["report"]))
    goal = goal_comparison(runs, report_seeds) if "reward_hacking" in findings else None
    if goal is not None:
        print(goal["comparison"])
    payload = record_splits(
        {},
        validation=None,
        test=None,
        recipe="none",
        benchmark="bench_detectors.py",
    )
    payload["splits"]["no_test_reason"] = (
        "scores diagnose() on training histories; thresholds set on the tuning seeds, rates "
        "reported on the disjoint report seeds"
    )
    return save(
        NAME,
        {
            **payload,
            "tuning_seeds": list(tuning_seeds),
            "report_seeds": list(report_seeds),
            "planted": symptoms.PLANTED,
            "rates": result,
            "table": table(result["report"]),
            "table_tuning": table(result["tuning"]),
            "reward_hacking_goal": goal,
            "cpu_seconds_total": sum(r["cpu_seconds"] for r in runs),
            "median_cpu_seconds_per_run": statistics.median(r["cpu_seconds"] for r in runs),
            "wall_seconds": wall,
            "jobs": jobs,
            "runs": runs,
        },
        out_dir,
    )


def add_options(parser) -> None:
    parser.add_argument("--jobs", type=int, default=2, help="runs in parallel processes")
    parser.add_argument(
        "--findings",
        nargs="+",
        metavar="NAME",
        help="only these findings' planted and fixed runs (needs --out; default: every finding)",
    )


def section(r: dict, results_dir=RESULTS_DIR) -> str:
    """diagnose(): hit and false-alarm rates per finding, on the report and the tuning seeds."""
    report = r["rates"]["report"]
    missed = "; ".join(f"{k}: {v['missed_seeds']}" for k, v in report.items() if v["missed_seeds"])
    alarms = "; ".join(
        f"{k}: {v['false_alarm_seeds_healthy']}"
        for k, v in report.items()
        if v["false_alarm_seeds_healthy"] and k not in INFO_NOTES
    )

    def seed_range(seeds: list) -> str:
        return f"{seeds[0]}-{seeds[-1]}" if seeds else "none"

    return "\n".join(
        [
            "## Detectors: how often `diagnose()` is right (`bench_detectors.py`, notebook 13)",
            "",
            f"Each finding's planted cause (`symptoms.planted_run`), its fix and the healthy run, "
            f"on each of the reported seeds {seed_range(r['report_seeds'])}; "
            f"the thresholds were set on the tuning seeds {seed_range(r['tuning_seeds'])} only. "
            "Hit rate: planted runs that get the finding; false "
            "alarms: healthy runs that get it; last column: fixed runs that still get it "
            "(`loss_near_zero` is an info note whose place is the healthy run). "
            f"{sum(not x.get('same_as_healthy') for x in r['runs'])} runs trained, "
            f"{r['cpu_seconds_total'] / 60:.1f} CPU-minutes.",
            "",
            r["table"],
            "",
            f"Missed on seeds: {missed or 'none'}. False alarms on healthy seeds: "
            f"{alarms or 'none'}.",
            "",
            "The same counts on the tuning seeds:",
            "",
            r["table_tuning"],
        ]
    )


if __name__ == "__main__":
    main(**parse_args(add_options))
