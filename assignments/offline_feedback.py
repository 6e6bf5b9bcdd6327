#!/usr/bin/env python3
"""Make nbgrader's feedback HTML render math offline.

    nbgrader generate_feedback a5
    python ../assignments/offline_feedback.py feedback        # from the course directory

nbgrader 0.9.6's feedback template calls nbconvert's ``mathjax()`` macro with its default
URL, so every feedback page loads MathJax 2 from a CDN (cdnjs.cloudflare.com): without a
network its formulas show as raw ``$...$``, and ``HTMLExporter.mathjax_url`` does not
reach that template. This script rewrites every ``*.html`` under the given folders in
place: the CDN ``<script>`` and its MathJax 2 configuration block are replaced by an inline
MathJax 3 configuration (the same ``$...$`` / ``$$...$$`` delimiters) and MathJax 3's
``tex-svg-full.js`` inlined into the page (about 2.3 MB; SVG output needs no font files),
so each page renders its formulas from ``file://`` with no request at all.

MathJax 3 comes from the ``sphinx-mathjax-offline`` wheel that the book already pins
(``requirements-book.txt``: ``pip install sphinx-mathjax-offline==0.0.2``), or from
``--mathjax PATH`` (any MathJax 3 ``tex-svg-full.js``). A page that is already offline is
left alone; a page with a CDN MathJax script this script does not recognise is an error.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

#: The block nbconvert's ``mathjax()`` macro writes (nbconvert 7: base/mathjax.html.j2).
MATHJAX_BLOCK = re.compile(
    r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.DOTALL
)
#: Any remaining script that loads MathJax over the network.
CDN_SCRIPT = re.compile(r"<script[^>]+src=\"https?://[^\"]*mathjax[^\"]*\"", re.IGNORECASE)
MARKER = "<!-- MathJax 3, inlined for offline use (assignments/offline_feedback.py) -->"
CONFIG = (
    "<script>window.MathJax = {tex: {inlineMath: [['$', '$'], ['\\\\(', '\\\\)']], "
    "displayMath: [['$$', '$$'], ['\\\\[', '\\\\]']], processEscapes: true, "
    "processEnvironments: true}, svg: {fontCache: 'global'}};</script>"
)


def find_mathjax() -> Path:
    """tex-svg-full.js of the installed sphinx-mathjax-offline wheel."""
    from importlib import metadata

    try:
        dist = metadata.distribution("sphinx-mathjax-offline")
    except metadata.PackageNotFoundError as err:
        raise SystemExit(
            "MathJax 3 not found: pip install sphinx-mathjax-offline==0.0.2 (pinned in "
            "requirements-book.txt) or pass --mathjax PATH/tex-svg-full.js"
        ) from err
    path = Path(dist.locate_file("sphinx-mathjax-offline/static/mathjax/tex-svg-full.js"))
    if not path.is_file():
        raise SystemExit(f"MathJax 3 not found at {path}; pass --mathjax PATH/tex-svg-full.js")
    return path


def offline_block(mathjax_js: str) -> str:
    """The replacement for nbconvert's MathJax block: configuration, then MathJax itself."""
    safe = mathjax_js.replace("</script", "<\\/script")
    return f"{MARKER}\n{CONFIG}\n<script>{safe}</script>"


def rewrite(html: str, block: str) -> str | None:
    """The page with MathJax inlined, or None when it is already offline."""
    if MARKER in html:
        return None
    new, count = MATHJAX_BLOCK.subn(lambda _: block, html, count=1)
    if count == 0:
        if CDN_SCRIPT.search(html):
            raise ValueError("a CDN MathJax script outside nbconvert's mathjax block")
        return None
    if CDN_SCRIPT.search(new):
        raise ValueError("a CDN MathJax script is left after the rewrite")
    return new


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path, help="e.g. feedback (of the course)")
    parser.add_argument("--mathjax", type=Path, help="a MathJax 3 tex-svg-full.js")
    args = parser.parse_args(argv)
    js = (args.mathjax or find_mathjax()).read_text(encoding="utf-8")
    block = offline_block(js)
    pages = sorted(p for folder in args.folders for p in folder.rglob("*.html"))
    if not pages:
        print(f"no .html files under {', '.join(map(str, args.folders))}")
        return 1
    changed = 0
    for page in pages:
        try:
            new = rewrite(page.read_text(encoding="utf-8"), block)
        except ValueError as err:
            raise SystemExit(f"{page}: {err}") from err
        if new is not None:
            page.write_text(new, encoding="utf-8")
            changed += 1
    print(f"{changed} of {len(pages)} feedback pages now render math offline")
    return 0


if __name__ == "__main__":
    sys.exit(main())
