"""Reading the benchmark scripts' results files (``benchmarks/results/*.json``) in notebooks.

The benchmarks (``python3 tasks.py bench``) write one JSON file each, with the machine they
ran on; a notebook reads and quotes them, never re-runs them. These helpers load a file,
say where its numbers came from, and draw the figures notebook 07 shows.

Taught in notebook 07.
"""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def load_result(name: str) -> tuple[Path, dict | None]:
    """(path, parsed JSON) of ``benchmarks/results/<name>.json``; None if it was never run.

    Taught in notebook 07.
    """
    path = RESULTS / f"{name}.json"
    return path, (json.loads(path.read_text()) if path.exists() else None)


def describe(path: Path, result: dict) -> str:
    """One line: which file, when, on what machine and under what load it was measured.

    Taught in notebook 07.
    """
    m = result.get("machine", {})
    return (
        f"from {path.relative_to(REPO)}: measured {m.get('date_utc', '?')} UTC on "
        f"{m.get('cpu', '?')} ({m.get('logical_cores', '?')} cores, torch threads "
        f"{m.get('torch_threads', '?')}, load average {m.get('load_average_1_5_15_min', '?')})"
    )


def plot_scaling(scaling: dict, axes) -> None:
    """bench_scaling's summary on two axes: samples and wall time to 99% against prompt length.

    Taught in notebook 07.
    """
    rows = scaling["summary"]
    lengths = [r["length"] for r in rows]
    left, right = axes
    for ax, (grpo, sft), ylabel, title in (
        (left, ("grpo_responses", "sft_examples"), "samples to reach 99% held-out", "Samples"),
        (right, ("grpo_seconds", "sft_seconds"), "wall time to 99% (s)", "Time"),
    ):
        ax.plot(lengths, [r[grpo] for r in rows], "o-", label="GRPO (sampled responses)")
        ax.plot(lengths, [r[sft] for r in rows], "s-", label="SFT (labelled examples)")
        ax.set(yscale="log", xlabel="prompt length (tokens)", ylabel=ylabel)
        ax.set_title(f"{title} needed (benchmark)")
        ax.legend()


def curve_after_target(run: dict, validation_target: float) -> tuple[list[float], list[float]]:
    """(optimizer steps since validation first reached the target, validation exact).

    ``run`` is one seed of a benchmark's ``runs``: its ``curve`` holds (responses
    sampled, validation exact, test exact) per evaluation, and ``responses_per_epoch`` and
    ``num_steps_per_epoch`` convert responses to optimizer steps (without them the x values
    stay responses sampled since the target).
    """
    curve = run["curve"]
    first = next(i for i, c in enumerate(curve) if c[1] >= validation_target)
    scale = run.get("num_steps_per_epoch", 1) / run.get("responses_per_epoch", 1)
    x = [(c[0] - curve[first][0]) * scale for c in curve[first:]]
    return x, [c[1] for c in curve[first:]]


def plot_stability(stability: dict, variants: list[str], target: float, axes) -> None:
    """Validation exact after the target, one panel per variant, one line per seed.

    Taught in notebook 07.
    """
    for ax, name in zip(axes, variants):
        runs = stability["variants"][name]["runs"]
        for run in runs:
            x, y = curve_after_target(run, target)
            ax.plot(x, y, label=f"seed {run['seed']}")
        ax.axhline(target, color="gray", linestyle=":")
        unit = "optimizer steps" if "responses_per_epoch" in runs[0] else "responses sampled"
        ax.set(xlabel=f"{unit} after first reaching the target", ylim=(0, 1.02))
        ax.set_ylabel("greedy exact-sort, validation")
        ax.set_title(name)
    axes[0].legend(fontsize=8)
