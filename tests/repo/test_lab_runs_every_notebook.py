"""After ``python3 tasks.py lab`` alone, every notebook's imports are installed.

Reads every import of every notebook in ``notebooks/``, maps each top-level module to the
distribution that provides it (in this venv), and checks that the distribution is pinned in
one of ``tasks.LAB_REQUIREMENTS`` or is a (transitive) requirement of one that is. A notebook
that starts importing a package only the test or instructor setup installs fails here.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
import tasks  # noqa: E402


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[(]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def lab_closure(files: list[str]) -> set[str]:
    """Distributions the lab setup installs: the pins of ``files``, their requirements (as
    installed here, extras ignored), and this package."""
    todo = ["pgrl-helpers"]
    for f in files:
        for line in (REPO / f).read_text().splitlines():
            if line.strip() and not line.lstrip().startswith(("#", "-")):
                todo.append(_name(line))
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        todo += [_name(r) for r in requires if "extra ==" not in r]
    return seen


def notebook_imports(path: Path) -> set[str]:
    modules = set()
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "\n".join(
            line
            for line in "".join(cell["source"]).splitlines()
            if not line.lstrip().startswith(("%", "!"))
        )
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                modules |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    return modules


def missing(files: list[str]) -> list[str]:
    installed = lab_closure(files)
    providers = md.packages_distributions()
    found = []
    for path in sorted((REPO / "notebooks").glob("*.ipynb")):
        for module in sorted(notebook_imports(path)):
            local = any((REPO / d / f"{module}.py").exists() for d in ("scale", "benchmarks"))
            if module in sys.stdlib_module_names or module == "pgrl_helpers" or local:
                continue  # the standard library, this package, a script of the repository
            dists = {d.lower().replace("_", "-") for d in providers.get(module, [module])}
            if not dists & installed:
                found.append(f"{path.name}: {module} ({', '.join(sorted(dists))})")
    return found


def test_the_lab_setup_installs_every_notebook_import():
    assert not missing(tasks.LAB_REQUIREMENTS)


def test_without_the_trl_extra_notebooks_09_12_14_would_not_run():
    # the check can fail: the student pins alone leave transformers / trl out
    found = missing(["requirements.txt"])
    assert any(f.startswith("09_") and "trl" in f for f in found), found
    assert any(f.startswith("14_") for f in found), found
