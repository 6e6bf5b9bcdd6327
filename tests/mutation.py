"""Mutation testing of the numerical core with mutmut 3 (``python3 tasks.py mutation``).

mutmut changes the code a little (flips an operator, swaps min and max, changes a
constant, an axis or a string) one change at a time and reruns the unit tests that call
the changed function; a change that no test notices is a *surviving* mutant. This script

1. copies the package and ONLY the fast unit tests of the targets into a fresh scratch
   directory ``.mutation/`` (gitignored; mutmut writes its mutated copy to
   ``.mutation/mutants/``), so nothing of a previous run, no notebook and no browser test
   takes part;
2. runs ``mutmut run`` there (niced, ``--workers`` processes, torch on one thread);
3. prints the score per module and every surviving mutant as a one-line diff.

Mutants that cannot change any result (equivalent mutants) are listed with the reason in
``tests/mutation_equivalent.toml``, matched by module, function and the changed line's
text (not by mutmut's mutant number, which shifts when a function is edited). They are
reported as "equivalent" and left out of the score; an entry that matches a mutant the
tests KILL is reported as wrong (it was not equivalent), one that matches nothing as stale.

A surviving mutant that only wraps a string literal of a ``raise`` statement in "XX"
(mutmut's string mutation) is reported as "message" and also left out: error-message tests
pin the argument name and the bound (which the upper/lower-case string mutants change, and
tests kill), not the whole sentence, so decorating the sentence is not a defect.

    score = killed / (mutants - equivalent - message)      per module; the goal is >= 98 %

What is mutated, against which tests, follows from the test layout (tests/README.md): a
module ``m`` of ``pgrl_helpers`` is a target iff ``tests/test_m.py`` exists and has a line
``# --- mutants ---``; its tests are ``tests/test_m.py`` plus the files (relative to
``tests/``) that ``test_m.py`` names in a module-level tuple ``MUTATION_ALSO``.

Usage: ``python tests/mutation.py [--workers N] [--report-only] [module ...]``
(``module`` e.g. ``kl`` restricts the run to that module and its tests).
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
SCRATCH = ROOT / ".mutation"
EQUIVALENT_FILE = ROOT / "tests" / "mutation_equivalent.toml"

TESTS = ROOT / "tests"

#: The line that opens a test file's mutation-kill tests and makes its module a target.
MUTANTS_HEADER = "# --- mutants ---"


def _mutation_also(path: Path, source: str) -> tuple[str, ...]:
    """The module-level ``MUTATION_ALSO`` tuple of a test file (paths relative to tests/)."""
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == "MUTATION_ALSO" for t in targets):
            also = ast.literal_eval(node.value)
            if not isinstance(also, tuple) or not all(isinstance(a, str) for a in also):
                raise SystemExit(f"{path.name}: MUTATION_ALSO must be a tuple of paths")
            for extra in also:
                if not (TESTS / extra).is_file():
                    raise SystemExit(f"{path.name}: MUTATION_ALSO names a missing file {extra}")
            return also
    return ()


def mutation_targets() -> dict[str, tuple[str, ...]]:
    """module of pgrl_helpers -> its test files (relative to tests/), by the naming convention.

    ``m`` is a target iff ``tests/test_m.py`` has a ``# --- mutants ---`` line; its tests are
    that file plus its ``MUTATION_ALSO`` (cross-module files whose tests also pin ``m``).
    """
    targets = {}
    for path in sorted(TESTS.glob("test_*.py")):
        source = path.read_text(encoding="utf-8")
        if MUTANTS_HEADER not in (line.strip() for line in source.splitlines()):
            continue
        module = path.stem.removeprefix("test_")
        if not (ROOT / "pgrl_helpers" / f"{module}.py").is_file():
            raise SystemExit(
                f"{path.name} has {MUTANTS_HEADER!r} but pgrl_helpers/{module}.py is missing"
            )
        targets[module] = (path.name, *_mutation_also(path, source))
    return targets


#: mutmut's verdicts that count as "a test noticed the change".
KILLED = ("killed", "timeout", "caught by type check")

GOAL = 98.0


def _select(names: list[str]) -> dict[str, tuple[str, ...]]:
    """module path -> test file paths, for the named modules (default: all)."""
    targets = mutation_targets()
    unknown = set(names) - set(targets)
    if unknown:
        raise SystemExit(f"unknown module(s) {sorted(unknown)}; known: {', '.join(targets)}")
    return {
        f"pgrl_helpers/{module}.py": tuple(f"tests/{test}" for test in tests)
        for module, tests in targets.items()
        if not names or module in names
    }


def _toml_list(items) -> str:
    return "[" + ", ".join(f'"{item}"' for item in items) + "]"


def prepare_scratch(targets: dict[str, tuple[str, ...]]) -> None:
    """A fresh copy of the package, the selected tests and a pyproject with the mutmut config."""
    if SCRATCH.exists():
        shutil.rmtree(SCRATCH)
    SCRATCH.mkdir()
    shutil.copytree(
        ROOT / "pgrl_helpers",
        SCRATCH / "pgrl_helpers",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    tests = sorted({t for files in targets.values() for t in files})
    (SCRATCH / "tests").mkdir()
    for extra in ("tests/__init__.py", "tests/conftest.py"):
        if (ROOT / extra).exists():
            tests.append(extra)
    for test in tests:  # integration/ tests keep their subfolder (and their parents[2])
        (SCRATCH / test).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / test, SCRATCH / test)
    config = f"""

