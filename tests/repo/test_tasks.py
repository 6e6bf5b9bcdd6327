"""tasks.py: the command line (argparse), the learner workspace, JupyterLab's arguments, Ctrl+C,
the book's install; benchmarks/notebook_timings.py (``tasks.py timings``)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
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
notebook_timings = tasks.load_notebook_timings()

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
    script = str(tasks.NOTEBOOK_TIMINGS)
    cmd = [str(tasks.PY), script, notebook_timings.WORKER, str(path), str(out), "60"]
    subprocess.run(cmd, check=True, capture_output=True, cwd=tmp_path)
    cells = json.loads(out.read_text())
    assert [c["cell"] for c in cells] == [1, 2]
    assert cells[0]["seconds"] >= 1.5 > cells[1]["seconds"]
    assert cells[0]["first_line"] == "import time"
    # a cell that runs past the per-cell timeout stops the notebook, naming the cell
    notebook["cells"][1]["source"] = "import time\ntime.sleep(60)"
    path.write_text(json.dumps(notebook))
    cmd[-1] = "3"
    began = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 1 and time.perf_counter() - began < 45
    assert "cell 1 ('import time') did not finish within 3 s (--cell-timeout)" in done.stderr
    cells = json.loads(out.read_text())
    assert cells == [{"cell": 1, "seconds": None, "unfinished": True, "first_line": "import time"}]


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


# --------------------------------------------------------------------------------------
# The torch build: CPU on every platform, decided with pip mocked (no network)
# --------------------------------------------------------------------------------------

#: What ``pip index versions torch --json`` answers: PyPI (Linux: CUDA wheels, no label),
#: this machine (a local +cpu wheel beside PyPI's), an index serving CUDA builds.
PYPI = ["2.14.0", "2.13.0", "2.12.1"]
LOCAL_CPU_WHEEL = ["2.14.0", "2.13.0+cpu", "2.13.0", "2.12.1"]
CUDA_INDEX = ["2.13.0+cu128", "2.13.0+cpu", "2.12.1+cu128"]


class FakePip:
    """Stands in for subprocess.run: answers the probes, records every pip install."""

    def __init__(self, versions=None, installed=None, json_flag=True, torch_build="2.13.0+cpu "):
        self.versions, self.installed, self.json_flag = versions, installed, json_flag
        self.torch_build, self.calls = torch_build, []

    def __call__(self, cmd, *args, **kwargs):
        cmd = [str(c) for c in cmd]
        self.calls.append(cmd)
        out, code = "", 0
        if "importlib.metadata" in " ".join(cmd):
            out, code = (self.installed or "") + "\n", 0 if self.installed else 1
        elif cmd[-3:-1] == ["index", "versions"] or cmd[-4:-2] == ["index", "versions"]:
            if self.versions is None:
                code = 1  # no network
            elif "--json" in cmd:
                out = json.dumps({"name": "torch", "versions": self.versions})
                code = 0 if self.json_flag else 2  # an older pip has no --json
            else:
                out = "torch (x)\nAvailable versions: " + ", ".join(self.versions) + "\n"
        elif "import torch" in " ".join(cmd):
            out = self.torch_build
        return subprocess.CompletedProcess(cmd, code, stdout=out, stderr="")

    def installs(self):
        return [c[c.index("install") + 1 :] for c in self.calls if "install" in c]


def test_pinned_torch_is_read_from_the_student_requirements():
    assert tasks.pinned_torch(tasks.LAB_REQUIREMENTS) == "torch==2.13.0"
    assert tasks.pinned_torch(tasks.BOOK_REQUIREMENTS) is None  # the site builder: no torch


def test_a_linux_laptop_on_pypi_gets_the_cpu_build_from_pytorchs_index(monkeypatch, capsys):
    pip = FakePip(versions=PYPI)
    monkeypatch.setattr(tasks.subprocess, "run", pip)
    tasks.install_torch(tasks.LAB_REQUIREMENTS, environ={}, platform="linux")
    assert pip.installs() == [
        ["--progress-bar", "on", "torch==2.13.0", "--index-url", tasks.TORCH_CPU_INDEX]
    ]
    assert tasks.TORCH_CPU_INDEX == "https://download.pytorch.org/whl/cpu"  # PyTorch's page
    said = capsys.readouterr().out
    assert "would bring torch 2.13.0, a CUDA build" in said and "installing the CPU build" in said
    probe = [c for c in pip.calls if "index" in c][0]
    assert "--dry-run" not in probe and "download" not in probe, "never fetch the 0.5 GB wheel"


@pytest.mark.parametrize(
    "versions, platform, index, said",
    [
        (LOCAL_CPU_WHEEL, "linux", None, "torch 2.13.0+cpu, a CPU build"),  # this machine
        (CUDA_INDEX, "linux", tasks.TORCH_CPU_INDEX, "torch 2.13.0+cu128, a CUDA build"),
        (PYPI, "win32", None, "torch 2.13.0, a CPU build"),  # PyPI's Windows wheel is CPU
        (CUDA_INDEX, "win32", tasks.TORCH_CPU_INDEX, "2.13.0+cu128, a CUDA build"),
        (None, "linux", None, "could not ask pip"),  # offline: plain install, says so
        (["2.12.1"], "linux", None, "could not ask pip"),  # the pin is not offered
    ],
)
def test_the_index_is_switched_only_when_pip_would_pick_a_cuda_build(
    versions, platform, index, said, monkeypatch
):
    monkeypatch.setattr(tasks.subprocess, "run", FakePip(versions=versions))
    got, why = tasks.torch_plan("torch==2.13.0", platform)
    assert got == index and said in why, why


def test_an_older_pip_without_json_is_read_from_its_text(monkeypatch):
    monkeypatch.setattr(tasks.subprocess, "run", FakePip(versions=PYPI, json_flag=False))
    assert tasks.index_torch_versions() == PYPI
    assert tasks.torch_plan("torch==2.13.0", "linux")[0] == tasks.TORCH_CPU_INDEX


def test_macos_an_installed_torch_and_the_users_choice_skip_the_probe(monkeypatch):
    pip = FakePip(versions=PYPI)
    monkeypatch.setattr(tasks.subprocess, "run", pip)
    assert tasks.torch_plan("torch==2.13.0", "darwin")[0] is None
    assert tasks.torch_plan("torch==2.13.0", "linux", "index")[0] is None
    assert tasks.torch_plan("torch==2.13.0", "darwin", "cpu")[0] == tasks.TORCH_CPU_INDEX
    assert not [c for c in pip.calls if "index" in c and "versions" in c]
    pip.installed = "2.13.0"  # a CUDA torch the user installed on purpose is kept
    assert tasks.torch_plan("torch==2.13.0", "linux") == (None, "torch 2.13.0 is installed already")
    with pytest.raises(SystemExit, match="PGRL_TORCH must be 'cpu', 'index' or unset"):
        tasks.torch_plan("torch==2.13.0", "linux", "gpu")


def test_a_mocked_linux_setup_installs_the_cpu_torch_first_and_says_so(
    tmp_path, monkeypatch, capsys
):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()  # the venv exists: no `python -m venv`
    monkeypatch.setattr(tasks, "VENV", venv)
    monkeypatch.setattr(tasks, "PY", venv / "bin" / "python")
    monkeypatch.setattr(tasks.sys, "platform", "linux")
    monkeypatch.delenv("PGRL_TORCH", raising=False)
    pip = FakePip(versions=PYPI)
    monkeypatch.setattr(tasks.subprocess, "run", pip)
    tasks.setup(tasks.LAB_REQUIREMENTS, about="the student packages")
    installs = pip.installs()
    assert installs[0][-3:] == ["torch==2.13.0", "--index-url", tasks.TORCH_CPU_INDEX]
    assert installs[1][-6:] == [
        "-r", "requirements.txt", "-r", "requirements-scale.txt",
        "-r", "requirements-real-model.txt",
    ]  # fmt: skip
    assert installs[2][-2:] == ["-e", "."]
    said = capsys.readouterr().out
    assert "Setup done (torch 2.13.0+cpu, the CPU build)." in said
    pip.calls.clear()
    tasks.setup(tasks.LAB_REQUIREMENTS, about="the student packages")
    assert pip.calls == [], "a second run skips the installs"


def test_the_package_brings_numpy_and_never_a_newer_torch_than_the_pin():
    listed = re.search(r"(?m)^dependencies = \[(.*)\]$", (ROOT / "pyproject.toml").read_text())
    dependencies = re.findall(r'"([^"]+)"', listed[1])
    deps = {re.split(r"[<>=!~ ]", d, maxsplit=1)[0].lower(): d for d in dependencies}
    assert {"torch", "numpy", "einops", "tqdm"} <= set(deps)
    assert deps["torch"].endswith(f"<={tasks.pinned_torch(['requirements.txt']).split('==')[1]}")
    pins = dict(
        line.split("==") for line in (ROOT / "requirements.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )  # fmt: skip
    for name, dep in deps.items():  # the pinned versions satisfy every lower bound
        low = re.search(r">=([\d.]+)", dep)
        pinned = tuple(int(x) for x in pins[name].split("."))
        assert low and tuple(int(x) for x in low[1].split(".")) <= pinned, dep


def test_the_student_setup_brings_the_trl_extra():
    assert tasks.LAB_REQUIREMENTS == [
        "requirements.txt", "requirements-scale.txt", "requirements-real-model.txt"
    ]  # fmt: skip
    readme = (ROOT / "README.md").read_text()
    assert "requirements-scale.txt" in readme and "09, 12, 14 and 16" in readme
    assert "requirements-real-model.txt" in readme


def test_lab_and_test_convert_the_real_model_after_their_setup(monkeypatch):
    """Notebook 16 loads models/SmolLM2-135M-Instruct: the first command and the test command
    make it (``ensure_real_model``) right after installing gguf."""
    calls = []
    monkeypatch.setattr(tasks, "setup", lambda files, **kw: calls.append(("setup", list(files))))
    monkeypatch.setattr(tasks, "run", lambda *cmd, **kw: calls.append(("run", list(map(str, cmd)))))
    monkeypatch.setattr(tasks, "run_stages", lambda stages: calls.append(("stages", len(stages))))
    tasks.test()
    assert calls[0] == ("setup", tasks.TEST_REQUIREMENTS)
    assert calls[1][0] == "run" and calls[1][1][-2:] == ["pgrl_helpers.hf.real_lm", "convert"]
    assert "requirements-real-model.txt" in tasks.TEST_REQUIREMENTS


# --------------------------------------------------------------------------------------
# The command line: help, a typo, timings' arguments, the lab's first notebook
# --------------------------------------------------------------------------------------


def tasks_cli(*args):
    cmd = [sys.executable, str(ROOT / "tasks.py"), *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_help_lists_every_command_on_one_line_and_exits_0():
    for flag in ("--help", "-h", "help"):
        done = tasks_cli(flag)
        assert done.returncode == 0 and done.stderr == "", flag
    listed = done.stdout.split("commands (python3 tasks.py COMMAND --help says more):\n")[1]
    names = [line.split()[0] for line in listed.split("\n\n")[0].splitlines()]
    assert names == list(tasks.COMMANDS)
    assert all(len(line) <= 80 for line in listed.splitlines()[: len(names)])
    lab = tasks_cli("lab", "--help")  # a command's help: before any setup, exit 0
    assert lab.returncode == 0 and "--reset" in lab.stdout and "go to JupyterLab" in lab.stdout


def test_a_bad_command_or_argument_is_one_line_on_stderr_with_exit_2():
    typo = tasks_cli("labb")
    assert typo.returncode == 2 and typo.stdout == ""
    assert typo.stderr.startswith("python3 tasks.py: unknown command 'labb' (did you mean 'lab'?)")
    assert "commands: setup, lab, test," in typo.stderr
    for args, message in [
        ((), "python3 tasks.py: no command given"),
        (("bogus",), "python3 tasks.py: unknown command 'bogus'; commands:"),
        (("--quick",), "python3 tasks.py: no command given before --quick"),
        (("bench", "--quik"), "python3 tasks.py bench: unrecognized arguments: --quik"),
        (("cpu-kernels", "avx3"), "argument capability: invalid choice: 'avx3'"),
        (("setup", "extra"), "python3 tasks.py setup: unrecognized arguments: extra"),
    ]:
        done = tasks_cli(*args)
        assert done.returncode == 2, args
        assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "Traceback" not in done.stderr


def test_each_command_gets_its_options_and_the_rest_in_order(monkeypatch):
    """main() calls the command's function with its parsed options; the commands that pass
    arguments on get the rest unchanged, in order."""
    calls = []
    for name in tasks.COMMANDS:
        monkeypatch.setitem(tasks.COMMANDS, name, lambda name=name, **kw: calls.append((name, kw)))
    cases = [
        (["lab"], ("lab", {"reset": False, "extra": []})),
        (["lab", "--port=9", "--reset", "--no-browser"],
         ("lab", {"reset": True, "extra": ["--port=9", "--no-browser"]})),
        (["test", "-k", "kl", "-x"], ("test", {"extra": ["-k", "kl", "-x"]})),
        (["bench"], ("bench", {"quick": False})),
        (["bench", "--quick"], ("bench", {"quick": True})),
        (["cpu-kernels"], ("cpu-kernels", {"capability": "default"})),
        (["cpu-kernels", "avx2"], ("cpu-kernels", {"capability": "avx2"})),
        (["book", "--working-tree", "-v"], ("book", {"working_tree": True, "extra": ["-v"]})),
        (["timings", "--help"], ("timings", {"extra": ["--help"]})),  # the script's own help
        (["real-model", "--out", "d", "--force"],
         ("real-model", {"extra": ["--out", "d", "--force"]})),
        (["grade", "a.ipynb", "--student", "x"],
         ("grade", {"extra": ["a.ipynb", "--student", "x"]})),
        (["setup"], ("setup", {})),
    ]  # fmt: skip
    for argv, expected in cases:
        calls.clear()
        assert tasks.main(["tasks.py", *argv]) == 0
        assert calls == [expected], argv
    assert set(tasks.PASSES_ARGUMENTS_TO) < set(tasks.COMMANDS)


def test_a_failing_command_returns_its_exit_status(monkeypatch):
    def fails(**kw):
        raise subprocess.CalledProcessError(3, ["x"])

    monkeypatch.setitem(tasks.COMMANDS, "bench", fails)
    assert tasks.main(["tasks.py", "bench"]) == 3


def test_timings_arguments_fail_in_one_line_before_any_setup(monkeypatch):
    done = tasks_cli("timings", "--out")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        "python3 tasks.py timings: argument --out: expected one argument (see --help)"
    )
    missing = tasks_cli("timings", "99_nothing.ipynb")
    assert missing.returncode == 2 and "no notebook" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    helped = tasks_cli("timings", "--help")
    assert helped.returncode == 0 and "--out PATH" in helped.stdout
    assert "--cell-timeout S" in helped.stdout
    monkeypatch.setattr(tasks, "setup", lambda *a, **k: pytest.fail("setup before the check"))
    for bad in (["--out"], ["--cell-timeout", "0"], ["--cell-timeout", "x"], ["7.ipynb"]):
        with pytest.raises(SystemExit) as stopped:
            tasks.main(["tasks.py", "timings", *bad])
        assert stopped.value.code == 2, bad
    args = notebook_timings.parse_args(["07_grpo_training.ipynb", "--out", "t.json"])
    assert args.notebooks == ["07_grpo_training.ipynb"] and args.out == Path("t.json").resolve()
    assert args.cell_timeout == notebook_timings.CELL_TIMEOUT_SECONDS


def test_timings_runs_the_script_after_the_setup(monkeypatch):
    calls = []
    monkeypatch.setattr(tasks, "setup", lambda files, **kw: calls.append(("setup", files)))
    monkeypatch.setattr(tasks, "run", lambda *cmd, **kw: calls.append(("run", cmd)))
    assert tasks.main(["tasks.py", "timings", "07_grpo_training.ipynb", "--cell-timeout", "9"]) == 0
    assert calls[0] == ("setup", tasks.LAB_REQUIREMENTS)
    assert calls[-1] == (
        "run", (tasks.PY, tasks.NOTEBOOK_TIMINGS, "07_grpo_training.ipynb", "--cell-timeout", "9")
    )  # fmt: skip
    # the script and tasks.py agree on the file and on the folders linked beside the copies
    assert notebook_timings.TIMINGS_JSON == tasks.TIMINGS_JSON
    assert notebook_timings.SHARED_FOLDERS == tasks.SHARED_FOLDERS


def test_timings_runs_where_there_is_no_resource_module_or_load_average(monkeypatch):
    assert notebook_timings._children_cpu_seconds() >= 0
    assert len(notebook_timings._load_average()) == 3
    monkeypatch.setitem(sys.modules, "resource", None)  # Windows: import resource fails
    monkeypatch.delattr(os, "getloadavg")  # Windows has none
    assert notebook_timings._children_cpu_seconds() is None
    assert notebook_timings._load_average() is None


def test_the_lab_opens_notebook_00_where_the_served_folder_has_it(tmp_path):
    ws = tmp_path / "ws"
    tasks.make_workspace(ws)
    url = "--LabApp.default_url=/lab/tree/notebooks/00_start_here.ipynb"
    assert url in tasks.lab_command(root_dir=ws)
    assert (ws / tasks.FIRST_NOTEBOOK).exists()
    assert url in tasks.lab_command("--ServerApp.root_dir=.")  # the repository has it too
    assert url not in tasks.lab_command(f"--ServerApp.root_dir={tmp_path}")  # no notebooks/
    mine = "--LabApp.default_url=/lab/tree/notebooks/07_grpo_training.ipynb"
    cmd = tasks.lab_command(mine, root_dir=ws)
    assert url not in cmd and cmd[-1] == mine, "the user's choice wins"


def test_a_reset_says_where_the_old_copies_went(tmp_path):
    ws = tmp_path / "ws"
    first = tasks.prepare_workspace(ws)
    assert f"{len(NOTEBOOKS) + len(ASSIGNMENTS)} files copied" in first
    assert "Start with notebooks/00_start_here.ipynb" in first
    (ws / "assignments" / ASSIGNMENTS[0]).write_text("my answers")
    again = tasks.prepare_workspace(ws)
    assert "0 files copied" in again and "left as they are" in again
    reset = tasks.prepare_workspace(ws, reset=True)
    backup = next((ws / ".backup").iterdir())
    assert f"your previous copies were moved to {backup}" in reset
    assert "kept" not in reset
    assert (backup / "assignments" / ASSIGNMENTS[0]).read_text() == "my answers"


def test_quick_benchmarks_use_the_cores_between_two_and_four():
    assert [tasks.quick_bench_workers(n) for n in (None, 1, 2, 3, 16)][1:] == [2, 2, 3, 4]
    assert 2 <= tasks.quick_bench_workers() <= 4


def test_unit_tests_hand_out_whole_modules_the_slowest_first():
    """Every SLOW_TEST_FILES entry exists (a renamed file would silently lose its place), the
    command keeps whole modules per worker and still collects all of tests/ after them."""
    missing = [name for name in tasks.SLOW_TEST_FILES if not (ROOT / name).is_file()]
    assert missing == [], f"SLOW_TEST_FILES names files that do not exist: {missing}"
    cmd = [str(c) for c in tasks.unit_test_command("-k", "kl")]
    slow = list(tasks.SLOW_TEST_FILES)
    files = [c for c in cmd[3:] if c.endswith(".py")]
    every = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("test_*.py"))
    assert files[: len(slow)] == slow and sorted(files) == every  # each test file once
    assert cmd[cmd.index("--dist") + 1] == "loadscope" and cmd[-2:] == ["-k", "kl"]


def test_notebooks_longest_first_reads_the_stored_timings(tmp_path):
    names = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    known = {name: float(i) for i, name in enumerate(names[1:])}  # names[0] has no timing
    timings = tmp_path / "t.json"
    timings.write_text(json.dumps({"notebooks": [
        {"notebook": n, "cpu_seconds": s, "wall_seconds": s} for n, s in known.items()
    ]}))  # fmt: skip
    order = tasks.notebooks_longest_first(timings)
    assert order[0] == f"notebooks/{names[0]}", "a notebook without a timing counts as slowest"
    assert order[1:] == [f"notebooks/{n}" for n in sorted(known, key=known.get, reverse=True)]
    # no timings file: every notebook still runs
    assert sorted(tasks.notebooks_longest_first(tmp_path / "none.json")) == [
        f"notebooks/{n}" for n in names
    ]
