"""The package itself (pgrl_helpers/__init__.py): its version, read from pyproject.toml."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pgrl_helpers

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