[tool.mutmut]
source_paths = ["pgrl_helpers"]
only_mutate = {_toml_list(targets)}
pytest_add_cli_args_test_selection = {_toml_list(t for t in tests if Path(t).name.startswith("test_"))}
pytest_add_cli_args = ["-p", "no:cacheprovider"]
use_git_change_detection = false
"""
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    (SCRATCH / "pyproject.toml").write_text(pyproject + config, encoding="utf-8")


def run_mutmut(workers: int) -> int:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONHASHSEED="0")
    cmd = [sys.executable, "-m", "mutmut", "run", "--max-children", str(workers)]
    if shutil.which("nice"):
        cmd = ["nice", "-n", "10", *cmd]
    print("+", " ".join(cmd), f"(in {SCRATCH.relative_to(ROOT)})", flush=True)
    return subprocess.run(cmd, cwd=SCRATCH, env=env).returncode


# --------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------


def function_of(mutant: str) -> str:
    """'pgrl_helpers.kl.x_kl_k2__mutmut_3' -> 'kl_k2'; methods 'xǁClsǁf__mutmut_1' -> 'Cls.f'."""
    name = mutant.rpartition(".")[-1].rpartition("__mutmut_")[0]
    if name.startswith("xǁ"):
        return name[2:].replace("ǁ", ".")
    return name.removeprefix("x_")


def changed_lines(diff: str) -> tuple[str, str]:
    """The removed and the added lines of a unified diff, each stripped and newline-joined."""
    removed, added = [], []
    for line in diff.splitlines():
        if line.startswith(("---", "+++")):
            continue
        if line.startswith("-"):
            removed.append(line[1:].strip())
        elif line.startswith("+"):
            added.append(line[1:].strip())
    return "\n".join(removed), "\n".join(added)


def load_equivalents() -> list[dict]:
    if not EQUIVALENT_FILE.exists():
        return []
    entries = tomllib.loads(EQUIVALENT_FILE.read_text(encoding="utf-8")).get("equivalent", [])
    for entry in entries:
        missing = {"module", "function", "before", "after", "why"} - set(entry)
        if missing:
            raise SystemExit(f"{EQUIVALENT_FILE.name}: entry {entry} lacks {sorted(missing)}")
    return entries


def collect_results(targets) -> dict[str, list[dict]]:
    """module path -> [{name, function, status, before, after}] read from mutmut's files."""
    os.chdir(SCRATCH)
    sys.path.insert(0, str(SCRATCH))
    from mutmut.mutation.data import SourceFileMutationData
    from mutmut.mutation.diff_apply import get_diff_for_mutant
    from mutmut.stats import status_by_exit_code

    results = {}
    for path in targets:
        data = SourceFileMutationData(path=Path(path))
        data.load()
        rows = []
        for name, exit_code in sorted(data.exit_code_by_key.items(), key=lambda kv: _order(kv[0])):
            before, after = changed_lines(get_diff_for_mutant(name, path=Path(path)))
            rows.append(
                {
                    "name": name,
                    "function": function_of(name),
                    "status": status_by_exit_code[exit_code],
                    "before": before,
                    "after": after,
                }
            )
        results[path] = rows
    os.chdir(ROOT)
    return results


