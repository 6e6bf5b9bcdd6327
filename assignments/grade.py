#!/usr/bin/env python3
"""Grade student notebooks outside the browser: nbgrader's whole flow, one command.

    python3 tasks.py grade SUBMISSION.ipynb [SUBMISSION.ipynb ...] [--student ID] [--course DIR]
    .venv/bin/python assignments/grade.py ...        (the same, once .venv has nbgrader)

Each submission is a student's copy of one hand-out notebook, named as in
``assignments/student/`` (``05_masks_and_aggregation.ipynb``, or any name ending in it, e.g.
``alice_05_masks_and_aggregation.ipynb``); its assignment is ``a5``. For each one, in the
course directory (default ``course/``, git-ignored):

1. ``nbgrader_config.py`` is copied from ``assignments/`` if the course has none;
2. the instructor notebook goes to ``source/aN/`` and ``nbgrader generate_assignment aN``
   records its check cells, hidden tests included, in ``gradebook.db``;
3. the submission goes to ``submitted/<student>/aN/`` (student: ``--student``, else the file
   name's prefix before the notebook's name, else ``student``);
4. ``nbgrader autograde`` runs it from a fresh kernel with the hidden tests put back;
5. ``nbgrader generate_feedback`` writes ``feedback/<student>/aN/*.html``, and
   ``offline_feedback.py`` makes their formulas render with no network;
6. ``nbgrader export`` writes ``grades.csv`` (every student and assignment graded so far).

It prints the score per check cell, the ``[PASS]`` / ``[FAIL]`` / ``[TODO]`` line of each
visible check, and where the feedback page is. nbgrader's known, harmless warnings
(``assignments/README.md``, "Known warnings") are counted, not shown; ``--verbose`` shows
nbgrader's whole output. Exit status 0 when every step ran (whatever the scores).
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
INSTRUCTOR = HERE / "instructor"
CONFIG = HERE / "nbgrader_config.py"
#: nbgrader's log lines that are known and harmless (assignments/README.md explains each).
KNOWN = (
    re.compile(r"Attribute 'checksum' for cell \S+ has changed!"),
    re.compile(r"Kernel is running over TCP without encryption"),
    re.compile(r"Alternative text is missing on \d+ image"),
    re.compile(r"Removing existing assignment: "),  # generate_assignment --force, ours
)
CHECK_LINE = re.compile(r"^\[(PASS|FAIL|TODO)\] ")


def instructor_notebook(submission: Path) -> Path:
    """The instructor notebook whose name the submission's name ends with."""
    for path in sorted(INSTRUCTOR.glob("[0-9][0-9]_*.ipynb")):
        if submission.name == path.name or submission.name.endswith("_" + path.name):
            return path
    names = ", ".join(p.name for p in sorted(INSTRUCTOR.glob("[0-9][0-9]_*.ipynb")))
    raise SystemExit(
        f"{submission.name}: not the name of a hand-out notebook (or one ending in it): {names}"
    )


def assignment_id(notebook: Path) -> str:
    """'a5' for 05_masks_and_aggregation.ipynb."""
    return f"a{int(notebook.name[:2])}"


def student_id(submission: Path, notebook: Path, given: str | None) -> str:
    if given:
        student = given
    elif submission.name != notebook.name:
        student = submission.name[: -len(notebook.name) - 1]
    else:
        student = "student"
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", student):
        raise SystemExit(f"student id {student!r}: use letters, digits, '_', '.', '-'")
    return student


