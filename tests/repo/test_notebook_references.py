"""Every notebook ends with a references section of links (one line each); 00 has the symbol table."""

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "notebooks"
CHECKED = sorted(ROOT.glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("path", CHECKED, ids=lambda p: p.name)
def test_ends_with_references(path):
    cells = json.loads(path.read_text())["cells"]
    last = "".join(cells[-1]["source"])
    assert "## References" in last, "the last cell must hold the references"
    items = [
        line
        for line in last.split("## References", 1)[1].splitlines()
        if line.startswith(("- ", "* "))
    ]
    assert len(items) >= 3 and all("http" in line for line in items), "links, one line each"


def test_start_here_has_the_symbol_table():
    cells = json.loads((ROOT / "00_start_here.ipynb").read_text())["cells"]
    text = " ".join("".join(c["source"]) for c in cells)
    for symbol in (r"$\pi_{\text{ref}}$", r"$\rho$", "$w$", r"$\delta_i$", "$q$", "$s$"):
        assert symbol in text, symbol
