"""The mutation-testing script's own rules (tests/mutation.py), checked on hand-made rows."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, where mutation.py is
import mutation  # noqa: E402


def test_only_a_decorated_raise_message_counts_as_a_message_mutant():
    messages = mutation.raise_lines("pgrl_helpers/_validate.py")
    line = 'raise ValueError(f"{name} must be a positive int, got {value!r}")'
    assert line in messages
    decorated = line.replace('f"', 'f"XX').replace('!r}")', '!r}XX")')
    assert mutation.is_message_mutant({"before": line, "after": decorated}, messages)
    upper = line.replace("must be a positive int", "MUST BE A POSITIVE INT")
    assert not mutation.is_message_mutant({"before": line, "after": upper}, messages)
    # a string outside a raise statement (a mode name, a dict key) is never exempt
    code = 'if mode == "naive":'
    assert not mutation.is_message_mutant(
        {"before": code, "after": code.replace('"naive"', '"XXnaiveXX"')}, messages
    )


def test_function_names_come_from_mutmut_keys():
    assert mutation.function_of("pgrl_helpers.kl.x_kl_k2__mutmut_3") == "kl_k2"
    assert mutation.function_of("pgrl_helpers.kl.xǁAdaptiveKLControllerǁupdate__mutmut_1") == (
        "AdaptiveKLController.update"
    )


def test_targets_follow_the_test_layout():
    """A module is a target iff tests/test_<module>.py has the mutants header; its tests are
    that file plus the files its MUTATION_ALSO names."""
    targets = mutation.mutation_targets()
    core = {
        "advantages", "kl", "losses", "masking", "sort_task", "gae", "value", "offpolicy",
        "diagnose", "clip_family", "covariance", "tool_task", "registry",
    }  # fmt: skip
    assert core <= set(targets)
    tests = mutation.ROOT / "tests"
    for module, files in targets.items():
        assert files[0] == f"test_{module}.py"
        assert mutation.MUTANTS_HEADER in (tests / files[0]).read_text(encoding="utf-8")
        assert (mutation.ROOT / "pgrl_helpers" / f"{module}.py").is_file()
        assert all((tests / f).is_file() for f in files)
    # a unit test file without the header is not a target
    assert "training" not in targets and (tests / "test_training.py").is_file()
    # cross-module files reach the runs that need them
    assert "integration/test_framework_agreement.py" in targets["kl"]
    assert mutation._select(["covariance"]) == {
        "pgrl_helpers/covariance.py": tuple(f"tests/{f}" for f in targets["covariance"])
    }
