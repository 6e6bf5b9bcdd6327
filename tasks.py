#!/usr/bin/env python3
"""One entry point for the pgrl series; needs nothing but python3.

    python3 tasks.py lab          set up .venv (first time) and open JupyterLab on workspace/,
                                  your own copy of the notebooks and the student assignments
                                  (made on first run; --reset refreshes it from the committed
                                  versions, keeping a backup; other arguments go to JupyterLab)
    python3 tasks.py test         set up .venv (first time) and run every check:
                                  ruff, pytest unit tests, every benchmark's --quick
                                  version (bench --quick), nbval over every notebook
    python3 tasks.py setup        only create / update .venv
    python3 tasks.py bench        run the benchmark scripts in benchmarks/ (minutes to hours),
                                  then benchmarks/report.py (writes benchmarks/RESULTS.md);
                                  --quick: each script at tiny sizes into a temporary folder
                                  and the report of that folder (a few minutes; fails if any
                                  script fails; benchmarks/results/ is never touched)
    python3 tasks.py assignments  generate student notebooks from the instructor ones
    python3 tasks.py book         build the series as a static, offline website in build/book/html
    python3 tasks.py timings      run every notebook from a fresh kernel (a temporary copy) and
                                  write benchmarks/results/notebook_timings.json
    python3 tasks.py mutation     mutation testing of the numerical core (slow; not in `test`)
    python3 tasks.py checkpoint   build notebook 14's small SFT checkpoint into .cache/pgrl/

The Makefile has the same targets (make lab, make test, ...).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"
#: The learner's working copy (git-ignored): notebooks/ and assignments/ side by side
#: (``PGRL_WORKSPACE`` moves it, e.g. for tests).
WORKSPACE = Path(os.environ.get("PGRL_WORKSPACE") or ROOT / "workspace").resolve()
#: What the workspace holds: its folder -> the committed files copied into it.
WORKSPACE_SOURCES = {
    "notebooks": ("notebooks", "[0-9][0-9]_*.ipynb"),
    "assignments": ("assignments/student", "*.ipynb"),
}
#: Repository folders the notebooks read by relative path (``../benchmarks/results/*.json``,
#: ``../scale``): linked into the workspace and the timing copies, so those paths resolve.
SHARED_FOLDERS = ("benchmarks", "scale")
#: JupyterLab options that choose the folder it serves (a user's choice replaces ours).
ROOT_DIR_OPTIONS = ("--ServerApp.root_dir", "--notebook-dir", "--ServerApp.notebook_dir")

#: Requirement files installed for readers (lab) and, in addition, for the test run.
LAB_REQUIREMENTS = ["requirements.txt"]
TEST_REQUIREMENTS = [
    "requirements.txt",
    "requirements-test.txt",
    "requirements-scale.txt",
    "requirements-instructor.txt",
    "requirements-book.txt",  # tests/repo/test_book.py builds the book site
]


def run(*cmd: str | Path, **kwargs) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, cwd=ROOT, **kwargs)


def setup(
    requirement_files: list[str],
    constraints: list[str] = (),
    editable: bool = True,
    about: str = "the pinned packages",
) -> None:
    """Create .venv if needed and install the given requirement files plus this package.

    ``constraints`` pin versions (``pip -c``) without installing anything; ``editable``
    installs this package (``pip install -e .``). Prints what it installs and about how long
    it takes; pip's own progress stays visible.
    """
    files = [f for f in requirement_files if (ROOT / f).exists()]
    constraints = [f for f in constraints if (ROOT / f).exists()]
    if not PY.exists():
        print(f"Creating the virtual environment {VENV} ...", flush=True)
        run(sys.executable, "-m", "venv", VENV)
        run(PY, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    digest = hashlib.sha256()
    for f in files + constraints + ["pyproject.toml"]:
        digest.update((ROOT / f).read_bytes())
    if not editable:
        digest.update(b"without this package")
    stamp = VENV / f".installed-{digest.hexdigest()[:16]}"
    if stamp.exists():
        return
    args = []
    for f in files:
        args += ["-r", f]
    for f in constraints:
        args += ["-c", f]
    print(
        f"Installing {about} ({', '.join(files)}) into .venv. The first time this takes a few "
        "minutes (about 4 min for requirements.txt, most of it torch); later runs skip it.",
        flush=True,
    )
    run(PY, "-m", "pip", "install", "--progress-bar", "on", *args)
    if editable:
        # setuptools prints a boxed 'Editable installation' notice here; it is harmless, so
        # the output is shown only if the step fails
        print("+ pip install -e . (this package, editable)", flush=True)
        done = subprocess.run(
            [str(PY), "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
            + ["-e", "."],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        if done.returncode:
            print(done.stdout + done.stderr, file=sys.stderr)
            raise subprocess.CalledProcessError(done.returncode, done.args)
    stamp.touch()
    print("Setup done.", flush=True)


def lab_command(*extra: str, root_dir: Path = WORKSPACE) -> list[str]:
    """JupyterLab on ``root_dir``, bound to 127.0.0.1, token auth on (never disabled).

    ``extra`` arguments go to JupyterLab unchanged. One that picks the served folder
    (``--ServerApp.root_dir=...``, ``--notebook-dir=...``) replaces ``root_dir``, so the two
    never clash. ``answer_yes`` skips JupyterLab's "Shut down? (y/[n])" prompt when the
    command is run by hand; ``lab()`` itself stops the server on Ctrl+C.
    """
    cmd = [str(BIN / "jupyter"), "lab", "--ip=127.0.0.1", "--ServerApp.answer_yes=True"]
    if not any(arg.split("=")[0] in ROOT_DIR_OPTIONS for arg in extra):
        cmd.append(f"--ServerApp.root_dir={root_dir}")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # JupyterLab refuses root otherwise; token auth stays on
    return cmd + list(extra)


def make_workspace(workspace: Path = WORKSPACE, reset: bool = False) -> list[Path]:
    """The learner's copy: committed notebooks and student assignments, side by side.

    Files already in the workspace are the learner's work and are never overwritten; only
    missing ones are copied (so a notebook added by ``git pull`` appears). With ``reset``,
    the copies are refreshed from the committed versions and the old ones moved to
    ``workspace/.backup/<time>/`` first. Returns the files copied.
    """
    copied = []
    backup = workspace / ".backup" / time.strftime("%Y%m%d-%H%M%S")
    for folder, (source, pattern) in WORKSPACE_SOURCES.items():
        target = workspace / folder
        target.mkdir(parents=True, exist_ok=True)
        for original in sorted((ROOT / source).glob(pattern)):
            copy = target / original.name
            if copy.exists() and reset:
                (backup / folder).mkdir(parents=True, exist_ok=True)
                shutil.move(str(copy), backup / folder / original.name)
            if not copy.exists():
                shutil.copyfile(original, copy)
                copied.append(copy)
    link_shared_folders(workspace)
    readme = workspace / "README.md"
    if not readme.exists():
        readme.write_text(
            "# Your workspace\n\n"
            "Your own copies of the series (`notebooks/`) and of the student assignments\n"
            "(`assignments/`). Edit and save freely: this folder is git-ignored, and the\n"
            "committed originals are never touched. `python3 tasks.py lab --reset` refreshes\n"
            "the copies from the committed versions (your old files go to `.backup/`).\n"
            "`benchmarks/` and `scale/` here are links to the repository's folders, which\n"
            "the notebooks read (benchmark results); there is no need to edit them.\n"
        )
    return copied


def link_shared_folders(folder: Path) -> None:
    """Symlink ``SHARED_FOLDERS`` of the repository into ``folder`` (the notebooks' parent)."""
    for name in SHARED_FOLDERS:
        link, target = folder / name, ROOT / name
        if target.is_dir() and not link.exists() and not link.is_symlink():
            try:
                link.symlink_to(target, target_is_directory=True)
            except OSError as err:  # e.g. Windows without the symlink privilege
                print(f"note: could not link {link} -> {target} ({err})", file=sys.stderr)


def lab() -> None:
    extra = sys.argv[2:]
    reset = "--reset" in extra
    extra = [arg for arg in extra if arg != "--reset"]
    setup(LAB_REQUIREMENTS, about="the student packages")
    copied = make_workspace(reset=reset)
    print(
        f"Your workspace: {WORKSPACE} ({len(copied)} files copied from the committed versions; "
        "your own edits there are kept). Stop the server with Ctrl+C.",
        flush=True,
    )
    cmd = lab_command(*extra)
    print("+", " ".join(cmd), flush=True)
    # JupyterLab runs in its own session: Ctrl+C (SIGINT) and SIGTERM reach this process only,
    # which asks the server to stop with SIGTERM (its clean shutdown: no "Shut down? (y/[n])"
    # prompt, no KeyboardInterrupt traceback, no server left behind)
    proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True)

    def stop(signum, frame) -> None:
        print("\nStopping JupyterLab ...", flush=True)
        proc.send_signal(signal.SIGTERM)

    previous = {signum: signal.signal(signum, stop) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = proc.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    print("JupyterLab stopped.", flush=True)
    if code not in (0, -signal.SIGINT, 128 + signal.SIGINT, -signal.SIGTERM):
        sys.exit(code)


def test() -> None:
    setup(TEST_REQUIREMENTS)
    targets = [
        p
        for p in (
            "pgrl_helpers",
            "tests",
            "benchmarks",
            "assignments/make_assignments.py",
            "tasks.py",
        )
        if (ROOT / p).exists()
    ]
    run(BIN / "ruff", "check", *targets)
    run(BIN / "ruff", "format", "--check", *targets)
    run(PY, "-m", "pytest", "tests", *sys.argv[2:])
    bench(quick=True, install=False)  # every benchmark runs, at tiny sizes
    run(
        PY,
        "-m",
        "pytest",
        "--nbval",
        "--nbval-current-env",
        "--nbval-sanitize-with",
        ".nbval-sanitize.cfg",
        "-p",
        "no:cacheprovider",
        "notebooks",
    )


def bench(quick: bool | None = None, install: bool = True) -> None:
    """Every ``benchmarks/bench_*.py``, then ``benchmarks/report.py`` (RESULTS.md).

    ``quick`` (default: ``--quick`` on the command line): each script's ``--quick`` run into
    one temporary folder, one process each, timed; then the report of that folder. Raises
    SystemExit naming the scripts that failed (their output is printed; the folder is kept).
    ``install``: set up the packages first (``test`` has done it already).
    """
    if install:
        setup(["requirements.txt", "requirements-scale.txt"])  # TRL for bench_trl*, pass@k
    if quick is None:
        quick = "--quick" in sys.argv[2:]
    scripts = sorted((ROOT / "benchmarks").glob("bench_*.py"))
    report = ROOT / "benchmarks" / "report.py"
    if not quick:
        for script in scripts:
            run(PY, script)
        run(PY, report)
        return
    out = Path(tempfile.mkdtemp(prefix="pgrl-bench-quick-"))
    print(f"Quick benchmark runs into {out} (benchmarks/results/ is not touched):", flush=True)
    failed, start = [], time.perf_counter()

    def quick_run(script: Path, args: list[str]) -> tuple[subprocess.CompletedProcess, float]:
        began = time.perf_counter()
        done = subprocess.run(
            [str(PY), str(script), *args], cwd=ROOT, capture_output=True, text=True
        )
        return done, time.perf_counter() - began

    # two at a time (the machine's two cores; each script runs torch on one thread)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        runs = [(s, pool.submit(quick_run, s, ["--quick", "--out", str(out)])) for s in scripts]
        results = [(script, *future.result()) for script, future in runs]
    results.append((report, *quick_run(report, [str(out)])))  # reads what the scripts wrote
    for script, done, seconds in results:
        status = "ok" if done.returncode == 0 else f"FAILED (exit {done.returncode})"
        print(f"  {script.name:28s} {seconds:5.1f} s  {status}", flush=True)
        if done.returncode:
            failed.append(script.name)
            print(done.stdout[-4000:] + done.stderr[-4000:], file=sys.stderr, flush=True)
    print(f"  {'total':28s} {time.perf_counter() - start:5.1f} s", flush=True)
    if failed:
        raise SystemExit(f"bench --quick: {', '.join(failed)} failed (outputs kept in {out})")
    shutil.rmtree(out, ignore_errors=True)


def assignments() -> None:
    setup(["requirements.txt", "requirements-instructor.txt"])
    run(PY, ROOT / "assignments" / "make_assignments.py", *sys.argv[2:])


def book_command(out: Path, python: str | Path = PY, source: Path = ROOT) -> list[str]:
    """Sphinx + myst-nb build of the book site into out/html (config: source/book/conf.py).

    The notebooks with their stored outputs, nothing executed. Warnings (a broken link,
    a missing page) fail the build.
    """
    sphinx = [str(python), "-m", "sphinx", "-b", "html", "-c", str(source / "book")]
    return sphinx + [
        "-d",
        str(out / "doctrees"),
        "-W",
        "--keep-going",
        "-q",
        str(source),
        str(out / "html"),
    ]


def committed_tree(target: Path) -> bool:
    """Extract the committed files (git HEAD) into ``target``; False if this is no git clone."""
    try:
        archive = subprocess.run(
            ["git", "archive", "--format=tar", "HEAD"], cwd=ROOT, capture_output=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return False
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return True


#: What ``tasks.py book`` installs: the site builder only (no torch, no JupyterLab); the
#: student pins constrain the versions shared with it (nbformat, ipykernel, ...).
BOOK_REQUIREMENTS = ["requirements-book.txt"]
BOOK_CONSTRAINTS = ["requirements.txt"]


def book() -> None:
    setup(BOOK_REQUIREMENTS, BOOK_CONSTRAINTS, editable=False, about="the site builder")
    out = ROOT / "build" / "book"
    extra = [arg for arg in sys.argv[2:] if arg != "--working-tree"]
    with tempfile.TemporaryDirectory(prefix="pgrl-book-") as tmp:
        # the committed notebooks, never a working copy a session may have rewritten
        if "--working-tree" not in sys.argv[2:] and committed_tree(Path(tmp)):
            print("Building the book from the committed files (git HEAD).", flush=True)
            run(*book_command(out, source=Path(tmp)), *extra)
        else:
            print("Building the book from the working tree.", flush=True)
            run(*book_command(out), *extra)
    print(f"Book built; open {out / 'html' / 'index.html'} in a browser (works offline).")


#: Notebook cells slower than this should show progress (issue 29).
SLOW_CELL_SECONDS = 20.0
TIMINGS_JSON = ROOT / "benchmarks" / "results" / "notebook_timings.json"


def timings() -> None:
    """Run notebooks from a fresh kernel, each in a temporary copy; write the timings JSON.

    ``python3 tasks.py timings [NN_name.ipynb ...] [--out PATH]`` (default: every notebook,
    ``benchmarks/results/notebook_timings.json``). Wall time is measured here; CPU time is
    the user + system time of the executing process and its kernel (``RUSAGE_CHILDREN``).
    """
    import resource

    setup(LAB_REQUIREMENTS, about="the student packages")
    args = sys.argv[2:]
    out = TIMINGS_JSON
    if "--out" in args:
        at = args.index("--out")
        out = Path(args[at + 1]).resolve()
        del args[at : at + 2]
    names = args or sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    results = []
    for name in names:
        notebook = ROOT / "notebooks" / Path(name).name
        if not notebook.exists():
            sys.exit(f"no notebook {notebook}")
        with tempfile.TemporaryDirectory(prefix="pgrl-timings-") as tmp:
            # the repository's layout: notebooks/ beside (links to) benchmarks/ and scale/
            (Path(tmp) / "notebooks").mkdir()
            link_shared_folders(Path(tmp))
            copy = Path(tmp) / "notebooks" / notebook.name
            shutil.copyfile(notebook, copy)
            cells_json = Path(tmp) / "cells.json"
            load_before = os.getloadavg()
            usage = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            done = subprocess.run(
                [str(PY), str(ROOT / "tasks.py"), "_execute_notebook", str(copy), str(cells_json)],
                cwd=tmp,
            )
            wall = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
            cells = json.loads(cells_json.read_text()) if cells_json.exists() else []
        timed = [c for c in cells if c["seconds"] is not None]
        slow = [c for c in timed if c["seconds"] > SLOW_CELL_SECONDS]
        slowest = max(timed, key=lambda c: c["seconds"], default=None)
        results.append(
            {
                "notebook": notebook.name,
                "commit": _git("rev-parse", "--short", "HEAD"),
                # differs from that commit (uncommitted edits in the working tree)?
                "modified": bool(_git("status", "--porcelain", str(notebook))),
                "ok": done.returncode == 0,
                "wall_seconds": round(wall, 1),
                "cpu_seconds": round(cpu, 1),
                "code_cells": len(cells),
                "slowest_cell": slowest,
                "cells_over_20_s": slow,
                "unfinished_cells": [c for c in cells if c["seconds"] is None],
                "load_average_1_5_15_min_before": [round(x, 2) for x in load_before],
                "load_average_1_5_15_min_after": [round(x, 2) for x in os.getloadavg()],
            }
        )
        print(
            f"{notebook.name}: {'ok' if done.returncode == 0 else 'FAILED'}, wall {wall:.1f} s, "
            f"CPU {cpu:.1f} s, slowest cell {slowest['seconds'] if slowest else '-'} s, "
            f"load {os.getloadavg()[0]:.2f}",
            flush=True,
        )
        _write_timings(out, results)
    if not all(r["ok"] for r in results):
        sys.exit(1)


def _write_timings(out: Path, results: list[dict]) -> None:
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


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def _execute_notebook() -> None:
    """Worker of ``timings`` (runs in .venv): execute argv[2] in place, cell times to argv[3]."""
    from datetime import datetime

    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    path, out = Path(sys.argv[2]), Path(sys.argv[3])
    notebook = nbformat.read(path, as_version=4)
    # IPC sockets in this run's own folder (the working directory), not TCP ports: with many
    # kernels starting at once on a shared machine, a port picked as free can be taken by
    # another kernel before this one binds it, and the run then waits forever for a reply.
    manager = KernelManager(kernel_name="python3", transport="ipc", ip=str(out.parent / "kernel"))
    client = NotebookClient(notebook, km=manager, timeout=900, record_timing=True)
    client.resources = {"metadata": {"path": str(path.parent)}}
    error = None
    try:
        client.execute()
    except Exception as err:  # noqa: BLE001 - reported, and the timings so far are kept
        error = err
    finally:  # the client does not own this manager: stop and reap the kernel here, so its
        if manager.has_kernel:  # CPU time is counted in the parent's RUSAGE_CHILDREN
            manager.shutdown_kernel()
    cells = []
    for index, cell in enumerate(notebook.cells):
        timing = cell.get("metadata", {}).get("execution", {})
        if (
            cell.cell_type == "code"
            and "iopub.execute_input" in timing
            and ("shell.execute_reply" not in timing)
        ):  # started, never finished (an error stopped the run here)
            first_line = next((line for line in cell.source.splitlines() if line.strip()), "")
            cells.append({"cell": index, "seconds": None, "unfinished": True,
                          "first_line": first_line[:100]})  # fmt: skip
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
        first_line = next((line for line in cell.source.splitlines() if line.strip()), "")
        cells.append(
            {
                "cell": index,
                "seconds": round(seconds, 2),
                "shows_progress": progress,
                "first_line": first_line[:100],
            }
        )
    out.write_text(json.dumps(cells))
    if error is not None:
        print(f"{path.name}: {type(error).__name__}: {str(error)[-2000:]}", file=sys.stderr)
        sys.exit(1)


def checkpoint() -> None:
    """The small SFT checkpoint of notebook 14 (pgrl_helpers/checkpoint.py), cached in .cache/."""
    setup(["requirements.txt", "requirements-scale.txt"])
    run(PY, "-m", "pgrl_helpers.checkpoint", *sys.argv[2:])


def mutation() -> None:
    """Mutation testing (mutmut, tests/mutation.py) of each module whose tests/test_<module>.py
    has a `# --- mutants ---` section."""
    setup(["requirements.txt", "requirements-dev.txt"])
    run(PY, ROOT / "tests" / "mutation.py", *sys.argv[2:])


COMMANDS = {
    "setup": lambda: setup(TEST_REQUIREMENTS),
    "lab": lab,
    "test": test,
    "bench": bench,
    "assignments": assignments,
    "book": book,
    "timings": timings,
    "_execute_notebook": _execute_notebook,
    "mutation": mutation,
    "checkpoint": checkpoint,
}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        print(__doc__)
        sys.exit(2)
    try:
        COMMANDS[sys.argv[1]]()
    except subprocess.CalledProcessError as err:
        sys.exit(err.returncode or 1)
