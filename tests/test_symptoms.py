"""The symptom catalogue (pgrl_helpers.symptoms): symptom -> cause -> fix -> metric to watch.

Every metric the catalogue tells a reader to watch is one the loop logs (``history.METRICS``)
and, after the slash, one TRL logs; every finding ``diagnose`` can emit has an entry and
every entry is emitted by some rule; the table renders one row per entry; the planted runs
name only catalogued findings. Each check is shown to fail on a planted fault.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from pgrl_helpers import diagnose as dg
from pgrl_helpers import symptoms
from pgrl_helpers.config import TrainConfig
from pgrl_helpers.history import METRICS
from pgrl_helpers.sort_task import exact_sort, sort_distance_reward_batch
from pgrl_helpers.symptoms import (
    CATALOGUE,
    PLANTED,
    catalogue_table,
    exact_sort_reward,
    flaky_reward,
    healthy_config,
    planted_run,
    wrong_answer_penalty,
)

DIAGNOSE_SOURCE = Path(dg.__file__).read_text()


def watched(watch: str) -> tuple[list[str], list[str]]:
    """'grad_norm, ratio_mean / TRL grad_norm, clip_ratio/region_mean' ->
    (['grad_norm', 'ratio_mean'], ['grad_norm', 'clip_ratio/region_mean']).

    Names are separated by ', ', ' next to ' or ' and '; words after a name ('per reward')
    and articles ('an accuracy reward': prose, no metric name) are dropped.
    """
    ours, _, trl = watch.partition(" / TRL ")
    split = re.compile(r",\s*| next to | and ")
    names = ([], [])
    for side, text in zip(names, (ours, trl), strict=True):
        for piece in split.split(text):
            first = piece.split()[0] if piece.split() else ""
            if first and first not in ("a", "an"):
                side.append(first)
    return names


def unknown_loop_metrics(catalogue: dict) -> dict[str, list[str]]:
    """finding -> the metrics it says to watch that the loop does not log."""
    problems = {}
    for name, (*_, watch) in catalogue.items():
        ours, _ = watched(watch)
        missing = [m for m in ours if m not in METRICS]
        if missing or not ours or " / TRL " not in watch:
            problems[name] = missing or ["(no 'ours / TRL' metric)"]
    return problems


def emitted_findings(source: str) -> set[str]:
    """The finding names ``diagnose``'s rules can emit: every ``_finding("<name>", ...)``."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "_finding":
            first = node.args[0]
            assert isinstance(first, ast.Constant), f"line {node.lineno}: a computed name"
            names.add(first.value)
    return names


def table_rows(table: str) -> list[list[str]]:
    """The cells of a markdown table's body rows (header and separator dropped)."""
    lines = table.splitlines()
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines[2:]]


# ---- every metric to watch is logged ----------------------------------------------------------


def test_the_watch_parser_on_every_shape_the_catalogue_uses():
    assert watched("grad_norm, ratio_mean / TRL grad_norm, clip_ratio/region_mean") == (
        ["grad_norm", "ratio_mean"],
        ["grad_norm", "clip_ratio/region_mean"],
    )
    assert watched(
        "validation_exact_sort next to validation_mean_reward / TRL rewards/<fn>/mean per reward"
    ) == (["validation_exact_sort", "validation_mean_reward"], ["rewards/<fn>/mean"])
    assert watched("mean_reward next to validation_exact_sort / TRL reward and an accuracy reward")[
        1
    ] == ["reward"]


def test_every_metric_to_watch_is_one_the_loop_logs():
    assert unknown_loop_metrics(CATALOGUE) == {}
    assert {m for *_, w in CATALOGUE.values() for m in watched(w)[0]} >= {
        "grad_norm",
        "frac_reward_zero_std",
        "entropy",
        "kl",
        "clip_fraction",
        "response_length",
        "validation_exact_sort",
    }


def test_a_misspelt_or_missing_metric_is_caught():
    symptom, causes, fixes, watch = CATALOGUE["entropy_collapse"]
    typo = {**CATALOGUE, "entropy_collapse": (symptom, causes, fixes, "entropies / TRL entropy")}
    assert unknown_loop_metrics(typo) == {"entropy_collapse": ["entropies"]}
    no_trl = {**CATALOGUE, "kl_blowup": (symptom, causes, fixes, "kl")}
    assert list(unknown_loop_metrics(no_trl)) == ["kl_blowup"]


