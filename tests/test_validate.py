"""Unit tests of the shared checks in ``pgrl_helpers._validate``: check_number, check_choice,
check_bool, is_number. Every config field's check is one of these calls, so their edges are
pinned here; and the package holds no number check of its own beside them (an AST scan)."""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import pytest

from pgrl_helpers._validate import check_bool, check_choice, check_number, is_number

PACKAGE = Path(__file__).resolve().parents[1] / "pgrl_helpers"


def _message(value, *args, **kwargs) -> str:
    with pytest.raises(ValueError) as info:
        check_number(value, "x", *args, **kwargs)
    return str(info.value)


@pytest.mark.parametrize("value", [True, False, "1", None, [1], 1j])
def test_bools_strings_none_and_other_types_are_refused(value):
    assert _message(value) == f"x must be a finite number, got {value!r}"


@pytest.mark.parametrize("value", [0, -3, 2.5, 10**30, -1e300])
def test_any_finite_int_or_float_passes_without_bounds(value):
    check_number(value, "x")


def test_nan_is_always_refused_and_inf_only_without_allow_inf():
    for value in (math.nan, math.inf, -math.inf):
        assert _message(value).startswith("x must be a finite number, got ")
    assert _message(math.nan, allow_inf=True) == "x must be a number (inf allowed), got nan"
    check_number(math.inf, "x", allow_inf=True)
    check_number(-math.inf, "x", allow_inf=True)
    check_number(math.inf, "x", 0, allow_inf=True)
    assert _message(-math.inf, 0, allow_inf=True).startswith("x must be a positive number")


def test_the_lower_bound_is_exclusive_unless_low_inclusive():
    assert _message(0, 0) == "x must be a positive finite number, got 0"
    check_number(1e-12, "x", 0)
    check_number(0, "x", 0, low_inclusive=True)
    assert _message(-1e-12, 0, low_inclusive=True) == "x must be a finite number >= 0, got -1e-12"
    assert _message(1.0, 1.0) == "x must be a finite number > 1, got 1.0"
    check_number(1.0 + 1e-12, "x", 1.0)


def test_the_upper_bound_is_inclusive_unless_high_inclusive_false():
    check_number(1, "x", high=1)
    assert _message(1, high=1, high_inclusive=False) == "x must be a finite number < 1, got 1"
    assert _message(1.5, high=1) == "x must be a finite number <= 1, got 1.5"


def test_both_bounds_read_as_an_interval():
    check_number(0, "x", 0, 1, low_inclusive=True)
    check_number(1, "x", 0, 1, low_inclusive=True)
    assert _message(1.5, 0, 1, low_inclusive=True) == "x must be a number in [0, 1], got 1.5"
    assert _message(-0.5, 0, 1, low_inclusive=True) == "x must be a number in [0, 1], got -0.5"
    assert _message(0, 0, 1) == "x must be a number in (0, 1], got 0"
    assert _message(1, 0, 1, high_inclusive=False) == "x must be a number in (0, 1), got 1"
    assert _message(math.inf, 0, 1) == "x must be a number in (0, 1], got inf"


def test_integer_refuses_floats_and_bools_and_reads_positive():
    check_number(1, "x", 1, low_inclusive=True, integer=True)
    for bad in (0, 1.0, True, -1):
        assert _message(bad, 1, low_inclusive=True, integer=True) == (
            f"x must be a positive int, got {bad!r}"
        )
    assert _message(0, 0, integer=True) == "x must be a positive int, got 0"
    assert _message(-1, 0, low_inclusive=True, integer=True) == "x must be an int >= 0, got -1"
    assert (
        _message(7, 1, 6, low_inclusive=True, integer=True) == "x must be an int in [1, 6], got 7"
    )
    assert _message(2.0, integer=True) == "x must be an int, got 2.0"


def test_none_passes_only_when_allowed_and_the_note_explains_the_bound():
    check_number(None, "x", 0, allow_none=True)
    assert _message(None, 0) == "x must be a positive finite number, got None"
    assert _message(0, 0, allow_none=True) == "x must be a positive finite number or None, got 0"
    got = _message(3, 4, low_inclusive=True, integer=True, allow_none=True, note="why")
    assert got == "x must be an int >= 4 (why) or None, got 3"


def test_a_planted_bug_is_caught():
    """A check that forgets bools (True == 1 passes `value >= 1`) lets True through; ours
    refuses it, and so do the config fields that use it."""

    def forgetful(value, name, low):
        if not isinstance(value, (int, float)) or not value >= low:
            raise ValueError(f"{name} must be >= {low}, got {value!r}")

    forgetful(True, "num_epochs", 1)  # the bug: True slips through as 1
    with pytest.raises(ValueError, match="^num_epochs must be a positive int, got True$"):
        check_number(True, "num_epochs", 1, low_inclusive=True, integer=True)
    from pgrl_helpers.config import TrainConfig

    with pytest.raises(ValueError, match="^num_epochs must be a positive int, got True$"):
        TrainConfig(num_epochs=True).validate()


