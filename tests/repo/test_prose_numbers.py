"""Prose guard: every number a markdown cell quotes must come from the same notebook's code.

A markdown cell that quotes a measured number (a decimal, a percentage, a ratio such as 1.8x, a
count the code computes) fails this test unless that number appears in a code cell's source or in a
stored output of the same notebook. Constants that come from papers or from settings, which no cell
prints, go in ``tests/repo/data/prose_allowlist.toml`` (notebook -> number -> reason), each with a reason.

What counts as "appears" (the number ``p`` quoted in prose, ``v`` any number in code or outputs):

* Signs are ignored (prose says "drops by 0.3", an output prints ``-0.3``).
* Rounding: ``p`` appears when ``|v - p|`` is at most half a unit in ``p``'s last written digit,
  so "0.66" is matched by an output ``0.6614`` and "2.3e-9" by ``2.34e-09``. An integer ``p`` is
  matched by a ``v`` that rounds to it.
* Percentages: "99.5%" in prose is matched by ``99.5`` or ``0.995`` in code, and "0.995" in prose
  by ``0.995`` or by ``99.5%`` printed with its percent sign.
* ``1,000`` is one thousand; ``1e-3``, ``1.5e+2`` and LaTeX ``10^{-6}`` are read as numbers.

What is not a measurement and is never checked (rules applied to the markdown before extraction):

1. Link targets ``[text](target)``, bare URLs and HTML tags.
2. Numbers glued to a letter or underscore in front or behind (identifiers and names: ``k3``,
   ``float32``, ``lecture_17.py``, ``x_1``, ``11_modern_objectives``, ``0.5B``) or followed by an
   ordinal suffix (``1st``, ``3rd``), and bit widths (``16-bit``). A trailing ``x``/``×`` (ratio)
   or ``%`` is kept.
3. Notebook numbers: any integer written with a leading zero (``07``), the integer(s) after
   "notebook(s)", "nb", "lecture", "part" (``notebook 7``, ``notebooks 10 and 11``), and a bare
   integer NN on a line that links ``NN_*.ipynb`` (the series table).
4. Equation, section, table, figure, page, cell, step-of-a-list, chapter, appendix numbers: the
   number(s) after "eq."/"eqs."/"equation(s)", "section(s)", "§", "table", "fig."/"figure",
   "page"/"p.", "cell(s)", "chapter", "appendix", "item", "step" (when followed by a period or
   colon), "Try this", "exercise", "assignment", "issue", "review", "row", "line(s)".
5. arXiv ids (``2402.03300``, ``1707.06347v2``), DOIs, versions after a tool's name (``TRL 1.16``,
   ``torch 2.6``, ``Python 3.11``, ``nbval 0.11``, ``v0.3``), years 1900-2099 written as integers
   and year ranges (``2025-26``). LaTeX's ``2{,}220{,}075`` reads as 2,220,075.
6. Heading numbers (``## 3. Title``, ``### 4b``) and ordered-list markers (``1.`` at the start of a
   line).
7. Integers from 0 to 10 (ordinary words in running text, list indices, small sizes; notebooks
   print the measured ones anyway). Larger integers and every decimal are checked.
8. Numbers inside fenced code blocks in markdown are still checked (they are quoted code).

Limits: the guard checks that a quoted number *appears* in the notebook's code or outputs, not that
it is the right one; a short number ("0.5", "35") is matched by any output that rounds to it. It
catches numbers from memory, stale numbers after a re-run and numbers no cell computes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
ALLOWLIST_FILE = Path(__file__).resolve().parent / "data" / "prose_allowlist.toml"

# A number: optional sign, digits (with 1,000-style thousands groups), optional decimals,
# optional exponent. Unicode minus is normalised before matching.
_NUMBER = re.compile(
    r"(?<![\w.])"  # not glued to an identifier or a preceding decimal point
    r"(?P<num>\d{1,3}(?:,\d{3})+(?![\d])|\d+)"
    r"(?P<frac>\.\d+)?"
    r"(?P<exp>[eE][-+]?\d+)?"
    r"(?P<after>\s*(?:%|x\b|×|st\b|nd\b|rd\b|th\b))?"
    r"(?P<glued>[A-Za-z_])?"
)
_LATEX_POW10 = re.compile(r"(\d+(?:\.\d+)?)\s*(?:\\times|\\cdot|×)\s*10\^\{?(-?\d+)\}?")
_BARE_POW10 = re.compile(r"(?<![\d.])10\^\{?(-?\d+)\}?")

_REFERENCE_WORDS = (
    r"notebooks?|nb|lectures?|part|eqs?\.|equations?|sections?|§|tables?|figs?\.|figures?|"
    r"pages?|pp?\.|cells?|chapters?|appendix|items?|try this|exercises?|assignments?|"
    r"issues?|reviews?|rows?|lines?|ch\.|sec\.|steps?(?=\s*\d+\s*[.:])"
)
# "notebook 7", "notebooks 10 and 11", "eq. 6-7", "sections 2, 3 and 4b", "§2.5"
_REFERENCE = re.compile(
    r"(?i)(?:" + _REFERENCE_WORDS + r")\s*"
    r"\(?\d+[a-z]?(?:\.\d+)*(?:\s*(?:,|and|or|to|-|–|—|&)\s*\d+[a-z]?(?:\.\d+)*)*"
)
_ARXIV = re.compile(r"\b\d{4}\.\d{4,5}(?:v\d+)?\b")
_VERSION = re.compile(
    r"(?i)\b(?:trl|torch|pytorch|python|transformers|nbval|numpy|jupyter(?:lab)?|cuda|"
    r"peft|accelerate|vllm|datasets|einops|tqdm|version)\s+v?\d+(?:\.\d+)+\b|\bv\d+(?:\.\d+)*\b"
)
_URL = re.compile(r"https?://\S+")
_LINK_TARGET = re.compile(r"\]\([^)]*\)")
_HTML_TAG = re.compile(r"<[^>]+>")
_HEADING_NUMBER = re.compile(r"(?m)^(\s*#+\s*)\d+[a-z]?(?:\.\d+)*\.?")
_LIST_MARKER = re.compile(r"(?m)^(\s*)\d+[.)]\s")


_DOI = re.compile(r"\b10\.\d{4,}/\S+")
_BIT_WIDTH = re.compile(r"\b\d+-bit\b")
_YEAR_RANGE = re.compile(r"\b(?:19|20)\d\d\s*[-–]\s*\d\d\b")
_NOTEBOOK_LINK = re.compile(r"\((\d\d)_[\w-]+\.ipynb[^)]*\)")


def _drop_linked_notebook_numbers(line: str) -> str:
    """In a line that links notebook ``NN_*.ipynb``, the bare integer NN is its number (rule 3)."""
    for number in {int(m.group(1)) for m in _NOTEBOOK_LINK.finditer(line)}:
        line = re.sub(rf"(?<![\w.]){number}(?![\w.])", " ", line)
    return line


def load_allowlist(path: Path = ALLOWLIST_FILE) -> dict[str, dict[str, str]]:
    """``{notebook file name: {number as written: reason}}`` from the TOML allowlist."""
    if not path.exists():
        return {}
    return tomllib.loads(path.read_text(encoding="utf-8"))


def _clean_markdown(text: str) -> str:
    """Remove the parts of a markdown cell that hold no measurement (rules 1, 3-6 above)."""
    text = text.replace("\u2212", "-").replace("\u2009", " ").replace("\u202f", " ")
    text = text.replace("{,}", ",")
    text = "\n".join(_drop_linked_notebook_numbers(line) for line in text.split("\n"))
    text = _DOI.sub(" ", text)
    text = _BIT_WIDTH.sub(" ", text)
    text = _YEAR_RANGE.sub(" ", text)
    text = _LINK_TARGET.sub("]", text)
    text = _URL.sub(" ", text)
    text = _HTML_TAG.sub(" ", text)
    text = _HEADING_NUMBER.sub(r"\1", text)
    text = _LIST_MARKER.sub(r"\1", text)
    text = _ARXIV.sub(" ", text)
    text = _VERSION.sub(" ", text)
    text = _REFERENCE.sub(" ", text)
    return text


def _value(match: re.Match) -> tuple[float, float]:
    """(value, half a unit in the last written digit) of a number match."""
    integer = match.group("num").replace(",", "")
    frac = match.group("frac") or ""
    exp = match.group("exp") or ""
    value = float(integer + frac + exp)
    decimals = len(frac) - 1 if frac else 0
    power = int(exp[1:]) if exp else 0
    return value, 0.5 * 10.0 ** (power - decimals)


def prose_numbers(text: str, contexts: list[str] | None = None) -> list[tuple[str, float, float]]:
    """Numbers a markdown cell quotes that count as measurements: ``[(as written, value, half-ulp)]``.

    Applies the exclusion rules in this module's docstring. When ``contexts`` is a list, the text
    around each number (after cleaning) is appended to it, one entry per returned number.
    """
    text = _clean_markdown(text)
    if contexts is None:
        contexts = []

    def around(match: re.Match) -> str:
        return " ".join(text[max(0, match.start() - 50) : match.end() + 30].split())

    found: list[tuple[str, float, float]] = []
    # "2.3 \times 10^{-9}" and "10^{-6}" first, then blank them out.
    for match in _LATEX_POW10.finditer(text):
        mantissa, power = match.group(1), int(match.group(2))
        decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
        found.append(
            (match.group(0), float(mantissa) * 10.0**power, 0.5 * 10.0 ** (power - decimals))
        )
        contexts.append(around(match))
    text = _LATEX_POW10.sub(" ", text)
    for match in _BARE_POW10.finditer(text):
        power = int(match.group(1))
        if abs(power) > 1:
            found.append((match.group(0), 10.0**power, 0.5 * 10.0**power))
            contexts.append(around(match))
    text = _BARE_POW10.sub(" ", text)
    for match in _NUMBER.finditer(text):
        written = match.group(0).strip()
        after = (match.group("after") or "").strip()
        if after in ("st", "nd", "rd", "th") or (match.group("glued") and not after):
            continue
        if match.group("num").startswith("0") and len(match.group("num")) > 1:
            continue  # "07": a notebook number
        value, half_ulp = _value(match)
        is_integer = not match.group("frac") and not match.group("exp")
        if is_integer and after != "%" and (value <= 10 or 1900 <= value <= 2099):
            continue
        if is_integer and after == "%" and value in (0, 100):
            continue
        found.append((written, value, half_ulp))
        contexts.append(around(match))
    return found


def code_numbers(text: str) -> list[float]:
    """Every number in code or output text; one printed with a % also stands for its fraction."""
    text = text.replace("\u2212", "-")
    values: list[float] = []
    for match in re.finditer(r"(\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)(\s*%)?", text):
        value = float(match.group(1))
        values.append(value)
        if match.group(2):
            values.append(value / 100.0)
    for match in re.finditer(r"\d{1,3}(?:,\d{3})+", text):
        values.append(float(match.group(0).replace(",", "")))
    for match in _LATEX_POW10.finditer(text):
        values.append(float(match.group(1)) * 10.0 ** int(match.group(2)))
    return values


def _cell_text(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _output_text(cell: dict) -> str:
    parts: list[str] = []
    for out in cell.get("outputs", []):
        text = out.get("text")
        if text is not None:
            parts.append("".join(text) if isinstance(text, list) else text)
        for mime, data in out.get("data", {}).items():
            if mime.startswith("text/") or mime in ("application/json",):
                parts.append("".join(data) if isinstance(data, list) else str(data))
    return "\n".join(parts)


def _appears(value: float, half_ulp: float, pool: list[float]) -> bool:
    tolerance = half_ulp * (1 + 1e-9) + 1e-12 * abs(value)
    target = abs(value)
    return any(abs(abs(v) - target) <= tolerance for v in pool)


def _normalise_key(written: str) -> str:
    return written.replace("\u2212", "-").replace(",", "").replace(" ", "").lstrip("-+")


def unbacked_numbers(notebook: dict, allowlist: dict[str, str] | None = None) -> list[dict]:
    """The prose numbers of ``notebook`` that no code cell or stored output backs.

    ``notebook``: the parsed .ipynb JSON. ``allowlist``: ``{number as written: reason}`` for this
    notebook. Returns ``[{"cell": index, "number": as written, "context": text around it}]``.
    """
    allowed = {_normalise_key(key) for key in (allowlist or {})}
    pool: list[float] = []
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            pool.extend(code_numbers(_cell_text(cell)))
            pool.extend(code_numbers(_output_text(cell)))
    offenders = []
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        text = _cell_text(cell)
        contexts: list[str] = []
        for (written, value, half_ulp), context in zip(
            prose_numbers(text, contexts), contexts, strict=True
        ):
            key = _normalise_key(written.rstrip("%x× ").strip())
            if key in allowed or _normalise_key(written) in allowed:
                continue
            if _appears(value, half_ulp, pool):
                continue
            if written.endswith("%") and _appears(value / 100.0, half_ulp / 100.0, pool):
                continue
            offenders.append({"cell": index, "number": written, "context": context})
    return offenders


def _format(path_name: str, offenders: list[dict]) -> str:
    lines = [
        f"{path_name}: {len(offenders)} number(s) in markdown appear in no code cell or stored "
        f"output of this notebook (print them from a cell, drop them, or allowlist a true "
        f"constant with its reason in {ALLOWLIST_FILE.relative_to(ROOT)}):"
    ]
    for item in offenders:
        lines.append(f"  cell {item['cell']}: {item['number']!r}  ...{item['context']}...")
    return "\n".join(lines)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_markdown_numbers_come_from_the_notebook(path):
    notebook = json.loads(path.read_text(encoding="utf-8"))
    offenders = unbacked_numbers(notebook, load_allowlist().get(path.name, {}))
    assert not offenders, _format(path.name, offenders)


def test_allowlist_entries_have_reasons_and_are_used():
    names = {p.name for p in NOTEBOOKS}
    for notebook_name, entries in load_allowlist().items():
        assert notebook_name in names, f"allowlist names a missing notebook {notebook_name}"
        prose = " ".join(
            _cell_text(c)
            for c in json.loads((ROOT / "notebooks" / notebook_name).read_text())["cells"]
            if c["cell_type"] == "markdown"
        )
        quoted = {_normalise_key(w.rstrip("%x× ").strip()) for w, _, _ in prose_numbers(prose)}
        quoted |= {_normalise_key(w) for w, _, _ in prose_numbers(prose)}
        for number, reason in entries.items():
            assert isinstance(reason, str) and len(reason.strip()) >= 10, (
                f"{notebook_name}: allowlist entry {number!r} needs a reason"
            )
            assert _normalise_key(number) in quoted, (
                f"{notebook_name}: allowlist entry {number!r} is quoted nowhere in its prose: "
                "remove it"
            )


# ---------------------------------------------------------------- the guard can fail


def _tiny_notebook(markdown: str, code: str = "x = 1", output: str = "") -> dict:
    cell = {"cell_type": "code", "source": code, "outputs": []}
    if output:
        cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": output}]
    return {"cells": [{"cell_type": "markdown", "source": markdown}, cell]}


def test_planted_number_in_a_copy_of_a_real_notebook_fails():
    path = next(p for p in NOTEBOOKS if p.name.startswith("02_"))
    notebook = json.loads(path.read_text(encoding="utf-8"))
    allow = load_allowlist().get(path.name, {})
    before = unbacked_numbers(notebook, allow)
    index = next(i for i, c in enumerate(notebook["cells"]) if c["cell_type"] == "markdown")
    cell = notebook["cells"][index]
    cell["source"] = _cell_text(cell) + "\n\nThe measured variance drops to 0.4137 after training."
    after = unbacked_numbers(notebook, allow)
    planted = [o for o in after if o not in before]
    assert planted == [{"cell": index, "number": "0.4137", "context": planted[0]["context"]}], (
        planted
    )
    assert "0.4137" in _format(path.name, after) and f"cell {index}" in _format(path.name, after)


def test_allowlisted_constant_passes_and_only_in_its_notebook():
    notebook = _tiny_notebook("DeepSeekMath trains with a KL coefficient of 0.04.")
    assert [o["number"] for o in unbacked_numbers(notebook)] == ["0.04"]
    assert unbacked_numbers(notebook, {"0.04": "DeepSeekMath's beta, a paper constant"}) == []
    assert unbacked_numbers(notebook, {"0.05": "another constant"}) != []


@pytest.mark.parametrize(
    ("prose", "output", "backed"),
    [
        ("The run ends at 99.5% exact-sort.", "test exact-sort 0.995", True),
        ("The run ends at 0.995 exact-sort.", "test exact-sort: 99.5%", True),
        ("The ratio is about 0.66.", "ratio 0.6614", True),
        ("The ratio is about 0.67.", "ratio 0.6614", False),
        ("A 1.8x speed-up.", "speed-up 1.79", True),
        ("A 1.8x speed-up.", "speed-up 1.74", False),
        ("The leftover gradient is 2.3e-9.", "norm 2.34e-09", True),
        ("The leftover gradient is about 1e-9.", "norm 2.34e-09", False),
        ("It is $2.3 \\times 10^{-9}$.", "norm 2.34e-09", True),
        ("It went from 0.070 to 0.999.", "P: 0.0700 -> 0.9990", True),
        ("It went from 0.070 to 0.990.", "P: 0.0700 -> 0.9990", False),
        ("13 of 35 runs reach the target.", "13 / 35 reach it", True),
        ("14 of 35 runs reach the target.", "13 / 35 reach it", False),
        ("A loss of \u22120.25.", "-0.25", True),
        ("1,000 samples.", "n = 1000", True),
    ],
)
def test_matching_rules(prose, output, backed):
    offenders = unbacked_numbers(_tiny_notebook(prose, output=output))
    assert (offenders == []) is backed, offenders


@pytest.mark.parametrize(
    "prose",
    [
        "See [notebook 07](07_grpo_training.ipynb) and notebooks 10 and 11.",
        "DeepSeekMath (arXiv 2402.03300) eq. 3 and PPO eqs. 6-7; Williams (1992).",
        "Section 4b and §2.5 and table 2 and cell 13.",
        "As TRL 1.16 and torch 2.6 compute it; see `lecture_17.py`, k3 and float32.",
        "## 3. A heading\n\n1. first\n2. second\n\nThe two runs, three seeds, G = 8.",
        "The 1st and 3rd groups. Notebook 12 and nb 05.",
        "Weights in 16-bit precision, 32-bit Adam moments.",
    ],
)
def test_non_measurements_are_not_flagged(prose):
    assert unbacked_numbers(_tiny_notebook(prose)) == []


def test_a_large_integer_count_is_checked():
    assert [o["number"] for o in unbacked_numbers(_tiny_notebook("It took 4096 samples."))] == [
        "4096"
    ]
