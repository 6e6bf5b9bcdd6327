"""The report sections of bench_staleness, bench_pass_at_k, bench_multi_turn and bench_collapse
print the verdicts that ``seed_stats.compare_seeds`` gives on the stored per-seed values, never a
verdict stored in the results file.

Review r5 MAJOR 16-3: ``compare_seeds`` once said "within seed noise" for every p >= 0.05, also
where the exact test could not reach 0.05 whatever the runs did (five paired seeds: smallest
p = 0.0625). It now says "undecided: ... (smallest possible p = ...)" there and "no difference
detected" where the test could have rejected and did not. Results files written before still hold
the old string, so each section recomputes its comparisons from the per-seed values (as
``bench_length_drift``'s does). Each test below computes the expected result itself with
``compare_seeds`` from the stored per-seed values, renders the section from a copy of the
results file whose stored verdicts (and p-values) are all set to something else, and checks
every row; ``test_planted_*`` shows that a section printing the stored records fails it.
"""

from __future__ import annotations

import copy
import statistics
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import _common  # noqa: E402
import bench_collapse  # noqa: E402
import bench_multi_turn  # noqa: E402
import bench_pass_at_k  # noqa: E402
import bench_staleness  # noqa: E402

from pgrl_helpers.seed_stats import LEGACY_VERDICT, compare_seeds, format_comparison  # noqa: E402

#: What a stored record says in the copies the sections render: the legacy string, or a
#: verdict compare_seeds could give but does not give on these values.
STORED_WORDINGS = (LEGACY_VERDICT, "no difference detected at 0.05 (p = 0.5)")
STALE_P = 0.987654  # a stored p-value that no comparison here has: printed as 0.988


def load(name: str) -> dict:
    payload = _common.load(name)
    assert payload is not None, f"benchmarks/results/{name}.json is missing"
    return payload


def with_stored(records, verdict: str) -> None:
    """Overwrite every stored comparison record's verdict and p-value (in place)."""
    for record in records:
        record["verdict"], record["p_value"] = verdict, STALE_P


def row(text: str, start: str) -> str:
    lines = [line for line in text.splitlines() if line.startswith(start)]
    assert len(lines) == 1, f"{len(lines)} rows start with {start!r}"
    return lines[0]


def assert_no_stored(text: str, verdict: str) -> None:
    assert LEGACY_VERDICT not in text
    assert verdict not in text, f"the section printed the stored verdict {verdict!r}"
    assert f"{STALE_P:.3f}" not in text, "the section printed a stored p-value"


# ---- bench_staleness -------------------------------------------------------------------


def staleness_expected(payload: dict) -> list[dict]:
    s = payload["summary"]
    out = []
    for c in payload["comparisons"]:
        a, b = c["name_a"], c["name_b"]
        assert s[a]["seeds"] == s[b]["seeds"]  # the same seeds in the same order: paired
        out.append(compare_seeds(s[a]["test_exact"], s[b]["test_exact"], a, b, paired=True))
    return out


def check_staleness(section) -> None:
    stored = load(bench_staleness.NAME)
    expected = staleness_expected(stored)
    assert len(expected) == 16
    for verdict in STORED_WORDINGS:
        payload = copy.deepcopy(stored)
        with_stored(payload["comparisons"], verdict)
        text = section(payload)
        assert_no_stored(text, verdict)
        for x in expected:
            line = row(text, f"| {x['name_a']} | {x['name_b']} |")
            assert line.endswith(f"| {x['p_value']:.3f} | {x['verdict']} |"), line
        below = sum(x["p_value"] < 0.05 for x in expected)
        undecided = sum(x["verdict"].startswith("undecided: ") for x in expected)
        assert f"{below} of {len(expected)} comparisons have p < 0.05, {undecided} are " in text


def test_staleness_section_recomputes_every_verdict():
    check_staleness(bench_staleness.section)


def test_planted_staleness_section_printing_stored_verdicts_is_caught(monkeypatch):
    monkeypatch.setattr(bench_staleness, "rendered_comparisons", lambda p: p["comparisons"])
    with pytest.raises(AssertionError):
        check_staleness(bench_staleness.section)


# ---- bench_pass_at_k -------------------------------------------------------------------


def pass_at_k_expected(payload: dict) -> dict:
    """{(region, "pass@k"): compare_seeds(after, before)} from the per-seed curves, at every k
    the stored file compares."""
    ks, out = payload["ks"], {}
    for region, by_k in payload["comparisons"].items():
        for k_name in by_k:
            i = ks.index(int(k_name.removeprefix("pass@")))
            before = [s["before"][region]["pass_at_k"][i] for s in payload["per_seed"]]
            after = [s["after"][region]["pass_at_k"][i] for s in payload["per_seed"]]
            out[region, k_name] = compare_seeds(
                after, before, "after RL", "checkpoint", paired=True
            )
    return out


