"""Notebook 07 in a real browser: JupyterLab + headless Chromium driven by Python playwright.

Checks what nbval cannot: that the widgets render as live controls in JupyterLab (a missing
front-end extension silently shows text such as ``VBox(children=...)``), that Run All
finishes without a traceback, and that the dashboard trains when clicked.

Safety: the notebook is copied to a temporary folder and served from there, with throwaway
Jupyter config/data/runtime/settings folders and autosave off, so the repository's
notebooks are never rewritten. A screenshot goes to ``artifacts/`` (gitignored).

Needs Debian's ``chromium`` at /usr/bin/chromium and the ``playwright`` Python package
(``requirements-test.txt``); never run ``playwright install``. Without them the test skips,
except under CI (``PGRL_CI=1``), where it fails instead.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from chromium_helpers import CHROMIUM, CHROMIUM_FLAGS, load_sync_playwright
from chromium_helpers import skip_or_fail as shared_skip_or_fail

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = "07_grpo_training.ipynb"
HOW_TO_ENABLE = (
    "install Debian's Chromium and the pinned playwright package: "
    "`apt-get install -y chromium` and `.venv/bin/pip install -r requirements-test.txt` "
    "(do not run `playwright install`)"
)
ARTIFACTS = ROOT / "artifacts"
RUN_ALL_TIMEOUT_S = 300


def skip_or_fail(reason: str) -> None:
    """Skip with a reason that says how to enable the test; under CI (PGRL_CI=1) fail."""
    shared_skip_or_fail(reason, "browser test", HOW_TO_ENABLE)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


def wait_for_server(proc, base: str, token: str, log: Path, what: str, timeout_s: float) -> None:
    """Poll the server's status API until it answers 200; fail with the log if it exits."""
    deadline = time.time() + timeout_s
    while True:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited: {log.read_text()[-2000:]}")
        try:
            if api_status(f"{base}/api/status?token={token}") == 200:
                return
        except OSError:
            pass
        if time.time() > deadline:
            pytest.fail(f"{what} did not answer within {timeout_s:.0f} s")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def sync_playwright():
    return load_sync_playwright("browser test", HOW_TO_ENABLE)


@pytest.fixture(scope="module")
def lab_server(tmp_path_factory):
    """JupyterLab on 127.0.0.1 with a token, serving a temporary copy of notebook 07."""
    tmp = tmp_path_factory.mktemp("lab")
    served = tmp / "notebooks"
    served.mkdir()
    # a copy without outputs: every execution count seen later comes from this run
    notebook = json.loads((ROOT / "notebooks" / NOTEBOOK).read_text())
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    notebook["metadata"].pop("widgets", None)
    (served / NOTEBOOK).write_text(json.dumps(notebook, indent=1))
    settings = tmp / "lab-settings"
    for plugin, values in {
        "docmanager-extension/plugin": {"autosave": False},
        # render every cell (no virtual scrolling), so all outputs are in the page
        "notebook-extension/tracker": {"windowingMode": "none", "autoStartDefaultKernel": True},
        "apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    }.items():
        path = settings / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))

    env = dict(os.environ)
    env.update(
        JUPYTER_CONFIG_DIR=str(tmp / "config"),
        # user data dir only: the venv's share/jupyter (widget extension, kernel) stays on the path
        JUPYTER_DATA_DIR=str(tmp / "data"),
        JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(settings),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"),
        IPYTHONDIR=str(tmp / "ipython"),
        PGRL_QUICK="1",  # the notebook shrinks every training run (see its first code cell)
    )
    port, token = free_port(), "pgrl-browser-test-token"
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={served}",
        f"--FileCheckpoints.checkpoint_dir={tmp / 'checkpoints'}",
        "--LabApp.news_url=None",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    log = (tmp / "jupyter.log").open("wb")
    proc = subprocess.Popen(cmd, env=env, cwd=tmp, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_server(proc, base, token, tmp / "jupyter.log", "jupyter lab", 90)
        assert api_status(f"{base}/api/status") == 403, "the server must require the token"
        yield base, token, served
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_notebook_07_runs_in_jupyterlab_with_live_widgets(sync_playwright, lab_server):
    base, token, served = lab_server
    original = (served / NOTEBOOK).read_bytes()
    repo_copy = (ROOT / "notebooks" / NOTEBOOK).read_bytes()
    ARTIFACTS.mkdir(exist_ok=True)

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS
        )
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        try:
            page.goto(f"{base}/lab/tree/{NOTEBOOK}?token={token}", timeout=90_000)
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
            assert no_cell_has_run(page), "the served copy must start without outputs"
            wait_for_idle_kernel(page)

            # Run menu -> Run All Cells
            page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
            page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
            wait_until_all_cells_ran(page)

            outputs = page.locator(".jp-OutputArea-output").all_inner_texts()
            text = "\n".join(outputs)
            assert "Traceback (most recent call last)" not in text, tail_with(text, "Traceback")
            stderr = page.locator("[data-mime-type='application/vnd.jupyter.stderr']")
            for message in stderr.all_inner_texts():  # warnings may pass, errors may not
                assert "Error" not in message and "Traceback" not in message, message
            # live controls, not their text repr
            assert "VBox(children=" not in text and "TrainingDashboard(children=" not in text
            dashboard = page.locator(".jupyter-widgets.widget-vbox").filter(
                has=page.locator(".widget-button", has_text="Train")
            )
            assert dashboard.count() >= 1, "the dashboard did not render as widgets"
            delta = page.locator(".widget-dropdown", has_text="delta mode").locator("select")
            assert delta.count() == 1 and delta.is_enabled()
            assert page.locator(".widget-inline-hbox.widget-slider").count() >= 5
            assert page.locator(".widget-hprogress, .widget-progress").count() >= 1

            # change the delta mode and train: the plot and the run table must update
            delta.select_option("rewards")
            page.get_by_role("button", name="Train", exact=True).click()
            page.wait_for_function(
                "() => [...document.querySelectorAll('.widget-html')]"
                ".some(e => e.innerText.includes('Run 1 done'))",
                timeout=300_000,  # the default preset's 200 epochs, on shared cores
            )
            plot = page.locator(".jupyter-widgets .jp-OutputArea-output img")
            assert plot.count() >= 1, "the training plot was not drawn in the dashboard"
            table = page.locator(".widget-html pre").all_inner_texts()
            assert any("rewards/clipped/transformer" in t for t in table), table  # the preset
            page.get_by_role("button", name="Train", exact=True).scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "browser_07_dashboard.png"), full_page=False)
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "browser_07_failure.png"), full_page=True)
            raise
        finally:
            browser.close()

    # nothing was saved: neither the served copy nor the repository's notebook changed
    assert (served / NOTEBOOK).read_bytes() == original
    assert (ROOT / "notebooks" / NOTEBOOK).read_bytes() == repo_copy


