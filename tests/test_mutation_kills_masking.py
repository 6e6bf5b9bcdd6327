"""masking: the cases mutation testing found unchecked (tests/MUTATION.md).

aggregate_loss without a mask but with whole-batch counts or a constant (fixed-length
micro-batches), the count checks, empty inputs, tuple and negative dims, and error
messages that name the offending argument.
"""

from __future__ import annotations

import re

import pytest
import torch

from pgrl_helpers.masking import (
    LOSS_AGGREGATIONS,
    aggregate_loss,
    effective_token_weights,
    masked_mean,
    masked_normalize,
)

# [batch 2, trial 2, pos 3], fixed length (no padding)
LOSS = torch.tensor([[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], [[-1.0, 0.5, 9.0], [2.0, 2.0, 8.0]]])
MASK = torch.tensor([[[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]], [[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]]])


def test_without_a_mask_the_whole_batch_counts_are_used():
    micro = LOSS[:1]  # one micro-batch of an optimizer batch with 8 responses, 24 tokens
    total = micro.sum().item()  # 21
    per_sequence_means = micro.mean(-1).sum().item()  # 2 + 5
    cases = {
        ("sequence_mean", "num_sequences", 8): per_sequence_means / 8,
        ("token_mean", "num_tokens", 24): total / 24,
        ("constant_normalizer", "num_sequences", 8): total / (3 * 8),
    }
    for (aggregation, name, value), expected in cases.items():
        got = aggregate_loss(micro, None, aggregation, **{name: value})
        assert got.item() == pytest.approx(expected), aggregation
        # the same as with an all-ones mask
        torch.testing.assert_close(
            got, aggregate_loss(micro, torch.ones_like(micro), aggregation, **{name: value})
        )
    # constant_normalizer without a mask: sum / (L * N) with the L given
    got = aggregate_loss(LOSS, None, "constant_normalizer", normalize_constant=6.0)
    assert got.item() == pytest.approx(LOSS.sum().item() / (6 * 4))


def test_counts_of_one_are_allowed_and_bad_counts_are_named():
    one = LOSS[:1, :1]
    assert aggregate_loss(one, None, "sequence_mean", num_sequences=1).item() == pytest.approx(2.0)
    assert aggregate_loss(one, MASK[:1, :1], "token_mean", num_tokens=1).item() == pytest.approx(
        3.0
    )
    for name in ("num_sequences", "num_tokens"):
        for bad in (0, -1, 2.5, True, "4"):
            with pytest.raises(
                ValueError, match=rf"^{name} must be a positive int or None, got {bad!r}$"
            ):
                aggregate_loss(LOSS, MASK, "token_mean", **{name: bad})


def test_an_empty_loss_is_refused_not_nan():
    for shape in ((1, 1, 0), (0, 2, 3), (2, 0, 3)):
        for aggregation in LOSS_AGGREGATIONS:
            with pytest.raises(
                ValueError,
                match=rf"^per_token_loss is empty, shape {list(shape)}: a loss over no tokens is "
                "undefined$".replace("[", r"\[").replace("]", r"\]"),
            ):
                aggregate_loss(torch.zeros(shape), None, aggregation)
    single = torch.full((1, 1, 1), 3.0)
    for aggregation in LOSS_AGGREGATIONS:
        assert aggregate_loss(single, None, aggregation).item() == 3.0


def test_aggregate_loss_messages_name_the_argument():
    with pytest.raises(ValueError, match="^unknown loss aggregation 'sum'; valid modes are"):
        aggregate_loss(LOSS, None, "sum")
    with pytest.raises(
        ValueError, match=r"^per_token_loss must have shape \[batch, trial, pos\] \(3 dims\)"
    ):
        aggregate_loss(LOSS[0], None, "token_mean")


def test_tuple_and_negative_dims():
    torch.testing.assert_close(
        masked_mean(LOSS, MASK, dim=(1, 2)),
        torch.tensor([(1 + 2 + 4 + 5 + 6) / 5, (-1 + 2 + 2) / 3]),
    )
    torch.testing.assert_close(
        masked_normalize(LOSS, MASK, 2.0, dim=[0, 2]),
        torch.tensor([(1 + 2 - 1) / 2, (4 + 5 + 6 + 2 + 2) / 2]),
    )
    # dim = -ndim is the first axis
    torch.testing.assert_close(masked_mean(LOSS, torch.ones_like(MASK), dim=-3), LOSS.mean(0))
    with pytest.raises(ValueError, match=r"^dim -4 is out of range for a tensor with 3 dims$"):
        masked_mean(LOSS, MASK, dim=-4)
    with pytest.raises(ValueError, match=r"^dim \(0, 3\) is out of range"):
        masked_mean(LOSS, MASK, dim=(0, 3))


