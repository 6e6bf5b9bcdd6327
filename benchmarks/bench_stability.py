"""Stability after the target: does a GRPO run collapse later?

Each variant trains the 5 seeds of ``bench_generalization`` until validation exact-sort
first reaches 99.5%, then ``STEPS_AFTER_TARGET`` more optimizer steps (so a variant with 4
steps per sampled batch trains a quarter as many epochs after the target), and reports the
largest drop of validation exact-sort below its value at the target, plus test exact-sort
at the target and at the end. The variants change one thing each against the setting that
collapsed (bench_generalization's first setting, 4 Adam steps on every sampled batch), to find
what causes a collapse and what removes it; bench_generalization now uses the fix (1 step per
batch).

    python benchmarks/bench_stability.py [--quick] [--seeds S ...] [--variants NAME ...]

(default: all variants, bench_generalization's seeds); results are merged into
``<out>/stability.json`` by variant name and seed (a re-run seed replaces its old run; other
seeds are kept), so more seeds can be added to decide a comparison that is undecided (five
paired seeds cannot give p below 2/2^5) or shows no difference. Each run records the
machine it ran on. Runs go ``os.cpu_count()`` at a time, so wall times are comparable between
variants; CPU seconds are reported beside them.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

import matplotlib

matplotlib.use("Agg")
from _common import (  # noqa: E402
    RESULTS_DIR,
    machine,
    markdown_table,
    median,
    output_dir,
    parse_args,
    save,
    setup,
    train_to_target,
)
from bench_generalization import CONFIG, QUICK, SEEDS, VALIDATION_TARGET  # noqa: E402

#: Optimizer steps trained after validation first reaches the target, in every variant.
STEPS_AFTER_TARGET = 400
QUICK_STEPS_AFTER_TARGET = 4  # a quick run: divisible by every variant's steps per epoch

#: name -> the TrainConfig fields changed against bench_generalization's CONFIG (1 step per
#: batch); the last name keeps "bench_3", the script's name when these runs were made
VARIANTS: dict[str, dict] = {
    "4 inner steps per batch (before)": {"num_steps_per_epoch": 4},
    "4 inner steps, lr 3e-4": {"num_steps_per_epoch": 4, "learning_rate": 3e-4},
    "4 inner steps, entropy bonus 0.01": {"num_steps_per_epoch": 4, "entropy_coef": 0.01},
    "2 inner steps per batch": {"num_steps_per_epoch": 2},
    "1 inner step per batch (bench_3 setting)": {},
}
BEFORE = "4 inner steps per batch (before)"
AFTER = "1 inner step per batch (bench_3 setting)"


NAME = "stability"


def summary_row(name: str, runs: list[dict]) -> list:
    """One variant's row; a run that never reached the target has no drop ('-')."""
    drops = [r["largest_drop_after_target"] for r in runs]
    reached = [d for d in drops if d is not None]
    return [
        name,
        f"{sum(r['reached'] for r in runs)}/{len(runs)}",
        f"{median([r['seconds'] for r in runs]):.1f}",
        f"{median([r['cpu_seconds'] for r in runs]):.1f}",
        median([r["epochs"] for r in runs]),
        f"{median([r['test_exact_sort_at_target'] for r in runs]):.3f}",
        f"{min(r['test_exact_sort'] for r in runs):.3f}",
        f"{median(reached):.3f}" if reached else "-",
        f"{max(reached):.3f}" if reached else "-",
        " ".join("-" if d is None else f"{d:.2f}" for d in drops),
    ]


def table(results: dict, steps_after: int = STEPS_AFTER_TARGET) -> str:
    headers = [
        "variant",
        "reached 99.5%",
        "wall time to target (s, median)",
        "CPU s to target (median)",
        "epochs to target (median)",
        "test exact at target (median)",
        f"test exact {steps_after} steps later (worst seed)",
        "largest validation drop after target (median)",
        "(max)",
        "per seed",
    ]
    rows = [summary_row(name, r["runs"]) for name, r in results.items()]
    return markdown_table(headers, rows)


def run_one(job: tuple) -> dict:
    """One (variant, seed, base config, steps after): train to the validation target, then
    that many optimizer steps."""
    name, seed, base, steps_after = job
    setup()
    config = replace(base, **VARIANTS[name], seed=seed)
    epochs_after = steps_after // config.num_steps_per_epoch
    result = train_to_target(
        config, VALIDATION_TARGET, max_seconds=180.0, epochs_after_target=epochs_after
    )
    print(f"{name}, seed {seed}: drop {result['largest_drop_after_target']}", flush=True)
    per_epoch = config.batch_prompts * config.num_responses
    where = machine()
    return result | {
        "measured_on": f"{where['cpu']}, {where['date_utc']} UTC",
        "seed": seed,
        "num_steps_per_epoch": config.num_steps_per_epoch,
        "responses_per_epoch": per_epoch,
    }


