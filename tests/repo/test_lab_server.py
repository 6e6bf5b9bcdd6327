"""The README's first command serves the learner's workspace; JupyterLab answers with the token
only; the student's lab keeps nbgrader's panels and JupyterLab's news popup out."""

import html
import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("tasks", ROOT / "tasks.py")
tasks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tasks)  # puts the repository root on sys.path: tools/ imports

from tools import workspace  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, b""


@pytest.fixture
def lab_server(tmp_path):
    if not (Path(sys.prefix) / "bin" / "jupyter").exists() and not tasks.BIN.exists():
        pytest.skip("jupyter is not installed; run `python3 tasks.py setup`")
    port, token = free_port(), "pgrl-test-token"
    env = workspace.lab_environment(os.environ)  # as `tasks.py lab` runs it
    for var in ("JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR"):
        env[var] = str(tmp_path / var.lower())
    served = tmp_path / "workspace"
    workspace.make_workspace(served)
    extra = ("--no-browser", f"--port={port}", f"--IdentityProvider.token={token}")
    cmd = workspace.lab_command(*extra, root_dir=served)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"jupyter lab exited: {proc.stderr.read().decode()[-2000:]}")
            try:
                status, _ = get(f"{base}/api/status?token={token}")
                if status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            pytest.fail("jupyter lab did not answer within 60 s")
        yield base, token
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_lab_serves_the_workspace_with_token_auth(lab_server):
    base, token = lab_server
    assert get(f"{base}/api/status")[0] == 403, "the API must refuse requests without the token"
    status, body = get(f"{base}/api/contents?token={token}")
    assert status == 200
    names = {item["name"] for item in json.loads(body)["content"]}
    assert {"notebooks", "assignments"} <= names
    status, body = get(f"{base}/api/contents/notebooks?token={token}")
    assert "00_start_here.ipynb" in {item["name"] for item in json.loads(body)["content"]}
    assert get(f"{base}/lab?token={token}")[0] == 200


def test_widget_front_end_is_installed():
    # without it every widget shows up as plain text such as VBox(children=...)
    jupyter = str(tasks.BIN / "jupyter") if tasks.BIN.exists() else "jupyter"
    out = subprocess.run(
        [jupyter, "labextension", "list"], capture_output=True, text=True, check=True
    )
    assert "@jupyter-widgets/jupyterlab-manager" in out.stdout + out.stderr


def page_config(base: str, token: str) -> dict:
    """The JSON JupyterLab's page carries for its front end (which extensions load, the news)."""
    status, body = get(f"{base}/lab?token={token}")
    assert status == 200
    found = re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>',
                      body.decode(), re.S)  # fmt: skip
    return json.loads(html.unescape(found[1]))


def test_the_student_lab_keeps_nbgrader_and_the_news_popup_out(lab_server):
    """Installing nbgrader (``tasks.py assignments``, or ``test``) enables its JupyterLab
    extension (menu, Validate button, Create Assignment sidebar) and its server extensions in
    .venv; the student's lab (``tasks.py lab``) must show neither, nor the news popup."""
    base, token = lab_server
    config = page_config(base, token)
    assert workspace.NBGRADER_LAB_EXTENSION in config["disabledExtensions"]
    assert config["news"] == {"disabled": True}, "JupyterLab's news popup is off"
    assert "@jupyter-widgets/jupyterlab-manager" not in config["disabledExtensions"]
    loaded = {e["name"] for e in config["federated_extensions"]}
    assert "@jupyter-widgets/jupyterlab-manager" in loaded, "the widgets stay on"
    if workspace.NBGRADER_LAB_EXTENSION in loaded:  # nbgrader is installed in this .venv
        for page in ("formgrader", "formgraders", "assignments", "courses"):  # its servers
            assert get(f"{base}/{page}?token={token}")[0] == 404, page


def test_the_student_lab_config_disables_what_nbgrader_enables():
    """``tools/student_lab`` turns off every server extension nbgrader's install enables (read
    from nbgrader's own config file in .venv, so a new one in an update is caught)."""
    theirs = sorted(Path(sys.prefix, "etc", "jupyter").glob("jupyter_server_config.d/nbgrader*"))
    if not theirs:
        pytest.skip("nbgrader is not installed in this environment")
    enabled = json.loads(theirs[0].read_text())["ServerApp"]["jpserver_extensions"]
    ours = json.loads((workspace.STUDENT_LAB_CONFIG / "jupyter_server_config.json").read_text())
    off = ours["ServerApp"]["jpserver_extensions"]
    assert {name for name, on in enabled.items() if on} == set(workspace.NBGRADER_SERVER_EXTENSIONS)
    assert off == dict.fromkeys(workspace.NBGRADER_SERVER_EXTENSIONS, False)
    labconfig = workspace.STUDENT_LAB_CONFIG / "labconfig" / "page_config.json"
    assert json.loads(labconfig.read_text()) == {
        "disabledExtensions": {workspace.NBGRADER_LAB_EXTENSION: True}
    }
    env = workspace.lab_environment({"JUPYTER_CONFIG_PATH": "/mine"})
    assert env["JUPYTER_CONFIG_PATH"].split(os.pathsep) == [
        str(workspace.STUDENT_LAB_CONFIG),
        "/mine",
    ]
