"""How long each notebook takes: run it from a fresh kernel in a temporary copy, cell by cell.

    python3 tasks.py timings                         # every notebook (sets up .venv first)
    python3 tasks.py timings 07_grpo_training.ipynb --out /tmp/t.json --cell-timeout 300

Writes ``benchmarks/results/notebook_timings.json`` (or ``--out``), rewritten after every
notebook so a partial run keeps its results. Wall time is measured here; CPU time is the user +
system time of the executing process and its kernel (``RUSAGE_CHILDREN``; None on Windows, as
is the load average). ``tasks.py test`` reads the stored CPU seconds to hand the slowest
notebooks out first (``tasks.notebooks_longest_first``).

Each notebook runs in a worker process (this script again, ``WORKER`` as its first argument)
that starts the kernel and executes the cells with nbclient; a cell that runs longer than
``--cell-timeout`` seconds stops that notebook with a message naming the cell (a kernel that
hangs on a loaded machine would otherwise hold the run for good), and the worker itself is
stopped when the whole notebook overruns its budget.

Standard library only at import: ``tasks.py`` (system python3, before any setup) reads this
command line from ``parse_args``; the worker imports nbformat, nbclient and jupyter_client.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
TIMINGS_JSON = ROOT / "benchmarks" / "results" / "notebook_timings.json"
#: Notebook cells slower than this should show progress (issue 29).
SLOW_CELL_SECONDS = 20.0
#: A cell running longer than this (seconds) stops its notebook. The slowest cell takes about
#: 40 s on an idle core; a machine shared by several runs makes that a few minutes at most.
CELL_TIMEOUT_SECONDS = 600.0
#: Repository folders the notebooks read by relative path (``../benchmarks/results``,
#: ``../scale``): linked beside each temporary copy (``tasks.SHARED_FOLDERS``).
SHARED_FOLDERS = ("benchmarks", "scale")
#: The first argument that makes this script the worker that executes one notebook.
WORKER = "_execute_notebook"


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error (no usage block, no traceback), exit status 2."""

    def error(self, message: str) -> None:
        self.exit(2, f"{self.prog}: {message} (see --help)\n")


def _notebook(name: str) -> str:
    """A notebooks/ file name (a path's folder is ignored); argparse's error if there is none."""
    if not (NOTEBOOKS / Path(name).name).exists():
        raise argparse.ArgumentTypeError(f"no notebook {NOTEBOOKS / Path(name).name}")
    return Path(name).name


