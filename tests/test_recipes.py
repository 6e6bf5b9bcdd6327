"""The named recipes (``pgrl_helpers.recipes.RECIPES``) and ``TrainConfig.preset``."""

from __future__ import annotations

import ast
import dataclasses
import json
import sys
from pathlib import Path

import pytest

from pgrl_helpers.config import TrainConfig
from pgrl_helpers.recipes import OBJECTIVE_FIELDS, RECIPES

REPO = Path(__file__).resolve().parents[1]

#: benchmarks/bench_objectives.py's table as it was written by hand before it read the recipes.
BENCH_OBJECTIVES = {
    "GRPO": {"loss_aggregation": "sequence_mean"},
    "Dr. GRPO": {"deltas_mode": "centered_rewards", "loss_aggregation": "constant_normalizer"},
    "DAPO": {"epsilon_high": 0.28, "batch_filter": "dapo", "dynamic_sampling_max_draws": 3},
    "GSPO": {"importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4,
             "loss_aggregation": "sequence_mean"},
    "CISPO": {"loss_mode": "cispo", "epsilon": 1.0, "epsilon_high": 4.0},
    "RLOO": {"deltas_mode": "loo_rewards"},
    "REINFORCE++": {"deltas_mode": "reinforce_pp_baseline"},
}  # fmt: skip

FIELDS = {f.name for f in dataclasses.fields(TrainConfig)}


def test_the_table_names_the_methods_of_the_course():
    assert {"lecture", "grpo", "dr_grpo", "dapo", "gspo", "cispo", "rloo", "reinforce_pp",
            "notebook_08", "generalizing_transformer"} <= set(RECIPES)  # fmt: skip
    assert TrainConfig.preset("lecture") == TrainConfig()
    # the lecture recipe names the objective's axes at TrainConfig's defaults, nothing else
    defaults = TrainConfig()
    assert set(RECIPES["lecture"]) == set(OBJECTIVE_FIELDS)
    assert all(getattr(defaults, name) == value for name, value in RECIPES["lecture"].items())


