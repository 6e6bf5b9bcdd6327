"""Stability after the target (issue 12, item 3): does bench_3's GRPO run collapse later?

Each variant trains the 5 seeds of ``bench_3_generalization`` (one process per variant and
seed) until validation exact-sort first reaches 99.5%, then ``EPOCHS_AFTER_TARGET`` more epochs, and reports the largest drop
of validation exact-sort below its value at the target (plus test exact-sort at the target
and at the end). The variants change one thing each against bench_3's setting, to find
what causes a collapse and what removes it.

Usage: ``python bench_3_stability.py [variant ...]`` (default: all); results are merged
into ``results/stability.json`` by variant name.
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

import matplotlib

matplotlib.use("Agg")
from _common import RESULTS_DIR, markdown_table, median, save, setup, train_to_target  # noqa: E402
from bench_3_generalization import CONFIG, SEEDS, VALIDATION_TARGET  # noqa: E402

#: Epochs trained after validation first reaches the target (bench_3 itself: 150).
EPOCHS_AFTER_TARGET = 100

#: name -> the TrainConfig fields changed against bench_3's CONFIG
VARIANTS: dict[str, dict] = {
    "bench_3 setting": {},
    "1 inner step per batch": {"num_steps_per_epoch": 1},
    "entropy bonus 0.01": {"entropy_coef": 0.01},
}
BASELINE = "bench_3 setting"


def truncated(run: dict, epochs_after: int) -> dict:
    """A bench_3 run trained past its target, cut to ``epochs_after`` epochs after it.

    Training is deterministic and does not depend on ``epochs_after_target`` before the
    window ends, so this equals a run with ``epochs_after_target=epochs_after``
    (``tests/test_loop_regression.py``: same config, same history).
    """
    per_epoch = run["responses_sampled"] / run["epochs"]  # responses per epoch
    end = run["responses_sampled"] + epochs_after * per_epoch
    curve = [c for c in run["curve"] if c[0] <= end]
    at_target = next(i for i, c in enumerate(curve) if c[0] == run["responses_sampled"])
    return run | {
        "curve": curve,
        "epochs_after_target": epochs_after,
        "test_exact_sort": curve[-1][2],
        "largest_drop_after_target": max(curve[at_target][1] - c[1] for c in curve[at_target:]),
        "largest_test_drop_after_target": max(
            curve[at_target][2] - c[2] for c in curve[at_target:]
        ),
        "source": f"generalization.json, cut at {epochs_after} epochs after the target",
    }


NAME = "stability"


def summary_row(name: str, runs: list[dict]) -> list:
    drops = [r["largest_drop_after_target"] for r in runs]
    return [
        name,
        f"{sum(r['reached'] for r in runs)}/{len(runs)}",
        f"{median([r['seconds'] for r in runs]):.1f}",
        median([r["epochs"] for r in runs]),
        f"{median([r['test_exact_sort_at_target'] for r in runs]):.3f}",
        f"{min(r['test_exact_sort'] for r in runs):.3f}",
        f"{median(drops):.3f}",
        f"{max(drops):.3f}",
        " ".join(f"{d:.2f}" for d in drops),
    ]


def table(results: dict) -> str:
    headers = [
        "variant",
        "reached 99.5%",
        "wall time to target (s, median)",
        "epochs to target (median)",
        "test exact at target (median)",
        f"test exact {EPOCHS_AFTER_TARGET} epochs later (worst seed)",
        "largest validation drop after target (median)",
        "(max)",
        "per seed",
    ]
    rows = [summary_row(name, r["runs"]) for name, r in results.items()]
    return markdown_table(headers, rows)


def run_one(job: tuple[str, int]) -> dict:
    """One (variant, seed): train to the validation target, then ``EPOCHS_AFTER_TARGET``."""
    name, seed = job
    setup()
    config = replace(CONFIG, **VARIANTS[name], seed=seed)
    result = train_to_target(
        config, VALIDATION_TARGET, max_seconds=180.0, epochs_after_target=EPOCHS_AFTER_TARGET
    )
    print(f"{name}, seed {seed}: drop {result['largest_drop_after_target']}", flush=True)
    return result | {"seed": seed}


def main(names: list[str]) -> None:
    setup()
    saved = RESULTS_DIR / "generalization.json"  # bench_3 itself trains 150 epochs past it
    baseline = {}
    if BASELINE in names and saved.exists():
        runs = json.loads(saved.read_text())["runs"]
        if runs[0]["epochs_after_target"] >= EPOCHS_AFTER_TARGET:
            names = [n for n in names if n != BASELINE]
            baseline = {
                BASELINE: {"changes": {}, "runs": [truncated(r, EPOCHS_AFTER_TARGET) for r in runs]}
            }
    jobs = [(name, seed) for name in names for seed in SEEDS]
    with ProcessPoolExecutor(len(jobs)) as pool:  # one process per (variant, seed)
        results = list(pool.map(run_one, jobs))
    new = baseline | {
        name: {
            "changes": VARIANTS[name],
            "runs": [r for (n, _), r in zip(jobs, results) if n == name],
        }
        for name in names
    }
    path = RESULTS_DIR / f"{NAME}.json"  # read last: variants may run in parallel processes
    results = (json.loads(path.read_text())["variants"] if path.exists() else {}) | new
    results = {name: results[name] for name in VARIANTS if name in results}
    text = table(results)
    print(text)
    save(NAME, {"epochs_after_target": EPOCHS_AFTER_TARGET, "variants": results, "table": text})


if __name__ == "__main__":
    main(sys.argv[1:] or list(VARIANTS))