def _positive_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return seconds


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line: notebook names (default: all), ``--out PATH``, ``--cell-timeout S``."""
    parser = _Parser(
        prog="python3 tasks.py timings",
        description="Run notebooks from a fresh kernel, each in a temporary copy, and write "
        "their wall and CPU seconds, cell by cell, to a JSON file.",
        allow_abbrev=False,
    )
    parser.add_argument(
        "notebooks", nargs="*", type=_notebook, metavar="NN_name.ipynb",
        help="notebooks/ files (default: all)",
    )  # fmt: skip
    parser.add_argument(
        "--out", type=Path, default=TIMINGS_JSON, metavar="PATH",
        help=f"the JSON file to write (default: {TIMINGS_JSON.relative_to(ROOT)})",
    )  # fmt: skip
    parser.add_argument(
        "--cell-timeout", type=_positive_seconds, default=CELL_TIMEOUT_SECONDS, metavar="S",
        help="stop a notebook whose cell runs longer than S seconds "
        f"(default: {CELL_TIMEOUT_SECONDS:.0f})",
    )  # fmt: skip
    args = parser.parse_args(argv)
    args.out = args.out.resolve()
    return args


def _children_cpu_seconds() -> float | None:
    """User + system seconds of this process's finished children (None where the platform
    cannot tell: Windows has no ``resource`` module)."""
    try:
        import resource
    except ImportError:
        return None
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _load_average() -> list[float] | None:
    """The 1/5/15-minute load average, rounded (None on Windows, which has none)."""
    if not hasattr(os, "getloadavg"):
        return None
    return [round(x, 2) for x in os.getloadavg()]


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def _link_shared_folders(folder: Path) -> None:
    """Symlink ``SHARED_FOLDERS`` of the repository into ``folder`` (the notebooks' parent)."""
    for name in SHARED_FOLDERS:
        if not (ROOT / name).is_dir():
            continue
        try:
            (folder / name).symlink_to(ROOT / name, target_is_directory=True)
        except OSError as err:  # e.g. Windows without the symlink privilege
            print(f"note: could not link {folder / name} -> {ROOT / name} ({err})", file=sys.stderr)


def run_worker(copy: Path, cells_json: Path, cell_timeout: float) -> tuple[int, str]:
    """Execute ``copy`` in the worker process; (its exit status, an error message or '').

    The worker runs in its own process group: when the whole notebook overruns (every code
    cell at the timeout, plus a minute to start the kernel), the group is killed, kernel
    included.
    """
    code_cells = sum(c["cell_type"] == "code" for c in json.loads(copy.read_text())["cells"])
    budget = cell_timeout * (code_cells + 1) + 60
    cmd = [sys.executable, str(Path(__file__).resolve()), WORKER, str(copy), str(cells_json)]
    worker = subprocess.Popen(
        [*cmd, str(cell_timeout)], cwd=copy.parent.parent, start_new_session=True
    )
    try:
        return worker.wait(timeout=budget), ""
    except subprocess.TimeoutExpired:
        if hasattr(os, "killpg"):
            os.killpg(worker.pid, signal.SIGKILL)
        else:  # Windows: no process groups
            worker.kill()
        worker.wait()
        return 1, f"the worker did not finish within {budget:.0f} s and was stopped"


def timings(args: argparse.Namespace) -> int:
    """Run ``args.notebooks`` (default: every notebook) one after another; the exit status."""
    names = args.notebooks or sorted(p.name for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    results = []
    for name in names:
        notebook = NOTEBOOKS / name
        with tempfile.TemporaryDirectory(prefix="pgrl-timings-") as tmp:
            # the repository's layout: notebooks/ beside (links to) benchmarks/ and scale/
            (Path(tmp) / "notebooks").mkdir()
            _link_shared_folders(Path(tmp))
            copy = Path(tmp) / "notebooks" / notebook.name
            shutil.copyfile(notebook, copy)
            cells_json = Path(tmp) / "cells.json"
            load_before = _load_average()
            cpu_before = _children_cpu_seconds()
            start = time.perf_counter()
            returncode, error = run_worker(copy, cells_json, args.cell_timeout)
            wall = time.perf_counter() - start
            cpu_after = _children_cpu_seconds()
            cpu = None if cpu_before is None else cpu_after - cpu_before
            cells = json.loads(cells_json.read_text()) if cells_json.exists() else []
        if error:
            print(f"{notebook.name}: {error}", file=sys.stderr, flush=True)
        timed = [c for c in cells if c["seconds"] is not None]
        slow = [c for c in timed if c["seconds"] > SLOW_CELL_SECONDS]
        slowest = max(timed, key=lambda c: c["seconds"], default=None)
        results.append(
            {
                "notebook": notebook.name,
                "commit": _git("rev-parse", "--short", "HEAD"),
                # differs from that commit (uncommitted edits in the working tree)?
                "modified": bool(_git("status", "--porcelain", str(notebook))),
                "ok": returncode == 0,
                "wall_seconds": round(wall, 1),
                "cpu_seconds": None if cpu is None else round(cpu, 1),
                "code_cells": len(cells),
                "slowest_cell": slowest,
                "cells_over_20_s": slow,
                "unfinished_cells": [c for c in cells if c["seconds"] is None],
                "load_average_1_5_15_min_before": load_before,
                "load_average_1_5_15_min_after": _load_average(),
            }
        )
        load = _load_average()
        print(
            f"{notebook.name}: {'ok' if returncode == 0 else 'FAILED'}, wall {wall:.1f} s, "
            f"CPU {'-' if cpu is None else f'{cpu:.1f}'} s, slowest cell "
            f"{slowest['seconds'] if slowest else '-'} s, load {load[0] if load else '-'}",
            flush=True,
        )
        write_timings(args.out, results)
    return 0 if all(r["ok"] for r in results) else 1


def write_timings(out: Path, results: list[dict]) -> None:
    """The timings JSON, rewritten after every notebook so a partial run keeps its results."""
    payload = {
        "what": "each notebook executed from a fresh kernel in a temporary copy "
        "(python3 tasks.py timings); wall = elapsed seconds, cpu = user + system seconds of "
        "the executing process and its kernel; load = 1/5/15-min load average of the machine, "
        "which other work shares",
        # the commit each notebook was timed at is in its entry (HEAD may move during a run)
        "commits": sorted({r["commit"] for r in results}),
        "machine": {
            "logical_cores": os.cpu_count(),
            "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        },
        "slow_cell_seconds": SLOW_CELL_SECONDS,
        "notebooks": results,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {out}")


def _first_line(source: str) -> str:
    return next((line for line in source.splitlines() if line.strip()), "")[:100]


def execute_notebook(path: Path, out: Path, cell_timeout: float = CELL_TIMEOUT_SECONDS) -> int:
    """The worker (runs in .venv): execute ``path`` in place, each code cell's seconds to
    ``out`` (JSON); the exit status (1 when a cell failed or ran past ``cell_timeout``)."""
    from datetime import datetime

    import nbformat
    from jupyter_client.manager import AsyncKernelManager
    from jupyter_core.utils import run_sync
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError

    notebook = nbformat.read(path, as_version=4)
    # IPC sockets in this run's own folder (the working directory), not TCP ports: with many
    # kernels starting at once on a shared machine, a port picked as free can be taken by
    # another kernel before this one binds it, and the run then waits forever for a reply.
    # (Windows has no IPC sockets: TCP there). The asynchronous manager, as nbclient makes
    # its own: with the blocking KernelManager, nbclient's per-cell timeout never fires.
    if os.name == "nt":
        manager = AsyncKernelManager(kernel_name="python3")
    else:
        manager = AsyncKernelManager(
            kernel_name="python3", transport="ipc", ip=str(out.parent / "kernel")
        )
    # timeout: nbclient's limit on one cell's execution (CellTimeoutError when it runs past it)
    client = NotebookClient(notebook, km=manager, timeout=cell_timeout, record_timing=True)
    client.resources = {"metadata": {"path": str(path.parent)}}
    error = None
    try:
        client.execute()
    except Exception as err:  # noqa: BLE001 - reported, and the timings so far are kept
        error = err
    finally:  # the client does not own this manager: stop and reap the kernel here, so its
        if manager.has_kernel:  # CPU time is counted in the parent's RUSAGE_CHILDREN
            run_sync(manager.shutdown_kernel)(now=isinstance(error, CellTimeoutError))
    cells = []
    for index, cell in enumerate(notebook.cells):
        timing = cell.get("metadata", {}).get("execution", {})
        if (
            cell.cell_type == "code"
            and "iopub.execute_input" in timing
            and ("shell.execute_reply" not in timing)
        ):  # started, never finished (an error or the timeout stopped the run here)
            cells.append({"cell": index, "seconds": None, "unfinished": True,
                          "first_line": _first_line(cell.source)})  # fmt: skip
            continue
        if cell.cell_type != "code" or "shell.execute_reply" not in timing:
            continue
        began = timing.get("iopub.execute_input") or timing["shell.execute_reply.started"]
        seconds = (
            datetime.fromisoformat(timing["shell.execute_reply"].replace("Z", "+00:00"))
            - datetime.fromisoformat(began.replace("Z", "+00:00"))
        ).total_seconds()
        progress = any(
            o.get("name") == "stderr"
            or "application/vnd.jupyter.widget-view+json" in o.get("data", {})
            for o in cell.get("outputs", [])
        )
        cells.append(
            {
                "cell": index,
                "seconds": round(seconds, 2),
                "shows_progress": progress,
                "first_line": _first_line(cell.source),
            }
        )
    out.write_text(json.dumps(cells))
    if isinstance(error, CellTimeoutError):
        stuck = next((c for c in cells if c["seconds"] is None), None)
        where = f"cell {stuck['cell']} ({stuck['first_line']!r})" if stuck else "a cell"
        print(
            f"{path.name}: {where} did not finish within {cell_timeout:g} s (--cell-timeout); "
            "the kernel hung or the machine is overloaded, so this notebook was stopped",
            file=sys.stderr,
        )
        return 1
    if error is not None:
        print(f"{path.name}: {type(error).__name__}: {str(error)[-2000:]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == [WORKER]:  # run_worker's command: NOTEBOOK CELLS_JSON CELL_TIMEOUT
        sys.exit(execute_notebook(Path(sys.argv[2]), Path(sys.argv[3]), float(sys.argv[4])))
    sys.exit(timings(parse_args(sys.argv[1:])))
