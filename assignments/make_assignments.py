#!/usr/bin/env python3
"""Generate the student notebooks from the instructor (solution) notebooks.

    python3 tasks.py assignments            (or: make assignments)
    .venv/bin/python assignments/make_assignments.py [--out DIR] [--check]

Reads every ``assignments/instructor/NN_*.ipynb`` and writes the student version with the
same name to ``assignments/student/`` (or ``--out``), through nbconvert's notebook exporter
with nbgrader's own preprocessors:

* ``ClearSolutions``: every ``### BEGIN SOLUTION`` ... ``### END SOLUTION`` region becomes
  ``# YOUR CODE HERE`` / ``raise NotImplementedError()`` (indented like the region);
* ``ClearHiddenTests``: every ``### BEGIN HIDDEN TESTS`` ... ``### END HIDDEN TESTS`` region
  is removed (nbgrader's autograde puts it back when grading);
* ``ClearOutput``: outputs and execution counts are removed.

``enforce_metadata=False`` lets the plain markers work even in cells without nbgrader cell
metadata (the instructor notebooks carry that metadata anyway, for ``nbgrader
generate_assignment``). ``--check`` writes nothing and exits with status 1 if a committed
student notebook differs from what would be generated (the tests run the same comparison).

Never edit ``assignments/student/`` by hand: edit the instructor notebook and regenerate.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "instructor"
TARGET = HERE / "student"
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")


def exporter():
    """nbconvert's NotebookExporter running nbgrader's ClearSolutions, ClearHiddenTests and
    ClearOutput preprocessors, in that order."""
    from nbconvert.exporters import NotebookExporter
    from nbgrader.preprocessors import ClearHiddenTests, ClearOutput, ClearSolutions
    from traitlets.config import Config

    config = Config()
    config.ClearSolutions.enforce_metadata = False
    config.ClearHiddenTests.enforce_metadata = False
    config.NotebookExporter.preprocessors = [ClearSolutions, ClearHiddenTests, ClearOutput]
    return NotebookExporter(config=config)


def student_version(path: Path) -> str:
    """The student notebook generated from the instructor notebook at ``path``, as text."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    sources = "\n".join(c.source for c in nb.cells)
    if "### BEGIN SOLUTION" not in sources:
        raise ValueError(f"{path.name} has no '### BEGIN SOLUTION' region: nothing to hand out")
    text, _ = exporter().from_notebook_node(nb)
    for marker in MARKERS:
        if marker in text:  # pragma: no cover - the preprocessors raise on unbalanced markers
            raise ValueError(f"{path.name}: {marker!r} is still in the student version")
    return text if text.endswith("\n") else text + "\n"


def generate(out: Path = TARGET, source: Path = SOURCE) -> dict[str, str]:
    """{file name: student notebook text} for every instructor notebook in ``source``."""
    paths = sorted(source.glob("[0-9][0-9]_*.ipynb"))
    if not paths:
        raise SystemExit(f"no instructor notebooks (NN_*.ipynb) in {source}")
    return {path.name: student_version(path) for path in paths}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=TARGET, help="where to write (default %(default)s)"
    )
    parser.add_argument(
        "--check", action="store_true", help="write nothing; fail if --out is not up to date"
    )
    args = parser.parse_args(argv)
    notebooks = generate(args.out)
    stale = []
    for name, text in notebooks.items():
        target = args.out / name
        current = target.read_text(encoding="utf-8") if target.exists() else None
        if current == text:
            continue
        stale.append(name)
        if not args.check:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            print(f"wrote {target}")
    extra = sorted(p.name for p in args.out.glob("*.ipynb") if p.name not in notebooks)
    if args.check:
        if stale or extra:
            print(
                "out of date: "
                + ", ".join(stale + [f"{e} (no instructor notebook)" for e in extra])
                + "; run `python3 tasks.py assignments`"
            )
            return 1
        print(f"{len(notebooks)} student notebooks up to date")
        return 0
    for name in extra:
        print(f"warning: {args.out / name} has no instructor notebook (left in place)")
    print(f"{len(notebooks)} student notebooks in {args.out} ({len(stale)} changed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
