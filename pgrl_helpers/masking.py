"""Response masks and loss aggregation for variable-length responses.

A batch of responses of different lengths is stored as a rectangle float[batch, trial,
pos]; the *response mask* (same shape, 1 for a real token up to and including EOS, 0
for padding) says which slots count. Padding must never count: its "log-probs" are
whatever the model predicts after the answer ended, and letting them into the loss
trains the model on tokens it never generated.

Reductions:

* ``masked_mean(tensor, mask, dim=None)``: sum of the selected entries / their count.
* ``masked_normalize(tensor, mask, normalize_constant, dim=None)``: sum of the selected
  entries / a constant you choose (CS336's name).

Masked entries are *selected away* (``torch.where``), not multiplied by 0, so a NaN or
inf in a padding slot cannot leak into the result, and its gradient is exactly 0.

Loss aggregation (how per-token losses float[batch, trial, pos] become one scalar),
with |o_i| the number of real tokens of response i and N the number of responses:

* ``sequence_mean`` (original GRPO): mean over each response's tokens, then mean over
  responses: (1/N) sum_i (1/|o_i|) sum_t l_it. A token of a short response weighs
  more than a token of a long one.
* ``token_mean`` (DAPO): one mean over every real token of the batch:
  sum_i sum_t l_it / sum_i |o_i|. Every token weighs the same.
* ``constant_normalizer`` (Dr. GRPO): token sum over a constant, per response:
  (1/N) sum_i sum_t l_it / L, with L fixed (the maximum response length). Every token
  weighs the same, and the weight does not depend on what else is in the batch.

Micro-batches: when one optimizer batch is split into micro-batches for gradient
accumulation, the counts (``num_sequences``, ``num_tokens``) must be those of the WHOLE
optimizer batch. Normalising each micro-batch by its own count and summing gives a
different (and batch-split-dependent) loss; see ``aggregate_loss``.
"""

from __future__ import annotations

import math

import torch

from ._validate import check_mode, check_ndim, check_tensor

LOSS_AGGREGATIONS: tuple[str, ...] = ("sequence_mean", "token_mean", "constant_normalizer")


