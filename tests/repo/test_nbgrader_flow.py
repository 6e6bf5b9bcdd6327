"""nbgrader's autograde flow on a new assignment (08, pass@k): a correct, a partly wrong and an
empty submission get full, partial and zero points; the feedback pages render math offline
once ``assignments/offline_feedback.py`` has run (checked in Chromium with every network
request blocked, when Chromium and playwright are installed). The README's flow by hand runs
as written, and ``assignments/grade.py`` (``python3 tasks.py grade``) runs the whole flow on
student files outside the browser."""

from __future__ import annotations

import csv
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from chromium_helpers import CHROMIUM, CHROMIUM_FLAGS

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = "08_pass_at_k.ipynb"
INSTRUCTOR = ROOT / "assignments" / "instructor" / NOTEBOOK
CONFIG = ROOT / "assignments" / "nbgrader_config.py"
WRONG_EX20 = '''def benchmark_pass_at_k(correct, k):
    """correct bool[problems, n] -> mean over problems of pass@k."""
    n = correct.shape[1]
    return sum(1 - (1 - int(c) / n) ** k for c in correct.sum(dim=1)) / correct.shape[0]
'''


def nbgrader(args: list[str], course: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    done = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args, f"--CourseDirectory.root={course}"],
        cwd=course,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def load_module(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "assignments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def solutions(instructor: Path = INSTRUCTOR) -> dict[str, str]:
    """grade_id -> source of the instructor's solution cells."""
    nb = nbformat.read(instructor, as_version=4)
    return {
        c.metadata["nbgrader"]["grade_id"]: c.source
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("solution")
    }


def submit(release: Path, course: Path, student: str, answers: dict[str, str]) -> None:
    nb = nbformat.read(release, as_version=4)
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id]
    target = course / "submitted" / student / "a8"
    target.mkdir(parents=True)
    nbformat.write(nb, target / NOTEBOOK)


def test_autograde_scores_correct_partial_and_empty_submissions(tmp_path):
    pytest.importorskip("nbgrader", reason="pip install -r requirements-instructor.txt")
    course = tmp_path / "course"
    (course / "source" / "a8").mkdir(parents=True)
    (course / "source" / "a8" / NOTEBOOK).write_bytes(INSTRUCTOR.read_bytes())
    (course / "nbgrader_config.py").write_bytes(CONFIG.read_bytes())  # the committed one
    nbgrader(["generate_assignment", "a8"], course)
    release = course / "release" / "a8" / NOTEBOOK
    right = solutions()
    assert set(right) == {"ex19_pass_at_k", "ex20_benchmark_pass_at_k"}
    submit(release, course, "correct", right)
    submit(
        release,
        course,
        "partly",
        {"ex19_pass_at_k": right["ex19_pass_at_k"], "ex20_benchmark_pass_at_k": WRONG_EX20},
    )
    submit(release, course, "empty", {})
    done = nbgrader(["autograde", "a8"], course)
    # the committed config silences SQLAlchemy's session warning (assignments/README.md)
    assert "SAWarning" not in done.stderr and "not in session" not in done.stderr

    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        scores = {
            student: gradebook.find_submission("a8", student).score
            for student in ("correct", "partly", "empty")
        }
        max_score = gradebook.find_assignment("a8").max_score
    assert max_score == 4  # points = difficulty: exercise 19 (2) + exercise 20 (2)
    assert scores == {"correct": 4.0, "partly": 2.0, "empty": 0.0}

    nbgrader(["generate_feedback", "a8"], course)
    pages = sorted((course / "feedback").rglob("*.html"))
    assert len(pages) == 3
    assert "cdnjs.cloudflare.com/ajax/libs/mathjax" in pages[0].read_text(encoding="utf-8")
    offline = load_module("offline_feedback")
    assert offline.main([str(course / "feedback")]) == 0
    for page in pages:
        html = page.read_text(encoding="utf-8")
        assert offline.MARKER in html and not offline.CDN_SCRIPT.search(html)
    assert offline.main([str(course / "feedback")]) == 0  # idempotent
    render_offline(pages[0])


