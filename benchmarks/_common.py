"""Shared bits of the benchmark scripts: machine description, tables, results files.

Not a benchmark itself (``tasks.py bench`` runs only ``bench_*.py``).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

RESULTS_DIR = Path(__file__).resolve().parent / "results"

#: Every benchmark runs torch on one thread: fastest for these tiny models, and fair
#: to whatever else shares the CPU.
NUM_THREADS = 1


def setup() -> None:
    """Fix the thread count and create the results folder."""
    torch.set_num_threads(NUM_THREADS)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def machine() -> dict:
    """What the numbers were measured on (load average: other processes sharing the CPU)."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return {
        "cpu": cpu_model(),
        "logical_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_1_5_15_min": [round(x, 2) for x in load],
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
    }


def save(name: str, payload: dict) -> Path:
    """Write results/<name>.json with the machine description added."""
    path = RESULTS_DIR / f"{name}.json"
    payload = {"machine": machine(), **payload}
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {path.relative_to(RESULTS_DIR.parent.parent)}")
    return path


def markdown_table(headers: list[str], rows: list[list]) -> str:
    """A GitHub markdown table; floats keep the formatting they were given as strings."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def median(values: list[float]) -> float:
    return statistics.median(values)


def train_to_target(
    config, target: float = 0.99, max_seconds: float = 240.0, epochs_after_target: int = 0
) -> dict:
    """Run GRPO until greedy exact-sort on the loop's VALIDATION set reaches ``target``.

    The loop holds out validation and test prompts by the task's key (for 'sort' with random
    prompts: the multiset), so no training batch contains a validation or test multiset.
    The stopping rule is the loop's own (``target_heldout_exact_sort``, validation only);
    ``test_exact_sort_at_target`` is the test set's score when validation first reached the
    target, ``test_exact_sort`` its score at the end, a set the rule never reads. With
    ``epochs_after_target`` > 0 the run keeps training that many epochs after the target
    (``max_seconds``, this process's CPU seconds so that a loaded machine does not cut runs
    short, caps only the time to reach it); ``largest_drop_after_target`` is the
    largest fall of validation exact-sort below its value at the target (0 by construction
    when the run stops at the target). ``seconds`` is the wall time to the target (or to the
    cap), evaluations included (``cpu_seconds``: CPU time of the same span); ``seconds_total``
    includes the epochs after it.
    """
    from dataclasses import replace

    from pgrl_helpers.training import run_policy_gradient

    config = replace(
        config, target_heldout_exact_sort=target, epochs_after_target=epochs_after_target
    )
    start, cpu_start = time.perf_counter(), time.process_time()
    at_target: dict = {}

    def stop_or_time(epoch, history) -> bool:
        if history.target_epoch is not None:
            at_target.setdefault("seconds", time.perf_counter() - start)
            at_target.setdefault("cpu_seconds", time.process_time() - cpu_start)
            return False
        return time.process_time() - cpu_start > max_seconds

    history = run_policy_gradient(config, callback=stop_or_time)
    seconds_total = time.perf_counter() - start
    cpu_total = time.process_time() - cpu_start
    evals = history.evals()
    per_response = config.batch_prompts * config.num_responses
    curve = [  # (responses sampled, validation exact, test exact)
        (e["responses_sampled"], e["heldout_exact_sort"], e["test_exact_sort"]) for e in evals
    ]
    reached = history.target_epoch is not None
    first = next((e for e in evals if e["epoch"] == history.target_epoch), evals[-1])
    epochs = first["epoch"] if reached else evals[-1]["epoch"]
    assert history.train_prompts_with_heldout_key == 0
    return {
        "reached": reached,
        "seconds": at_target.get("seconds", seconds_total),
        "seconds_total": seconds_total,
        "cpu_seconds": at_target.get("cpu_seconds", cpu_total),
        "epochs": epochs,
        "epochs_total": evals[-1]["epoch"],
        "epochs_after_target": epochs_after_target,
        "responses_sampled": epochs * per_response,
        "prompts_seen": epochs * config.batch_prompts,
        "validation_exact_sort": first["heldout_exact_sort"],
        "test_exact_sort_at_target": first["test_exact_sort"],
        "test_exact_sort": evals[-1]["test_exact_sort"],
        "largest_drop_after_target": history.largest_drop_after_target() if reached else None,
        "largest_test_drop_after_target": (
            history.largest_drop_after_target("test_exact_sort") if reached else None
        ),
        "min_validation_after_target": min(
            (e["heldout_exact_sort"] for e in evals if reached and e["epoch"] >= epochs),
            default=None,
        ),
        "num_validation": len(history.heldout_prompts),
        "num_test": len(history.test_prompts),
        "train_prompts_with_heldout_key": history.train_prompts_with_heldout_key,
        "final_response_length": history.steps()[-1]["response_length"],
        "curve": curve,
    }


def save_seed_runs(
    name: str,
    runs: list[dict],
    config,
    *,
    goal: float,
    ylabel: str,
    title: str,
    table: str,
    verdict: str,
    validation_target: float,
    budget_seconds: float | None = None,
) -> None:
    """Plot each seed's curve (wall seconds vs validation exact) and save JSON + PNG as ``name``.

    ``runs``: one dict per seed with ``seed`` and ``curve`` = [(responses, validation, test), ...].
    """
    import matplotlib.pyplot as plt

    from pgrl_helpers.training import build_model

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in runs:
        ax.plot([c[0] for c in r["curve"]], [c[1] for c in r["curve"]], label=f"seed {r['seed']}")
    ax.axhline(goal, color="gray", linestyle=":", label=f"goal {goal:.0%}")
    ax.set_xlabel("responses sampled")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS_DIR / f"{name}.png", dpi=100)
    plt.close(fig)
    save(
        name,
        {
            "config": {k: (v if not callable(v) else v.__name__) for k, v in vars(config).items()},
            "parameters": sum(p.numel() for p in build_model(config).parameters()),
            "runs": runs,
            "table": table,
            "verdict": verdict,
            "validation_target": validation_target,
            "goal": goal,
        },
    )
