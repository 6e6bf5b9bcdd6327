"""Shared bits of the benchmark scripts: command line, machine description, tables, results.

Not a benchmark itself (``tasks.py bench`` runs only ``bench_*.py``). Every ``bench_<name>.py``
exposes ``NAME`` (the stem of its main results file), ``main(quick=False, seeds=None,
out_dir=RESULTS_DIR) -> dict`` (runs the benchmark, writes ``out_dir/<NAME>.json`` and returns
what it wrote) and ``section(result, results_dir) -> str`` (its part of RESULTS.md, rendered
from that JSON by ``report.py``); its command line is ``parse_args``'s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

RESULTS_DIR = Path(__file__).resolve().parent / "results"

#: Every benchmark runs torch on one thread: fastest for these tiny models, and fair
#: to whatever else shares the CPU.
NUM_THREADS = 1


def parse_args(add_options=None, argv: list[str] | None = None) -> dict:
    """The command line every benchmark shares, as keyword arguments for its ``main``.

    ``--quick``: tiny sizes (a few seconds), written to a temporary folder (or ``--out``), never
    to results/; ``--seeds S [S ...]``: the seeds to run instead of the benchmark's own;
    ``--out DIR``: where the results files go (default: benchmarks/results/). ``add_options``,
    if given, adds the script's own options to the ``argparse`` parser (each becomes a keyword
    argument of ``main``).
    """
    doc = (sys.modules["__main__"].__doc__ or "").strip().splitlines()
    parser = argparse.ArgumentParser(description=doc[0] if doc else None)
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes, a few seconds; never writes results/"
    )
    parser.add_argument(
        "--seeds", type=int, nargs="+", metavar="S", help="seeds (default: the benchmark's)"
    )
    parser.add_argument(
        "--out",
        dest="out_dir",
        type=Path,
        metavar="DIR",
        help="folder for the results files (default: results/)",
    )
    if add_options is not None:
        add_options(parser)
    args = vars(parser.parse_args(argv))
    if args["out_dir"] is None:
        args["out_dir"] = RESULTS_DIR
    return args


def output_dir(out_dir: Path | str, quick: bool) -> Path:
    """The folder a run writes to, created: ``out_dir``, except that a quick run aimed at
    results/ goes to a new temporary folder instead (quick numbers never replace the record)."""
    out_dir = Path(out_dir).resolve()
    if quick and out_dir == RESULTS_DIR:
        out_dir = Path(tempfile.mkdtemp(prefix="bench-quick-"))
        print(f"quick run: writing to {out_dir}", flush=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    return out_dir


def setup(out_dir: Path | None = None) -> None:
    """Fix the thread count (and create ``out_dir`` if given)."""
    torch.set_num_threads(NUM_THREADS)
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)


def load(name: str, results_dir: Path = RESULTS_DIR) -> dict | None:
    """results_dir/<name>.json, or None if that benchmark has not been run."""
    path = Path(results_dir) / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


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


def save(name: str, payload: dict, out_dir: Path = RESULTS_DIR) -> dict:
    """Write out_dir/<name>.json with the machine description added; return what was written."""
    path = Path(out_dir) / f"{name}.json"
    payload = {"machine": machine(), **payload}
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {path}", flush=True)
    return payload


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
    The stopping rule is the loop's own (``target_validation_exact_sort``, validation only);
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
        config, target_validation_exact_sort=target, epochs_after_target=epochs_after_target
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
        (e["responses_sampled"], e["validation_exact_sort"], e["test_exact_sort"]) for e in evals
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
        "validation_exact_sort": first["validation_exact_sort"],
        "test_exact_sort_at_target": first["test_exact_sort"],
        "test_exact_sort": evals[-1]["test_exact_sort"],
        "largest_drop_after_target": history.largest_drop_after_target() if reached else None,
        "largest_test_drop_after_target": (
            history.largest_drop_after_target("test_exact_sort") if reached else None
        ),
        "min_validation_after_target": min(
            (e["validation_exact_sort"] for e in evals if reached and e["epoch"] >= epochs),
            default=None,
        ),
        "num_validation": len(history.run.validation_prompts),
        "num_test": len(history.run.test_prompts),
        "train_prompts_with_heldout_key": history.train_prompts_with_heldout_key,
        "final_response_length": history.steps()[-1]["response_length"],
        "curve": curve,
    }


def trl_run_kwargs(config, output_dir: str, **overrides) -> dict:
    """``GRPOConfig`` keyword arguments of a benchmark's TRL run: ``config`` mapped by
    ``trl_config.grpo_config_kwargs``, on the CPU, nothing saved or reported, a log line per
    round (``num_steps_per_epoch`` optimizer steps); ``overrides`` on top."""
    from pgrl_helpers.hf import trl_config  # here: a report never needs the TRL bridge

    return trl_config.grpo_config_kwargs(
        config,
        output_dir=output_dir,
        report_to="none",
        save_strategy="no",
        logging_steps=config.num_steps_per_epoch,
        disable_tqdm=True,
        use_cpu=True,
        **overrides,
    )


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
    out_dir: Path = RESULTS_DIR,
) -> dict:
    """Plot each seed's curve (wall seconds vs validation exact) and save JSON + PNG as ``name``
    in ``out_dir``; return the JSON's content.

    ``runs``: one dict per seed with ``seed`` and ``curve`` = [(responses, validation, test), ...].
    """
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in runs:
        ax.plot([c[0] for c in r["curve"]], [c[1] for c in r["curve"]], label=f"seed {r['seed']}")
    ax.axhline(goal, color="gray", linestyle=":", label=f"goal {goal:.0%}")
    ax.set_xlabel("responses sampled")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(Path(out_dir) / f"{name}.png", dpi=100)
    plt.close(fig)
    return save(
        name,
        {
            "config": {k: (v if not callable(v) else v.__name__) for k, v in vars(config).items()},
            "parameters": sum(p.numel() for p in config.build_policy().parameters()),
            "runs": runs,
            "table": table,
            "verdict": verdict,
            "validation_target": validation_target,
            "goal": goal,
        },
        out_dir,
    )


# --- Test splits: what was held out, and which recipes were scored on the test set ----------
#
# A test set is scored once, by the final recipe. Every results JSON records its validation
# and test splits (seed, sizes, key) and every recipe scored on that test split;
# tests/repo/test_test_splits.py reads these records (and split_records_legacy.json for files written
# before this helper) and fails when a test split was scored by more than one recipe unless the
# JSON and the prose that reports it both say that it guided the choice.
#
# A *recipe* is one configuration a benchmark puts forward as its answer (hyperparameters,
# schedule, stopping rule). Arms of a comparison trained and scored side by side in one run,
# none of them chosen by its test score, are one scoring, listed as one entry.

GUIDED_PHRASE = "guided the choice"


def split_record(split_id: str, *, seed: int | None, sizes: dict, key: str, note: str = "") -> dict:
    """One held-out split: ``split_id`` names its content (two files with the same id scored
    the same prompts); ``seed`` drew it; ``sizes`` e.g. {"multisets": 22, "prompts": 99};
    ``key`` what "disjoint by content" compares (e.g. "multiset of the prompt")."""
    if not split_id or not isinstance(split_id, str):
        raise ValueError(f"split_id must be a non-empty string, got {split_id!r}")
    if not sizes or any(not isinstance(v, int) or v < 1 for v in sizes.values()):
        raise ValueError(f"sizes must map names to positive ints, got {sizes!r}")
    if not key:
        raise ValueError("key must say what the split is disjoint by")
    record = {"id": split_id, "seed": seed, "sizes": dict(sizes), "key": key}
    if note:
        record["note"] = note
    return record


#: What each task's held-out key is, in words (stored beside the keys by ``split_keys``).
KEY_DESCRIPTIONS = {
    "sort": "multiset of the prompt (SortTask.prompt_key)",
    "sort_dedup": "set of distinct values (SortDedupTask.prompt_key, a bit mask)",
}


def split_keys(config, validation, test) -> dict:
    """The keys themselves of a run's validation and test prompts (int[n, prompt_pos] each),
    with seed, size and what the key is, so a test can check the splits are disjoint from each
    other and from training. ``record_splits`` keeps the summary; this keeps the evidence."""
    task = config.build_task()
    record = {}
    for name, prompts in (("validation", validation), ("test", test)):
        keys = sorted(set(task.prompt_key(prompts).tolist()))
        record[name] = {
            "seed": config.eval_seed,
            "size": int(prompts.shape[0]),
            "distinct_keys": len(keys),
            "key": KEY_DESCRIPTIONS[config.task],
            "keys": keys,
        }
    return record


def loop_splits(config, benchmark: str) -> dict:
    """Validation and test records of ``run_policy_gradient``'s held-out split for ``config``.

    The loop draws both sets with ``config.eval_seed`` and ``config.heldout_size`` prompts
    each, disjoint by the task's key (the multiset for 'sort'); the id names ``benchmark``, the
    task, length, values and seed, so re-runs of one benchmark on one split share an id.
    """
    task = config.build_task()
    n = config.heldout_size
    v, t = task.heldout_split((n, n), config.eval_seed)
    sizes = lambda p: {"prompts": len(p), "keys": len(set(task.prompt_key(p).tolist()))}  # noqa: E731
    base = (
        f"{benchmark}: loop held-out split, task {config.task}, length {config.prompt_length}, "
        f"values 0-{config.vocab_size - 1}, eval_seed {config.eval_seed}, {n} prompts"
    )
    key = f"{config.task} task key (multiset of the prompt for 'sort')"
    return {
        "validation": split_record(
            base + " [validation]", seed=config.eval_seed, sizes=sizes(v), key=key
        ),
        "test": split_record(base + " [test]", seed=config.eval_seed, sizes=sizes(t), key=key),
    }


def record_splits(
    payload: dict,
    *,
    validation: dict | None,
    test: dict | None,
    recipe: str,
    earlier_recipes: list[str] | tuple[str, ...] = (),
    guided_choice: str | None = None,
    benchmark: str | None = None,
) -> dict:
    """Add the split facts to a results payload (before ``save``) and return it.

    ``recipe``: the configuration this file scored on ``test``; ``earlier_recipes``: others
    scored on the same test split whose files are gone (from the git history);
    ``guided_choice``: None if the test split guided no choice, else a sentence saying how it
    did (required by tests/repo/test_test_splits.py when more than one recipe scored it);
    ``benchmark``: the script's file name (default: the running script's), which the test
    looks for in the prose.
    """
    if not recipe:
        raise ValueError("recipe must name the configuration scored on the test split")
    if guided_choice is not None and GUIDED_PHRASE not in guided_choice:
        raise ValueError(f"guided_choice must contain {GUIDED_PHRASE!r}, got {guided_choice!r}")
    if benchmark is None:
        import sys

        benchmark = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    payload["splits"] = {
        "benchmark": benchmark,
        "validation": validation,
        "test": test,
        "test_scored_by": [recipe, *earlier_recipes] if test is not None else [],
        "test_guided_choice": guided_choice,
    }
    return payload


def record_file_splits(
    path: Path,
    config,
    benchmark: str,
    recipe: str,
    no_test_reason: str | None = None,
) -> dict:
    """Give the results file ``path`` the ``record_splits`` record of the loop's split for
    ``config``. With ``no_test_reason`` the file keeps no test score: the runs' test values (the
    loop computes them) are dropped and the record has no test split. Returns the new content.
    """
    path = Path(path)
    payload = json.loads(path.read_text())
    if isinstance(payload.get("splits"), dict) and "validation" in payload["splits"]:
        if "keys" in payload["splits"]["validation"]:
            payload["split_keys"] = payload.pop("splits")
    for key in ("test_scored_by", "test_guided_choice"):
        payload.pop(key, None)
    splits = loop_splits(config, benchmark)
    test = splits["test"] if no_test_reason is None else None
    if no_test_reason is not None:
        for runs in payload["runs"].values():
            for r in runs:
                r.pop("test_exact", None)
    record_splits(payload, validation=splits["validation"], test=test, recipe=recipe,
                  benchmark=benchmark)  # fmt: skip
    if no_test_reason is not None:
        payload["splits"]["no_test_reason"] = no_test_reason
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return payload
