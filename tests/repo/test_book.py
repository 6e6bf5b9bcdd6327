"""The book site (``python3 tasks.py book``) built, served on 127.0.0.1 and read in headless Chromium.

The site is built into a temporary folder with the same command as ``tasks.py book``, served by
a local HTTP server, and every page is opened in Debian's Chromium through playwright's Python
API. Every request that leaves 127.0.0.1 is blocked and recorded, so the checks below also prove
that the site renders offline (no CDN). Expected counts (notebooks, plots, code cells, widget
outputs, cross-links) are read from the committed ``.ipynb`` files, not written down here.

Needs Debian's ``chromium`` at /usr/bin/chromium, the ``playwright`` package
(requirements-test.txt) and the book tools (requirements-book.txt); never run
``playwright install``. Without them the test skips, except under CI (``PGRL_CI=1``), where it
fails instead. A screenshot of one notebook page goes to ``artifacts/`` (gitignored).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from chromium_helpers import CHROMIUM, CHROMIUM_FLAGS, load_sync_playwright
from chromium_helpers import skip_or_fail as shared_skip_or_fail

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("tasks", ROOT / "tasks.py")
tasks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tasks)

NOTEBOOKS = sorted(ROOT.glob("notebooks/[0-9][0-9]_*.ipynb"))
HOW_TO_ENABLE = (
    "install Debian's Chromium, the pinned playwright package and the book tools: "
    "`apt-get install -y chromium` and `.venv/bin/pip install -r requirements.txt "
    "-r requirements-test.txt -r requirements-book.txt` (do not run `playwright install`)"
)
ARTIFACTS = ROOT / "artifacts"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
PAGE_TIMEOUT_MS = 120_000  # generous: the CPUs are shared; a page takes ~5 s under load

# Text of a page with code, outputs and rendered math taken out, and whatever still looks like
# LaTeX source in it: a formula MathJax did not typeset.
LEFTOVER_MATH_JS = r"""() => {
    const root = (document.querySelector('main') || document.body).cloneNode(true);
    root.querySelectorAll('pre, code, script, style, mjx-container').forEach(e => e.remove());
    const text = root.textContent;
    const patterns = [/\$\$/, /\\frac/, /\\begin\{/, /\\\(/, /\\\[/, /\$[^$\n]*\\[a-zA-Z]+[^$\n]*\$/];
    const hits = [];
    for (const p of patterns) {
        const m = text.match(p);
        if (m) hits.push(text.slice(Math.max(0, m.index - 40), m.index + 60));
    }
    // every math element must hold MathJax's output
    for (const e of document.querySelectorAll('.math')) {
        if (!e.querySelector('mjx-container')) hits.push('untypeset: ' + e.textContent.slice(0, 80));
    }
    return hits;
}"""

PAGE_REPORT_JS = r"""() => ({
    title: (document.querySelector('main h1') || {innerText: ''}).innerText,
    text: (document.querySelector('main') || document.body).innerText,
    outputText: [...document.querySelectorAll('.cell_output')].map(e => e.innerText).join('\n'),
    math: document.querySelectorAll('mjx-container').length,
    images: [...document.querySelectorAll('img')].map(i => ({
        src: i.src, loaded: i.complete && i.naturalWidth > 0,
        output: !!i.closest('.cell_output'),
    })),
    links: [...document.querySelectorAll('a[href]')].map(a => a.href),
    nav: [...document.querySelectorAll('nav.bd-docs-nav a.reference.internal')].map(a => a.href),
    cellInputs: document.querySelectorAll('.cell .cell_input').length,
    cellOutputs: document.querySelectorAll('.cell .cell_output').length,
    widgetNotes: document.querySelectorAll('.pgrl-widget-note').length,
})"""

MATHJAX_DONE_JS = """async () => {
    if (!document.querySelector('script[src*="mathjax"]')) return 'no math on this page';
    const start = Date.now();
    while (!(window.MathJax && MathJax.startup && MathJax.startup.promise)) {
        if (Date.now() - start > 60000) return 'MathJax did not start';
        await new Promise(r => setTimeout(r, 50));
    }
    await MathJax.startup.promise;
    await document.fonts.ready;  // MathJax's web fonts, loaded while typesetting
    return 'typeset';
}"""


def skip_or_fail(reason: str) -> None:
    """Skip with a reason that says how to enable the test; under CI (PGRL_CI=1) fail."""
    shared_skip_or_fail(reason, "book test", HOW_TO_ENABLE)


def load_notebook(path: Path) -> dict:
    return json.loads(path.read_text())


def markdown_source(notebook: dict) -> str:
    return "\n".join(
        "".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "markdown"
    )


def outputs_of(notebook: dict) -> list[dict]:
    return [o for c in notebook["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]


def page_of(notebook: Path) -> str:
    return f"notebooks/{notebook.stem}.html"


@pytest.fixture(scope="module")
def sync_playwright():
    return load_sync_playwright("book test", HOW_TO_ENABLE)


@pytest.fixture(scope="module")
def book_html(tmp_path_factory) -> Path:
    """The site, built like `python3 tasks.py book` (warnings fail it) into a temporary folder."""
    for module in ("sphinx", "myst_nb", "sphinx_book_theme"):
        if importlib.util.find_spec(module) is None:
            skip_or_fail(f"the book tool `{module}` is not installed")
    out = tmp_path_factory.mktemp("book")
    result = subprocess.run(
        tasks.book_command(out, python=sys.executable),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert result.returncode == 0, (
        f"book build failed:\n{result.stdout[-3000:]}{result.stderr[-5000:]}"
    )
    return out / "html"


class QuietHandler(SimpleHTTPRequestHandler):
    """Serves the site; records every path it answered with an error."""

    errors: list[str]

    def send_error(self, code, message=None, explain=None):
        self.errors.append(f"{code} {self.path}")
        super().send_error(code, message, explain)

    def log_message(self, format, *args):
        pass


@pytest.fixture(scope="module")
def site(book_html):
    """(base URL, list of server errors) of the site served on 127.0.0.1."""
    errors: list[str] = []
    handler = type("Handler", (QuietHandler,), {"errors": errors})
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=book_html))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", errors
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser(sync_playwright):
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS
        )
        try:
            yield browser
        finally:
            browser.close()


class Visitor:
    """One browser page that records console errors, failed and off-machine requests."""

    def __init__(self, browser, base: str):
        self.base = base
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.page.set_default_timeout(PAGE_TIMEOUT_MS)
        self.problems: list[str] = []
        self.external: list[str] = []
        self.page.on(
            "console",
            lambda m: m.type == "error" and self.problems.append(f"console error: {m.text}"),
        )
        self.page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        self.page.on(
            "requestfailed",
            lambda r: (
                r.url.startswith(base)
                and self.problems.append(f"request failed: {r.url} {r.failure}")
            ),
        )
        self.page.on(
            "response",
            lambda r: r.status >= 400 and self.problems.append(f"HTTP {r.status}: {r.url}"),
        )
        self.page.route("**/*", self._route)

    def _route(self, route):
        url = route.request.url
        if url.startswith(self.base) or url.startswith("data:"):
            route.continue_()
        else:  # offline: nothing may leave the machine
            self.external.append(url)
            route.abort()

    def visit(self, path: str, redirect_to: str | None = None) -> dict:
        """Open path (which may redirect to redirect_to) and report what the page shows."""
        self.page.goto("about:blank")  # the last page's late events land before the reset
        self.problems.clear()
        try:
            self.page.goto(f"{self.base}/{path}", wait_until="load")
            if redirect_to:
                self.page.wait_for_url(f"{self.base}/{redirect_to}")
                self.page.wait_for_load_state("load")
            mathjax = self.page.evaluate(MATHJAX_DONE_JS)
        except Exception as err:
            raise AssertionError(f"{path}: {err}; so far: {self.problems}") from err
        report = self.page.evaluate(PAGE_REPORT_JS)
        report.update(
            url=self.page.url,
            mathjax=mathjax,
            leftover_math=self.page.evaluate(LEFTOVER_MATH_JS),
            problems=list(self.problems),
        )
        return report


@pytest.fixture(scope="module")
def reports(book_html, site, browser) -> dict[str, dict]:
    """Every HTML page of the site (but the search page) opened once: path -> what it showed."""
    base, _ = site
    visitor = Visitor(browser, base)
    pages = sorted(
        p.relative_to(book_html).as_posix()
        for p in book_html.rglob("*.html")
        if not p.relative_to(book_html).parts[0].startswith("_") and p.name != "search.html"
    )
    result = {path: visitor.visit(path, redirect_target(book_html, path)) for path in pages}
    shot = next((page_of(nb) for nb in NOTEBOOKS if nb.stem.startswith("02_")), None)
    shot = shot or page_of(NOTEBOOKS[0])
    ARTIFACTS.mkdir(exist_ok=True)
    visitor.visit(shot)
    plot = visitor.page.locator(".cell_output img")
    if plot.count():  # show a plot and the math around it, not just the title
        plot.first.scroll_into_view_if_needed()
    visitor.page.screenshot(path=str(ARTIFACTS / "book_page.png"), full_page=False)
    result["_external_requests"] = visitor.external
    visitor.page.close()
    return result


def test_every_notebook_has_a_page_in_series_order(reports):
    assert NOTEBOOKS, "no notebooks/NN_*.ipynb found"
    for notebook in NOTEBOOKS:
        report = reports.get(page_of(notebook))
        assert report is not None, f"no page for {notebook.name}"
        heading = next(
            line[2:]
            for line in markdown_source(load_notebook(notebook)).splitlines()
            if line.startswith("# ")
        )
        title = report["title"].replace("\N{RIGHT SINGLE QUOTATION MARK}", "'")  # smart quotes
        assert title.startswith(heading.replace("`", "")), (notebook.name, report["title"])
    # the landing page is the README, index.html leads to it, and the sidebar lists the series
    assert reports["index.html"]["url"].endswith("/README.html")
    nav = [u for u in reports["README.html"]["nav"] if "/notebooks/" in u]
    assert [u.rsplit("/", 1)[1] for u in nav] == [Path(page_of(nb)).name for nb in NOTEBOOKS]
    assert reports["assignments/README.html"]["title"], "no instructor page"


def test_code_cells_are_shown_with_their_stored_outputs(reports):
    for notebook in NOTEBOOKS:
        cells = [c for c in load_notebook(notebook)["cells"] if c["cell_type"] == "code"]
        report = reports[page_of(notebook)]
        assert report["cellInputs"] == len(cells), notebook.name
        assert report["cellOutputs"] == sum(1 for c in cells if c.get("outputs")), notebook.name
        # one stored stdout line, to show outputs are the committed ones (nothing re-executed)
        stream = next(
            (o for o in outputs_of(load_notebook(notebook)) if o.get("name") == "stdout"), None
        )
        if stream:
            first = next(line for line in "".join(stream["text"]).splitlines() if line.strip())
            assert first.strip() in report["text"], (notebook.name, first)


def test_learning_objectives_are_on_the_page(reports):
    for notebook in NOTEBOOKS:
        if "Learning objectives" in markdown_source(load_notebook(notebook)):
            assert "Learning objectives" in reports[page_of(notebook)]["text"], notebook.name


def test_math_is_rendered_by_mathjax(reports):
    for path, report in reports.items():
        if path.startswith("_"):
            continue
        assert report["leftover_math"] == [], (path, report["leftover_math"])
    for notebook in NOTEBOOKS:
        report = reports[page_of(notebook)]
        if re.search(r"\$[^$\n]+\$", markdown_source(load_notebook(notebook))):
            assert report["mathjax"] == "typeset" and report["math"] > 0, (notebook.name, report)


def test_every_stored_plot_is_an_image_that_loaded(reports):
    for notebook in NOTEBOOKS:
        plots = [o for o in outputs_of(load_notebook(notebook)) if "image/png" in o.get("data", {})]
        shown = [i for i in reports[page_of(notebook)]["images"] if i["output"]]
        assert len(shown) == len(plots), (notebook.name, len(shown), len(plots))
    for path, report in reports.items():
        if path.startswith("_"):
            continue
        broken = [i["src"] for i in report["images"] if not i["loaded"]]
        assert broken == [], (path, broken)


def test_widgets_say_they_need_a_live_kernel(reports):
    for notebook in NOTEBOOKS:
        widgets = [
            o for o in outputs_of(load_notebook(notebook)) if WIDGET_VIEW in o.get("data", {})
        ]
        report = reports[page_of(notebook)]
        assert report["widgetNotes"] == len(widgets), notebook.name
        if widgets:
            assert "does not run on this static page" in report["text"]
        for text_repr in ("VBox(children=", "interactive(children=", "Dashboard(children="):
            assert text_repr not in report["outputText"], (notebook.name, text_repr)


def test_internal_links_resolve(book_html, site, reports):
    base, _ = site
    checked: dict[str, int] = {}
    for path, report in reports.items():
        if path.startswith("_"):
            continue
        for link in report["links"]:
            if not link.startswith(base):
                continue
            target, _, fragment = link.partition("#")
            if target not in checked:
                checked[target] = http_status(target)
            assert checked[target] == 200, f"{path} links to {link}: HTTP {checked[target]}"
            if fragment:
                file = book_html / urllib.parse.unquote(urllib.parse.urlparse(target).path[1:])
                file = file / "index.html" if file.is_dir() else file
                html = file.read_text(errors="replace")
                assert f'id="{urllib.parse.unquote(fragment)}"' in html, f"{path}: {link}"
    # every `NN_x.ipynb` link inside a notebook became a link to that notebook's page
    for notebook in NOTEBOOKS:
        for name in re.findall(r"\]\(([^)#\s]+\.ipynb)", markdown_source(load_notebook(notebook))):
            page = f"{base}/notebooks/{Path(name).stem}.html"
            assert page in reports[page_of(notebook)]["links"], (notebook.name, name)


def test_no_console_errors_and_nothing_loaded_from_the_network(site, reports):
    _, server_errors = site
    for path, report in reports.items():
        if path.startswith("_"):
            continue
        assert report["problems"] == [], (path, report["problems"])
    assert reports["_external_requests"] == [], "the site must render offline"
    assert server_errors == []
    assert (ARTIFACTS / "book_page.png").stat().st_size > 10_000


@pytest.mark.parametrize("served", [True, False], ids=["served", "from-disk"])
def test_search_box_finds_a_notebook(site, browser, book_html, served):
    base = site[0] if served else book_html.resolve().as_uri()
    visitor = Visitor(browser, base)
    try:
        visitor.visit("search.html?q=REINFORCE")
        visitor.page.wait_for_selector("#search-results ul li")
        hits = visitor.page.eval_on_selector_all(
            "#search-results ul li a", "links => links.map(a => a.href)"
        )
        assert any("/notebooks/" in h for h in hits), hits
        assert visitor.problems == [] and visitor.external == []
    finally:
        visitor.page.close()


def test_a_notebook_page_reads_from_disk(browser, book_html):
    """The README says: open build/book/html/index.html, no server needed."""
    visitor = Visitor(browser, book_html.resolve().as_uri())
    notebook = next(
        nb for nb in NOTEBOOKS if re.search(r"\$[^$\n]+\$", markdown_source(load_notebook(nb)))
    )
    try:
        assert visitor.visit("index.html", redirect_to="README.html")["problems"] == []
        report = visitor.visit(page_of(notebook))
        assert report["mathjax"] == "typeset" and report["leftover_math"] == []
        assert all(i["loaded"] for i in report["images"])
        assert report["problems"] == [] and visitor.external == []
    finally:
        visitor.page.close()


def test_the_checks_catch_planted_faults(site, browser):
    """The detectors above flag raw LaTeX, a broken image, a console error and a 404."""
    base, errors = site
    visitor = Visitor(browser, base)
    try:
        visitor.page.goto(f"{base}/README.html")
        visitor.problems.clear()
        visitor.page.set_content(
            "<main><h1>planted</h1><p>$$\\frac{1}{2}$$ and \\(x\\)</p>"
            '<span class="math">\\(y\\)</span><img src="/missing.png"></main>'
            "<script>console.error('planted error')</script>"
        )
        visitor.page.wait_for_load_state("load")
        leftover = visitor.page.evaluate(LEFTOVER_MATH_JS)
        assert any("\\frac" in hit for hit in leftover)
        assert any(hit.startswith("untypeset") for hit in leftover)
        report = visitor.page.evaluate(PAGE_REPORT_JS)
        assert [i["loaded"] for i in report["images"]] == [False]
        assert any("planted error" in p for p in visitor.problems)
        assert any("HTTP 404" in p and "missing.png" in p for p in visitor.problems)
        assert http_status(f"{base}/notebooks/99_missing.html") == 404
    finally:
        visitor.page.close()
        errors.clear()  # the planted 404s are not the site's


def redirect_target(site_root: Path, path: str) -> str | None:
    """Where a page's <meta http-equiv="refresh"> sends the reader (relative to site_root)."""
    page = site_root / path
    found = re.search(r'http-equiv="refresh" content="0; url=([^"]+)"', page.read_text())
    if not found:
        return None
    return (page.parent / found.group(1)).resolve().relative_to(site_root.resolve()).as_posix()


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as err:
        return err.code
