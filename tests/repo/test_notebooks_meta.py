"""Static checks on the committed notebooks (nbval re-runs them; this checks how they were saved)."""

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


def load(path):
    return json.loads(path.read_text())


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ is empty"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_saved_from_a_fresh_kernel_top_to_bottom(path):
    assert re.fullmatch(r"\d\d_[a-z0-9_]+\.ipynb", path.name), "name must be NN_snake_case.ipynb"
    cells = load(path)["cells"]
    counts = [
        c["execution_count"]
        for c in cells
        if c["cell_type"] == "code" and "".join(c["source"]).strip()
    ]
    assert counts == list(range(1, len(counts) + 1)), (
        f"execution counts {counts} are not 1..N: re-run from a fresh kernel and save"
    )
    for cell in cells:
        for out in cell.get("outputs", []):
            assert out["output_type"] != "error", "a stored output is an error"
            text = "".join(out.get("text", ""))
            assert not re.search(r"\d+(\.\d+)?it/s", text), "console tqdm rates: use tqdm.auto"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_opens_with_a_title_and_objectives(path):
    cells = load(path)["cells"]
    first = "".join(cells[0]["source"])
    assert cells[0]["cell_type"] == "markdown" and first.startswith("# "), "first cell: a # title"
    head = " ".join("".join(c["source"]) for c in cells[:3]).lower()
    assert "objective" in head or "what you will" in head, "state the learning objectives on top"
    assert "prerequisite" in head, "state the prerequisites on top"


def test_start_here_links_every_notebook():
    start = next(p for p in NOTEBOOKS if p.name.startswith("00_"))
    text = " ".join("".join(c["source"]) for c in load(start)["cells"])
    for path in NOTEBOOKS:
        if path is not start:
            assert f"({path.name})" in text, f"00_start_here does not link {path.name}"
