"""tasks.py: the learner workspace, JupyterLab's arguments, Ctrl+C, the book's install, timings."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("tasks", ROOT / "tasks.py")
tasks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tasks)

NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
ASSIGNMENTS = sorted(p.name for p in (ROOT / "assignments" / "student").glob("*.ipynb"))


def root_dirs(cmd: list[str]) -> list[str]:
    return [a for a in cmd if a.split("=")[0] in tasks.ROOT_DIR_OPTIONS]


def test_lab_serves_the_workspace_and_a_users_root_dir_replaces_it():
    assert root_dirs(tasks.lab_command()) == [f"--ServerApp.root_dir={tasks.WORKSPACE}"]
    for choice in ("--ServerApp.root_dir=.", "--notebook-dir=/tmp"):
        assert root_dirs(tasks.lab_command("--no-browser", choice)) == [choice]
    cmd = tasks.lab_command("--port=9999")
    assert "--ip=127.0.0.1" in cmd and cmd[-1] == "--port=9999"
    assert not any("token=" in a and a.endswith("=") for a in cmd), "token auth stays on"


def test_workspace_holds_notebooks_and_assignments_and_keeps_the_learners_work(tmp_path):
    ws = tmp_path / "ws"
    copied = tasks.make_workspace(ws)
    assert sorted(p.name for p in (ws / "notebooks").iterdir()) == NOTEBOOKS
    assert sorted(p.name for p in (ws / "assignments").iterdir()) == ASSIGNMENTS
    assert len(copied) == len(NOTEBOOKS) + len(ASSIGNMENTS)
    # the notebooks read ../benchmarks/results/*.json and ../scale: those paths resolve
    for name in tasks.SHARED_FOLDERS:
        assert (ws / "notebooks" / ".." / name).resolve() == (ROOT / name).resolve()
    assert (ws / "notebooks" / ".." / "benchmarks" / "results").is_dir()
    mine = ws / "assignments" / ASSIGNMENTS[0]
    mine.write_text("my answers")
    (ws / "notebooks" / NOTEBOOKS[-1]).unlink()  # e.g. a notebook added later by git pull
    assert tasks.make_workspace(ws) == [ws / "notebooks" / NOTEBOOKS[-1]]
    assert mine.read_text() == "my answers", "a second run must not overwrite the learner's work"
    tasks.make_workspace(ws, reset=True)
    committed = (ROOT / "assignments" / "student" / ASSIGNMENTS[0]).read_bytes()
    assert mine.read_bytes() == committed
    backups = list((ws / ".backup").glob(f"*/assignments/{ASSIGNMENTS[0]}"))
    assert [b.read_text() for b in backups] == ["my answers"]


def test_workspace_and_course_folders_are_git_ignored():
    for path in ("workspace/notebooks/07_grpo_training.ipynb", "course/gradebook.db"):
        done = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT)
        assert done.returncode == 0, f"{path} is not git-ignored"


def test_book_installs_only_the_site_builder():
    names = []
    for f in tasks.BOOK_REQUIREMENTS:
        for line in (ROOT / f).read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                names.append(line.split("==")[0].strip().lower())
    assert "sphinx" in names and "myst-nb" in names
    assert not {"torch", "jupyterlab", "ipywidgets", "matplotlib"} & set(names)
    assert tasks.BOOK_CONSTRAINTS == ["requirements.txt"], "shared pins constrain, not install"


def test_the_book_reads_the_committed_tree(tmp_path):
    assert tasks.committed_tree(tmp_path)
    assert (tmp_path / "book" / "conf.py").exists()
    assert sorted(p.name for p in (tmp_path / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    cmd = tasks.book_command(tmp_path / "out", source=tmp_path)
    assert str(tmp_path / "book") in cmd and str(tmp_path) in cmd


def test_timing_worker_measures_each_cell(tmp_path):
    if not tasks.PY.exists():
        pytest.skip("no .venv; run `python3 tasks.py setup`")
    notebook = {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": "# t"},
            {
                "cell_type": "code",
                "metadata": {},
                "source": "import time\ntime.sleep(1.5)",
                "outputs": [],
                "execution_count": None,
            },
            {
                "cell_type": "code",
                "metadata": {},
                "source": "x = 1",
                "outputs": [],
                "execution_count": None,
            },
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path, out = tmp_path / "t.ipynb", tmp_path / "cells.json"
    path.write_text(json.dumps(notebook))
    cmd = [str(tasks.PY), str(ROOT / "tasks.py"), "_execute_notebook", str(path), str(out)]
    subprocess.run(cmd, check=True, capture_output=True, cwd=tmp_path)
    cells = json.loads(out.read_text())
    assert [c["cell"] for c in cells] == [1, 2]
    assert cells[0]["seconds"] >= 1.5 > cells[1]["seconds"]
    assert cells[0]["first_line"] == "import time"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_lab_takes_a_root_dir_and_stops_cleanly_on_ctrl_c(tmp_path):
    if not (tasks.BIN / "jupyter").exists():
        pytest.skip("jupyter is not installed; run `python3 tasks.py setup`")
    port, token = free_port(), "pgrl-tasks-test"
    env = dict(os.environ, PGRL_WORKSPACE=str(tmp_path / "ws"))
    for var in ("JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR", "JUPYTER_DATA_DIR"):
        env[var] = str(tmp_path / var.lower())
    args = [f"--port={port}", f"--IdentityProvider.token={token}", "--no-browser"]
    args.append(f"--ServerApp.root_dir={tmp_path / 'ws'}")  # the documented clash, now fine
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tasks.py"), "lab", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, as a terminal gives it
    )
    try:
        deadline = time.time() + 90
        while True:
            assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
            try:
                url = f"http://127.0.0.1:{port}/api/contents/assignments?token={token}"
                with urllib.request.urlopen(url, timeout=5) as response:
                    names = {i["name"] for i in json.loads(response.read())["content"]}
                break
            except OSError:
                assert time.time() < deadline, "jupyter lab did not answer within 90 s"
                time.sleep(0.5)
        assert set(ASSIGNMENTS) <= names
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl+C in the terminal: the whole group
        output, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = output.decode()
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text[-3000:]
    assert "JupyterLab stopped." in text
    assert proc.returncode == 0
