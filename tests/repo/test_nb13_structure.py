"""Notebook 13 after issues 48 and 49: the outlier rate its prose states is the helper's, the
main line ends with the debugging table and "What you learned", the evidence sits in the closing
``## Evidence`` section, and section 10 reads the committed TRL logs with the command line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from pgrl_helpers import symptoms

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "13_troubleshooting.ipynb"


def cells() -> list[dict]:
    return json.loads(NOTEBOOK.read_text())["cells"]


def text(cell: dict) -> str:
    return "".join(cell["source"])


def main_line_and_evidence() -> tuple[str, str]:
    all_cells = cells()
    start = next(i for i, c in enumerate(all_cells) if text(c).startswith("## Evidence"))
    return (
        "\n".join(text(c) for c in all_cells[:start]),
        "\n".join(text(c) for c in all_cells[start:]),
    )


def outlier_rate() -> float:
    """1 / the share of uniform (prompt, response) pairs of length-4 lists over 0-5 that
    ``symptoms.flaky_reward`` pays 1000, counted over all of them."""
    lists = torch.cartesian_prod(*[torch.arange(6)] * 4)
    hits = sum(
        int((symptoms.flaky_reward(lists[i : i + 324], lists.expand(324, -1, -1)) == 1000).sum())
        for i in range(0, len(lists), 324)
    )
    return len(lists) ** 2 / hits


def test_the_outlier_rate_in_the_prose_is_the_helpers():
    """Review r5 MAJOR 13-1: the prose said "one response in a thousand"; the helper pays 1000
    to 1 pair in 316 (the old sentence fails the first assert)."""
    markdown = " ".join(" ".join(text(c).split()) for c in cells() if c["cell_type"] == "markdown")
    assert "in a thousand" not in markdown and "1 in 1000" not in markdown
    stated = [int(n) for n in re.findall(r"\b1 in (\d+)\b", markdown)]
    assert stated and set(stated) == {round(outlier_rate())} == {316}


def test_the_main_line_carries_no_p_value_and_the_evidence_closes_the_notebook():
    main, evidence = main_line_and_evidence()
    headings = [line for c in cells() for line in text(c).splitlines() if line.startswith("## ")]
    assert headings[-2:] == ["## Evidence", "## References"]  # references close every notebook
    assert headings.index("## What you learned") < headings.index("## Evidence")
    for phrase in ("p-value", "sign-flip", "load average", "Holm"):
        assert phrase not in main, phrase
    assert not re.search(r"\bp ?[=<] ?0?\.\d", main)  # a p-value written as "p = 0.01"
    assert "sign-flip" in evidence and "trl_bench" in evidence


def test_the_debugging_table_names_trl_metrics_and_settings():
    main, _ = main_line_and_evidence()
    start = main.index("## When a GRPO run goes wrong")
    table = main[start : main.index("## What you learned")]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) >= 15
    for name in ("frac_reward_zero_std", "completions/clipped_ratio", "clip_ratio/region_mean",
                 "max_completion_length", "mask_truncated_completions", "num_generations",
                 "learning_rate", "beta", "scale_rewards"):  # fmt: skip
        assert name in table, name


def test_section_10_reads_committed_logs_and_its_outputs_show_the_verdicts():
    trl_cells = [c for c in cells() if c["cell_type"] == "code" and "TRL_LOGS" in text(c)]
    assert trl_cells
    for c in trl_cells:
        for name in re.findall(r'TRL_LOGS / "(\w+)"', text(c)):
            assert (
                ROOT / "benchmarks" / "results" / "trl_logs" / name / "trainer_state.json"
            ).is_file()
    out = "".join("".join(o.get("text", "")) for c in trl_cells for o in c.get("outputs", []))
    assert "warning truncation (steps 1-30)" in out and "exit status: 1" in out
    assert "verdict: no warning" in out and "exit status: 0" in out


def test_most_detectors_caught_every_planted_cause_as_what_you_learned_says():
    bench = json.loads((ROOT / "benchmarks" / "results" / "detectors.json").read_text())
    rows = [r for name, r in bench["rates"]["report"].items() if name != "loss_near_zero"]
    assert sum(r["hits"] == r["planted_runs"] for r in rows) > len(rows) / 2
    grad = bench["rates"]["report"]["grad_spike"]
    assert grad["hits"] < grad["planted_runs"]  # "misses when outliers are frequent"