def filled(student_notebook: Path, answers: dict[str, str], target: Path) -> Path:
    """The hand-out notebook with its solution cells replaced by ``answers``, at ``target``."""
    nb = nbformat.read(student_notebook, as_version=4)
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id]
    nbformat.write(nb, target)
    return target


def readme_block(title: str) -> str:
    """The first bash block after ``title`` in assignments/README.md."""
    readme = (ROOT / "assignments" / "README.md").read_text(encoding="utf-8")
    after = readme.split(title, 1)[1]
    return after.split("```bash\n", 1)[1].split("```", 1)[0]


def test_the_readme_flow_by_hand_runs_as_written(tmp_path):
    """The README's nbgrader commands, verbatim, in a scratch copy of the repository's layout
    (.venv and assignments/ linked, the student's file in a folder outside it, as issue 50
    asks: $SUBMISSIONS): a correct submission of
    assignment 5 gets 5 of 5 points, its feedback page renders math offline, grades.csv has
    its row."""
    pytest.importorskip("nbgrader", reason="pip install -r requirements-instructor.txt")
    block = readme_block("**nbgrader's flow by hand**")
    assert "cp assignments/nbgrader_config.py course/" in block and "printf" not in block
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in (".venv", "assignments"):
        (repo / name).symlink_to(ROOT / name)
    name = "05_masks_and_aggregation.ipynb"
    answers = solutions(ROOT / "assignments" / "instructor" / name)
    submissions = tmp_path / "submissions"
    submissions.mkdir()
    filled(ROOT / "assignments" / "student" / name, answers, submissions / f"alice_{name}")
    done = subprocess.run(
        ["bash", "-e", "-c", block],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "SUBMISSIONS": str(submissions)},
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "now render math offline" in done.stdout
    course = repo / "course"
    with open(course / "grades.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [(r["student_id"], r["assignment"], float(r["score"])) for r in rows] == [
        ("alice", "a5", 5.0)
    ]
    page = course / "feedback" / "alice" / "a5" / "05_masks_and_aggregation.html"
    offline = load_module("offline_feedback")
    assert offline.MARKER in page.read_text(encoding="utf-8")


def test_grade_runs_the_whole_flow_on_student_files(tmp_path, capsys):
    """``python3 tasks.py grade`` = ``assignments/grade.py``: one call grades two students'
    files (ids from the file names), prints each check's points and line, writes offline
    feedback and grades.csv; the known warnings are counted, not shown."""
    pytest.importorskip("nbgrader", reason="pip install -r requirements-instructor.txt")
    grade = load_module("grade")
    right = solutions()
    release = ROOT / "assignments" / "student" / NOTEBOOK
    carol = filled(release, right, tmp_path / f"carol_{NOTEBOOK}")
    dave = filled(
        release, {**right, "ex20_benchmark_pass_at_k": WRONG_EX20}, tmp_path / f"dave_{NOTEBOOK}"
    )
    course = tmp_path / "course"
    assert grade.main([str(carol), str(dave), "--course", str(course)]) == 0
    out = capsys.readouterr().out
    assert f"-> a8 ({NOTEBOOK}), student carol:" in out and "score 4 of 4" in out
    assert f"-> a8 ({NOTEBOOK}), student dave:" in out and "score 2 of 4" in out
    assert re.search(r"2/2  ex19_pass_at_k_check: \[PASS\] pass_at_k: ", out)
    assert re.search(r"0/2  ex20_benchmark_pass_at_k_check: \[FAIL\] mean_pass_at_k: .*biased", out)
    assert "known nbgrader warnings hidden" in out and "checksum" not in out
    assert "SAWarning" not in out and "without encryption" not in out
    offline = load_module("offline_feedback")
    for student in ("carol", "dave"):
        page = course / "feedback" / student / "a8" / NOTEBOOK.replace(".ipynb", ".html")
        assert offline.MARKER in page.read_text(encoding="utf-8")
    assert (course / "nbgrader_config.py").read_bytes() == CONFIG.read_bytes()
    with open(course / "grades.csv", newline="", encoding="utf-8") as f:
        scores = {r["student_id"]: float(r["score"]) for r in csv.DictReader(f)}
    assert scores == {"carol": 4.0, "dave": 2.0}
    # a file that is no hand-out notebook is refused by name
    stray = tmp_path / "notes.ipynb"
    stray.write_bytes(carol.read_bytes())
    with pytest.raises(SystemExit, match="not the name of a hand-out notebook"):
        grade.main([str(stray), "--course", str(course)])