def main(quick: bool = False, seeds=None, out_dir=RESULTS_DIR, *, variants=None) -> dict:
    """Run ``variants`` (default: all) on ``seeds`` (default: bench_generalization's) and merge
    them into out_dir/stability.json. ``quick``: one seed, bench_generalization's quick sizes."""
    out_dir = output_dir(out_dir, quick)
    setup()
    names = list(variants or VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}; choose from {list(VARIANTS)}")
    seeds = tuple(seeds) if seeds else (SEEDS[:1] if quick else SEEDS)
    base = replace(CONFIG, **QUICK) if quick else CONFIG
    steps_after = QUICK_STEPS_AFTER_TARGET if quick else STEPS_AFTER_TARGET
    jobs = [(name, seed, base, steps_after) for name in names for seed in seeds]
    with ProcessPoolExecutor(os.cpu_count() or 1) as pool:
        results = list(pool.map(run_one, jobs))
    new = {
        name: {
            "changes": VARIANTS[name],
            "runs": [r for (n, *_), r in zip(jobs, results) if n == name],
        }
        for name in names
    }
    path = out_dir / f"{NAME}.json"  # read last: variants may run in parallel processes
    old = json.loads(path.read_text()) if path.exists() else {}
    results = old.get("variants", {}) if "steps_after_target" in old else {}
    if "machine" in old:  # runs from before per-run records: the file's machine and date
        then = f"{old['machine']['cpu']}, {old['machine']['date_utc']} UTC"
        for variant in results.values():
            for run in variant["runs"]:
                run.setdefault("measured_on", then)
    for name, variant in new.items():  # merge by seed: a re-run seed replaces its old run
        fresh = {r["seed"] for r in variant["runs"]}
        kept = [r for r in results.get(name, {}).get("runs", []) if r["seed"] not in fresh]
        runs = sorted(kept + variant["runs"], key=lambda r: r["seed"])
        results[name] = {"changes": variant["changes"], "runs": runs}
    results = {name: results[name] for name in VARIANTS if name in results}
    text = table(results, steps_after)
    drops = {
        n: max(r["largest_drop_after_target"] or 0.0 for r in v["runs"]) for n, v in results.items()
    }
    verdict = "; ".join(f"{n}: {d:.3f}" for n, d in drops.items())
    verdict = f"largest validation drop after the target, worst seed: {verdict}"
    print(text, verdict, sep="\n")
    return save(
        NAME,
        {
            "steps_after_target": steps_after,
            "validation_target": VALIDATION_TARGET,
            "before": BEFORE,
            "after": AFTER,
            "variants": results,
            "table": text,
            "verdict": verdict,
        },
        out_dir,
    )


def add_options(parser) -> None:
    parser.add_argument("--variants", nargs="+", metavar="NAME", help="default: all")


def section(r: dict, results_dir=RESULTS_DIR) -> str:
    """The table, where and when each seed ran, and every comparison with
    ``seed_stats.compare_seeds`` (medians, worst seed, exact p; "undecided" when the test's
    smallest possible p is not below 0.05, else "no difference detected" when p >= 0.05),
    paired seed by seed on the seeds both variants ran: seed k of every variant starts from the
    same weights and prompts."""
    from pgrl_helpers.seed_stats import compare_seeds, format_comparison, pair_by_seed

    variants, base, after = r["variants"], r["before"], r["after"]
    drops = {  # runs that reached the target, {seed: drop}
        n: {
            run["seed"]: run["largest_drop_after_target"]
            for run in v["runs"]
            if run["largest_drop_after_target"] is not None
        }
        for n, v in variants.items()
    }
    pairs = [(n, base) for n in variants if n != base] + [("2 inner steps per batch", after)]
    pairs = [(a, b) for a, b in pairs if set(drops.get(a, ())) & set(drops.get(b, ()))]
    comparisons = []
    for a, b in pairs:
        seeds, x, y = pair_by_seed(drops[a], drops[b])
        result = compare_seeds(x, y, a, b, higher_is_better=False, paired=True)
        comparisons.append(f"- seeds {seeds[0]}-{seeds[-1]}: " + format_comparison(result))
    machines = sorted(
        {run.get("measured_on", "unknown") for v in variants.values() for run in v["runs"]}
    )
    window = f"{r['steps_after_target']} more optimizer steps (the same number in every variant)"
    counts = " or ".join(str(n) for n in sorted({len(v["runs"]) for v in variants.values()}))
    target = r.get("validation_target", VALIDATION_TARGET)
    validation = next(iter(variants.values()))["runs"][0]["num_validation"]
    return "\n".join(
        [
            "## Stability after the target (`bench_stability.py`)",
            "",
            f"Section <bench_generalization>'s seeds first, {counts} seeds per variant in all "
            "(the last column lists each seed's drop); each "
            "variant changes one thing against the setting that collapsed (4 Adam steps on every "
            "sampled batch). Every run trains until validation exact-sort first reaches "
            f"{target:.1%}, then "
            f"{window}; 'largest drop' is the largest fall of validation exact-sort below its value "
            f"at the target ({validation} validation multisets). The runs were measured on: "
            + "; ".join(machines)
            + ". The time columns mix those machines and loads; CPU seconds depend less on the "
            "load, and the drops not at all.",
            "",
            r["table"],
            "",
            "Largest drop per seed compared (a smaller drop is better; exact paired sign-flip test "
            "on the per-seed differences, over the seeds both variants ran: five pairs cannot go "
            f"below p = 0.0625, ten below 0.002; {len(pairs)} comparisons share these runs, so a "
            f"Bonferroni threshold would be {0.05 / max(len(pairs), 1):.3f}):",
            "",
            *comparisons,
        ]
    )


if __name__ == "__main__":
    main(**parse_args(add_options))
