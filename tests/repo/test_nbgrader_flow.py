"""nbgrader's autograde flow on a new assignment (08, pass@k): a correct, a partly wrong and an
empty submission get full, partial and zero points; the feedback pages render math offline
once ``assignments/offline_feedback.py`` has run (checked in Chromium with every network
request blocked, when Chromium and playwright are installed)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from chromium_helpers import CHROMIUM, CHROMIUM_FLAGS

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = "08_pass_at_k.ipynb"
INSTRUCTOR = ROOT / "assignments" / "instructor" / NOTEBOOK
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


def solutions() -> dict[str, str]:
    """grade_id -> source of the instructor's solution cells."""
    nb = nbformat.read(INSTRUCTOR, as_version=4)
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
    (course / "nbgrader_config.py").write_text(
        'c = get_config()\nc.CourseDirectory.course_id = "pgrl"\n'
        "c.ExecutePreprocessor.timeout = 300\n"
    )
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
    nbgrader(["autograde", "a8"], course)

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
    spec = importlib.util.spec_from_file_location(
        "offline_feedback", ROOT / "assignments" / "offline_feedback.py"
    )
    offline = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(offline)
    assert offline.main([str(course / "feedback")]) == 0
    for page in pages:
        html = page.read_text(encoding="utf-8")
        assert offline.MARKER in html and not offline.CDN_SCRIPT.search(html)
    assert offline.main([str(course / "feedback")]) == 0  # idempotent
    render_offline(pages[0])


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