def wait_until_all_cells_ran(page, timeout_s: float = RUN_ALL_TIMEOUT_S) -> None:
    """Wait until Run All has finished in the notebook on screen: no cell pending '[*]', the
    last code cell shows an execution count and the kernel is idle. Only the visible notebook
    panel counts (another open tab keeps its cells in the page), and only the last cell's count
    is read: JupyterLab renders cells far off screen lazily, so their prompts may lag."""
    script = """() => {
        const panel = [...document.querySelectorAll('.jp-NotebookPanel')]
            .find(el => !el.classList.contains('lm-mod-hidden'));
        if (!panel) return false;
        const prompts = [...panel.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')];
        if (prompts.length === 0) return false;
        if (prompts.some(p => p.innerText.includes('*'))) return false;
        const status = document.querySelector('.jp-StatusBar-Widget');
        const idle = status !== null && status.innerText.includes('| Idle');
        return idle && /\\[\\d+\\]/.test(prompts[prompts.length - 1].innerText);
    }"""
    page.wait_for_function(script, timeout=timeout_s * 1000, polling=500)


def wait_for_idle_kernel(page, timeout_s: float = 90) -> None:
    """Wait until the status bar shows an idle kernel (accepting a kernel dialog if shown)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        dialog = page.locator(".jp-Dialog", has_text="Select Kernel")
        if dialog.count():
            dialog.get_by_role("button", name="Select").click()
        if "| Idle" in page.locator(".jp-StatusBar-Widget").inner_text():
            return
        time.sleep(0.5)
    raise AssertionError("the notebook's kernel did not start (no idle kernel in the status bar)")


def no_cell_has_run(page) -> bool:
    prompts = page.locator(".jp-CodeCell .jp-InputArea-prompt").all_inner_texts()
    return bool(prompts) and not any(any(ch.isdigit() for ch in p) for p in prompts)


def tail_with(text: str, needle: str) -> str:
    at = text.find(needle)
    return text[max(0, at - 1500) : at + 1500]


# --------------------------------------------------------------------------------------
# The README's student path: python3 tasks.py lab, then an assignment and a notebook
# --------------------------------------------------------------------------------------

ASSIGNMENT = "01_rewards_and_exact_gradient.ipynb"
# a notebook that reads ../benchmarks/results/*.json: the workspace must resolve that path
FIRST_NOTEBOOK = "10_ppo_vs_grpo.ipynb"


def untracked_and_changed() -> set[str]:
    """``git status --porcelain`` entries (other work may already be there)."""
    out = subprocess.run(
        ["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return set(out.stdout.splitlines())


@pytest.fixture(scope="module")
def tasks_lab(tmp_path_factory):
    """``python3 tasks.py lab`` as a student starts it; workspace and Jupyter dirs throwaway."""
    tmp = tmp_path_factory.mktemp("tasks-lab")
    settings = tmp / "lab-settings"
    for plugin, values in {
        "docmanager-extension/plugin": {"autosave": False},
        "notebook-extension/tracker": {"windowingMode": "none"},
        "apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    }.items():
        path = settings / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    env = dict(os.environ)
    env.update(
        PGRL_WORKSPACE=str(tmp / "workspace"),
        JUPYTER_CONFIG_DIR=str(tmp / "config"),
        JUPYTER_DATA_DIR=str(tmp / "data"),
        JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(settings),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"),
        IPYTHONDIR=str(tmp / "ipython"),
    )
    port, token = free_port(), "pgrl-tasks-lab-token"
    cmd = [
        sys.executable,
        str(ROOT / "tasks.py"),
        "lab",
        "--",  # JupyterLab's arguments
        "--no-browser",
        f"--port={port}",
        f"--IdentityProvider.token={token}",
        f"--FileCheckpoints.checkpoint_dir={tmp / 'checkpoints'}",
        "--LabApp.news_url=None",
    ]
    status_before = untracked_and_changed()
    log = (tmp / "lab.log").open("wb")
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_server(proc, base, token, tmp / "lab.log", "tasks.py lab", 120)
        yield base, token, tmp / "workspace", status_before
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def wait_for_own_kernel(page, base: str, token: str, path: str, timeout_s: float = 90) -> None:
    """Wait until the server has an idle kernel for the notebook at ``path`` (accepting a kernel
    dialog if shown). The status bar is not enough with a second notebook open: it can still
    show the first notebook's idle kernel while this one's is starting, and a Run All sent then
    runs nothing."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        dialog = page.locator(".jp-Dialog", has_text="Select Kernel")
        if dialog.count():
            dialog.get_by_role("button", name="Select").click()
        with urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=5) as reply:
            sessions = json.loads(reply.read())
        states = [
            (x.get("kernel") or {}).get("execution_state") for x in sessions if x["path"] == path
        ]
        if "idle" in states:
            return
        time.sleep(0.5)
    raise AssertionError(f"no idle kernel for {path} within {timeout_s:.0f} s")


