"""Small input checks shared by the public helpers.

Every check raises ``ValueError`` or ``TypeError`` with a message that names the
argument and what is wrong with it, so that a bad input never turns into a
silent NaN further down.
"""

from __future__ import annotations

import math

import torch

#: log-ratios are clamped to +-MAX_LOG_RATIO before exp so the ratio stays finite
#: (shared by ``losses.compute_ratio`` and the k3 estimator in ``kl``).
MAX_LOG_RATIO = 20.0


def check_tensor(x, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def check_ndim(x: torch.Tensor, ndim: int, name: str, axes: str) -> None:
    check_tensor(x, name)
    if x.ndim != ndim:
        raise ValueError(
            f"{name} must have shape [{axes}] ({ndim} dims), got shape {list(x.shape)}"
        )


def check_integer(x: torch.Tensor, name: str) -> None:
    if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer token ids, got dtype {x.dtype}")


def check_token_range(x: torch.Tensor, vocab_size: int, name: str) -> None:
    if x.numel() and (int(x.min()) < 0 or int(x.max()) >= vocab_size):
        raise ValueError(
            f"{name} holds token ids outside the vocabulary [0, {vocab_size - 1}]: "
            f"min {int(x.min())}, max {int(x.max())}"
        )


def check_finite(x: torch.Tensor, name: str) -> None:
    if not torch.isfinite(x).all():
        bad = (~torch.isfinite(x)).sum().item()
        raise ValueError(f"{name} contains {bad} non-finite value(s) (NaN or inf)")


def check_same_shape(a: torch.Tensor, b: torch.Tensor, name_a: str, name_b: str) -> None:
    if a.shape != b.shape:
        raise ValueError(
            f"{name_a} and {name_b} must have the same shape, "
            f"got {list(a.shape)} and {list(b.shape)}"
        )


def check_positive_ints(**values) -> None:
    """Raise ValueError naming the first argument that is not a positive int (bools refused)."""
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


def check_prompts(prompts, vocab_size: int, prompt_length: int) -> None:
    """Prompts a policy can take: int[batch, prompt_length], ids in 0 .. vocab_size - 1."""
    check_ndim(prompts, 2, "prompts", "batch, prompt_pos")
    check_integer(prompts, "prompts")
    check_token_range(prompts, vocab_size, "prompts")
    if prompts.shape[1] != prompt_length:
        raise ValueError(
            f"this model takes prompts of length {prompt_length}, got shape {list(prompts.shape)}"
        )


def is_number(value) -> bool:
    """True for an int or a float; a bool is not a number here (``True`` is not a learning rate).

    For code that dispatches on the type (a name, a tensor or a number); to refuse a bad
    value, use ``check_number``."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _fmt(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _number_phrase(low, high, low_inclusive, high_inclusive, allow_inf, integer) -> str:
    """What check_number asks for, in words: 'a positive finite number', 'an int >= 0', ..."""
    noun = "int" if integer else "number"
    finite = "" if integer or allow_inf or (low is not None and high is not None) else "finite "
    positive = (low == 0 and not low_inclusive) or (integer and low == 1 and low_inclusive)
    if low is not None and high is not None:
        left, right = "[" if low_inclusive else "(", "]" if high_inclusive else ")"
        phrase = f"{noun} in {left}{_fmt(low)}, {_fmt(high)}{right}"
    elif positive:
        phrase = f"positive {finite}{noun}"
    elif low is not None:
        phrase = f"{finite}{noun} {'>=' if low_inclusive else '>'} {_fmt(low)}"
    elif high is not None:
        phrase = f"{finite}{noun} {'<=' if high_inclusive else '<'} {_fmt(high)}"
    else:
        phrase = f"{finite}{noun}"
    article = "an" if phrase[0] in "aeiou" else "a"
    return f"{article} {phrase}" + (" (inf allowed)" if allow_inf and not integer else "")


def check_number(
    value,
    name: str,
    low: float | None = None,
    high: float | None = None,
    *,
    low_inclusive: bool = False,
    high_inclusive: bool = True,
    allow_none: bool = False,
    allow_inf: bool = False,
    integer: bool = False,
    note: str | None = None,
) -> None:
    """Raise ValueError naming ``name`` and the bounds unless ``value`` is a number in range.

    Bools are refused (``True`` is not a learning rate); NaN always, and inf unless
    ``allow_inf``. ``low`` is exclusive unless ``low_inclusive``; ``high`` is inclusive unless
    ``high_inclusive=False``. ``integer``: only an int will do. ``allow_none``: None is
    accepted (an optional setting). ``note`` follows the bounds in brackets (why they hold).
    Examples of the message: "gamma must be a number in [0, 1], got 1.5"; "kl_horizon must
    be a positive int, got 0"; "value_clip must be a positive finite number or None, got 0".
    """
    if value is None and allow_none:
        return
    ok = (
        not isinstance(value, bool)
        and isinstance(value, int if integer else (int, float))
        and not math.isnan(value)
        and (allow_inf or math.isfinite(value))
    )
    if ok and low is not None:
        ok = value >= low if low_inclusive else value > low
    if ok and high is not None:
        ok = value <= high if high_inclusive else value < high
    if not ok:
        what = _number_phrase(low, high, low_inclusive, high_inclusive, allow_inf, integer)
        why = f" ({note})" if note else ""
        none = " or None" if allow_none else ""
        raise ValueError(f"{name} must be {what}{why}{none}, got {value!r}")


def check_choice(value, valid, name: str) -> None:
    """Raise ValueError naming ``name`` and listing the valid values unless value is one.

    ``valid``: any iterable of the allowed values (a tuple, or a registry dict's keys).
    """
    valid = tuple(valid)
    if value not in valid:
        listed = ", ".join(str(v) for v in valid)
        raise ValueError(f"unknown {name} {value!r}; valid values are: {listed}")


def check_bool(value, name: str) -> None:
    """Raise TypeError naming ``name`` unless value is True or False (1 and 0 refused)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
