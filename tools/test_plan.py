"""What ``tasks.py test`` and ``cpu-kernels`` run: the lint targets, the unit-test and nbval
command lines (the slowest files and notebooks handed out first) and the stages runner that
runs every stage and fails at the end naming the failed ones. The standard library only.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from . import PY, ROOT

#: The notebook timings ``tasks.py timings`` writes (benchmarks/notebook_timings.py).
TIMINGS_JSON = ROOT / "benchmarks" / "results" / "notebook_timings.json"

#: What ruff lints and formats: every Python file of the repository (the notebooks are checked
#: by nbval instead).
LINT_TARGETS = (
    "pgrl_helpers",
    "tests",
    "benchmarks",
    "assignments",
    "scale",
    "book",
    "tools",
    "tasks.py",
)
#: The tests that compare numbers with stored ones, and so depend on the CPU's float kernels
#: (``cpu-kernels`` runs them under another ``ATEN_CPU_CAPABILITY``).
KERNEL_SENSITIVE_TESTS = ("tests/integration/test_loop_regression.py",)


def nbval_command(*notebooks: str) -> list[str | Path]:
    """pytest + nbval over ``notebooks`` on every core: ``--dist loadfile`` keeps each
    notebook's cells in one worker, in order, in one kernel."""
    return [
        PY,
        "-m",
        "pytest",
        "--nbval",
        "--nbval-current-env",
        "--nbval-sanitize-with",
        ".nbval-sanitize.cfg",
        "-p",
        "no:cacheprovider",
        "-n",
        "auto",
        "--dist",
        "loadfile",
        *(notebooks or ("notebooks",)),
    ]


def run_stages(stages: list[tuple[str, object]]) -> None:
    """Run every ``(name, callable)`` stage even when an earlier one fails; at the end, exit 1
    naming the failed stages (so one failing unit test does not hide a failing notebook)."""
    failed, began = [], time.perf_counter()
    for name, stage in stages:
        start = time.perf_counter()
        try:
            stage()
        except (subprocess.CalledProcessError, SystemExit) as error:
            if isinstance(error, SystemExit) and error.code in (None, 0):
                continue
            failed.append(name)
            print(f"!! stage '{name}' failed ({error})", flush=True)
        print(f"== {name}: {time.perf_counter() - start:.0f} s", flush=True)
    total = time.perf_counter() - began
    if failed:
        raise SystemExit(f"FAILED stages: {', '.join(failed)} (after {total:.0f} s)")
    print(f"All {len(stages)} stages passed in {total:.0f} s.", flush=True)


#: The test files that take longest (per-module wall seconds with 2 workers): the unit-test
#: stage hands them out first. ``--dist loadscope`` gives a worker one whole module at a time, so
#: a module-scoped fixture (the book build, a JupyterLab server) is made once; a long module
#: handed out last would leave the other worker idle, so the longest go first (then the rest in
#: collection order). Re-measure with ``pytest tests -n 2 --durations=40`` when this drifts.
SLOW_TEST_FILES = (
    "tests/repo/test_browser.py",
    "tests/repo/test_nbgrader_flow.py",
    "tests/repo/test_book.py",
    "tests/repo/test_assignments.py",
    "tests/test_widgets.py",
    "tests/test_diagnose.py",
    "tests/repo/test_capstone.py",
    "tests/repo/test_lab_server.py",
    "tests/integration/test_grpo_checkpoint.py",
    "tests/integration/test_scale_two_processes.py",
    "tests/integration/test_trl_mapping.py",
    "tests/integration/test_real_lm_trl.py",
    "tests/repo/test_readme_quickstart.py",
    "tests/repo/test_tasks.py",
)


def unit_test_command(*args: str) -> list[str | Path]:
    """pytest over every ``tests/**/test_*.py`` on every core, whole modules per worker
    (``--dist loadscope``), the ``SLOW_TEST_FILES`` first. Each file is named once: pytest keeps
    the order of file arguments, but not ahead of a folder argument that contains them."""
    every = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("test_*.py"))
    slow = [name for name in SLOW_TEST_FILES if name in every]
    files = slow + [name for name in every if name not in slow]
    return [PY, "-m", "pytest", *files, "-n", "auto", "--dist", "loadscope", *args]


def notebooks_longest_first(timings: Path | None = None) -> list[str]:
    """``notebooks/NN_*.ipynb``, the slowest first by the stored CPU seconds of
    ``notebook_timings.json`` (a notebook it lacks counts as slowest), so that nbval's
    ``--dist loadfile`` does not hand a long notebook out last."""
    timings = TIMINGS_JSON if timings is None else timings
    try:
        stored = json.loads(timings.read_text())["notebooks"]
        seconds = {n["notebook"]: float(n["cpu_seconds"] or n["wall_seconds"]) for n in stored}
    except (OSError, ValueError, KeyError, TypeError):
        seconds = {}
    names = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    names.sort(key=lambda name: -seconds.get(name, float("inf")))
    return [f"notebooks/{name}" for name in names]
