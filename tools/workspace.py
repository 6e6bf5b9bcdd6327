"""The learner's workspace and the JupyterLab command that serves it (``tasks.py lab``).

``workspace/`` (git-ignored) holds the learner's own copies of the notebooks and the student
assignments, side by side; the committed originals are never touched. The student's lab runs
with ``student_lab/`` first on ``JUPYTER_CONFIG_PATH`` (``lab_environment``): nbgrader's
JupyterLab panels and server extensions, which the instructor's setup installs into the same
.venv, stay off, and JupyterLab's news popup stays off. The standard library only.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

from . import BIN, ROOT

#: The learner's working copy (git-ignored): notebooks/ and assignments/ side by side
#: (``PGRL_WORKSPACE`` moves it, e.g. for tests).
WORKSPACE = Path(os.environ.get("PGRL_WORKSPACE") or ROOT / "workspace").resolve()
#: What the workspace holds: its folder -> the committed files copied into it.
WORKSPACE_SOURCES = {
    "notebooks": ("notebooks", "[0-9][0-9]_*.ipynb"),
    "assignments": ("assignments/student", "*.ipynb"),
}
#: Repository folders the notebooks read by relative path (``../benchmarks/results/*.json``,
#: ``../scale``): linked into the workspace and the timing copies, so those paths resolve.
SHARED_FOLDERS = ("benchmarks", "scale")
#: JupyterLab options that choose the folder it serves (a user's choice replaces ours).
ROOT_DIR_OPTIONS = ("--ServerApp.root_dir", "--notebook-dir", "--ServerApp.notebook_dir")
#: The notebook the lab opens on (relative to the served folder: the workspace, or the
#: repository with ``--ServerApp.root_dir=.``); a user's ``default_url`` replaces it.
FIRST_NOTEBOOK = "notebooks/00_start_here.ipynb"
DEFAULT_URL_OPTIONS = ("--LabApp.default_url", "--ServerApp.default_url")


def lab_command(
    *extra: str, root_dir: Path = WORKSPACE, jupyter: Path = BIN / "jupyter"
) -> list[str]:
    """JupyterLab on ``root_dir``, bound to 127.0.0.1, token auth on (never disabled).

    ``extra`` arguments go to JupyterLab unchanged. One that picks the served folder
    (``--ServerApp.root_dir=...``, ``--notebook-dir=...``) replaces ``root_dir``, so the two
    never clash. The lab opens on ``FIRST_NOTEBOOK`` (the URL it prints and the browser
    tab it opens) where the served folder has it. ``answer_yes`` skips JupyterLab's "Shut
    down? (y/[n])" prompt when the command is run by hand; ``lab()`` itself stops the server
    on Ctrl+C. ``news_url=None``: no "get notified about official Jupyter news?" popup over
    the notebooks. Run it with ``lab_environment()``: nbgrader's panels stay off.
    """
    cmd = [str(jupyter), "lab", "--ip=127.0.0.1", "--ServerApp.answer_yes=True"]
    cmd.append("--LabApp.news_url=None")
    chosen = [arg.split("=", 1) for arg in extra if arg.split("=")[0] in ROOT_DIR_OPTIONS]
    if chosen:
        served = Path(chosen[-1][1]) if len(chosen[-1]) == 2 else None
        served = served if served is None or served.is_absolute() else ROOT / served
    else:
        served = root_dir
        cmd.append(f"--ServerApp.root_dir={root_dir}")
    own_url = any(arg.split("=")[0] in DEFAULT_URL_OPTIONS for arg in extra)
    if served is not None and (served / FIRST_NOTEBOOK).exists() and not own_url:
        cmd.append(f"--LabApp.default_url=/lab/tree/{FIRST_NOTEBOOK}")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # JupyterLab refuses root otherwise; token auth stays on
    return cmd + list(extra)


def make_workspace(workspace: Path = WORKSPACE, reset: bool = False) -> list[Path]:
    """The learner's copy: committed notebooks and student assignments, side by side.

    Files already in the workspace are the learner's work and are never overwritten; only
    missing ones are copied (so a notebook added by ``git pull`` appears). With ``reset``,
    the copies are refreshed from the committed versions and the old ones moved to
    ``workspace/.backup/<time>/`` first. Returns the files copied.
    """
    copied = []
    backup = workspace / ".backup" / time.strftime("%Y%m%d-%H%M%S")
    for folder, (source, pattern) in WORKSPACE_SOURCES.items():
        target = workspace / folder
        target.mkdir(parents=True, exist_ok=True)
        for original in sorted((ROOT / source).glob(pattern)):
            copy = target / original.name
            if copy.exists() and reset:
                (backup / folder).mkdir(parents=True, exist_ok=True)
                shutil.move(str(copy), backup / folder / original.name)
            if not copy.exists():
                shutil.copyfile(original, copy)
                copied.append(copy)
    link_shared_folders(workspace)
    readme = workspace / "README.md"
    if not readme.exists():
        readme.write_text(
            "# Your workspace\n\n"
            f"Start with `{FIRST_NOTEBOOK}` (the map of the series).\n"
            "Your own copies of the series (`notebooks/`) and of the student assignments\n"
            "(`assignments/`). Edit and save freely: this folder is git-ignored, and the\n"
            "committed originals are never touched. `python3 tasks.py lab --reset` refreshes\n"
            "the copies from the committed versions (your old files go to `.backup/`).\n"
            "`benchmarks/` and `scale/` here are links to the repository's folders, which\n"
            "the notebooks read (benchmark results); there is no need to edit them.\n"
        )
    return copied


def prepare_workspace(workspace: Path = WORKSPACE, reset: bool = False) -> str:
    """``make_workspace``, then one line saying what it did (and where a reset's backup went)."""
    backups = workspace / ".backup"
    before = set(backups.iterdir()) if backups.is_dir() else set()
    copied = make_workspace(workspace, reset=reset)
    moved = sorted(set(backups.iterdir()) - before) if backups.is_dir() else []
    if reset:
        kept = f"your previous copies were moved to {moved[-1]}" if moved else "nothing to back up"
        what = f"{len(copied)} files refreshed from the committed versions; {kept}"
    else:
        what = (
            f"{len(copied)} files copied from the committed versions; files already there "
            "(your work) were left as they are"
        )
    return f"Your workspace: {workspace} ({what}). Start with {FIRST_NOTEBOOK}."


def link_shared_folders(folder: Path) -> None:
    """Symlink ``SHARED_FOLDERS`` of the repository into ``folder`` (the notebooks' parent)."""
    for name in SHARED_FOLDERS:
        link, target = folder / name, ROOT / name
        if target.is_dir() and not link.exists() and not link.is_symlink():
            try:
                link.symlink_to(target, target_is_directory=True)
            except OSError as err:  # e.g. Windows without the symlink privilege
                print(f"note: could not link {link} -> {target} ({err})", file=sys.stderr)


#: The student lab's Jupyter configuration, read before every other (``lab_environment``):
#: ``labconfig/page_config.json`` disables nbgrader's JupyterLab extension (its menu, the
#: Validate button, the Create Assignment sidebar), ``jupyter_server_config.json`` its server
#: extensions (formgrader, assignment list, course list, validate). Installing nbgrader (the
#: instructor's ``tasks.py assignments``, or ``tasks.py test``) enables both in .venv.
STUDENT_LAB_CONFIG = Path(__file__).resolve().parent / "student_lab"
#: What the student lab keeps out: nbgrader's JupyterLab extension and server extensions.
NBGRADER_LAB_EXTENSION = "@jupyter/nbgrader"
NBGRADER_SERVER_EXTENSIONS = tuple(
    f"nbgrader.server_extensions.{name}"
    for name in ("formgrader", "validate_assignment", "assignment_list", "course_list")
)


def lab_environment(environ=os.environ) -> dict[str, str]:
    """``environ`` with ``STUDENT_LAB_CONFIG`` first on ``JUPYTER_CONFIG_PATH`` (the highest
    priority of Jupyter's config folders; a path the user set stays, after it)."""
    paths = [str(STUDENT_LAB_CONFIG)] + [
        p for p in environ.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep) if p
    ]
    return {**environ, "JUPYTER_CONFIG_PATH": os.pathsep.join(paths)}
