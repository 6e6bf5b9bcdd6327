#!/usr/bin/env python3
"""One entry point for the pgrl series; needs nothing but python3.

    python3 tasks.py lab          set up .venv (first time) and open JupyterLab on notebooks/
    python3 tasks.py test         set up .venv (first time) and run every check:
                                  ruff, pytest unit tests, nbval over every notebook
    python3 tasks.py setup        only create / update .venv
    python3 tasks.py bench        run the benchmark scripts in benchmarks/
    python3 tasks.py assignments  generate student notebooks from the instructor ones
    python3 tasks.py book         build the series as a static, offline website in build/book/html
    python3 tasks.py mutation     mutation testing of the numerical core (slow; not in `test`)

The Makefile has the same targets (make lab, make test, ...).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"

#: Requirement files installed for readers (lab) and, in addition, for the test run.
LAB_REQUIREMENTS = ["requirements.txt"]
TEST_REQUIREMENTS = [
    "requirements.txt",
    "requirements-test.txt",
    "requirements-scale.txt",
    "requirements-instructor.txt",
    "requirements-book.txt",  # tests/test_book.py builds the book site
]


def run(*cmd: str | Path, **kwargs) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, cwd=ROOT, **kwargs)


def setup(requirement_files: list[str]) -> None:
    """Create .venv if needed and install the given requirement files plus this package."""
    files = [f for f in requirement_files if (ROOT / f).exists()]
    if not PY.exists():
        run(sys.executable, "-m", "venv", VENV)
        run(PY, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    digest = hashlib.sha256()
    for f in files + ["pyproject.toml"]:
        digest.update((ROOT / f).read_bytes())
    stamp = VENV / f".installed-{digest.hexdigest()[:16]}"
    if stamp.exists():
        return
    args = []
    for f in files:
        args += ["-r", f]
    run(PY, "-m", "pip", "install", "--quiet", *args)
    run(PY, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "-e", ".")
    stamp.touch()


def lab_command(*extra: str) -> list[str]:
    """JupyterLab on notebooks/, bound to 127.0.0.1, token auth on (never disabled)."""
    cmd = [
        str(BIN / "jupyter"),
        "lab",
        "--ip=127.0.0.1",
        f"--ServerApp.root_dir={ROOT / 'notebooks'}",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # JupyterLab refuses root otherwise; token auth stays on
    return cmd + list(extra)


def lab() -> None:
    setup(LAB_REQUIREMENTS)
    run(*lab_command(*sys.argv[2:]))


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


def bench() -> None:
    setup(LAB_REQUIREMENTS)
    scripts = sorted((ROOT / "benchmarks").glob("bench_*.py"))
    report = ROOT / "benchmarks" / "bench_9_report.py"  # assembles RESULTS.md: runs last
    for script in [s for s in scripts if s != report] + [report]:
        run(PY, script)


def assignments() -> None:
    setup(["requirements.txt", "requirements-instructor.txt"])
    run(PY, ROOT / "assignments" / "make_assignments.py", *sys.argv[2:])


def book_command(out: Path, python: str | Path = PY) -> list[str]:
    """Sphinx + myst-nb build of the book site into out/html (config: book/conf.py).

    The notebooks as committed: stored outputs, nothing executed. Warnings (a broken link,
    a missing page) fail the build.
    """
    sphinx = [str(python), "-m", "sphinx", "-b", "html", "-c", str(ROOT / "book")]
    return sphinx + [
        "-d",
        str(out / "doctrees"),
        "-W",
        "--keep-going",
        "-q",
        str(ROOT),
        str(out / "html"),
    ]


def book() -> None:
    setup(["requirements.txt", "requirements-book.txt"])
    out = ROOT / "build" / "book"
    run(*book_command(out), *sys.argv[2:])
    print(f"Book built; open {out / 'html' / 'index.html'} in a browser (works offline).")


def mutation() -> None:
    """Mutation testing (mutmut) of the core modules listed in tests/mutation.py."""
    setup(["requirements.txt", "requirements-dev.txt"])
    run(PY, ROOT / "tests" / "mutation.py", *sys.argv[2:])


COMMANDS = {
    "setup": lambda: setup(TEST_REQUIREMENTS),
    "lab": lab,
    "test": test,
    "bench": bench,
    "assignments": assignments,
    "book": book,
    "mutation": mutation,
}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        print(__doc__)
        sys.exit(2)
    try:
        COMMANDS[sys.argv[1]]()
    except subprocess.CalledProcessError as err:
        sys.exit(err.returncode or 1)
