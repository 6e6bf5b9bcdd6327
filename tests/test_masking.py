"""masked_mean / masked_normalize on hand cases, loss aggregations vs their formulas."""

from __future__ import annotations

import pytest
import torch

from pgrl_helpers.masking import (
    LOSS_AGGREGATIONS,
    aggregate_loss,
    effective_token_weights,
    masked_mean,
    masked_normalize,
)

# [2, 3]: row 0 keeps 1, 2; row 1 keeps 4 only
X = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
M = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])


def test_masked_mean_hand_cases_every_dim():
    assert masked_mean(X, M).item() == pytest.approx((1 + 2 + 4) / 3)
    torch.testing.assert_close(masked_mean(X, M, dim=1), torch.tensor([1.5, 4.0]))
    torch.testing.assert_close(masked_mean(X, M, dim=-1), torch.tensor([1.5, 4.0]))
    # dim 0: column 2 is empty -> must raise, so use a mask with every column filled
    m0 = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    torch.testing.assert_close(masked_mean(X, m0, dim=0), torch.tensor([2.5, 5.0, 3.0]))
    # 3-d, [batch, trial, pos]
    x3 = torch.arange(8.0).reshape(2, 2, 2)
    m3 = torch.tensor([[[1, 1], [1, 0]], [[0, 1], [1, 1]]], dtype=torch.float32)
    torch.testing.assert_close(masked_mean(x3, m3, dim=2), torch.tensor([[0.5, 2.0], [5.0, 6.5]]))
    torch.testing.assert_close(masked_mean(x3, m3, dim=1), torch.tensor([[1.0, 1.0], [6.0, 6.0]]))
    torch.testing.assert_close(masked_mean(x3, m3, dim=0), torch.tensor([[0.0, 3.0], [4.0, 7.0]]))
    assert masked_mean(x3, m3).item() == pytest.approx((0 + 1 + 2 + 5 + 6 + 7) / 6)


def test_masked_normalize_hand_cases_every_dim():
    assert masked_normalize(X, M, 2.0).item() == pytest.approx(7 / 2)
    torch.testing.assert_close(masked_normalize(X, M, 4.0, dim=1), torch.tensor([0.75, 1.0]))
    torch.testing.assert_close(masked_normalize(X, M, 1.0, dim=0), torch.tensor([5.0, 2.0, 0.0]))
    torch.testing.assert_close(masked_normalize(X, M.bool(), 1.0, dim=-1), torch.tensor([3.0, 4.0]))


def test_empty_masks_raise_instead_of_dividing_by_zero():
    with pytest.raises(ValueError, match="selects no entries"):
        masked_mean(X, torch.zeros_like(X))
    with pytest.raises(ValueError, match="1 slice"):
        masked_mean(X, M, dim=0)  # column 2 is empty
    with pytest.raises(ValueError, match="selects no entries"):
        masked_normalize(X, torch.zeros_like(X), 3.0)


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match=r"\[2, 3\] and \[3, 2\]"):
        masked_mean(X, M.T)
    with pytest.raises(ValueError, match="only 0 and 1"):
        masked_mean(X, M * 0.5)
    with pytest.raises(ValueError, match="normalize_constant"):
        masked_normalize(X, M, 0.0)
    with pytest.raises(ValueError, match="out of range"):
        masked_mean(X, M, dim=2)
    with pytest.raises(ValueError, match="valid modes are"):
        aggregate_loss(torch.zeros(1, 1, 1), None, "sum")


def test_padding_never_leaks_values_or_gradient():
    x = torch.tensor([[1.0, float("nan"), float("inf")]], requires_grad=True)
    m = torch.tensor([[1.0, 0.0, 0.0]])
    out = masked_mean(x, m) + masked_normalize(x, m, 2.0)
    assert out.item() == pytest.approx(1.5)
    out.backward()
    torch.testing.assert_close(x.grad, torch.tensor([[1.5, 0.0, 0.0]]))


# hand case for the aggregations: 2 prompts x 2 responses, max length 4
LOSS = torch.tensor(
    [
        [[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]],
        [[-1.0, 0.5, 9.0, 9.0], [2.0, 2.0, 2.0, 9.0]],
    ]
)
MASK = torch.tensor(
    [
        [[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]],
        [[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]],
    ]
)
SEQ_SUMS = [10.0, 11.0, -0.5, 6.0]
SEQ_LENS = [4, 2, 2, 3]


def test_each_aggregation_equals_its_formula():
    sequence_mean = sum(s / n for s, n in zip(SEQ_SUMS, SEQ_LENS)) / 4
    token_mean = sum(SEQ_SUMS) / sum(SEQ_LENS)
    constant = sum(SEQ_SUMS) / (4 * 4)  # L = max length 4, N = 4 responses
    assert aggregate_loss(LOSS, MASK, "sequence_mean").item() == pytest.approx(sequence_mean)
    assert aggregate_loss(LOSS, MASK, "token_mean").item() == pytest.approx(token_mean)
    assert aggregate_loss(LOSS, MASK, "constant_normalizer").item() == pytest.approx(constant)
    assert aggregate_loss(LOSS, MASK, "constant_normalizer", normalize_constant=8.0).item() == (
        pytest.approx(sum(SEQ_SUMS) / (8 * 4))
    )


def test_without_mask_every_aggregation_is_the_plain_mean():
    for aggregation in LOSS_AGGREGATIONS:
        assert aggregate_loss(LOSS, None, aggregation).item() == pytest.approx(LOSS.mean().item())
    assert torch.equal(aggregate_loss(LOSS, None, "token_mean"), LOSS.mean())  # bit-identical


def test_micro_batches_need_the_whole_batch_counts():
    for aggregation in LOSS_AGGREGATIONS:
        full = aggregate_loss(LOSS, MASK, aggregation)
        parts = [(LOSS[i : i + 1], MASK[i : i + 1]) for i in range(2)]
        whole = sum(
            aggregate_loss(x, m, aggregation, num_sequences=4, num_tokens=int(MASK.sum()))
            for x, m in parts
        )
        torch.testing.assert_close(whole, full)
    # token_mean normalised per micro-batch: a different loss (here 9.5/2 + 5.5/2 vs 26.5/11)
    naive = sum(aggregate_loss(x, m, "token_mean") for x, m in parts) / 2
    assert abs(naive.item() - aggregate_loss(LOSS, MASK, "token_mean").item()) > 0.1


def test_effective_token_weights_follow_the_formulas():
    deltas = torch.tensor([[1.0, -1.0], [0.5, -2.0]])
    lens = torch.tensor([SEQ_LENS[:2], SEQ_LENS[2:]], dtype=torch.float32)
    formulas = {
        "sequence_mean": deltas / (lens * 4),
        "token_mean": deltas / lens.sum(),
        "constant_normalizer": deltas / (4 * 4),
    }
    for aggregation, per_token in formulas.items():
        weights = effective_token_weights(MASK, deltas, aggregation)
        torch.testing.assert_close(weights, per_token[:, :, None] * MASK)
        assert (weights[MASK == 0] == 0).all()