def test_masked_mean_empty_messages():
    with pytest.raises(
        ValueError,
        match=r"^masked_mean: the mask selects no entries; the mean of nothing is undefined "
        r"\(is a response empty, or the mask all zeros\?\)$",
    ):
        masked_mean(LOSS, torch.zeros_like(MASK))
    # two empty slices along dim 2 (and none with exactly one entry)
    two_empty = torch.tensor(
        [[[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]], [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]]
    )
    with pytest.raises(
        ValueError, match=r"^masked_mean: the mask selects no entries in 2 slice\(s\) along dim 2;"
    ):
        masked_mean(LOSS, two_empty, dim=2)


def test_masked_normalize_checks_the_constant_by_name():
    for bad in (0.0, -1.0, float("nan"), float("inf"), True, "2", None):
        with pytest.raises(
            ValueError, match=r"^normalize_constant must be a positive finite number, got "
        ):
            masked_normalize(LOSS, MASK, bad)
    assert masked_normalize(LOSS, MASK, 2).item() == pytest.approx(
        LOSS[MASK.bool()].sum().item() / 2
    )
    with pytest.raises(
        ValueError, match=r"^masked_normalize: the mask selects no entries \(all zeros\)$"
    ):
        masked_normalize(LOSS, torch.zeros_like(MASK), 2.0)


def test_mask_checks_name_the_argument():
    with pytest.raises(TypeError, match="^tensor must be a torch.Tensor, got list"):
        masked_mean(LOSS.tolist(), MASK)
    with pytest.raises(TypeError, match="^mask must be a torch.Tensor, got list"):
        masked_mean(LOSS, MASK.tolist())
    with pytest.raises(ValueError, match=r"^mask must hold only 0 and 1 \(or be bool\)$"):
        masked_mean(LOSS, MASK * 2)


def test_effective_token_weights_use_the_constant_and_name_bad_input():
    deltas = torch.tensor([[1.0, -1.0], [0.5, -2.0]])
    weights = effective_token_weights(MASK, deltas, "constant_normalizer", normalize_constant=6.0)
    torch.testing.assert_close(weights, deltas[:, :, None] / (6.0 * 4) * MASK)
    with pytest.raises(ValueError, match=r"^mask must have shape \[batch, trial, pos\] \(3 dims\)"):
        effective_token_weights(MASK[0], deltas, "token_mean")
    with pytest.raises(ValueError, match=r"^deltas must have shape \[batch, trial\] \(2 dims\)"):
        effective_token_weights(MASK, deltas[0], "token_mean")
    with pytest.raises(
        ValueError,
        match=r"^deltas must be \[batch, trial\] matching mask: deltas \[2, 1\], mask \[2, 2, 3\]$",
    ):
        effective_token_weights(MASK, deltas[:, :1], "token_mean")


def test_token_mean_without_a_mask_is_exactly_mean_even_in_float16():
    # documented: with mask=None, token_mean IS .mean(). The general path (masked sum / count)
    # rounds differently in float16 for this tensor, so this catches a lost fast path.
    x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0)).half()
    assert not torch.equal(masked_normalize(x, torch.ones_like(x), float(x.numel())), x.mean())
    assert torch.equal(aggregate_loss(x, None, "token_mean"), x.mean())


def test_token_mean_with_an_all_ones_mask_is_exactly_mean():
    x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0)).half()
    for mask in (torch.ones_like(x), torch.ones_like(x, dtype=torch.bool)):
        assert torch.equal(aggregate_loss(x, mask, "token_mean"), x.mean())


def test_counts_are_checked_without_a_mask_too():
    for aggregation in LOSS_AGGREGATIONS:
        with pytest.raises(ValueError, match="^num_sequences must be a positive int or None"):
            aggregate_loss(LOSS, None, aggregation, num_sequences=0)


def test_empty_mask_and_entropy_mask_messages_in_full():
    from pgrl_helpers.masking import aggregate_loss, high_entropy_mask

    message = (
        "mask selects no token (it is all zeros): a loss over no tokens is undefined; drop the "
        "empty batch (or micro-batch) before aggregating"
    )
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        aggregate_loss(torch.ones(1, 1, 2), torch.zeros(1, 1, 2), "token_mean")
    with pytest.raises(
        ValueError, match=r"^mask selects no token \(it is all zeros\): no entropy to rank$"
    ):
        high_entropy_mask(torch.ones(1, 1, 2), torch.zeros(1, 1, 2), 0.5)
