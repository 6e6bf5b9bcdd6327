"""Code to lesson back-links (d2l's "Defined in"): the package says where each piece is taught.

Every public module's docstring has one line ``Taught in notebook NN.`` / ``Taught in
notebooks NN, MM.`` naming exactly the series notebooks (``notebooks/NN_*.ipynb``) whose code
cells import it (``from pgrl_helpers.X import ...``, ``from pgrl_helpers import X``,
``import pgrl_helpers.X``), or, when no notebook imports it, a line ``Not imported by a
notebook: <reason>``. Every public function or class a notebook imports by name has the same
``Taught in ...`` line in its own docstring, naming the notebooks that import it; a function
no notebook imports by name has none. A name imported through a second module (or through the
package's lazy ``__init__``) is credited to the module that defines it.

Exempt: the package ``__init__``, private modules (leading underscore) and the ``checks``
subpackage (the assignments' graders). The notebooks and modules are parsed, never executed;
a code cell that does not parse (``%`` magics) is skipped.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pgrl_helpers"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
#: A back-link is a whole docstring line; prose that mentions a notebook is not one.
TAUGHT = re.compile(r"Taught in notebooks? \d\d(, \d\d)*\.")
NOT_IMPORTED = "Not imported by a notebook: "


def public_modules() -> dict[str, str]:
    """Module name -> source, for the package's public top-level modules."""
    return {
        path.stem: path.read_text()
        for path in sorted(PACKAGE.glob("*.py"))
        if not path.stem.startswith("_")
    }


def lazy_homes() -> dict[str, str]:
    """``pgrl_helpers.__init__._HOMES`` (public name -> home module), read from the source."""
    for node in ast.parse((PACKAGE / "__init__.py").read_text()).body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "_HOMES":
            return ast.literal_eval(node.value)
    return {}