def check_pass_at_k(section) -> None:
    stored = load(bench_pass_at_k.NAME)
    expected = pass_at_k_expected(stored)
    assert len(expected) == 15
    for verdict in STORED_WORDINGS:
        payload = copy.deepcopy(stored)
        with_stored([c for by_k in payload["comparisons"].values() for c in by_k.values()], verdict)
        text = section(payload)
        assert_no_stored(text, verdict)
        for (region, k_name), x in expected.items():
            line = row(text, f"| {region} | {k_name} |")
            assert line.endswith(f"| {x['p_value']:.3f} | {x['verdict']} |"), line
        undecided = sum(x["verdict"].startswith("undecided: ") for x in expected.values())
        assert f"Verdicts (of {len(expected)}): {undecided} undecided" in text


def test_pass_at_k_section_recomputes_every_verdict():
    check_pass_at_k(bench_pass_at_k.section)


def test_planted_pass_at_k_section_printing_stored_verdicts_is_caught(monkeypatch):
    monkeypatch.setattr(bench_pass_at_k, "rendered_comparisons", lambda r: r["comparisons"])
    with pytest.raises(AssertionError):
        check_pass_at_k(bench_pass_at_k.section)


# ---- bench_multi_turn ------------------------------------------------------------------


def multi_turn_expected(payload: dict) -> dict:
    masked, unmasked = payload["runs"]["masked"], payload["runs"]["unmasked (bug)"]
    assert [x["seed"] for x in masked] == [x["seed"] for x in unmasked]  # paired by seed
    last = payload["last_epochs"]

    def train(x):
        return statistics.fmean(x["train_reward"][-last:])

    return {
        what: compare_seeds(
            [value(x) for x in masked],
            [value(x) for x in unmasked],
            "masked",
            "unmasked (bug)",
            paired=True,
        )
        for what, value in (("test exact", lambda x: x["test_exact"]), ("training reward", train))
    }


def check_multi_turn(section) -> None:
    stored = load(bench_multi_turn.NAME)
    expected = multi_turn_expected(stored)
    for verdict in STORED_WORDINGS:
        payload = copy.deepcopy(stored)
        with_stored([payload["comparison_test_exact"], payload["comparison_train_reward"]], verdict)
        text = section(payload)
        assert_no_stored(text, verdict)
        for what, x in expected.items():
            assert f"{what}: {format_comparison(x)}" in text, what


def test_multi_turn_section_recomputes_both_verdicts():
    check_multi_turn(bench_multi_turn.section)


def test_planted_multi_turn_section_printing_stored_verdicts_is_caught(monkeypatch):
    def stored(r):
        return {
            "test exact": r["comparison_test_exact"],
            "training reward": r["comparison_train_reward"],
        }

    monkeypatch.setattr(bench_multi_turn, "rendered_comparisons", stored)
    with pytest.raises(AssertionError):
        check_multi_turn(bench_multi_turn.section)


# ---- bench_collapse --------------------------------------------------------------------


def collapse_expected(payload: dict) -> list[dict]:
    first = next(iter(payload["settings"]))
    tests = {
        n: {r["seed"]: r["final_test_exact"] for r in payload["runs"] if r["setting"] == n}
        for n in payload["settings"]
    }
    out = []
    for name in list(payload["settings"])[1:]:
        assert list(tests[name]) == list(tests[first])  # the same seeds: paired
        a, b = list(tests[name].values()), list(tests[first].values())
        out.append(compare_seeds(a, b, name, first, paired=True))
    return out


def check_collapse(section) -> None:
    stored = load(bench_collapse.NAME)
    expected = collapse_expected(stored)
    assert len(expected) == 2
    for verdict in STORED_WORDINGS:
        payload = copy.deepcopy(stored)
        with_stored(payload["comparisons"].values(), verdict)
        payload["table"] = "| planted stored table |"
        text = section(payload)
        assert_no_stored(text, verdict)
        assert "planted stored table" not in text
        for x in expected:
            assert f"{x['name_a']} vs {x['name_b']}: {x['verdict']}" in text
            line = row(text, f"| {x['name_a']} |")
            assert f"| {x['p_value']:.3f} |" in line, line


def test_collapse_section_recomputes_its_verdicts_and_table():
    check_collapse(bench_collapse.section)


def test_planted_collapse_section_printing_stored_records_is_caught(monkeypatch):
    def planted(payload):  # the section as it was: the stored table and records
        monkeypatch.setattr(bench_collapse, "comparisons", lambda runs: payload["comparisons"])
        monkeypatch.setattr(bench_collapse, "summary_table", lambda runs: payload["table"])
        return bench_collapse.section(payload)

    with pytest.raises(AssertionError):
        check_collapse(planted)
