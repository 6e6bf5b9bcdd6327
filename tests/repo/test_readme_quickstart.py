"""README.md's "Quick start" (under "Use the package") runs as written, and says what it prints.

Every ```python block between the heading ``### Quick start`` and the next heading is executed,
in order, in one namespace, as a reader would paste them. The blocks check their own central
claim (the run learns); this file checks the rest: the printed lines the README quotes, the
install line (the pinned torch from PyTorch's CPU index) and the preset the run uses.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MARKER = "### Quick start"


def quick_start_blocks(text: str, marker: str = MARKER) -> list[str]:
    """The ```python blocks under ``marker`` up to the next heading (fence-aware)."""
    blocks, current, inside, in_fence = [], None, False, False
    for line in text.splitlines():
        if line.startswith("```"):
            if in_fence:
                if current is not None:
                    blocks.append("\n".join(current) + "\n")
                current, in_fence = None, False
            else:
                in_fence = True
                current = [] if inside and line.strip() == "```python" else None
            continue
        if in_fence:
            if current is not None:
                current.append(line)
        elif line.startswith("#"):
            inside = line.strip() == marker
    return blocks


def test_the_extraction_finds_the_blocks_and_only_them():
    text = "## A\n```python\nx = 0\n```\n### Quick start\n```python\n# a comment\nx = 1\n```\n"
    text += "```bash\nls\n```\n```python\ny = 2\n```\n### Next\n```python\nz = 3\n```\n"
    assert quick_start_blocks(text) == ["# a comment\nx = 1\n", "y = 2\n"]
    blocks = quick_start_blocks(README.read_text())
    assert len(blocks) == 2, "the README's quick start: tensors, then a run"
    assert "aggregate_loss(" in blocks[0] and "run_policy_gradient(" in blocks[1]


def test_the_install_line_is_the_setups_cpu_torch():
    spec = importlib.util.spec_from_file_location("tasks", ROOT / "tasks.py")
    tasks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tasks)  # puts the repository root on sys.path: tools/ imports
    from tools import torch_install

    torch_pin = torch_install.pinned_torch(["requirements.txt"])
    line = f"pip install {torch_pin} --index-url {torch_install.TORCH_CPU_INDEX}"
    assert line in README.read_text(), f"README must give the researcher: {line}"


def test_the_install_line_names_every_pip_extra():
    listed = re.search(
        r"(?ms)^\[project.optional-dependencies\]\n(.*?)\n\n", (ROOT / "pyproject.toml").read_text()
    )
    extras = re.findall(r"(?m)^([\w-]+) = \[", listed[1])
    assert "real-model" in extras and "widgets" in extras
    install = next(
        line for line in README.read_text().splitlines() if line.startswith("pip install -e .")
    )
    for name in extras:
        assert f".[{name}]" in install, f"the README's `pip install -e .` line must name .[{name}]"


@pytest.fixture(scope="module")
def quick_start():
    """(namespace, printed output) of the quick start, run once."""
    namespace: dict = {"__name__": "readme_quick_start"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for block in quick_start_blocks(README.read_text()):
            exec(compile(block, str(README), "exec"), namespace)
    return namespace, out.getvalue()


def test_the_quick_start_runs_and_prints_what_the_readme_says(quick_start):
    namespace, printed = quick_start
    assert "padding gets no gradient: True" in printed
    history = namespace["history"]
    assert history.stop_reason == "max_epochs"
    # the repr the README quotes in a comment, up to its "...", is the printed one
    quoted = re.search(
        r"print\(history\)\s+# (History\(.*?); last step: \.\.\.\)", README.read_text()
    )
    assert quoted and quoted[1] in printed, (quoted and quoted[1], printed)
    assert repr(history).startswith(quoted[1])


def test_the_run_is_the_preset_and_learns_as_the_readme_says(quick_start):
    from pgrl_helpers import TrainConfig

    namespace, printed = quick_start
    assert namespace["config"] == TrainConfig.preset("generalizing_transformer")
    evals = namespace["history"].evals()
    assert evals[0]["validation_exact_sort"] < 0.1 < 0.9 < evals[-1]["validation_exact_sort"]
    assert len(evals) == 21 and evals[-1]["epoch"] == 200
    text = README.read_text()
    assert "climbs from 0% to above 90% in its 200 epochs" in text
    assert f"{evals[-1]['test_exact_sort']:.1%}" in printed
