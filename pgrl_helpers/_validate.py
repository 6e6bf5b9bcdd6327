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


def check_mode(mode: str, valid: tuple[str, ...], what: str) -> None:
    if mode not in valid:
        raise ValueError(f"unknown {what} {mode!r}; valid modes are: {', '.join(valid)}")


def check_positive_ints(**values) -> None:
    """Raise ValueError naming the first argument that is not a positive int (bools refused)."""
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


def check_prompts(prompts, vocab_size: int, prompt_length: int) -> None:
    """Prompts a policy can take: int[batch, prompt_length], ids in 0 .. vocab_size - 1."""
    check_ndim(prompts, 2, "prompts", "batch, pos")
    check_integer(prompts, "prompts")
    check_token_range(prompts, vocab_size, "prompts")
    if prompts.shape[1] != prompt_length:
        raise ValueError(
            f"this model takes prompts of length {prompt_length}, got shape {list(prompts.shape)}"
        )


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
) -> None:
    """Raise ValueError naming ``name`` unless ``value`` is a real number in the given range.

    Bools are refused (``True`` is not a learning rate); NaN always, and inf unless
    ``allow_inf``. ``low`` is exclusive unless ``low_inclusive``; ``high`` is inclusive unless
    ``high_inclusive=False``. ``allow_none``: None is accepted (an optional setting).
    """
    if value is None and allow_none:
        return
    ok = (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and not math.isnan(value)
        and (allow_inf or math.isfinite(value))
    )
    if ok and low is not None:
        ok = value >= low if low_inclusive else value > low
    if ok and high is not None:
        ok = value <= high if high_inclusive else value < high
    if not ok:
        bounds = []
        if low is not None:
            bounds.append(f"{'>=' if low_inclusive else '>'} {low:g}")
        if high is not None:
            bounds.append(f"{'<=' if high_inclusive else '<'} {high:g}")
        what = "a number" if allow_inf else "a finite number"
        range_ = f" {' and '.join(bounds)}" if bounds else ""
        none = " or None" if allow_none else ""
        raise ValueError(f"{name} must be {what}{range_}{none}, got {value!r}")


def check_choice(value, valid, name: str) -> None:
    """Raise ValueError naming ``name`` and listing the valid values unless value is one."""
    valid = tuple(valid)
    if value not in valid:
        raise ValueError(f"unknown {name} {value!r}; valid values are: {', '.join(valid)}")
