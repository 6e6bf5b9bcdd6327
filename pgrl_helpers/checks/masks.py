"""Checkers: the masked mean and the three loss aggregations (series notebook 08)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..masking import aggregate_loss, masked_mean
from ._core import (
    _as_tensor,
    _call,
    _check_unchanged,
    _close,
    _expected_got,
    _Failed,
    _first_match,
    _fmt_shape,
    _graded_too,
    _NotImplemented,
    _run,
)

#: Real tokens per response of the padded test batch [batch=2, trial=3, pos=5]: every length
#: differs from its neighbours, so a per-response mean, a per-token mean and a constant
#: normaliser give three different numbers; the two prompts hold different token counts
#: (10 and 7), so a per-prompt token mean (each prompt's tokens, then the prompts) differs
#: from the batch's token mean too.
MASK_LENGTHS = ((5, 2, 3), (1, 4, 2))
#: A finite value planted in every padding slot: a mean that reads padding moves towards it.
PADDING_VALUE = 50.0


def _padded_batch(seed: int, padding=PADDING_VALUE) -> tuple[torch.Tensor, torch.Tensor]:
    """(values float[2, 3, 5] with ``padding`` in every padding slot, mask float[2, 3, 5])."""
    g = torch.Generator().manual_seed(800 + seed)
    values = torch.randn(2, 3, 5, generator=g)
    positions = torch.arange(5)
    lengths = torch.tensor(MASK_LENGTHS)
    mask = (positions < lengths[..., None]).float()
    values = torch.where(mask > 0, values, torch.full_like(values, padding))
    return values, mask


# --------------------------------------------------------------------------------------
# Exercise: masked_mean
# --------------------------------------------------------------------------------------


@_graded_too
def check_masked_mean(fn: Callable, *, seed: int = 0, strict: bool = False):
    """fn(tensor, mask, dim=None) -> the mean of ``tensor`` over the entries where ``mask`` is
    1: a scalar for dim=None, per-slice for dim=d; ValueError if the mask selects nothing."""

    def diagnose() -> str:
        values, mask = _padded_batch(seed)
        before = [values.clone(), mask.clone()]
        real = mask > 0
        for dim in (None, -1):
            out = _as_tensor(_call(fn, values, mask, dim=dim))
            _check_unchanged(before, [values, mask])
            want = masked_mean(values, mask, dim=dim)
            where = "dim=None" if dim is None else "dim=-1"
            if out.shape != want.shape:
                raise _Failed(
                    f"with {where} expected shape {_fmt_shape(want)}, got {_fmt_shape(out)}"
                    + (": reduce only the given dim" if dim is not None else ": return a scalar")
                )
            if _close(out, want, 1e-5):
                continue
            summed = torch.where(real, values, torch.zeros_like(values))
            candidates = [
                (
                    values.mean() if dim is None else values.mean(dim),
                    f"averaged over padding ({where}): the padding slots (here {PADDING_VALUE:g}) "
                    "entered the mean; keep only the entries where mask is 1",
                ),
                (
                    summed.mean() if dim is None else summed.mean(dim),
                    f"averaged over padding ({where}): you zeroed the padding but divided by every "
                    "slot; divide by the number of real entries, mask.sum()",
                ),
                (
                    summed.sum() if dim is None else summed.sum(dim),
                    "you returned the masked sum; divide it by the number of real entries",
                ),
            ]
            if dim is None:
                candidates.append(
                    (
                        masked_mean(values, mask, dim=-1).mean(),
                        "per-sequence instead of per-token: you averaged each response, then "
                        "averaged the responses; with dim=None every real token weighs the same",
                    )
                )
            raise _Failed(
                _first_match(out, candidates, 1e-5)
                or f"with {where} the value differs from the masked mean over the real entries"
            )
        nan_values, _ = _padded_batch(seed, padding=float("nan"))
        out = _as_tensor(_call(fn, nan_values, mask, dim=None))
        if not torch.isfinite(out).all():
            raise _Failed(
                "a NaN in a padding slot leaked into your result: tensor * mask gives "
                "0 * NaN = NaN; select the real entries instead (torch.where(mask > 0, tensor, 0) "
                "or tensor[mask > 0])"
            )
        if not _close(out, masked_mean(nan_values, mask), 1e-5):
            raise _Failed("with NaN in the padding slots the value differs from the masked mean")
        one_empty = mask.clone()
        one_empty[1, 0] = 0.0  # response (1, 0) has no real token left; the others do
        for empty_mask, dim, what in (
            (torch.zeros_like(mask), None, "an all-zero mask (dim=None)"),
            (
                one_empty,
                -1,
                "a mask whose response [1, 0] selects nothing (dim=-1: that slice's mean is 0/0)",
            ),
        ):
            try:
                empty = fn(values, empty_mask, dim=dim)
            except ValueError:
                continue
            except NotImplementedError as err:
                raise _NotImplemented from err
            except Exception as err:
                raise _Failed(
                    f"{what} raised {type(err).__name__}; raise ValueError (the mean of "
                    "nothing is undefined)"
                ) from err
            shown = empty.detach().tolist() if isinstance(empty, torch.Tensor) else empty
            raise _Failed(
                f"{what} returned {shown!r}; raise ValueError naming the problem instead of "
                "returning 0/0 = NaN or 0"
                + (
                    " (check every slice: (count == 0).any(), not only the whole mask)"
                    if dim is not None
                    else ""
                )
            )
        return (
            "masked mean over every real token (dim=None) and per response (dim=-1); NaN in "
            "padding stays out; an empty mask, or an empty slice along dim, raises ValueError"
        )

    __tracebackhide__ = True  # noqa: F841 (IPython hides this frame in tracebacks)
    return _run("masked_mean", diagnose, strict)


# --------------------------------------------------------------------------------------
# Exercise: the three loss aggregations
# --------------------------------------------------------------------------------------


@_graded_too
def check_aggregate_loss(fn: Callable, *, seed: int = 0, strict: bool = False):
    """fn(per_token_loss, mask, aggregation, max_length) -> scalar, for aggregation in
    'sequence_mean' (GRPO), 'token_mean' (DAPO), 'constant_normalizer' (Dr. GRPO, dividing
    every response's token sum by ``max_length``)."""

    def diagnose() -> str:
        values, mask = _padded_batch(seed)
        length = mask.shape[-1]
        real = mask > 0
        zeroed = torch.where(real, values, torch.zeros_like(values))
        n_seq = mask.shape[0] * mask.shape[1]
        per_sequence = masked_mean(values, mask, dim=-1).mean()
        per_token = masked_mean(values, mask)
        wrong = {
            "plain": (
                values.mean(),
                "averaged over padding: the padding slots entered the mean; keep only the real "
                "tokens (mask)",
            ),
            "zeroed": (
                zeroed.mean(),
                "averaged over padding: you zeroed the padding but divided by every slot",
            ),
            "sequence_mean": (
                per_sequence,
                "per-sequence instead of per-token: that is sequence_mean (mean over each "
                "response, then over responses)",
            ),
            "token_mean": (
                per_token,
                "per-token instead of per-sequence: that is token_mean (one mean over every "
                "real token of the batch)",
            ),
            "own_length": (
                per_sequence,
                "you divided each response's sum by its own length (that is sequence_mean); "
                "constant_normalizer divides by the constant max_length",
            ),
            "no_count": (
                zeroed.sum() / length,
                "you divided the token sum by max_length only; divide by max_length x the "
                "number of responses",
            ),
            "sum": (zeroed.sum(), "you returned the masked sum; normalise it"),
            "per_prompt": (
                (zeroed.sum((1, 2)) / mask.sum((1, 2))).mean(),
                "a per-prompt token mean: you averaged the tokens of each prompt's group, then "
                f"the prompts; here the prompts hold {mask.sum((1, 2)).int().tolist()} tokens, "
                "so their tokens weigh differently. token_mean divides the token sum of the "
                "whole batch by the batch's token count",
            ),
        }
        plan = {
            "token_mean": ["plain", "zeroed", "sequence_mean", "per_prompt", "sum"],
            "sequence_mean": ["plain", "zeroed", "token_mean", "sum"],
            "constant_normalizer": ["plain", "own_length", "token_mean", "no_count", "sum"],
        }
        for aggregation, mistakes in plan.items():
            loss = values.clone().requires_grad_(True)
            before = [values.clone(), mask.clone()]
            out = _as_tensor(_call(fn, loss, mask, aggregation, length))
            _check_unchanged(before, [loss.detach(), mask])
            want = aggregate_loss(loss, mask, aggregation, normalize_constant=float(length))
            if out.shape != want.shape:
                raise _Failed(
                    f"{aggregation}: expected a scalar (shape []), got shape {_fmt_shape(out)}"
                )
            if not _close(out, want, 1e-5):
                message = _first_match(out, [wrong[m] for m in mistakes], 1e-5)
                raise _Failed(
                    f"{aggregation}: "
                    + (
                        message
                        or f"{_expected_got(want.item(), out.item(), 5)} on a padded batch "
                        f"of {n_seq} responses with lengths {list(MASK_LENGTHS)}"
                    )
                )
            if not out.requires_grad:
                raise _Failed(f"{aggregation}: value is right but carries no gradient")
            (got,) = torch.autograd.grad(out, loss, allow_unused=True)
            (ref,) = torch.autograd.grad(want, loss)
            if got is None or not _close(got, ref, 1e-5):
                raise _Failed(
                    f"{aggregation}: value is right but the gradient per token differs "
                    "(a padding slot must get exactly 0)"
                )
        nan_values, _ = _padded_batch(seed, padding=float("nan"))
        for aggregation in plan:
            loss = nan_values.clone().requires_grad_(True)
            out = _as_tensor(_call(fn, loss, mask, aggregation, length))
            want = aggregate_loss(loss, mask, aggregation, normalize_constant=float(length))
            leaked = not torch.isfinite(out.detach()).all()
            if not leaked and out.requires_grad:
                (got,) = torch.autograd.grad(out, loss, allow_unused=True)
                leaked = got is not None and not torch.isfinite(got).all()
            if leaked:
                raise _Failed(
                    f"{aggregation}: a NaN in a padding slot leaked into the loss (or its "
                    "gradient): per_token_loss * mask gives 0 * NaN = NaN; select the real "
                    "tokens instead (torch.where(mask > 0, per_token_loss, 0))"
                )
            if not _close(out, want, 1e-5):
                raise _Failed(
                    f"{aggregation}: with NaN in the padding slots the value differs from the "
                    "reference"
                )
        return (
            f"sequence_mean, token_mean and constant_normalizer match the reference on "
            f"{n_seq} padded responses (lengths {list(MASK_LENGTHS)}), gradients included, "
            "and NaN in the padding stays out"
        )

    __tracebackhide__ = True  # noqa: F841 (IPython hides this frame in tracebacks)
    return _run("aggregate_loss", diagnose, strict)
