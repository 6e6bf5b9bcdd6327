"""Stability after the target (issue 12, item 3): does bench_3's GRPO run collapse later?

Each variant trains the 5 seeds of ``bench_3_generalization`` until validation exact-sort
first reaches 99.5%, then ``EPOCHS_AFTER_TARGET`` more epochs, and reports the largest drop
of validation exact-sort below its value at the target (plus test exact-sort at the target
and at the end). The variants change one thing each against bench_3's setting, to find
what causes a collapse and what removes it.

Usage: ``python bench_3_stability.py [variant ...]`` (default: all); results are merged
into ``results/stability.json`` by variant name.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import matplotlib

matplotlib.use("Agg")
from _common import RESULTS_DIR, markdown_table, median, save, setup  # noqa: E402
from bench_3_generalization import CONFIG, EPOCHS_AFTER_TARGET, run_seeds  # noqa: E402

#: name -> the TrainConfig fields changed against bench_3's CONFIG
VARIANTS: dict[str, dict] = {
    "bench_3 setting": {},
    "learning rate 3e-4": {"learning_rate": 3e-4},
    "1 inner step per batch": {"num_steps_per_epoch": 1},
    "entropy bonus 0.01": {"entropy_coef": 0.01},
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


def main(names: list[str]) -> None:
    setup()
    new = {}
    for name in names:
        print(f"--- {name}", flush=True)
        new[name] = {
            "changes": VARIANTS[name],
            "runs": run_seeds(replace(CONFIG, **VARIANTS[name])),
        }
    path = RESULTS_DIR / f"{NAME}.json"  # read last: variants may run in parallel processes
    results = (json.loads(path.read_text())["variants"] if path.exists() else {}) | new
    results = {name: results[name] for name in VARIANTS if name in results}
    text = table(results)
    print(text)
    save(NAME, {"epochs_after_target": EPOCHS_AFTER_TARGET, "variants": results, "table": text})


if __name__ == "__main__":
    main(sys.argv[1:] or list(VARIANTS))
