"""The README's first command serves the learner's workspace; JupyterLab answers with the token only."""

import importlib.util
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

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("tasks", ROOT / "tasks.py")
tasks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tasks)


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
    env = dict(os.environ)
    for var in ("JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR"):
        env[var] = str(tmp_path / var.lower())
    workspace = tmp_path / "workspace"
    tasks.make_workspace(workspace)
    extra = ("--no-browser", f"--port={port}", f"--IdentityProvider.token={token}")
    cmd = tasks.lab_command(*extra, root_dir=workspace)
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