def _order(name: str):
    head, _, number = name.rpartition("__mutmut_")
    return head, int(number) if number.isdigit() else 0


def raise_lines(path: str) -> set[str]:
    """The stripped source lines of every ``raise`` statement in ``path`` (its message)."""
    source = (ROOT / path).read_text(encoding="utf-8")
    lines = source.splitlines()
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Raise):
            found.update(line.strip() for line in lines[node.lineno - 1 : node.end_lineno])
    return found


def is_message_mutant(row: dict, messages: set[str]) -> bool:
    """True if the mutant only adds "XX" inside a string of a raise statement's message."""
    before, after = row["before"], row["after"]
    return (
        "XX" in after
        and after.replace("XX", "") == before.replace("XX", "")
        and bool(before)
        and all(line in messages for line in before.splitlines())
    )


def report(targets, equivalents: list[dict]) -> bool:
    results = collect_results(targets)
    used = [0] * len(equivalents)
    ok = True
    header = (
        f"{'module':<28} {'mutants':>7} {'killed':>7} {'timeout':>7} {'equiv':>6} "
        f"{'message':>7} {'alive':>6}"
    )
    lines = ["", header + f" {'score':>7}"]
    details = []
    for path, rows in results.items():
        counts = Counter()
        alive = []
        messages = raise_lines(path)
        for row in rows:
            match = [
                i
                for i, e in enumerate(equivalents)
                if (e["module"], e["function"], e["before"].strip(), e["after"].strip())
                == (path, row["function"], row["before"], row["after"])
            ]
            for i in match:
                used[i] += 1
            if row["status"] in KILLED:
                counts["killed"] += 1
                counts["timeout"] += row["status"] == "timeout"
                if match:
                    ok = False
                    details.append(f"WRONG EQUIVALENT (a test kills it): {row['name']}")
            elif match:
                counts["equivalent"] += 1
            elif is_message_mutant(row, messages):
                counts["message"] += 1
            else:
                counts["alive"] += 1
                alive.append(row)
        total = len(rows)
        counted = total - counts["equivalent"] - counts["message"]
        score = 100.0 * counts["killed"] / counted if counted else 100.0
        if score < GOAL:
            ok = False
        lines.append(
            f"{path:<28} {total:>7} {counts['killed']:>7} {counts['timeout']:>7} "
            f"{counts['equivalent']:>6} {counts['message']:>7} "
            f"{counts['alive']:>6} {score:>6.1f}%"
        )
        for row in alive:
            details.append(f"{row['status'].upper()}: {row['name']}")
            details.append(f"    - {row['before']}".replace("\n", "\n      "))
            details.append(f"    + {row['after']}".replace("\n", "\n      "))
    for entry, count in zip(equivalents, used):
        if count == 0 and entry["module"] in results:
            details.append(
                f"STALE EQUIVALENT (matches no mutant): {entry['module']} {entry['function']}: "
                f"{entry['before']!r} -> {entry['after']!r}"
            )
    print("\n".join(details))
    print("\n".join(lines))
    print(
        f"\nscore = killed / (mutants - equivalent - message), goal >= {GOAL:.0f}% per module; killed "
        "includes timeouts (a test ran > 15x its normal time), shown apart: rerun if the "
        "machine was loaded"
    )
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="e.g. kl losses (default: all)")
    parser.add_argument("--workers", type=int, default=2, help="mutmut processes (default 2)")
    parser.add_argument(
        "--report-only", action="store_true", help="only print the report of the last run"
    )
    args = parser.parse_args(argv)
    targets = _select(args.modules)
    equivalents = load_equivalents()
    if not args.report_only:
        prepare_scratch(targets)
        code = run_mutmut(max(1, args.workers))
        if code != 0:
            print(f"mutmut run exited with {code}")
            return code
    return 0 if report(targets, equivalents) else 1


if __name__ == "__main__":
    sys.exit(main())