def trl_logged_names() -> set[str]:
    """Every metric name TRL's GRPOTrainer logs (``self._metrics[mode]["..."]``, an f-string's
    field written ``<fn>``), plus the transformers Trainer's ``grad_norm``. Read from the
    installed sources, never imported."""
    trl = importlib.util.find_spec("trl")
    transformers = importlib.util.find_spec("transformers")
    if trl is None or transformers is None:
        pytest.skip("the TRL extra is not installed (pip install -r requirements-scale.txt)")
    grpo = (Path(trl.origin).parent / "trainer" / "grpo_trainer.py").read_text()
    names = {
        re.sub(r"\{[^}]*\}", "<fn>", name)
        for name in re.findall(r'_metrics\[mode\]\[f?"([^"]+)"\]', grpo)
    }
    trainer = (Path(transformers.origin).parent / "trainer.py").read_text()
    if 'logs["grad_norm"]' in trainer:
        names.add("grad_norm")
    return names


def test_every_trl_name_is_one_trls_grpo_trainer_logs():
    logged = trl_logged_names()
    assert {"frac_reward_zero_std", "clip_ratio/region_mean", "kl"} <= logged  # the scan works
    for name, (*_, watch) in CATALOGUE.items():
        trl = watched(watch)[1]
        assert trl, name
        assert set(trl) <= logged, (name, sorted(set(trl) - logged))
    assert "clip_ratio/region_men" not in logged  # a misspelt name would fail the line above


# ---- every finding diagnose emits is catalogued ------------------------------------------------


def test_every_finding_diagnose_can_emit_is_catalogued_and_every_entry_is_emitted():
    emitted = emitted_findings(DIAGNOSE_SOURCE)
    assert emitted == set(CATALOGUE), emitted ^ set(CATALOGUE)
    assert len(emitted) == 12


def test_the_scan_sees_a_finding_that_is_not_catalogued():
    planted = DIAGNOSE_SOURCE.replace('_finding("kl_blowup"', '_finding("kl_explosion"', 1)
    assert planted != DIAGNOSE_SOURCE
    assert emitted_findings(planted) - set(CATALOGUE) == {"kl_explosion"}
    assert set(CATALOGUE) - emitted_findings(planted) == {"kl_blowup"}


def test_a_finding_takes_its_texts_from_the_catalogue_and_an_unknown_name_fails():
    for name, (symptom, causes, fixes, watch) in CATALOGUE.items():
        finding = dg._finding(name, "the detail")
        assert (finding.name, finding.detail) == (name, "the detail")
        assert (finding.symptom, finding.causes, finding.fixes, finding.watch) == (
            symptom,
            causes,
            fixes,
            watch,
        )
    with pytest.raises(KeyError, match="kl_explosion"):
        dg._finding("kl_explosion", "a name the catalogue lacks")
    assert dg.CATALOGUE is CATALOGUE and dg.catalogue_table is catalogue_table  # one source


# ---- the table ---------------------------------------------------------------------------------


def test_the_table_has_one_row_per_entry_with_its_texts_in_order():
    table = catalogue_table()
    assert table.splitlines()[:2] == [
        "| finding | symptom | likely cause | fix | metric to watch (ours / TRL) |",
        "|---|---|---|---|---|",
    ]
    rows = table_rows(table)
    assert len(rows) == len(CATALOGUE) == len(table.splitlines()) - 2
    for row, (name, texts) in zip(rows, CATALOGUE.items(), strict=True):
        assert row == [f"`{name}`", *texts]


def test_no_catalogue_text_can_break_a_row():
    for name, texts in CATALOGUE.items():
        assert len(texts) == 4, name
        for text in texts:
            assert text and "|" not in text and "\n" not in text, (name, text)


