"""Small input checks shared by the public helpers.

Every check raises ``ValueError`` or ``TypeError`` with a message that names the
argument and what is wrong with it, so that a bad input never turns into a
silent NaN further down.
"""

from __future__ import annotations

import torch


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