def test_recipes_import_nothing_from_the_package():
    """No config <-> recipes import circle: recipes is data, config imports it (issue 50)."""
    tree = ast.parse((REPO / "pgrl_helpers" / "recipes.py").read_text())
    imports = [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert all(
        isinstance(node, ast.ImportFrom) and node.module == "__future__" for node in imports
    ), [ast.unparse(node) for node in imports]


@pytest.mark.parametrize("name", list(RECIPES))
def test_each_recipe_validates_and_changes_only_the_fields_it_names(name):
    fields = RECIPES[name]
    assert set(fields) <= FIELDS, f"{name} names unknown fields {set(fields) - FIELDS}"
    config = TrainConfig.preset(name)
    config.validate()
    default = TrainConfig()
    changed = {f for f in FIELDS if getattr(config, f) != getattr(default, f)}
    assert changed <= set(fields)
    assert all(getattr(config, f) == value for f, value in fields.items())


def test_overrides_win_over_the_recipe():
    config = TrainConfig.preset("dapo", epsilon_high=0.3, seed=7)
    assert (config.epsilon_high, config.seed, config.batch_filter) == (0.3, 7, "dapo")
    assert RECIPES["dapo"]["epsilon_high"] == 0.28  # the table itself is untouched
    assert TrainConfig.preset("grpo", loss_mode="naive").loss_mode == "naive"
    with pytest.raises(TypeError, match="epsilon_hi"):
        TrainConfig.preset("grpo", epsilon_hi=0.3)  # a misspelt field is not silently kept


def test_an_unknown_recipe_lists_the_valid_names():
    with pytest.raises(ValueError, match="unknown preset 'ppo'; valid values are: lecture, grpo"):
        TrainConfig.preset("ppo")
    with pytest.raises(ValueError, match="reinforce_pp"):
        TrainConfig.preset("GRPO")


def test_the_methods_differ_where_their_papers_do():
    grpo, dr_grpo = TrainConfig.preset("grpo"), TrainConfig.preset("dr_grpo")
    assert (grpo.deltas_mode, grpo.loss_aggregation) == ("normalized_rewards", "sequence_mean")
    assert (dr_grpo.deltas_mode, dr_grpo.loss_aggregation) == (
        "centered_rewards",
        "constant_normalizer",
    )
    dapo = TrainConfig.preset("dapo")
    assert (dapo.epsilon, dapo.epsilon_high, dapo.task) == (0.2, 0.28, "sort_dedup")
    gspo = TrainConfig.preset("gspo")
    assert gspo.importance_sampling_level == "sequence"
    assert (gspo.epsilon, gspo.epsilon_high) == (3e-4, 4e-4)
    assert TrainConfig.preset("rloo").loss_mode == "naive"  # REINFORCE, no ratio clip
    assert TrainConfig.preset("reinforce_pp").loss_mode == "clipped"
    assert all(TrainConfig.preset(name).kl_coef == 0 for name in RECIPES)


def test_the_run_that_learns_is_a_preset_and_the_dashboards_default():
    config = TrainConfig.preset("generalizing_transformer")
    config.validate()
    assert (config.model, config.prompt_source, config.num_epochs) == ("transformer", "random", 200)
    widgets = pytest.importorskip("pgrl_helpers.ui.dashboard")  # the dashboard reads the recipe
    assert widgets.PRESETS["generalizing transformer"] == (config, 1.0)
    assert widgets.DEFAULT_PRESET == "generalizing transformer"
    sizes = {k: getattr(config, k) for k in widgets.MODEL_DEFAULTS["transformer"]}
    assert sizes == widgets.MODEL_DEFAULTS["transformer"], "the dashboard's transformer sizes"
    source = (REPO / "pgrl_helpers" / "ui" / "dashboard.py").read_text()
    assert 'TrainConfig.preset("generalizing_transformer")' in source, "one home, not a copy"


def test_bench_objectives_reads_its_table_from_the_recipes():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import bench_objectives
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    table = bench_objectives.OBJECTIVES
    assert table == BENCH_OBJECTIVES
    assert list(table) == list(BENCH_OBJECTIVES)  # same display names, same order
    for title, overrides in BENCH_OBJECTIVES.items():
        assert list(table[title]) == list(overrides), title  # same field order
    source = (REPO / "benchmarks" / "bench_objectives.py").read_text()
    assert "RECIPES[" in source  # derived, not a second hand-written copy


def _notebook_assignments(path: Path) -> dict[str, ast.expr]:
    """name -> value expression of every top-level ``NAME = ...`` in the notebook's code."""
    found = {}
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
        for node in ast.parse("\n".join(lines)).body:
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        found[target.id] = node.value
                    elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                        for name, value in zip(target.elts, node.value.elts):
                            found[name.id] = value
    return found


def test_the_notebook_08_recipe_is_notebook_08s_last_run():
    assignments = _notebook_assignments(REPO / "notebooks" / "08_real_lm_details.ipynb")
    call = assignments["main_config"]
    assert isinstance(call, ast.Call) and call.func.id == "TrainConfig"
    settings = {}
    for keyword in call.keywords:
        value = keyword.value
        if isinstance(value, ast.Name):  # a constant of the notebook, e.g. PROMPT_LENGTH
            value = assignments[value.id]
        settings[keyword.arg] = ast.literal_eval(value)
    settings.pop("progress", None)  # display only
    assert TrainConfig(**settings) == TrainConfig.preset("notebook_08")


def test_the_readme_table_of_the_methods_is_the_recipes(monkeypatch):
    """README's "What GRPO, Dr. GRPO, DAPO, GSPO, ... are in these fields" is recipe_table()."""
    from pgrl_helpers import recipes

    readme = (REPO / "README.md").read_text()
    table = recipes.recipe_table()
    assert table in readme
    rows = table.splitlines()[2:]
    assert [row.split(" | ")[0] for row in rows] == [f"| `{n}`" for n in recipes.METHOD_RECIPES]
    gspo = next(row for row in rows if row.startswith("| `gspo`"))
    assert "| `sequence` | `sequence_mean` |" in gspo and "`epsilon=0.0003`" in gspo
    dapo = next(row for row in rows if row.startswith("| `dapo`"))
    assert "`batch_filter='dapo'`" in dapo and "notebook 08's task" in dapo
    assert "`model=" not in dapo  # the task's five fields are named once
    # a recipe changed without the README: the check fails
    monkeypatch.setitem(recipes.RECIPES, "gspo", {**RECIPES["gspo"], "epsilon": 0.2})
    assert recipes.recipe_table() not in readme