def click_run_all(page) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()


def run_all_in_workspace(page, base: str, token: str, path: str) -> str:
    """Open ``path`` (relative to the workspace) in JupyterLab, Run All, return the outputs."""
    page.goto(f"{base}/lab/tree/{path}?token={token}", timeout=90_000)
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
    wait_for_own_kernel(page, base, token, path)
    wait_for_idle_kernel(page)
    # a committed notebook arrives with its stored execution counts: clear them first, so a
    # count on the last cell can only come from this run
    page.locator(".lm-MenuBar-itemLabel", has_text="Edit").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Clear Outputs of All Cells").first.click()
    click_run_all(page)
    first_cell_started = """() => {
        const panel = [...document.querySelectorAll('.jp-NotebookPanel')]
            .find(el => !el.classList.contains('lm-mod-hidden'));
        const prompt = panel && panel.querySelector('.jp-CodeCell .jp-InputArea-prompt');
        return prompt !== null && /\\[(\\*|\\d+)\\]/.test(prompt.innerText);
    }"""
    try:  # the first cell shows [*] or [1]: the run started (else send Run All once more)
        page.wait_for_function(first_cell_started, timeout=30_000, polling=250)
    except Exception:
        click_run_all(page)
    wait_until_all_cells_ran(page)
    return "\n".join(page.locator(".jp-OutputArea-output").all_inner_texts())


def test_tasks_lab_runs_an_assignment_and_a_notebook_and_leaves_the_repository_alone(
    sync_playwright, tasks_lab
):
    base, token, workspace, status_before = tasks_lab
    originals = {
        p: p.read_bytes()
        for p in (
            ROOT / "assignments" / "student" / ASSIGNMENT,
            ROOT / "notebooks" / FIRST_NOTEBOOK,
        )
    }
    # the student's side by side folders, made on first run
    assert (workspace / "assignments" / ASSIGNMENT).exists()
    assert (workspace / "notebooks" / FIRST_NOTEBOOK).exists()
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS
        )
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        try:
            text = run_all_in_workspace(page, base, token, f"assignments/{ASSIGNMENT}")
            assert "Traceback (most recent call last)" not in text, tail_with(text, "Traceback")
            assert "[TODO]" in text, "the checkers report the unsolved exercises"
            page.keyboard.press("Control+s")  # a student saves: the workspace copy, only
            text = run_all_in_workspace(page, base, token, f"notebooks/{FIRST_NOTEBOOK}")
            assert "Traceback (most recent call last)" not in text, tail_with(text, "Traceback")
            assert "PPO / GRPO" in text, "the outputs were cleared, so this one is from this run"
            page.screenshot(path=str(ARTIFACTS / "browser_tasks_lab.png"), full_page=False)
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "browser_tasks_lab_failure.png"), full_page=True)
            raise
        finally:
            browser.close()
    for path, content in originals.items():
        assert path.read_bytes() == content, f"{path} was rewritten"
    new_entries = untracked_and_changed() - status_before
    # what a Jupyter session could leave: notebooks, checkpoints, the workspace (other work in
    # this tree may add unrelated files meanwhile)
    ours = [e for e in new_entries if ".ipynb" in e or "workspace" in e or "checkpoint" in e]
    assert not ours, f"git status gained {ours}"
