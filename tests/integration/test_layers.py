"""The package's layers: the lecture's math is a leaf layer, the package import is lazy.

A researcher must be able to copy ``compute_deltas`` or ``compute_gae`` with ``_validate``
and nothing else, and ``import pgrl_helpers.gae`` must not drag in the training loop (the
Spinning Up failure mode: an eager ``__init__`` that imports everything). Each check runs in
a fresh interpreter, so what one test imports cannot hide what another loads.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "pgrl_helpers"

#: The lecture's math: tensors in, tensors out. They may import only each other.
MATH = ("_validate", "sort_task", "task", "models", "policy", "sampling", "advantages",
        "losses", "covariance", "kl", "masking", "gae")  # fmt: skip

#: What nothing below the loop may import: the widgets (``ui``), Hugging Face (``hf``), studies,
#: readers.
OPTIONAL = ("ui", "hf", "bench_results", "claims", "seed_stats", "passk")

#: The optional dependencies (pip extras ``widgets`` and ``trl``): only ``ui/`` and ``hf/`` load them.
HEAVY = ("transformers", "trl", "peft", "ipywidgets", "matplotlib")

#: Below the loop: the math, the loop's pieces and the extensions it plugs in.
BELOW_THE_LOOP = MATH + ("rollout", "objective", "registry", "config", "history", "training",
                         "autoregressive", "dedup_task", "tool_task", "value", "offpolicy", "infra",
                         "memory")  # fmt: skip


def package_imports(source: str) -> set[str]:
    """The pgrl_helpers modules a module's source imports (relative or absolute)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:
                found.add(node.module.split(".")[0])
            elif node.level == 1:
                found.update(alias.name for alias in node.names)
            elif node.module and node.module.startswith("pgrl_helpers."):
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("pgrl_helpers."):
                    found.add(alias.name.split(".")[1])
    return found


def loaded_after(statement: str) -> list[str]:
    """The pgrl_helpers.* modules a fresh interpreter holds after ``statement``."""
    code = (
        f"import sys, json\n{statement}\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('pgrl_helpers.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", MATH)
def test_math_modules_import_only_each_other(module):
    imports = package_imports((PACKAGE / f"{module}.py").read_text())
    assert imports <= set(MATH), f"{module} imports {sorted(imports - set(MATH))}"


@pytest.mark.parametrize("module", BELOW_THE_LOOP)
def test_nothing_below_the_loop_imports_a_widget_trl_study_or_reader(module):
    imports = package_imports((PACKAGE / f"{module}.py").read_text())
    assert not imports & set(OPTIONAL), f"{module} imports {sorted(imports & set(OPTIONAL))}"


def test_the_import_checker_sees_relative_absolute_and_package_imports():
    source = (
        "from .losses import x\nfrom . import widgets\nimport pgrl_helpers.kl\nimport torch\n"
        "from pgrl_helpers.ui.dashboard import make_dashboard\nfrom .hf import real_lm\n"
    )
    assert package_imports(source) == {"losses", "widgets", "kl", "ui", "hf"}


TOP_LEVEL = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")


def heavy_loaded_after(statement: str) -> list[str]:
    """The optional dependencies (HEAVY) a fresh interpreter holds after ``statement``."""
    code = (
        f"import sys, json\n{statement}\n"
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_no_top_level_module_loads_an_optional_dependency():
    """Issue 41: ``import pgrl_helpers.<any top-level module>`` loads no transformers, trl, peft,
    ipywidgets or matplotlib (one interpreter imports them all; a second proves the probe sees
    a planted import)."""
    statement = "\n".join(f"import pgrl_helpers.{m}" for m in TOP_LEVEL)
    assert len(TOP_LEVEL) > 30
    assert heavy_loaded_after(statement) == []
    assert heavy_loaded_after("import pgrl_helpers.ui.dashboard") == ["ipywidgets", "matplotlib"]


def test_the_optional_parts_live_in_their_subpackages():
    """``ls pgrl_helpers`` shows the core; the extras' modules are in ``hf/`` and ``ui/``."""
    for name in ("trl_config", "trl_bridge", "trl_objectives", "hf_policy", "checkpoint",
                 "real_lm", "widgets", "gae_widget", "clip_widget"):  # fmt: skip
        assert name not in TOP_LEVEL, name
    for path in [*PACKAGE.glob("*.py"), *PACKAGE.glob("*/*.py")]:
        lines = len(path.read_text().splitlines())
        assert lines <= 600, f"{path.relative_to(PACKAGE)} has {lines} lines (limit 600)"


@pytest.mark.parametrize(
    "statement, limit",
    [
        ("import pgrl_helpers", 0),
        ("import pgrl_helpers.advantages", 2),
        ("import pgrl_helpers.gae", 3),
        ("from pgrl_helpers import compute_deltas", 2),
    ],
)
def test_import_closures_stay_small(statement, limit):
    loaded = loaded_after(statement)
    assert len(loaded) <= limit, f"{statement!r} loaded {loaded}"


def test_the_lazy_package_resolves_every_public_name_from_its_home():
    import pgrl_helpers

    for name, home in pgrl_helpers._HOMES.items():
        value = getattr(pgrl_helpers, name)
        module = __import__(f"pgrl_helpers.{home}", fromlist=[name])
        assert value is getattr(module, name), name
    assert set(pgrl_helpers.__all__) == set(pgrl_helpers._HOMES)
    assert {"compute_gae", "whiten", "aggregate_loss", "masked_mean", "kl_k3_bias_corrected",
            "clip_mask", "sequence_log_ratio", "run_policy_gradient"} <= set(dir(pgrl_helpers))  # fmt: skip
    with pytest.raises(AttributeError, match="no attribute 'compute_delta'"):
        pgrl_helpers.compute_delta  # noqa: B018


def test_a_planted_upward_import_fails_the_layer_check(tmp_path):
    """The check is not vacuous: advantages importing the value model (as it once did) fails."""
    planted = (PACKAGE / "advantages.py").read_text() + "\nfrom .value import GAEEstimator\n"
    assert "value" in package_imports(planted) - set(MATH)
    eager = "from .training import run_policy_gradient\n"
    assert "training" in package_imports(eager) and "training" not in MATH


def test_the_subpackages_default_paths_are_at_the_repository_root():
    """Moving a module one folder down must not move where it writes: the converted model
    (``models/``) and notebook 14's checkpoint (``.cache/pgrl/``) sit beside pyproject.toml."""
    from pgrl_helpers.hf import checkpoint, real_lm

    root = PACKAGE.parent
    assert (root / "pyproject.toml").exists()
    assert real_lm.DEFAULT_DIR == root / "models" / real_lm.MODEL_NAME
    assert checkpoint.DEFAULT_PATH == root / ".cache" / "pgrl" / "checkpoint"
