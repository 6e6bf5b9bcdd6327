"""Sphinx configuration for the pgrl book: the committed notebooks as a static, offline site.

Build it with ``python3 tasks.py book`` (or ``make book``); see the README, "Read it as a book".
The source folder is the repository root (this file lives in ``book/`` and is passed with
``-c book``), so that every relative link in the README and the notebooks resolves as it does
on a code host. Only the pages below are read; everything else in the repository is skipped.

- Notebooks are rendered from their stored outputs (myst-nb, ``nb_execution_mode = "off"``):
  nothing is re-executed, so the site shows exactly what was committed and checked by nbval.
- The table of contents is generated from the file list (``notebooks/NN_*.ipynb`` in order),
  so a new notebook appears without editing anything here.
- Offline: MathJax 3 comes from the ``sphinx-mathjax-offline`` wheel and is copied into
  ``_static/mathjax``; the theme ships its fonts and scripts; the ipywidgets embed scripts
  (which myst-nb would load from a CDN) are turned off and every widget output is replaced by
  a note that widgets need a live kernel.
"""

from __future__ import annotations

import re
from pathlib import Path

from docutils import nodes

ROOT = Path(__file__).resolve().parents[1]

#: Series notebooks, in order. Picked up from the file list: nothing to edit for a new one.
NOTEBOOKS = sorted(
    p.relative_to(ROOT).as_posix() for p in ROOT.glob("notebooks/[0-9][0-9]_*.ipynb")
)
#: Markdown pages besides the landing page, as (caption, [paths]); skipped if absent.
EXTRA_PAGES = [
    ("Instructors", ["assignments/README.md"]),
    ("More", ["benchmarks/RESULTS.md", "scale/README.md"]),
]
PAGES = ["README.md", *NOTEBOOKS] + [
    page for _, pages in EXTRA_PAGES for page in pages if (ROOT / page).exists()
]
#: Folders that hold a page; every other top-level entry is excluded (not even walked).
PAGE_FOLDERS = {page.split("/")[0] for page in PAGES if "/" in page}

WIDGET_VIEW_MIMETYPE = "application/vnd.jupyter.widget-view+json"
WIDGET_NOTE = (
    "Interactive widget: it needs a live Jupyter kernel and does not run on this static page. "
    "The plain-function cells next to it show the same computation without the widget; to use "
    "the widget, open the notebook in JupyterLab (python3 tasks.py lab) and run the cells."
)

project = "pgrl: policy gradients for language models"
author = "the pgrl authors"
copyright = "the pgrl authors"

root_doc = "README"
include_patterns = PAGES
exclude_patterns = sorted(
    p.name
    for p in ROOT.iterdir()
    if (p.is_dir() and p.name not in PAGE_FOLDERS) or p.name.startswith(".")
) + ["assignments/instructor", "assignments/student", "benchmarks/results"]

extensions = ["myst_nb", "sphinx.ext.mathjax", "sphinx-mathjax-offline"]

# myst-nb: show the stored outputs, never execute; no CDN scripts for widgets
nb_execution_mode = "off"
nb_ipywidgets_js = {}
nb_merge_streams = True
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_dmath_double_inline = True  # $$...$$ inside a paragraph, as JupyterLab renders it
myst_heading_anchors = 3
suppress_warnings = ["myst.header"]  # notebooks may skip a heading level on purpose

html_theme = "sphinx_book_theme"
html_title = "pgrl: policy gradients for LMs"
html_static_path: list[str] = []
html_theme_options = {
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
    "use_download_button": True,
    "use_fullscreen_button": False,
    "use_repository_button": False,
    "use_issues_button": False,
    "use_edit_page_button": False,
    "navigation_with_keys": False,
}
html_context = {"default_mode": "auto"}  # an empty mode logs a console error
html_show_sourcelink = False
html_show_search_summary = False  # summaries fetch() pages, which browsers refuse from file://
html_copy_source = True  # the download button offers the .ipynb


def add_toc(app, docname: str, source: list[str]) -> None:
    """Append the (hidden) table of contents to the landing page: series order, then extras."""
    if docname != root_doc:
        return
    blocks = [("The series", NOTEBOOKS)] + [
        (caption, [p for p in pages if (ROOT / p).exists()]) for caption, pages in EXTRA_PAGES
    ]
    for caption, pages in blocks:
        if pages:
            entries = "\n".join(re.sub(r"\.(ipynb|md)$", "", p) for p in pages)
            source[0] += f"\n\n```{{toctree}}\n:hidden:\n:caption: {caption}\n\n{entries}\n```\n"


def replace_widget_views(app, doctree: nodes.document) -> None:
    """Widgets cannot run on a static page: replace each widget view by a note saying so."""
    for raw in list(doctree.findall(nodes.raw)):
        if f'<script type="{WIDGET_VIEW_MIMETYPE}">' in raw.astext():
            note = nodes.note("", nodes.paragraph(text=WIDGET_NOTE), classes=["pgrl-widget-note"])
            raw.replace_self(note)


def drop_widget_state(app, pagename, templatename, context, doctree) -> None:
    """Without the (CDN) widget manager the embedded widget state is dead weight: drop it."""
    context["script_files"] = [
        js for js in context.get("script_files", []) if "widget-state" not in str(js.attributes)
    ]


def write_landing_redirect(app, exception) -> None:
    """index.html sends the reader to the landing page (the README), without a server."""
    if exception is None and app.builder.format == "html":
        target = f"{root_doc}.html"
        Path(app.outdir, "index.html").write_text(
            f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{project}</title>'
            f'<meta http-equiv="refresh" content="0; url={target}"></head>'
            f'<body><a href="{target}">{project}</a></body></html>\n'
        )


def setup(app):
    app.connect("source-read", add_toc)
    app.connect("doctree-read", replace_widget_views)
    app.connect("html-page-context", drop_widget_state)
    app.connect("build-finished", write_landing_redirect)