def _check_mask(tensor: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Validate and return the mask as bool (same shape as tensor, values 0/1 only)."""
    check_tensor(tensor, "tensor")
    check_tensor(mask, "mask")
    if tensor.shape != mask.shape:
        raise ValueError(
            f"tensor and mask must have the same shape, got {list(tensor.shape)} and "
            f"{list(mask.shape)}"
        )
    if mask.dtype != torch.bool:
        if not ((mask == 0) | (mask == 1)).all():
            raise ValueError("mask must hold only 0 and 1 (or be bool)")
        mask = mask != 0
    return mask


def _check_dim(dim, ndim: int):
    if dim is None:
        return None
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    for d in dims:
        if not isinstance(d, int) or not -ndim <= d < ndim:
            raise ValueError(f"dim {dim!r} is out of range for a tensor with {ndim} dims")
    return dim


def _masked_sum(tensor: torch.Tensor, mask: torch.Tensor, dim) -> torch.Tensor:
    selected = torch.where(mask, tensor, torch.zeros_like(tensor))
    return selected.sum() if dim is None else selected.sum(dim=dim)


def masked_mean(tensor: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``tensor`` over the entries where ``mask`` is 1.

    tensor and mask share a shape (e.g. [batch, trial, pos]); ``dim=None`` gives a
    scalar, ``dim=d`` reduces that axis only (e.g. ``dim=-1``: per-response mean over
    its tokens -> [batch, trial]). Raises ValueError if the mask selects nothing
    (overall, or in any slice along ``dim``) instead of returning 0/0 = NaN.
    """
    bool_mask = _check_mask(tensor, mask)
    dim = _check_dim(dim, tensor.ndim)
    count = bool_mask.sum() if dim is None else bool_mask.sum(dim=dim)
    if (count == 0).any():
        where = "" if dim is None else f" in {int((count == 0).sum())} slice(s) along dim {dim}"
        raise ValueError(
            f"masked_mean: the mask selects no entries{where}; the mean of nothing is "
            "undefined (is a response empty, or the mask all zeros?)"
        )
    return _masked_sum(tensor, bool_mask, dim) / count.to(tensor.dtype)


def masked_normalize(
    tensor: torch.Tensor,
    mask: torch.Tensor,
    normalize_constant: float,
    dim: int | None = None,
) -> torch.Tensor:
    """Sum of ``tensor`` over the entries where ``mask`` is 1, divided by a constant.

    ``dim=None`` sums everything (scalar); ``dim=d`` sums that axis only. Raises
    ValueError if the mask selects no entry at all (a loss over no tokens is a bug
    upstream), or if ``normalize_constant`` is not a positive finite number.
    """
    bool_mask = _check_mask(tensor, mask)
    dim = _check_dim(dim, tensor.ndim)
    if (
        isinstance(normalize_constant, bool)
        or not isinstance(normalize_constant, (int, float))
        or not math.isfinite(normalize_constant)
        or normalize_constant <= 0
    ):
        raise ValueError(
            f"normalize_constant must be a positive finite number, got {normalize_constant!r}"
        )
    if not bool_mask.any():
        raise ValueError("masked_normalize: the mask selects no entries (all zeros)")
    return _masked_sum(tensor, bool_mask, dim) / normalize_constant


def aggregate_loss(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor | None,
    aggregation: str,
    normalize_constant: float | None = None,
    num_sequences: int | None = None,
    num_tokens: int | None = None,
) -> torch.Tensor:
    """Reduce per-token losses float[batch, trial, pos] to the scalar to minimise.

    * ``mask``: response mask float/bool[batch, trial, pos]; None means every slot is
      real (fixed-length responses); then ``token_mean`` is exactly ``.mean()``.
    * ``aggregation``: one of ``LOSS_AGGREGATIONS`` (see the module docstring).
    * ``normalize_constant``: L of ``constant_normalizer`` (default: pos, the padded
      maximum response length).
    * ``num_sequences`` / ``num_tokens``: counts of the WHOLE optimizer batch when this
      call sees only one micro-batch (default: this call's batch x trial, and its number
      of real tokens). With them, the micro-batch losses add up to the full-batch loss.
    """
    check_mode(aggregation, LOSS_AGGREGATIONS, "loss aggregation")
    check_ndim(per_token_loss, 3, "per_token_loss", "batch, trial, pos")
    batch, trial, pos = per_token_loss.shape
    if per_token_loss.numel() == 0:
        raise ValueError(
            f"per_token_loss is empty, shape {list(per_token_loss.shape)}: a loss over no "
            "tokens is undefined"
        )
    if mask is None:
        mask = torch.ones_like(per_token_loss, dtype=torch.bool)
    bool_mask = _check_mask(per_token_loss, mask)
    for value, name in ((num_sequences, "num_sequences"), (num_tokens, "num_tokens")):
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 1
        ):
            raise ValueError(f"{name} must be a positive int or None, got {value!r}")
    if aggregation == "token_mean" and num_tokens is None and bool(bool_mask.all()):
        return per_token_loss.mean()  # every slot is real: exactly the plain mean
    sequences = batch * trial if num_sequences is None else num_sequences
    if aggregation == "sequence_mean":
        per_sequence = masked_mean(per_token_loss, bool_mask, dim=-1)  # [batch, trial]
        return per_sequence.sum() / sequences
    if aggregation == "token_mean":
        tokens = int(bool_mask.sum()) if num_tokens is None else num_tokens
        return masked_normalize(per_token_loss, bool_mask, float(tokens))
    constant = float(pos) if normalize_constant is None else normalize_constant
    return masked_normalize(per_token_loss, bool_mask, constant * sequences)


def effective_token_weights(
    mask: torch.Tensor,
    deltas: torch.Tensor,
    aggregation: str,
    normalize_constant: float | None = None,
) -> torch.Tensor:
    """The weight w_it on grad log pi(token t of response i) in -grad(loss): [batch, trial, pos].

    For the naive loss l_it = -delta_i log pi_it (and for the ratio losses at ratio 1),
    -grad(loss) = sum_it w_it grad log pi_it. Padding slots get weight 0. Computed by
    autograd through ``aggregate_loss``, so it is the real thing, not a formula.
    """
    check_ndim(mask, 3, "mask", "batch, trial, pos")
    check_ndim(deltas, 2, "deltas", "batch, trial")
    if deltas.shape != mask.shape[:2]:
        raise ValueError(
            f"deltas must be [batch, trial] matching mask: deltas {list(deltas.shape)}, "
            f"mask {list(mask.shape)}"
        )
    log_probs = torch.zeros(mask.shape, requires_grad=True)
    loss = aggregate_loss(-log_probs * deltas[:, :, None], mask, aggregation, normalize_constant)
    (grad,) = torch.autograd.grad(loss, log_probs)
    return -grad