def nbgrader(args: list[str], course: Path, verbose: bool) -> int:
    """Run one nbgrader command in the course directory; returns how many known warnings
    were hidden. nbgrader calls ``alembic``, so this environment's bin/ goes first on PATH."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    done = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args],
        cwd=course,
        env=env,
        capture_output=True,
        text=True,
    )
    hidden = 0
    for line in (done.stdout + done.stderr).splitlines():
        if any(p.search(line) for p in KNOWN) and not verbose:
            hidden += 1
        elif verbose or "WARNING" in line or "ERROR" in line or done.returncode:
            print(f"  nbgrader: {line}")
    if done.returncode:
        raise SystemExit(f"nbgrader {' '.join(args)} failed (exit {done.returncode})")
    return hidden


def offline_feedback(folder: Path) -> None:
    spec = importlib.util.spec_from_file_location("offline_feedback", HERE / "offline_feedback.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if module.main([str(folder)]) != 0:
        raise SystemExit(f"offline_feedback.py found no pages under {folder}")


def check_lines(notebook: Path) -> list[tuple[str, str]]:
    """(grade_id, the check's printed line) of every graded cell of an autograded notebook."""
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    out = []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if not meta.get("grade"):
            continue
        text = "".join(o.get("text", "") for o in cell.get("outputs", []) if "text" in o)
        lines = [line for line in text.splitlines() if CHECK_LINE.match(line)]
        errors = [o.get("ename", "") for o in cell.get("outputs", []) if o.output_type == "error"]
        shown = lines[0] if lines else "(no check line)"
        if errors:
            shown += f"  -- the hidden check raised {errors[0]}"
        out.append((meta["grade_id"], shown))
    return out


def grade_one(submission: Path, course: Path, student: str | None, verbose: bool) -> dict:
    """Run the flow on one submission; returns its scores."""
    from nbgrader.api import Gradebook

    notebook = instructor_notebook(submission)
    assignment = assignment_id(notebook)
    student = student_id(submission, notebook, student)
    source = course / "source" / assignment
    source.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(notebook, source / notebook.name)
    hidden = nbgrader(["generate_assignment", assignment, "--force"], course, verbose)
    target = course / "submitted" / student / assignment
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    shutil.copyfile(submission, target / notebook.name)
    one = ["--student", student, "--force"]
    hidden += nbgrader(["autograde", assignment, *one], course, verbose)
    hidden += nbgrader(["generate_feedback", assignment, *one], course, verbose)
    feedback = course / "feedback" / student / assignment
    offline_feedback(feedback)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        done = gradebook.find_submission(assignment, student)
        score, max_score = done.score, done.max_score
        cells = {
            grade.name: (grade.score, grade.max_score)
            for nb in done.notebooks
            for grade in nb.grades
        }
    autograded = course / "autograded" / student / assignment / notebook.name
    print(f"{submission} -> {assignment} ({notebook.name}), student {student}:")
    for grade_id, line in check_lines(autograded):
        points, most = cells.get(grade_id, (0.0, 0.0))
        print(f"  {points:g}/{most:g}  {grade_id}: {line}")
    print(f"  score {score:g} of {max_score:g}")
    print(f"  feedback: {feedback / notebook.name.replace('.ipynb', '.html')}")
    if hidden:
        print(f"  ({hidden} known nbgrader warnings hidden: see assignments/README.md)")
    return {"assignment": assignment, "student": student, "score": score, "max": max_score}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("submissions", nargs="+", type=Path, help="student notebooks")
    parser.add_argument("--student", help="student id (default: from the file name)")
    parser.add_argument(
        "--course", type=Path, default=ROOT / "course", help="course directory (%(default)s)"
    )
    parser.add_argument("--verbose", action="store_true", help="show nbgrader's whole output")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.submissions if not p.is_file()]
    if missing:
        raise SystemExit(f"no such file: {', '.join(missing)}")
    if args.student and len(args.submissions) > 1:
        raise SystemExit("--student names one student: grade one submission at a time with it")
    course = args.course.resolve()
    course.mkdir(parents=True, exist_ok=True)
    if not (course / "nbgrader_config.py").exists():
        shutil.copyfile(CONFIG, course / "nbgrader_config.py")
    results = [
        grade_one(path.resolve(), course, args.student, args.verbose) for path in args.submissions
    ]
    nbgrader(["export"], course, args.verbose)
    with open(course / "grades.csv", newline="", encoding="utf-8") as f:
        rows = len(list(csv.DictReader(f)))
    print(f"grades of every graded submission: {course / 'grades.csv'} ({rows} rows)")
    return 0 if results else 1


if __name__ == "__main__":
    sys.exit(main())
