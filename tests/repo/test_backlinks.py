"""Code to lesson back-links (d2l's "Defined in"): the package says where each piece is taught.

Every public module's docstring has one back-link line naming the series notebooks
(``notebooks/NN_*.ipynb``) whose code cells import it (``from pgrl_helpers.X import ...``,
``from pgrl_helpers import X``, ``import pgrl_helpers.X``; ``X`` may be ``hf.trl_config``), the
notebook that teaches it first, as d2l's "Defined in" names the one section that defines a
function:

* ``Taught in notebook NN.`` when one notebook imports it;
* ``Taught in notebook NN; also used in notebooks MM, KK.`` when several do: NN teaches it,
  the others (in series order) use it.

The teaching notebook is a choice the docstring states; this test checks that it is one of the
importers, that it is not notebook 00 (which previews the whole series) unless 00 alone imports
it, that a module and the names it defines agree (a module is taught where one of its imported
names is), and that the "also used in" list is exactly the other importers. When no notebook
imports a module its docstring says ``Not imported by a notebook: <reason>``. Every public
function or class a notebook imports by name has the same kind of line in its own docstring;
a function no notebook imports by name has none. A name imported through a second module (or
through the package's lazy ``__init__``) is credited to the module that defines it.

Exempt: the package ``__init__``s, private modules (leading underscore) and the ``checks``
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
#: A back-link is a whole docstring line starting with "Taught in notebook".
TAUGHT = re.compile(r"Taught in notebook (\d\d)(?:; also used in notebooks? (\d\d(?:, \d\d)*))?\.")
NOT_IMPORTED = "Not imported by a notebook: "
#: The overview notebook: it previews the series, so it teaches a piece only if it alone uses it.
OVERVIEW = "00"
#: Subpackages without back-links: the assignments' graders.
EXEMPT = ("checks",)


def public_modules() -> dict[str, str]:
    """Dotted module name ('kl', 'hf.trl_config') -> source, for every public module."""
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[0] in EXEMPT or any(part.startswith("_") for part in parts):
            continue
        modules[".".join(parts)] = path.read_text()
    return modules


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
                    if parts[0] == "pgrl_helpers" and ".".join(parts[1:]) in modules:
                        found_modules.add(".".join(parts[1:]))
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                parts = node.module.split(".")
                if parts[0] != "pgrl_helpers":
                    continue
                prefix = ".".join(parts[1:])  # '' (the package), 'hf' (a subpackage), 'kl'
                for alias in node.names:
                    inner = f"{prefix}.{alias.name}" if prefix else alias.name
                    if inner in modules:  # from pgrl_helpers[.hf] import X: a module
                        found_modules.add(inner)
                    elif prefix in modules:  # from pgrl_helpers.X import name
                        found_modules.add(prefix)
                        found_names.add((prefix, alias.name))
                    elif not prefix and alias.name in homes:  # a lazy name of __init__
                        found_modules.add(homes[alias.name])
                        found_names.add((homes[alias.name], alias.name))
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
        elif isinstance(node, ast.ImportFrom) and node.level >= 1 and node.module:
            if any((alias.asname or alias.name) == name for alias in node.names):
                package = module.split(".")[: -node.level]  # 'hf.x', level 2 -> []
                home = ".".join([*package, *node.module.split(".")])
                return definition(home, name, trees, seen + ((module, name),))
    return None


def taught_line(numbers: set[str], first: str | None = None) -> str:
    """The back-link for the notebooks ``numbers`` with ``first`` the one that teaches it
    (default: the earliest, passing over the overview): {'05'} -> 'Taught in notebook 05.';
    {'00', '04', '06'} -> 'Taught in notebook 04; also used in notebooks 00, 06.'"""
    if first not in numbers:
        first = min(numbers - {OVERVIEW} or numbers)
    rest = sorted(numbers - {first})
    also = f"; also used in notebook{'s' if len(rest) > 1 else ''} {', '.join(rest)}"
    return f"Taught in notebook {first}{also if rest else ''}."


def teaching_notebook(lines: list[str]) -> str | None:
    """The notebook a well-formed back-link names first (None without exactly one line)."""
    matches = [TAUGHT.fullmatch(line) for line in lines]
    return matches[0].group(1) if len(matches) == 1 and matches[0] else None


def backlinks(docstring: str | None) -> tuple[list[str], list[str]]:
    """(the ``Taught in notebook ...`` lines, well-formed or not, the ``Not imported by a
    notebook: ...`` lines) of a docstring."""
    lines = [line.strip() for line in (docstring or "").splitlines()]
    return (
        [line for line in lines if line.startswith("Taught in notebook")],
        [line for line in lines if line.startswith(NOT_IMPORTED.strip())],
    )


def wanted(stated: list[str], users: set[str]) -> str:
    """The back-link a docstring with ``stated`` lines should have for importers ``users``:
    the stated teaching notebook kept while it is an importer and not the overview (unless the
    overview alone imports it)."""
    first = teaching_notebook(stated)
    if first == OVERVIEW and users != {OVERVIEW}:
        first = None
    return taught_line(users, first)


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
        path = f"pgrl_helpers/{module.replace('.', '/')}.py"
        stated, not_imported = backlinks(ast.get_docstring(tree))
        users = module_users.get(module)
        module_right = False  # its line is right: then check it against its names' lines
        if users:
            want = wanted(stated, users)
            module_right = stated == [want] and not not_imported
            if not module_right:
                had = f" (has {stated + not_imported})" if stated or not_imported else ""
                problems.append(f"{path}:1 module docstring: write {want!r}{had}")
        elif stated or len(not_imported) != 1 or not not_imported[0][len(NOT_IMPORTED) :].strip():
            had = f" (has {stated + not_imported})" if stated or not_imported else ""
            problems.append(
                f"{path}:1 module docstring: no notebook imports it; write "
                f"'{NOT_IMPORTED}<reason>'{had}"
            )
        found, taught_names = name_problems(path, module, tree, name_users)
        problems += found
        first = teaching_notebook(stated)
        if module_right and taught_names and first not in taught_names:
            names = ", ".join(sorted(taught_names))
            problems.append(
                f"{path}:1 module docstring: taught in notebook {first}, but none of its "
                f"imported names is (they are taught in {names})"
            )
    return problems


def name_problems(
    path: str, module: str, tree: ast.Module, name_users: dict
) -> tuple[list[str], set[str]]:
    """(the back-link problems of a module's public functions and classes, the notebooks
    that teach those a notebook imports by name)."""
    problems, taught = [], set()
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if node.name.startswith("_"):
            continue
        users = name_users.get((module, node.name))
        stated = backlinks(ast.get_docstring(node))[0]
        want = [wanted(stated, users)] if users else []
        taught.update(teaching_notebook(want) for _ in want)
        if stated != want:
            where = f"{path}:{node.lineno} {node.name}"
            if want:
                had = f" (has {stated})" if stated else ""
                problems.append(f"{where}: write {want[0]!r}{had}")
            else:
                problems.append(f"{where}: no notebook imports it by name; drop {stated}")
    return problems, taught


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

Taught in notebook 05; also used in notebook 03.
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


def test_the_line_names_the_teaching_notebook_first_then_the_others_in_order():
    assert taught_line({"05"}) == "Taught in notebook 05."
    assert (
        taught_line({"07", "04", "12"}) == "Taught in notebook 04; also used in notebooks 07, 12."
    )
    assert taught_line({"07", "04", "12"}, "07") == (
        "Taught in notebook 07; also used in notebooks 04, 12."
    )
    assert taught_line({"00", "06"}) == "Taught in notebook 06; also used in notebook 00."
    assert taught_line({"00"}) == "Taught in notebook 00."
    assert teaching_notebook(["Taught in notebook 07; also used in notebooks 04, 12."]) == "07"
    assert teaching_notebook(["Taught in notebooks 04, 07."]) is None  # the old form


def test_a_module_docstring_naming_the_wrong_notebooks_fails():
    wrong = FAKE.replace("also used in notebook 03.", "also used in notebook 07.")
    problems = backlink_problems(FAKE_IMPORTS, {"fake": wrong})
    assert problems == [
        "pgrl_helpers/fake.py:1 module docstring: write 'Taught in notebook 05; also used in "
        "notebook 03.' (has ['Taught in notebook 05; also used in notebook 07.'])"
    ]


def test_a_line_in_the_old_form_without_a_teaching_notebook_fails():
    old = FAKE.replace(
        "Taught in notebook 05; also used in notebook 03.", "Taught in notebooks 03, 05."
    )
    assert backlink_problems(FAKE_IMPORTS, {"fake": old}) == [
        "pgrl_helpers/fake.py:1 module docstring: write 'Taught in notebook 03; also used in "
        "notebook 05.' (has ['Taught in notebooks 03, 05.'])"
    ]


def test_a_teaching_notebook_that_does_not_import_it_fails():
    absent = FAKE.replace("Taught in notebook 05; also", "Taught in notebook 07; also")
    assert backlink_problems(FAKE_IMPORTS, {"fake": absent})[0] == (
        "pgrl_helpers/fake.py:1 module docstring: write 'Taught in notebook 03; also used in "
        "notebook 05.' (has ['Taught in notebook 07; also used in notebook 03.'])"
    )


def test_the_overview_is_not_the_teaching_notebook_of_what_others_import():
    imports = {**FAKE_IMPORTS, "00": ({"fake"}, {("fake", "taught")})}
    line = "Taught in notebook 00; also used in notebooks 03, 05."
    overview = FAKE.replace("Taught in notebook 05; also used in notebook 03.", line)
    overview = overview.replace(
        "    Taught in notebook 05.\n", "    Taught in notebook 00; also used in notebook 05.\n"
    )
    assert backlink_problems(imports, {"fake": overview}) == [
        f"pgrl_helpers/fake.py:1 module docstring: write 'Taught in notebook 03; also used in "
        f"notebooks 00, 05.' (has [{line!r}])",
        "pgrl_helpers/fake.py:7 taught: write 'Taught in notebook 05; also used in notebook 00.' "
        "(has ['Taught in notebook 00; also used in notebook 05.'])",
    ]


def test_a_module_taught_where_none_of_its_names_is_fails():
    elsewhere = FAKE.replace(
        "Taught in notebook 05; also used in notebook 03.",
        "Taught in notebook 03; also used in notebook 05.",
    )
    assert backlink_problems(FAKE_IMPORTS, {"fake": elsewhere}) == [
        "pgrl_helpers/fake.py:1 module docstring: taught in notebook 03, but none of its "
        "imported names is (they are taught in 05)"
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
        "pgrl_helpers/fake.py:1 module docstring: write 'Taught in notebook 05; also used in "
        "notebooks 03, 07.' (has ['Taught in notebook 05; also used in notebook 03.'])",
        "pgrl_helpers/fake.py:7 taught: write 'Taught in notebook 05; also used in notebook 07.' "
        "(has ['Taught in notebook 05.'])",
    ]


def test_a_module_no_notebook_imports_needs_a_reason():
    unused = {"03": (set(), set()), "05": (set(), set())}
    plain = FAKE.replace(
        "Taught in notebook 05; also used in notebook 03.", "Not imported by a notebook: a fake."
    )
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


def test_a_subpackage_module_is_checked_and_its_relative_imports_followed():
    home = '"""Home.\n\nNot imported by a notebook: a fake.\n"""\n\n\ndef f():\n    """Taught in notebook 09."""\n'
    door = '"""Door.\n\nTaught in notebook 09.\n"""\n\nfrom ..home import f\n'
    imports = {"09": ({"hf.door"}, {("hf.door", "f")})}
    assert backlink_problems(imports, {"home": home, "hf.door": door}) == []
    stale = door.replace("Taught in notebook 09.", "Taught in notebook 11.")
    assert backlink_problems(imports, {"home": home, "hf.door": stale}) == [
        "pgrl_helpers/hf/door.py:1 module docstring: write 'Taught in notebook 09.' "
        "(has ['Taught in notebook 11.'])"
    ]
    assert {"hf.trl_config", "ui.dashboard"} <= set(public_modules())
    assert not any(m.startswith("checks") or "._" in m for m in public_modules())


def test_cells_with_magics_are_skipped_and_every_import_form_counts(tmp_path):
    cells = [
        "%matplotlib inline\nfrom pgrl_helpers.kl import kl_k3",  # does not parse: skipped
        "import pgrl_helpers.gae\nfrom pgrl_helpers import masking, run_policy_gradient",
        "def f():\n    from pgrl_helpers.sampling import sample_responses as draw\n",
        "from pgrl_helpers.checks import check_kl_k3  # the graders are exempt",
        "from pgrl_helpers.hf import trl_config\nfrom pgrl_helpers.ui.gae_widget import gae_curves",
    ]
    notebook = tmp_path / "03_fake.ipynb"
    notebook.write_text(
        json.dumps({"cells": [{"cell_type": "code", "source": [c]} for c in cells]})
    )
    modules, names = notebook_imports([notebook])["03"]
    assert modules == {"gae", "masking", "training", "sampling", "hf.trl_config", "ui.gae_widget"}
    assert names == {
        ("training", "run_policy_gradient"),
        ("sampling", "sample_responses"),
        ("ui.gae_widget", "gae_curves"),
    }