def code_cells(notebook: Path) -> list[ast.Module]:
    """The parsed code cells of a notebook; a cell that does not parse is left out."""
    trees = []
    for cell in json.loads(notebook.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        try:
            trees.append(ast.parse("".join(cell["source"])))
        except SyntaxError:  # IPython syntax (% magics, ! shell lines)
            continue
    return trees


def imports_of(
    trees: list[ast.Module], modules: set[str], homes: dict[str, str]
) -> tuple[set[str], set[tuple[str, str]]]:
    """(package modules imported, (module, name) pairs imported by name) in some cells."""
    found_modules: set[str] = set()
    found_names: set[tuple[str, str]] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    parts = alias.name.split(".")
                    if parts[0] == "pgrl_helpers" and len(parts) > 1 and parts[1] in modules:
                        found_modules.add(parts[1])
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                parts = node.module.split(".")
                if parts[0] != "pgrl_helpers":
                    continue
                if len(parts) == 1:  # from pgrl_helpers import X: a module or a lazy name
                    for alias in node.names:
                        if alias.name in modules:
                            found_modules.add(alias.name)
                        elif alias.name in homes:
                            found_modules.add(homes[alias.name])
                            found_names.add((homes[alias.name], alias.name))
                elif parts[1] in modules:
                    found_modules.add(parts[1])
                    found_names.update((parts[1], alias.name) for alias in node.names)
    return found_modules, found_names


def notebook_imports(notebooks=NOTEBOOKS) -> dict[str, tuple[set[str], set[tuple[str, str]]]]:
    """Notebook number ('00' .. '15') -> what its code cells import from the package."""
    modules, homes = set(public_modules()), lazy_homes()
    return {path.name[:2]: imports_of(code_cells(path), modules, homes) for path in notebooks}


def definition(module: str, name: str, trees: dict[str, ast.Module], seen=()) -> tuple | None:
    """(home module, def/class node) of ``module.name``, following ``from .home import name``.

    None for a constant (no docstring to carry a line) or a name defined outside the package.
    """
    if module not in trees or (module, name) in seen:
        return None
    for node in trees[module].body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == name:
                return module, node
        elif isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            if any((alias.asname or alias.name) == name for alias in node.names):
                home = node.module.split(".")[0]
                return definition(home, name, trees, seen + ((module, name),))
    return None


def taught_line(numbers: set[str]) -> str:
    """{'05'} -> 'Taught in notebook 05.'; {'06', '05'} -> 'Taught in notebooks 05, 06.'"""
    ordered = sorted(numbers)
    return f"Taught in notebook{'s' if len(ordered) > 1 else ''} {', '.join(ordered)}."


def backlinks(docstring: str | None) -> tuple[list[str], list[str]]:
    """(the ``Taught in ...`` lines, the ``Not imported by a notebook: ...`` lines) of a docstring."""
    lines = [line.strip() for line in (docstring or "").splitlines()]
    return (
        [line for line in lines if TAUGHT.fullmatch(line)],
        [line for line in lines if line.startswith(NOT_IMPORTED.strip())],
    )


def backlink_problems(
    imports: dict[str, tuple[set[str], set[tuple[str, str]]]], sources: dict[str, str]
) -> list[str]:
    """One line per missing, stale or malformed back-link, as ``path:line what: fix``."""
    trees = {name: ast.parse(source) for name, source in sources.items()}
    module_users: dict[str, set[str]] = {}
    name_users: dict[tuple[str, str], set[str]] = {}
    for number, (modules, names) in imports.items():
        for module in modules:
            module_users.setdefault(module, set()).add(number)
        for module, name in names:
            found = definition(module, name, trees)
            if found is not None:
                name_users.setdefault((found[0], found[1].name), set()).add(number)

    problems = []
    for module, tree in trees.items():
        path = f"pgrl_helpers/{module}.py"
        doc = ast.get_docstring(tree)
        stated, not_imported = backlinks(doc)
        users = module_users.get(module)
        if users:
            want = taught_line(users)
            if stated != [want] or not_imported:
                had = f" (has {stated + not_imported})" if stated or not_imported else ""
                problems.append(f"{path}:1 module docstring: write {want!r}{had}")
        elif stated or len(not_imported) != 1 or not not_imported[0][len(NOT_IMPORTED) :].strip():
            had = f" (has {stated + not_imported})" if stated or not_imported else ""
            problems.append(
                f"{path}:1 module docstring: no notebook imports it; write "
                f"'{NOT_IMPORTED}<reason>'{had}"
            )
        for node in tree.body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if node.name.startswith("_"):
                continue
            users = name_users.get((module, node.name))
            want = [taught_line(users)] if users else []
            stated = backlinks(ast.get_docstring(node))[0]
            if stated != want:
                where = f"{path}:{node.lineno} {node.name}"
                if want:
                    had = f" (has {stated})" if stated else ""
                    problems.append(f"{where}: write {want[0]!r}{had}")
                else:
                    problems.append(f"{where}: no notebook imports it by name; drop {stated}")
    return problems


# ---- the package itself ------------------------------------------------------------------------


def test_every_module_and_imported_name_links_to_its_notebooks():
    problems = backlink_problems(notebook_imports(), public_modules())
    assert not problems, "back-links missing or stale:\n" + "\n".join(problems)


def test_the_notebook_scan_sees_the_series():
    imports = notebook_imports()
    assert sorted(imports) == [f"{n:02d}" for n in range(len(NOTEBOOKS))] and len(NOTEBOOKS) >= 16
    modules, names = imports["00"]
    assert {"sort_task", "advantages", "kl"} <= modules  # from pgrl_helpers import kl, ...
    assert ("advantages", "compute_deltas") in names
    assert ("training", "run_policy_gradient") in imports["07"][1]


# ---- the checker on planted faults --------------------------------------------------------------

FAKE = '''"""A fake module.

Taught in notebooks 03, 05.
"""


def taught():
    """Imported by notebook 05.

    Taught in notebook 05.
    """


def helper():
    """No notebook imports this one."""


VALUE = 3
'''

FAKE_IMPORTS = {
    "03": ({"fake"}, {("fake", "VALUE")}),
    "05": ({"fake"}, {("fake", "taught")}),
    "07": (set(), set()),
}


def test_a_correct_fake_module_passes():
    assert backlink_problems(FAKE_IMPORTS, {"fake": FAKE}) == []


def test_a_module_docstring_naming_the_wrong_notebook_fails():
    wrong = FAKE.replace("Taught in notebooks 03, 05.", "Taught in notebooks 03, 07.")
    problems = backlink_problems(FAKE_IMPORTS, {"fake": wrong})
    assert problems == [
        "pgrl_helpers/fake.py:1 module docstring: write 'Taught in notebooks 03, 05.' "
        "(has ['Taught in notebooks 03, 07.'])"
    ]


def test_missing_and_stale_function_lines_fail_with_their_line_numbers():
    missing = FAKE.replace("    Taught in notebook 05.\n", "")
    assert backlink_problems(FAKE_IMPORTS, {"fake": missing}) == [
        "pgrl_helpers/fake.py:7 taught: write 'Taught in notebook 05.'"
    ]
    stale = FAKE.replace('"""No notebook imports this one."""', '"""Taught in notebook 03."""')
    assert backlink_problems(FAKE_IMPORTS, {"fake": stale}) == [
        "pgrl_helpers/fake.py:14 helper: no notebook imports it by name; "
        "drop ['Taught in notebook 03.']"
    ]
    more = {**FAKE_IMPORTS, "07": ({"fake"}, {("fake", "taught")})}
    assert backlink_problems(more, {"fake": FAKE}) == [
        "pgrl_helpers/fake.py:1 module docstring: write 'Taught in notebooks 03, 05, 07.' "
        "(has ['Taught in notebooks 03, 05.'])",
        "pgrl_helpers/fake.py:7 taught: write 'Taught in notebooks 05, 07.' "
        "(has ['Taught in notebook 05.'])",
    ]


def test_a_module_no_notebook_imports_needs_a_reason():
    unused = {"03": (set(), set()), "05": (set(), set())}
    plain = FAKE.replace("Taught in notebooks 03, 05.", "Not imported by a notebook: a fake.")
    plain = plain.replace("    Taught in notebook 05.\n", "")
    assert backlink_problems(unused, {"fake": plain}) == []
    no_reason = plain.replace("Not imported by a notebook: a fake.", "Not imported by a notebook: ")
    assert backlink_problems(unused, {"fake": no_reason})[0].startswith(
        "pgrl_helpers/fake.py:1 module docstring: no notebook imports it"
    )
    assert len(backlink_problems(unused, {"fake": FAKE})) == 2  # module + function now stale


def test_a_reexported_name_is_credited_to_its_home():
    home = (
        '"""Home.\n\nTaught in notebook 04.\n"""\n\n\ndef f():\n    """Taught in notebook 04."""\n'
    )
    door = '"""Door.\n\nTaught in notebook 04.\n"""\n\nfrom .home import f\n'
    imports = {"04": ({"door"}, {("door", "f")})}
    assert backlink_problems(imports, {"home": home, "door": door}) == [
        "pgrl_helpers/home.py:1 module docstring: no notebook imports it; write "
        "'Not imported by a notebook: <reason>' (has ['Taught in notebook 04.'])"
    ]


def test_cells_with_magics_are_skipped_and_every_import_form_counts(tmp_path):
    cells = [
        "%matplotlib inline\nfrom pgrl_helpers.kl import kl_k3",  # does not parse: skipped
        "import pgrl_helpers.gae\nfrom pgrl_helpers import masking, run_policy_gradient",
        "def f():\n    from pgrl_helpers.sampling import sample_responses as draw\n",
        "from pgrl_helpers.checks import check_kl_k3  # the graders are exempt",
    ]
    notebook = tmp_path / "03_fake.ipynb"
    notebook.write_text(
        json.dumps({"cells": [{"cell_type": "code", "source": [c]} for c in cells]})
    )
    modules, names = notebook_imports([notebook])["03"]
    assert modules == {"gae", "masking", "training", "sampling"}
    assert names == {("training", "run_policy_gradient"), ("sampling", "sample_responses")}