def test_a_pipe_in_a_text_would_break_its_row(monkeypatch):
    """Planted fault: a '|' in a text splits its cell, so the row check above would fail."""
    broken = {**CATALOGUE, "kl_blowup": ("KL | blow-up", *CATALOGUE["kl_blowup"][1:])}
    monkeypatch.setattr(symptoms, "CATALOGUE", broken)
    rows = table_rows(symptoms.catalogue_table())
    assert len(rows[list(broken).index("kl_blowup")]) == 6  # 5 cells expected


# ---- the planted runs --------------------------------------------------------------------------


def test_each_planted_cause_is_a_catalogued_finding_with_a_valid_config_pair():
    assert set(PLANTED) == set(CATALOGUE)  # every finding has a planted cause and its fix
    for name, words in PLANTED.items():
        assert words, name
        planted, fixed = planted_run(name, seed=3)
        assert isinstance(planted, TrainConfig) and isinstance(fixed, TrainConfig)
        planted.validate()
        fixed.validate()
        assert planted != fixed, f"{name}: the fix must change something"
        assert planted.seed == fixed.seed == 3


def test_the_healthy_run_is_the_base_of_the_planted_ones():
    assert planted_run("loss_near_zero", 5)[0] == healthy_config(5)
    assert planted_run("frozen_ratio", 0) == (
        replace(healthy_config(0), detach_old_log_probs=False),
        healthy_config(0),
    )
    assert healthy_config(1).num_epochs == symptoms.EPOCHS
    assert planted_run("reward_hacking")[0].num_epochs == 2 * symptoms.EPOCHS


@pytest.mark.parametrize("bad", ["kl_explosion", "", None, 3])
def test_an_unknown_planted_run_is_named(bad):
    with pytest.raises(ValueError, match=r"^name must be one of \['clip_high'.*got"):
        planted_run(bad)


# ---- the planted rewards -----------------------------------------------------------------------


def all_responses(length: int, values: int) -> torch.Tensor:
    """Every response of ``length`` tokens in 0..values-1: int64[values**length, length]."""
    grids = torch.meshgrid(*[torch.arange(values)] * length, indexing="ij")
    return torch.stack([g.flatten() for g in grids], dim=-1)


def test_exact_sort_reward_is_one_only_for_the_sorted_response():
    prompts = torch.tensor([[2, 0, 1], [1, 1, 0]])
    responses = torch.tensor([[[0, 1, 2], [2, 1, 0]], [[0, 1, 1], [1, 0, 1]]])
    rewards = exact_sort_reward(prompts, responses)
    assert rewards.dtype == torch.float32
    assert rewards.tolist() == [[1.0, 0.0], [1.0, 0.0]]
    assert torch.equal(rewards, exact_sort(prompts, responses).float())
    assert exact_sort_reward.vectorized and flaky_reward.vectorized


def test_flaky_reward_is_the_distance_reward_but_for_a_few_responses_in_a_thousand():
    responses = all_responses(4, 6)[None]  # [1, 1296, 4]: every response of the planted run
    prompts = torch.tensor([[3, 1, 4, 1]])
    flaky = flaky_reward(prompts, responses)
    clean = sort_distance_reward_batch(prompts, responses)
    outliers = flaky != clean
    assert outliers.any() and torch.all(flaky[outliers] == 1000.0)
    # Over every 37th prompt and every response: 191 outliers in 46656, 1 in 244 (over all
    # 1296 prompts 1 in 316): the docstring's and PLANTED's "about 1 in 300" (a code % 997
    # over a narrow range of codes is hit more often than 1 in 997).
    hits = sum(int((flaky_reward(p[None], responses) == 1000.0).sum()) for p in responses[0, ::37])
    assert hits == 191


def test_wrong_answer_penalty_is_zero_only_for_the_exact_answer():
    from pgrl_helpers.dedup_task import dedup_exact_reward

    prompts = torch.tensor([[3, 1, 3, 2]])
    eos = 6
    responses = torch.tensor([[[1, 2, 3, eos], [1, 2, 3, 3], [3, 2, 1, eos]]])
    penalty = wrong_answer_penalty(prompts, responses, eos)
    assert torch.equal(penalty, dedup_exact_reward(prompts, responses, eos) - 1.0)
    assert penalty[0, 0] == 0.0 and set(penalty.flatten().tolist()) <= {0.0, -1.0}
    assert (penalty == -1.0).any()
