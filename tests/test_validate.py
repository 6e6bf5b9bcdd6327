"""Unit tests of the shared checks in ``pgrl_helpers._validate``: check_number, check_choice,
check_bool. Every config field's check is one of these calls, so their edges are pinned here."""

from __future__ import annotations

import math
import re

import pytest

from pgrl_helpers._validate import check_bool, check_choice, check_number


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