def test_tasks_grade_sets_up_mathjax_then_runs_grade_py(monkeypatch, tmp_path):
    """``tasks.py grade`` installs the instructor's requirements and MathJax's wheel (pinned
    in requirements-book.txt, without Sphinx), then runs grade.py with its arguments;
    ``tasks.py assignments`` does the same setup before generating."""
    monkeypatch.chdir(tmp_path)  # tasks.py checks that the submission exists before any setup
    (tmp_path / "alice_08_pass_at_k.ipynb").write_text("{}")
    spec = importlib.util.spec_from_file_location("tasks_under_test", ROOT / "tasks.py")
    tasks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tasks)
    calls = []
    monkeypatch.setattr(tasks, "setup", lambda files, *a, **k: calls.append(("setup", files)))
    monkeypatch.setattr(tasks, "run", lambda *cmd, **k: calls.append(("run", cmd)))

    class Shown:
        stdout = "Name: sphinx-mathjax-offline\nVersion: 0.0.1\n"  # another version installed

    monkeypatch.setattr(tasks.subprocess, "run", lambda *a, **k: Shown())
    assert tasks.COMMANDS["grade"] is tasks.grade
    assert tasks.main(["tasks.py", "grade", "alice_08_pass_at_k.ipynb"]) == 0
    pin = next(
        line.strip()
        for line in (ROOT / "requirements-book.txt").read_text().splitlines()
        if line.startswith("sphinx-mathjax-offline==")
    )
    assert calls == [
        ("setup", ["requirements.txt", "requirements-instructor.txt"]),
        ("run", (tasks.PY, "-m", "pip", "install", "--quiet", "--no-deps", pin)),
        ("run", (tasks.PY, ROOT / "assignments" / "grade.py", "alice_08_pass_at_k.ipynb")),
    ]
    calls.clear()
    Shown.stdout = f"Name: sphinx-mathjax-offline\nVersion: {pin.partition('==')[2]}\n"
    assert tasks.main(["tasks.py", "assignments"]) == 0
    assert calls == [  # already installed: no pip call
        ("setup", ["requirements.txt", "requirements-instructor.txt"]),
        ("run", (tasks.PY, ROOT / "assignments" / "make_assignments.py")),
    ]


def render_offline(page: Path) -> None:
    """Open ``page`` from file:// with every other request aborted; MathJax must typeset."""
    if not CHROMIUM.exists():
        return
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return
    blocked = []
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS
        )
        try:
            context = browser.new_context()
            context.route(
                "**/*",
                lambda route: (
                    route.continue_()
                    if route.request.url.startswith(("file:", "data:"))
                    else (blocked.append(route.request.url), route.abort())
                ),
            )
            tab = context.new_page()
            tab.goto(page.as_uri())
            tab.wait_for_selector("mjx-container", timeout=60_000)
            typeset = tab.locator("mjx-container").count()
            raw = tab.evaluate("document.body.innerText.includes('\\\\binom')")
        finally:
            browser.close()
    assert typeset >= 1 and not raw, (typeset, raw)
    assert not blocked, f"the feedback page requested the network: {blocked[:3]}"
