"""The package itself (pgrl_helpers/__init__.py): its version, read from pyproject.toml; its pip
extras, and the message that names one where it is missing."""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import sys
from pathlib import Path

import pytest

import pgrl_helpers
from pgrl_helpers import ui

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT_VERSION = re.search(r'(?m)^version = "(.+)"$', (ROOT / "pyproject.toml").read_text())[1]


def test_the_version_is_pyprojects_and_the_changelog_has_it():
    assert pgrl_helpers.__version__ == PYPROJECT_VERSION, (
        "the installed metadata is stale: reinstall with `pip install -e .` "
        "(python3 tasks.py setup does it when pyproject.toml changes)"
    )
    assert "__version__" in dir(pgrl_helpers)
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"\n## {PYPROJECT_VERSION} " in changelog, "CHANGELOG.md names the current version"


def test_a_source_tree_that_was_never_installed_reads_pyproject(monkeypatch):
    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert pgrl_helpers._version() == PYPROJECT_VERSION


# --------------------------------------------------------------------------------------
# The pip extras: what each optional part needs, and the message when it is missing
# --------------------------------------------------------------------------------------


def extra(name: str) -> dict[str, str]:
    """pyproject.toml's extra ``name``: package -> its requirement."""
    listed = re.search(rf"(?m)^{name} = \[(.*)\]$", (ROOT / "pyproject.toml").read_text())
    assert listed, f"pyproject.toml has no extra {name!r}"
    return {
        re.split(r"[<>=!~ ]", d, maxsplit=1)[0].lower(): d
        for d in re.findall(r'"([^"]+)"', listed[1])
    }


def pins(*files: str) -> dict[str, str]:
    lines = [line for f in files for line in (ROOT / f).read_text().splitlines()]
    return dict(
        line.split("#")[0].strip().lower().split("==")
        for line in lines
        if "==" in line and not line.startswith("#")
    )


def test_the_real_model_has_an_extra_bounded_by_its_pins():
    """``pip install -e '.[real-model]'`` brings what ``python -m pgrl_helpers.hf.real_lm
    convert`` needs (gguf reads the GGUF file, transformers converts it), no newer than the
    versions ``tasks.py real-model`` pins (first use, R4: gguf was in no extra)."""
    wanted, pinned = (
        extra("real-model"),
        pins("requirements-scale.txt", "requirements-real-model.txt"),
    )
    assert set(wanted) == {"gguf", "transformers"}
    for name, requirement in wanted.items():
        assert requirement.endswith(f"<={pinned[name]}"), requirement
    widgets = extra("widgets")
    assert tuple(widgets) == ui.WIDGETS_EXTRA
    for name, requirement in widgets.items():
        assert requirement.endswith(f"<={pins('requirements.txt')[name]}"), requirement


@pytest.mark.parametrize(
    "module, missing",
    [
        ("pgrl_helpers.ui.dashboard", "ipywidgets"),
        ("pgrl_helpers.ui.gae_widget", "ipywidgets"),
        ("pgrl_helpers.ui.clip_widget", "ipywidgets"),
        ("pgrl_helpers.ui.figures", "matplotlib"),
    ],
)
def test_a_missing_widgets_module_names_the_extra(module, missing, monkeypatch):
    for name in list(sys.modules):
        if name.split(".")[0] == missing or name.startswith("pgrl_helpers.ui."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, missing, None)  # as if it were not installed
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'pgrl-helpers\[widgets\]'") as err:
        importlib.import_module(module)
    assert err.value.name.split(".")[0] == missing, err.value.name
    assert f"no module named {err.value.name!r}" in str(err.value)
    other = ModuleNotFoundError("No module named 'somewhere_else'", name="somewhere_else")
    assert ui.missing_extra(other) is other, "a module outside the extra: its own error"
