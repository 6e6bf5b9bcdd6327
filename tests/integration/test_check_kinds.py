"""The four kinds of ``check_*`` in the package, told apart by place and name.

1. **Argument checks**: ``_validate.check_*`` (shared) and a module's own ``check_*`` /
   ``_check_*`` beside the code whose arguments it checks: raise ``ValueError`` /
   ``TypeError`` (or ``NonFiniteError``) on a bad argument; never ``assert``, never print.
2. **Config checks**: ``check_<feature>_fields(config)`` in the feature's module, one argument,
   called by ``TrainConfig.validate`` (``config.py``).
3. **Notebook claims**: ``claims.check_*``: take the implementation under test, compare it with
   an independent computation, raise ``AssertionError`` naming the claim; each is listed in
   ``claims``' docstring.
4. **Exercise graders**: ``checks/<exercise>.check_*``: take the student's function, print
   ``[PASS]`` / ``[TODO]`` / ``[FAIL]``; each takes ``seed`` and ``strict``.

Anything else named ``check_*`` is a fifth kind and fails ``test_every_check_is_one_of_four``.
The package is parsed, never imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "pgrl_helpers"
KINDS = ("argument", "config", "claim", "grader")


def check_functions(package: Path = PACKAGE) -> list[tuple[str, ast.FunctionDef]]:
    """(path relative to the package, def node) of every ``check_*`` / ``_check_*`` function,
    module level or in a class."""
    found = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name.lstrip("_").startswith("check_"):
                found.append((path.relative_to(package).as_posix(), node))
    return found


def _calls(node: ast.AST) -> set[str]:
    names = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            func = sub.func
            names.add(func.id if isinstance(func, ast.Name) else getattr(func, "attr", ""))
    return names


def kind(path: str, node: ast.FunctionDef, sources: dict[str, str]) -> str | None:
    """Which of the four kinds ``node`` (in ``path``) is, or None: a fifth kind."""
    params = [a.arg for a in node.args.args + node.args.kwonlyargs]
    if path.startswith("checks/"):
        public = not node.name.startswith("_")
        return "grader" if not public or {"seed", "strict"} <= set(params) else None
    if path == "claims.py":
        listed = f"``{node.name}``" in (ast.get_docstring(ast.parse(sources[path])) or "")
        return "claim" if node.name.startswith("_") or listed else None
    if node.name.startswith("check_") and node.name.endswith("_fields"):
        called = f"{node.name}(self)" in sources["config.py"]
        return "config" if params == ["config"] and called else None
    asserts = any(isinstance(sub, ast.Assert) for sub in ast.walk(node))
    raises = any(isinstance(sub, ast.Raise) for sub in ast.walk(node))
    delegates = any(c.lstrip("_").startswith("check_") for c in _calls(node))
    if not asserts and "print" not in _calls(node) and (raises or delegates):
        return "argument"
    return None


def sources_of(package: Path = PACKAGE) -> dict[str, str]:
    return {p.relative_to(package).as_posix(): p.read_text() for p in package.rglob("*.py")}


def test_every_check_is_one_of_four():
    sources = sources_of()
    found = check_functions()
    fifth = [
        f"{path}:{node.lineno} {node.name}" for path, node in found if not kind(path, node, sources)
    ]
    assert not fifth, "a check_* that is none of the four kinds (tests/README.md):\n" + "\n".join(
        fifth
    )
    kinds = {kind(path, node, sources) for path, node in found}
    assert kinds == set(KINDS) and len(found) > 40


def test_each_kind_lives_where_the_readme_says():
    sources = sources_of()
    by_kind: dict[str, set[str]] = {k: set() for k in KINDS}
    for path, node in check_functions():
        by_kind[kind(path, node, sources)].add(path)
    assert by_kind["claim"] == {"claims.py"}
    assert all(p.startswith("checks/") for p in by_kind["grader"])
    assert "_validate.py" in by_kind["argument"]
    assert not by_kind["argument"] & {"claims.py"} and not any(
        p.startswith("checks/") for p in by_kind["argument"]
    )
    assert {"kl.py", "losses.py", "value.py", "rollout.py"} <= by_kind["config"]


# ---- planted fifth kinds ----------------------------------------------------------------------


def planted(tmp_path: Path, files: dict[str, str]) -> list[str]:
    """The fifth-kind checks of a fake package made of ``files``."""
    base = {"config.py": "def validate(self):\n    check_kl_fields(self)\n", "claims.py": ""}
    for name, text in {**base, **files}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    sources = sources_of(tmp_path)
    return [node.name for path, node in check_functions(tmp_path) if not kind(path, node, sources)]


GOOD = {
    "kl.py": "def check_kl_fields(config):\n    if config.kl_coef < 0:\n        raise ValueError\n",
    "gae.py": "def _check_mask(mask):\n    if mask.ndim != 3:\n        raise ValueError('mask')\n",
    "masking.py": "def check_mask(mask):\n    _check_mask(mask)\n",
    "checks/kl.py": "def check_kl_k3(fn, seed=0, strict=False):\n    print('[PASS]')\n",
    "claims.py": '"""Claims.\n\n* ``check_claim``: one.\n"""\n\n\ndef check_claim(fn):\n'
    "    assert fn() == 1\n",
}


@pytest.mark.parametrize(
    "files, fifth",
    [
        ({}, []),
        ({"gae.py": "def check_sorted(x):\n    return x == sorted(x)\n"}, ["check_sorted"]),
        ({"kl.py": "def check_kl(fn):\n    assert fn() >= 0\n    raise ValueError\n"}, ["check_kl"]),
        ({"gae.py": "def check_gae(fn):\n    print('[PASS]')\n    raise ValueError\n"}, ["check_gae"]),
        ({"value.py": "def check_value_fields(config):\n    raise ValueError\n"}, ["check_value_fields"]),
        ({"kl.py": "def check_kl_fields(config, x):\n    raise ValueError\n"}, ["check_kl_fields"]),
        ({"checks/gae.py": "def check_gae(fn):\n    print('[PASS]')\n"}, ["check_gae"]),
        ({"claims.py": "def check_claim(fn):\n    assert fn() == 1\n"}, ["check_claim"]),
    ],
    ids=["good", "predicate", "claim-outside-claims", "grader-outside-checks", "not-validated",
         "two-arguments", "grader-without-seed", "claim-not-listed"],
)  # fmt: skip
def test_a_fifth_kind_is_caught(tmp_path, files, fifth):
    assert planted(tmp_path, {**GOOD, **files}) == fifth