def test_check_choice_lists_the_valid_values():
    check_choice("b", ("a", "b"), "mode")
    check_choice("k", {"k": 1, "j": 2}, "registry")  # a dict's keys
    message = "unknown mode 'c'; valid values are: a, b"
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        check_choice("c", ("a", "b"), "mode")
    with pytest.raises(ValueError, match=re.escape("unknown mode ['a']; valid values are: a")):
        check_choice(["a"], ("a",), "mode")  # unhashable values are compared, not hashed
    with pytest.raises(ValueError, match=re.escape("unknown level 3; valid values are: 1, 2")):
        check_choice(3, (1, 2), "level")


def test_check_bool_refuses_ints():
    check_bool(True, "flag")
    check_bool(False, "flag")
    for bad in (1, 0, "True", None):
        with pytest.raises(
            TypeError, match=f"^flag must be True or False, got {re.escape(repr(bad))}$"
        ):
            check_bool(bad, "flag")


def test_is_number_takes_ints_and_floats_but_not_bools():
    for value in (0, -3, 2.5, math.inf, math.nan):
        assert is_number(value)
    for value in (True, False, "1", None, [1], 1j):
        assert not is_number(value)


# --- no hand-written number checks or defensive getattr outside _validate --------------

#: Most hand-written number checks the package may keep outside ``_validate`` (issue 41).
MAX_HAND_WRITTEN_NUMBER_CHECKS = 3
_NUMBER_TYPES = {"bool", "int", "float"}


def _names_a_number_type(node: ast.expr) -> bool:
    """True when an isinstance type argument is or contains bool, int or float
    (``int``, ``(int, float)``, ``int | float``)."""
    return any(isinstance(n, ast.Name) and n.id in _NUMBER_TYPES for n in ast.walk(node))


def _is_number_isinstance(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "isinstance"
        and len(node.args) == 2
        and _names_a_number_type(node.args[1])
    )


def hand_written_number_checks(source: str) -> list[int]:
    """Line numbers of the guards in ``source`` that test a value with ``isinstance(x, <bool,
    int or float>)`` and raise: an ``if`` whose body raises, or an ``assert``. A type
    dispatch (an ``if`` that does not raise, a conditional expression) is not a check."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.If) and any(isinstance(s, ast.Raise) for s in node.body):
            test = node.test
        elif isinstance(node, ast.Assert):
            test = node.test
        else:
            continue
        if any(_is_number_isinstance(n) for n in ast.walk(test)):
            lines.append(node.lineno)
    return sorted(lines)


def defensive_config_getattrs(source: str) -> list[int]:
    """Line numbers of ``getattr(<...config>, "<field>", <default>)`` in ``source``: a
    default that hides a missing config field instead of reporting it."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) == 3
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            continue
        owner = node.args[0]
        name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
        if name.endswith("config"):
            lines.append(node.lineno)
    return lines


def _package_sources():
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name != "_validate.py":
            yield path.relative_to(PACKAGE.parent).as_posix(), path.read_text(encoding="utf-8")


PLANTED = """
def f(x, config, g):
    if isinstance(x, bool) or not isinstance(x, (int, float)) or x < 0:
        raise ValueError("x")
    if not (isinstance(x, int | float) and x > 0):
        raise ValueError("x")
    assert isinstance(x, int)
    if isinstance(g, int):  # a dispatch: no raise
        g = None
    y = (x,) if isinstance(x, int) else x  # a dispatch
    if not isinstance(g, str):  # not a number type
        raise TypeError("g")
    a = getattr(config, "kl_target", None)
    b = getattr(self.config, "clip_cov_ratio", 0.0)
    c = getattr(config, "kl_target")  # no default: a missing field raises
    d = getattr(model, "response_length", None)  # not a config
    return y, a, b, c, d
"""


def test_the_scans_see_planted_checks_and_defaults():
    assert hand_written_number_checks(PLANTED) == [3, 5, 7]
    assert defensive_config_getattrs(PLANTED) == [13, 14]


def test_at_most_three_hand_written_number_checks_remain_outside_validate():
    found = [
        f"{path}:{line}"
        for path, source in _package_sources()
        for line in hand_written_number_checks(source)
    ]
    assert len(found) <= MAX_HAND_WRITTEN_NUMBER_CHECKS, (
        f"{len(found)} hand-written number checks (use pgrl_helpers._validate: check_number, "
        f"check_positive_ints, is_number): {', '.join(found)}"
    )


def test_no_getattr_with_a_default_on_a_config():
    found = [
        f"{path}:{line}"
        for path, source in _package_sources()
        for line in defensive_config_getattrs(source)
    ]
    assert not found, f"getattr(config, field, default) hides a missing field: {', '.join(found)}"
