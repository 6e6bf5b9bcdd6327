"""Which torch build a setup installs, and from which index (``tasks.py`` runs it).

Every setup installs torch's CPU build: where the configured package index would bring the
CUDA build (Linux from PyPI: several GB), torch comes from PyTorch's CPU index instead
(``PGRL_TORCH=index`` keeps the configured index's build, ``PGRL_TORCH=cpu`` always takes the
CPU index). pip is asked which versions the index offers (``pip index versions``), never made
to download a wheel. The standard library only: it runs before .venv has anything in it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from . import PY, ROOT

#: PyTorch's CPU-only wheel index, as its install page (pytorch.org/get-started/locally)
#: gives it for pip on Linux and Windows: ``pip install torch --index-url <this>``.
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def pinned_torch(requirement_files: list[str]) -> str | None:
    """The ``torch==X`` line of the first requirement file that pins torch, or None."""
    for f in requirement_files:
        for line in (ROOT / f).read_text().splitlines():
            line = line.split("#")[0].replace(" ", "")
            if line.lower().startswith("torch=="):
                return line
    return None


def installed_torch(python: Path = PY) -> str | None:
    """torch's version in the environment of ``python`` ('2.13.0+cpu'), or None."""
    code = "import importlib.metadata as m; print(m.version('torch'))"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None


def index_torch_versions(python: Path = PY) -> list[str] | None:
    """The torch versions the configured index (and find-links) offer for this platform.

    ``pip index versions torch``: reads the index page only, never a wheel (a dry-run
    install would download the 0.5 GB CUDA wheel to read its metadata where the index does
    not serve it separately). None when pip cannot tell (no network, a pip older than 21.2).
    """
    cmd = [str(python), "-m", "pip", "index", "versions", "torch"]
    done = subprocess.run([*cmd, "--json"], capture_output=True, text=True)
    if done.returncode == 0:
        try:
            return [str(v) for v in json.loads(done.stdout)["versions"]]
        except (ValueError, KeyError, TypeError):
            return None
    done = subprocess.run(cmd, capture_output=True, text=True)  # a pip without --json
    for line in done.stdout.splitlines() if done.returncode == 0 else []:
        if line.startswith("Available versions:"):
            return [v.strip() for v in line.partition(":")[2].split(",") if v.strip()]
    return None


def _local_label_key(version: str) -> tuple:
    """Sort key of a version's local label as PEP 440 orders them ('' < 'cpu' < 'cu128')."""
    label = version.partition("+")[2]
    return tuple((1, int(p), "") if p.isdigit() else (0, 0, p) for p in label.split(".") if p)


def torch_build_of(version: str, platform: str = sys.platform) -> str:
    """'cpu' or 'cuda' (any GPU build): the build of a torch wheel of this version.

    The local label names it ('+cpu', '+cu128', '+rocm6.4'). Without one the wheel comes
    from PyPI, whose Linux wheels are CUDA builds (they require nvidia-* / cuda-toolkit,
    several GB) and whose Windows and macOS wheels are CPU builds.
    """
    label = version.partition("+")[2].lower()
    if label:
        return "cpu" if label == "cpu" else "cuda"
    return "cuda" if platform.startswith("linux") else "cpu"


def torch_plan(
    requirement: str | None,
    platform: str = sys.platform,
    choice: str | None = None,
    installed=installed_torch,
    versions=index_torch_versions,
) -> tuple[str | None, str]:
    """(index to install torch from, or None for the configured index; why, in one line).

    ``choice``: the ``PGRL_TORCH`` environment variable ('cpu', 'index' or unset). Unset:
    keep an installed torch of the pinned version; on macOS the default wheel is the CPU
    build; elsewhere ask pip which versions the configured index offers (``versions``): pip
    takes the highest that matches the pin ('2.13.0+cpu' above '2.13.0'), and where that is
    a CUDA build, torch comes from PyTorch's CPU index instead.
    """
    if requirement is None:
        return None, ""
    choice = (choice or "").strip().lower()
    if choice not in ("", "cpu", "index"):
        raise SystemExit(f"PGRL_TORCH must be 'cpu', 'index' or unset, got {choice!r}")
    if choice == "index":
        return None, "PGRL_TORCH=index: torch from the configured package index, as it comes"
    if choice == "cpu":
        return TORCH_CPU_INDEX, f"PGRL_TORCH=cpu: torch's CPU build from {TORCH_CPU_INDEX}"
    pinned = requirement.partition("==")[2]
    have = installed()
    if have is not None and have.partition("+")[0] == pinned:
        return None, f"torch {have} is installed already"
    if platform == "darwin":
        return None, "macOS: the configured index's torch is the CPU build (no CUDA on a Mac)"
    offered = versions()
    matching = [v for v in offered or [] if v.partition("+")[0] == pinned]
    if not matching:
        return None, (
            f"could not ask pip which torch {pinned} builds the configured index has; installing "
            "from it (if that is the CUDA build, stop and rerun with PGRL_TORCH=cpu)"
        )
    chosen = max(matching, key=_local_label_key)  # what pip would pick
    if torch_build_of(chosen, platform) == "cuda":
        return TORCH_CPU_INDEX, (
            f"the configured index would bring torch {chosen}, a CUDA build (NVIDIA libraries, "
            f"several GB); installing the CPU build from {TORCH_CPU_INDEX} instead "
            "(PGRL_TORCH=index keeps the CUDA build)"
        )
    return None, f"the configured index has torch {chosen}, a CPU build"


def install_torch(
    requirement_files: list[str],
    environ=os.environ,
    platform: str = sys.platform,
    python: Path = PY,
) -> None:
    """Install the pinned torch from PyTorch's CPU index into ``python``'s environment when
    ``torch_plan`` says so."""
    requirement = pinned_torch(requirement_files)
    index, why = torch_plan(
        requirement,
        platform,
        environ.get("PGRL_TORCH"),
        installed=lambda: installed_torch(python),
        versions=lambda: index_torch_versions(python),
    )
    if why:
        print(f"torch: {why}.", flush=True)
    if index is None:
        return
    cmd = [str(python), "-m", "pip", "install", "--progress-bar", "on", requirement]
    print("+", " ".join(cmd + ["--index-url", index]), flush=True)
    try:
        subprocess.run(cmd + ["--index-url", index], check=True, cwd=ROOT)
    except subprocess.CalledProcessError:
        print(
            f"Could not install {requirement} from {index}. Check the connection, or rerun with "
            "PGRL_TORCH=index to take the configured index's build (CUDA on Linux: several GB).",
            file=sys.stderr,
            flush=True,
        )
        raise


def torch_build(python: Path = PY) -> str | None:
    """'torch 2.13.0+cpu, the CPU build' (or '..., a CUDA 13.0 build') of ``python``'s torch."""
    code = "import torch; print(torch.__version__, torch.version.cuda or torch.version.hip or '')"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    if done.returncode:
        return None
    version, _, gpu = done.stdout.strip().partition(" ")
    return f"torch {version}, " + (f"a GPU build (CUDA/ROCm {gpu})" if gpu else "the CPU build")
