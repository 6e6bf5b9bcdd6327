"""Every seed comparison in the notebooks and benchmarks says whether its runs are paired.

Runs that share seeds (same initial weights, prompts and sampling stream per seed) must be
compared with the paired sign-flip test (``seed_stats.paired_permutation_p_value``, through
``compare_seeds(..., paired=True)``); the unpaired permutation test is for independent groups.
Whether two arms share their seeds is a fact about how the runs were made, which the code that
compares them cannot infer from the numbers. So this test makes the design explicit at every
call site and fails on any comparison that does not state it:

* every call of ``compare_seeds`` (by name, alias or ``seed_stats.compare_seeds``) passes
  ``paired=True`` or ``paired=False`` as a literal;
* a call with ``paired=False``, and every direct call of the unpaired ``permutation_p_value``,
  carries a comment ``# unpaired: <why the two arms are independent>`` on one of its lines or
  the line before it.

What it catches: a comparison written without thinking about the design (the default of
``compare_seeds`` is unpaired, so a forgotten ``paired=`` is an unpaired test on what are, in
this course, almost always seed-paired runs), and a direct unpaired p-value with no stated
reason. What it cannot catch: a wrong statement (``paired=False  # unpaired: ...`` on runs that
do share seeds); that is for the reader of the reason. ``test_planted_*`` below show that the
scanner flags each kind of call it is meant to flag.

Scanned: the code cells of ``notebooks/*.ipynb`` and ``assignments/instructor/*.ipynb``, and
``benchmarks/*.py`` (the scripts that write the results the notebooks read and RESULTS.md shows).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPARE, UNPAIRED = "compare_seeds", "permutation_p_value"
REASON = "# unpaired:"


def _sources(path: Path) -> list[tuple[str, str]]:
    """(where, source) per code unit: one per notebook code cell, one per Python file."""
    if path.suffix == ".py":
        return [(str(path.relative_to(ROOT)), path.read_text())]
    cells = json.loads(path.read_text())["cells"]
    return [
        (f"{path.relative_to(ROOT)} cell {i}", "".join(c["source"]))
        for i, c in enumerate(cells)
        if c["cell_type"] == "code"
    ]


def _parseable(source: str) -> str:
    # notebook cells may hold IPython magics / shell escapes: blank them, keep line numbers
    return "\n".join(
        "" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()
    )


def problems(source: str, where: str = "<source>") -> list[str]:
    """The comparisons in ``source`` that do not state their design (see the module docstring)."""
    tree = ast.parse(_parseable(source))
    lines = source.splitlines()
    aliases = {COMPARE: COMPARE, UNPAIRED: UNPAIRED}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("seed_stats"):
            for name in node.names:
                if name.name in (COMPARE, UNPAIRED):
                    aliases[name.asname or name.name] = name.name

    def called(node: ast.Call) -> str | None:
        func = node.func
        if isinstance(func, ast.Name):
            return aliases.get(func.id)
        if isinstance(func, ast.Attribute) and func.attr in (COMPARE, UNPAIRED):
            return func.attr
        return None

    def has_reason(node: ast.Call) -> bool:
        span = lines[max(0, node.lineno - 2) : node.end_lineno]
        return any(REASON in line for line in span)

    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        kind = called(node)
        at = f"{where} line {node.lineno}"
        if kind == UNPAIRED and not has_reason(node):
            found.append(f"{at}: permutation_p_value (unpaired) without '{REASON} <reason>'")
        elif kind == COMPARE:
            paired = next((k.value for k in node.keywords if k.arg == "paired"), None)
            if paired is None:
                found.append(f"{at}: compare_seeds without paired=True/False")
            elif not (isinstance(paired, ast.Constant) and isinstance(paired.value, bool)):
                found.append(f"{at}: compare_seeds(paired=...) must be a literal True or False")
            elif paired.value is False and not has_reason(node):
                found.append(f"{at}: compare_seeds(paired=False) without '{REASON} <reason>'")
    return found


SCANNED = sorted(
    path
    for pattern in ("notebooks/*.ipynb", "assignments/instructor/*.ipynb", "benchmarks/*.py")
    for path in ROOT.glob(pattern)
    if COMPARE in path.read_text() or UNPAIRED in path.read_text()
)


@pytest.mark.parametrize("path", SCANNED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_seed_comparison_states_its_design(path):
    found = [p for where, source in _sources(path) for p in problems(source, where)]
    assert not found, "\n".join(found)


def test_the_scan_sees_the_comparisons():
    """The scan is not vacuous: the benchmarks and the notebooks that compare seeds are in it."""
    names = {p.name for p in SCANNED}
    assert {"08_real_lm_details.ipynb", "11_modern_objectives.ipynb", "bench_collapse.py"} <= names


# ------------------------------------------------------------------ planted call sites


@pytest.mark.parametrize(
    "source",
    [
        "compare_seeds(a, b)",
        "compare_seeds(a, b, 'x', 'y', True, 0.05)",
        "from pgrl_helpers.seed_stats import compare_seeds as cmp\ncmp(a, b)",
        "seed_stats.compare_seeds(a, b)",
        "compare_seeds(a, b, paired=False)",
        "compare_seeds(a, b, paired=flag)",
        "p = permutation_p_value(a, b)",
        "from pgrl_helpers.seed_stats import permutation_p_value as p\np(a, b)",
        "x = [compare_seeds(r, s) for r, s in zip(runs, other)]",
    ],
)
def test_planted_undeclared_comparison_is_flagged(source):
    assert len(problems(source)) == 1, problems(source)


@pytest.mark.parametrize(
    "source",
    [
        "compare_seeds(a, b, paired=True)",
        "seed_stats.compare_seeds(a, b, 'x', 'y', paired=True)",
        "compare_seeds(a, b, paired=False)  # unpaired: seeds 0-4 against seeds 5-9",
        "# unpaired: a different number of seeds in each arm\ncompare_seeds(a, b, paired=False)",
        "p = permutation_p_value(a, b)  # unpaired: independent groups",
        "paired_permutation_p_value(a, b)",
        "%matplotlib inline\ncompare_seeds(a, b, paired=True)",
    ],
)
def test_declared_comparison_passes(source):
    assert problems(source) == []
