"""Notebook 13 after issues 48 and 49: the outlier rate its prose states is the helper's, the
main line ends with the debugging table and "What you learned", the evidence sits in the closing
``## Evidence`` section, and section 10 reads the committed TRL logs with the command line.
"""

from __future__ import annotations

import json
import re
import statistics
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


def cell(cell_id: str) -> str:
    return " ".join(text(next(c for c in cells() if c.get("id") == cell_id)).split())


def test_a_reused_seed_is_filed_where_the_trl_catalogue_files_it():
    """Review R4 MAJOR: cell 33 said a seed reused per completion "gives the same picture" as
    temperature 0 (with an unsourced anecdote). TRL computes the entropy at the sampling
    temperature, so a reused seed at temperature 1 keeps a normal entropy: the catalogue files
    it under no_variance_within_groups, and the table must too (the old notebook fails)."""
    from pgrl_helpers import trl_diagnose, trl_log

    markdown = " ".join(" ".join(text(c).split()) for c in cells() if c["cell_type"] == "markdown")
    assert "CS336 student" not in markdown and "gives the same picture" not in markdown
    assert "seed" in trl_diagnose.TRL_CATALOGUE["no_variance_within_groups"][1]
    assert "seed" not in trl_diagnose.TRL_CATALOGUE["identical_rollouts"][0]
    rows = text(next(c for c in cells() if c.get("id") == "nb13-debug-table")).splitlines()
    entropy_row = next(r for r in rows if r.startswith("| gradient 0 from step 1, entropy near 0"))
    std_row = next(r for r in rows if r.startswith("| gradient 0 from step 1, `reward_std` > 0"))
    assert "seed" not in entropy_row and "seed" in std_row
    # the temperature run's entropy is near 0 in its committed log, as the prose says
    log = trl_log.load(ROOT / "benchmarks" / "results" / "trl_logs" / "temperature_zero")
    assert max(r["entropy"] for r in log.steps) <= trl_diagnose.NO_ENTROPY


def test_section_3_states_the_benchmarks_goal_result_with_its_spread():
    """Issue 48: the main line states the result once, with its spread (the old cell said only
    "on most of them")."""
    goal = json.loads((ROOT / "benchmarks" / "results" / "detectors.json").read_text())[
        "reward_hacking_goal"
    ]
    m = re.search(
        r"median of ([\d.]+) with the fix \(seeds ([\d.]+)-([\d.]+)\) and ([\d.]+) with the "
        r"loophole \(seeds ([\d.]+)-([\d.]+)\), the fix ahead on (\d+) of the (\d+) seeds",
        cell("nb13-goal-pointer"),
    )
    assert m, "section 3's pointer states no median and spread"
    fix, hole = goal["fixed"], goal["loophole"]
    stated = [float(x) for x in m.groups()[:6]]
    for got, want in zip(stated, [statistics.median(fix), min(fix), max(fix),
                                  statistics.median(hole), min(hole), max(hole)]):  # fmt: skip
        assert abs(got - want) <= 0.005 + 1e-9, (got, want)
    assert int(m[7]) == sum(f > h for f, h in zip(fix, hole)) and int(m[8]) == len(fix)


def test_the_reward_collapse_note_is_what_the_runs_stored():
    """Cell 50: the missed seeds' first rewards, and the committed hit's drop against twice its
    first reward_std, are the stored numbers."""
    from pgrl_helpers import trl_diagnose, trl_log

    bench = json.loads((ROOT / "benchmarks" / "results" / "trl_detectors.json").read_text())
    note = cell("nb13-trl-rates-note")
    missed = bench["rates"]["report"]["reward_collapse"]["missed_seeds"]
    runs = {r["seed"]: r for r in bench["runs"] if r["fault"] == "lr_too_high"}
    firsts = ", ".join(f"{runs[s]['reward_first']:.2f}" for s in missed[:-1])
    assert f"{firsts} and {runs[missed[-1]]['reward_first']:.2f} at the first step" in note
    assert all(runs[s]["reward_last"] == 0 for s in missed)
    steps = trl_log.load(ROOT / "benchmarks" / "results" / "trl_logs" / "lr_too_high").steps
    first, std0 = steps[0]["mean_reward"], steps[0]["reward_std"]
    late = statistics.fmean(r["mean_reward"] for r in steps[-(len(steps) // 4) :])
    assert f"a drop of {first - late:.3f} against 2 x {std0:.3f} = {2 * std0:.3f}" in note
    assert first - late >= trl_diagnose.COLLAPSE_STD * std0  # a hit, as the note says
