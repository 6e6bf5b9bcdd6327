"""The lecture benchmarks (``bench_lecture.py``, ``bench_lecture_ablation.py``) and RESULTS.md.

Review r5 MAJOR (issue 48): the lecture's 2.7 / 3.3 / 3.3 / 2.7 had no source (``lecture_17.py``
prints no final numbers and never trains ``max_rewards``), and z-scores and "within 2 std" were
built on them; section 10 corrected its six paired tests with Bonferroni and stated no floor.
Now: no lecture number, the lecture's verdicts in words, our medians (range) over the seeds, and
Holm's correction with each test's smallest possible p. The stored tables are what the stored
per-seed runs give (``--retable`` recomputes them without training). Section 16 states that five
paired seeds cannot reach 0.05.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import _common  # noqa: E402
import bench_collapse  # noqa: E402
import bench_lecture  # noqa: E402
import bench_lecture_ablation as ablation  # noqa: E402

from pgrl_helpers.seed_stats import paired_permutation_p_value  # noqa: E402

RESULTS_MD = (BENCHMARKS / "RESULTS.md").read_text()
#: The unsourced numbers and the statistics built on them, in any form they took.
GONE = ("(lecture: 2.7", "(lecture: 3.3", "lecture (1 run)", "z = (lecture", "within 2 std",
        "seeds below the lecture", "Bonferroni", "2.7 / 3.3")  # fmt: skip


def results_section(title: str) -> str:
    start = RESULTS_MD.index(title)
    end = RESULTS_MD.find("\n## ", start)
    return RESULTS_MD[start:end]


def test_holm_hand_example():
    # sorted: 0.005 < 0.05/4 rejected, 0.01 < 0.05/3 rejected, 0.03 >= 0.05/2: stop; 0.04 kept
    out = ablation.holm([0.01, 0.04, 0.03, 0.005])
    assert [r for _, r in out] == [True, False, False, True]
    assert [t for t, _ in out] == pytest.approx([0.05 / 3, 0.05, 0.05 / 2, 0.05 / 4])
    # step-down: once one fails, a later p below its own threshold is kept too
    assert [r for _, r in ablation.holm([0.001, 0.03, 0.04])] == [True, False, False]
    # Holm rejects more than Bonferroni: 0.011 > 0.05/4 but < 0.05/3 after the smallest
    assert [r for _, r in ablation.holm([0.001, 0.011, 0.9, 0.9])] == [True, True, False, False]


def test_sign_flip_floor_is_the_smallest_p_the_test_can_give():
    for diffs in ([0.0, 1.0, 0.0, 2.0], [1.0, 1.0, 1.0], [0.0, 0.0], [3.0, 0.0, 0.0, 0.0, 1.0]):
        a, b = diffs, [0.0] * len(diffs)
        k, floor = ablation.sign_flip_floor(a, b)
        assert k == sum(d != 0 for d in diffs)
        # the smallest p over every data set with the same zero pattern (all signs, two sizes)
        nonzero = [i for i, d in enumerate(diffs) if d]
        smallest = min(
            paired_permutation_p_value([s * m * (d != 0) for s, m, d in zip(signs, mags, diffs)], b)
            for signs in itertools.product((1.0, -1.0), repeat=len(diffs))
            for mags in itertools.product((1.0, 2.5), repeat=len(diffs))
        )
        assert floor == pytest.approx(smallest), (diffs, nonzero)


def test_stored_ablation_has_no_lecture_numbers_and_its_tables_are_the_runs():
    payload = _common.load(ablation.NAME)
    text = json.dumps(payload)
    for phrase in GONE:
        assert phrase not in text, phrase
    for stale in ablation.STALE_KEYS:
        assert stale not in payload
    for entry in payload["reproduction"].values():
        assert not {"lecture", "z", "consistent", "seeds_below_lecture"} & set(entry)
    derived = ablation.tables(payload)
    for key, value in derived.items():
        if key != "markdown":
            assert payload[key] == value, f"{key} is not what the stored runs give: --retable"
    md = (_common.RESULTS_DIR / f"{ablation.NAME}.md").read_text()
    assert md == derived["markdown"] + "\n"
    # the six comparisons: the two centred modes above raw rewards survive Holm, nothing else
    rejected = {(c["a"], c["b"]) for c in payload["mode_comparisons"] if c["rejected"]}
    assert rejected == {("rewards", "centered_rewards"), ("rewards", "normalized_rewards")}
    assert len(payload["mode_comparisons"]) == 6


def test_stored_reproduction_tables_are_the_runs():
    payload = _common.load(bench_lecture.NAME)
    built = bench_lecture.tables(payload)
    assert payload["table"] == built["table"] and payload["fixes_table"] == built["fixes_table"]
    assert "lecture:" not in payload["table"]


def test_results_md_quotes_the_lecture_in_words_and_uses_holm():
    for title in ("## 2. Lecture reproduction", "## 10. Which of the four lecture fixes matter"):
        section = results_section(title)
        for phrase in GONE:
            assert phrase not in section, (title, phrase)
        assert "haven't really learned sorting very well" in section
        assert "it never trains `max_rewards`" in section
    section10 = results_section("## 10. Which of the four lecture fixes matter")
    assert "6 comparisons" in section10 and "Holm" in section10
    assert "smallest possible p" in section10 and "median (range)" in section10
    assert "cannot sort in general" not in results_section("## 2. Lecture reproduction")


def test_collapse_section_states_the_floor_of_five_paired_seeds():
    sentence = (
        "With five paired seeds the exact sign-flip test cannot go below p = 0.0625: these "
        "comparisons cannot show a difference at 0.05."
    )
    assert sentence in results_section("## 16. Entropy collapse on the autoregressive task")
    payload = _common.load(bench_collapse.NAME)
    assert sentence in bench_collapse.section(payload)
    more = json.loads(json.dumps(payload))  # the section recomputes its tests from the runs
    more["runs"] += [r | {"seed": r["seed"] + 5} for r in payload["runs"]]
    # ten paired seeds can reach 0.05: no such sentence
    assert "cannot go below" not in bench_collapse.section(more)


def check_mode_verdicts(comparisons_fn):
    """The three verdicts of the Holm-corrected mode comparisons: rejected ("ends higher"),
    undecided (the test's floor 2/2^k is not below its Holm threshold), and no difference
    detected (it could have rejected and did not); never the old "within seed noise"."""

    def runs(values):
        return {"runs": [{"seed": s, "final_mean_reward": v} for s, v in enumerate(values)]}

    ten = [float(v) for v in range(10)]
    reproduction = {
        "low": runs(ten),
        "high": runs([v + 1 for v in ten]),  # above "low" on every seed: p = 2/1024
        "tied": runs([v + (1 if i < 3 else 0) for i, v in enumerate(ten)]),  # 3 seeds differ
        "mixed": runs([v + (0.5 if i % 2 else -0.4) for i, v in enumerate(ten)]),
    }
    rows = {(r["a"], r["b"]): r for r in comparisons_fn(reproduction)}
    assert rows["low", "high"]["rejected"]
    assert rows["low", "high"]["verdict"] == "high ends higher, beyond seed noise"
    tied = rows["low", "tied"]
    assert not tied["rejected"] and tied["smallest_possible_p"] == 2 / 2**3
    assert tied["verdict"].startswith("undecided: 3 differing seeds cannot reach p < ")
    assert tied["verdict"].endswith("(smallest possible p = 0.25)")
    mixed = rows["low", "mixed"]  # all ten differ: floor 2/1024, below every Holm threshold
    assert not mixed["rejected"] and mixed["smallest_possible_p"] < mixed["holm_threshold"]
    assert mixed["verdict"] == (
        f"no difference detected at {mixed['holm_threshold']:.3g} (p = {mixed['p_value']:.3g})"
    )
    assert not any("within seed noise" in r["verdict"] for r in rows.values())


def test_mode_comparison_verdicts_name_the_floor():
    check_mode_verdicts(ablation.mode_comparisons)


def test_planted_old_mode_verdict_is_caught():
    def old(reproduction):  # the verdicts before the floor was named
        rows = ablation.mode_comparisons(reproduction)
        for row in rows:
            if not row["rejected"]:
                row["verdict"] = "within seed noise"
        return rows

    with pytest.raises(AssertionError):
        check_mode_verdicts(old)
