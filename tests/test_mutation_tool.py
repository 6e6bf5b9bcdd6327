"""The mutation-testing script's own rules (tests/mutation.py), checked on hand-made rows."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
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
