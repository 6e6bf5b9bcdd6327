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


def train_to_target(config, target: float = 0.99, max_seconds: float = 240.0) -> dict:
    """Run GRPO until greedy exact-sort on a validation set reaches ``target``.

    ``config.num_eval_prompts`` held-out prompts (never trained on) are split in two
    halves: the run stops when the *validation* half reaches ``target`` (checked every
    ``config.eval_every`` epochs by a callback); the *test* half is scored once at the
    end, so the reported rate is not the one the stopping rule looked at. Wall time
    covers everything from the call to the stop, evaluations included.
    """
    from pgrl_helpers.training import evaluate_greedy, run_policy_gradient

    curve = []  # (seconds, responses sampled, validation exact-sort)
    start = time.perf_counter()
    state = {"reached": False}

    def callback(epoch, history):
        if (epoch + 1) % config.eval_every:
            return False
        half = len(history.heldout_prompts) // 2
        score = evaluate_greedy(history.model, history.heldout_prompts[:half], config.reward_fn)
        sampled = (epoch + 1) * config.batch_prompts * config.num_responses
        curve.append((time.perf_counter() - start, sampled, score["exact_sort"]))
        if score["exact_sort"] >= target:
            state["reached"] = True
            return "stop"
        return time.perf_counter() - start > max_seconds

    history = run_policy_gradient(config, callback=callback)
    seconds = time.perf_counter() - start
    half = len(history.heldout_prompts) // 2
    test = evaluate_greedy(history.model, history.heldout_prompts[half:], config.reward_fn)
    epochs = history.steps()[-1]["epoch"] + 1
    return {
        "reached": state["reached"],
        "seconds": seconds,
        "epochs": epochs,
        "responses_sampled": epochs * config.batch_prompts * config.num_responses,
        "prompts_seen": epochs * config.batch_prompts,
        "validation_exact_sort": curve[-1][2] if curve else None,
        "test_exact_sort": test["exact_sort"],
        "num_validation": half,
        "num_test": len(history.heldout_prompts) - half,
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

    ``runs``: one dict per seed with ``seed`` and ``curve`` = [(seconds, responses, exact), ...].
    """
    import matplotlib.pyplot as plt

    from pgrl_helpers.training import build_model

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in runs:
        ax.plot([c[0] for c in r["curve"]], [c[2] for c in r["curve"]], label=f"seed {r['seed']}")
    ax.axhline(goal, color="gray", linestyle=":", label=f"goal {goal:.0%}")
    if budget_seconds is not None:
        ax.axvline(
            budget_seconds, color="red", linestyle="--", label=f"{budget_seconds:.0f} s budget"
        )
    ax.set_xlabel("wall time (s, 1 CPU thread)")
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
