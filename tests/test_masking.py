"""masked_mean / masked_normalize on hand cases, loss aggregations vs their formulas."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import pytest
import torch

from pgrl_helpers.masking import (
    LOSS_AGGREGATIONS,
    aggregate_loss,
    effective_token_weights,
    high_entropy_mask,
    masked_mean,
    masked_normalize,
)

#: Other test files whose tests also pin pgrl_helpers/masking.py (tests/mutation.py).
MUTATION_ALSO = ("integration/test_framework_agreement.py", "test_config.py")

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
    with pytest.raises(ValueError, match="valid values are"):
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


# --- the high-entropy-token mask (Wang et al. 2025, arXiv 2506.01939) ---


def test_high_entropy_mask_by_hand():
    entropy = torch.tensor([[[0.1, 0.9, 0.5, 7.0], [0.3, 0.7, 0.2, 0.8]]])
    mask = torch.tensor([[[1, 1, 1, 0], [1, 1, 1, 1]]])
    # 7 real entropies; quantile 1 - 0.2 = 0.8 by linear interpolation: 0.74
    keep = high_entropy_mask(entropy, mask, 0.2)
    assert keep.tolist() == [[[False, True, False, False], [False, False, False, True]]]
    assert high_entropy_mask(entropy, mask, 1.0).tolist() == (mask > 0).tolist()
    for bad in (0, 1.5, True, math.nan):
        with pytest.raises(ValueError, match="^top_entropy_quantile must be a number in"):
            high_entropy_mask(entropy, mask, bad)
    with pytest.raises(ValueError, match="mask selects no token"):
        high_entropy_mask(entropy, torch.zeros_like(mask), 0.5)


@pytest.mark.parametrize("quantile", [0.2, 0.5, 0.8])
def test_high_entropy_mask_equals_trl(quantile):
    trl_grpo = pytest.importorskip("trl.trainer.grpo_trainer")
    identity = SimpleNamespace(pad_across_processes=lambda t, dim, pad_index: t, gather=lambda t: t)
    fake_trainer = SimpleNamespace(accelerator=identity)
    generator = torch.Generator().manual_seed(0)
    entropy = torch.rand(6, 9, generator=generator) * 2
    mask = (torch.arange(9) < torch.tensor([9, 3, 7, 1, 5, 8])[:, None]).long()
    theirs = trl_grpo.GRPOTrainer.get_high_entropy_mask(fake_trainer, entropy, mask, 1 - quantile)
    ours = high_entropy_mask(entropy[None], mask[None], quantile)[0]
    assert torch.equal(ours, theirs)
    assert 0 < ours.sum() < mask.sum()


# --- mutants ---
# The cases mutation testing found unchecked (tests/MUTATION.md).
#
# aggregate_loss without a mask but with whole-batch counts or a constant (fixed-length
# micro-batches), the count checks, empty inputs, tuple and negative dims, and error
# messages that name the offending argument.


# [batch 2, trial 2, pos 3], fixed length (no padding)
SMALL_LOSS = torch.tensor([[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], [[-1.0, 0.5, 9.0], [2.0, 2.0, 8.0]]])


SMALL_MASK = torch.tensor([[[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]], [[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]]])


def test_without_a_mask_the_whole_batch_counts_are_used():
    micro = SMALL_LOSS[:1]  # one micro-batch of an optimizer batch with 8 responses, 24 tokens
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
    got = aggregate_loss(SMALL_LOSS, None, "constant_normalizer", normalize_constant=6.0)
    assert got.item() == pytest.approx(SMALL_LOSS.sum().item() / (6 * 4))


def test_counts_of_one_are_allowed_and_bad_counts_are_named():
    one = SMALL_LOSS[:1, :1]
    assert aggregate_loss(one, None, "sequence_mean", num_sequences=1).item() == pytest.approx(2.0)
    assert aggregate_loss(
        one, SMALL_MASK[:1, :1], "token_mean", num_tokens=1
    ).item() == pytest.approx(3.0)
    for name in ("num_sequences", "num_tokens"):
        for bad in (0, -1, 2.5, True, "4"):
            with pytest.raises(
                ValueError, match=rf"^{name} .*positive int or None.*{re.escape(repr(bad))}"
            ):
                aggregate_loss(SMALL_LOSS, SMALL_MASK, "token_mean", **{name: bad})


def test_an_empty_loss_is_refused_not_nan():
    for shape in ((1, 1, 0), (0, 2, 3), (2, 0, 3)):
        for aggregation in LOSS_AGGREGATIONS:
            with pytest.raises(
                ValueError,
                match=rf"^per_token_loss is empty.*{re.escape(str(list(shape)))}.*undefined",
            ):
                aggregate_loss(torch.zeros(shape), None, aggregation)
    single = torch.full((1, 1, 1), 3.0)
    for aggregation in LOSS_AGGREGATIONS:
        assert aggregate_loss(single, None, aggregation).item() == 3.0


def test_aggregate_loss_messages_name_the_argument():
    with pytest.raises(ValueError, match="^unknown loss aggregation 'sum'; valid values are"):
        aggregate_loss(SMALL_LOSS, None, "sum")
    with pytest.raises(
        ValueError, match=r"^per_token_loss must have shape \[batch, trial, pos\] \(3 dims\)"
    ):
        aggregate_loss(SMALL_LOSS[0], None, "token_mean")


def test_tuple_and_negative_dims():
    torch.testing.assert_close(
        masked_mean(SMALL_LOSS, SMALL_MASK, dim=(1, 2)),
        torch.tensor([(1 + 2 + 4 + 5 + 6) / 5, (-1 + 2 + 2) / 3]),
    )
    torch.testing.assert_close(
        masked_normalize(SMALL_LOSS, SMALL_MASK, 2.0, dim=[0, 2]),
        torch.tensor([(1 + 2 - 1) / 2, (4 + 5 + 6 + 2 + 2) / 2]),
    )
    # dim = -ndim is the first axis
    torch.testing.assert_close(
        masked_mean(SMALL_LOSS, torch.ones_like(SMALL_MASK), dim=-3), SMALL_LOSS.mean(0)
    )
    with pytest.raises(ValueError, match=r"^dim -4 is out of range.*3 dims"):
        masked_mean(SMALL_LOSS, SMALL_MASK, dim=-4)
    with pytest.raises(ValueError, match=r"^dim \(0, 3\) is out of range"):
        masked_mean(SMALL_LOSS, SMALL_MASK, dim=(0, 3))


def test_masked_mean_empty_messages():
    with pytest.raises(
        ValueError,
        match=r"^masked_mean: the mask selects no entries;.*the mask all zeros",
    ):
        masked_mean(SMALL_LOSS, torch.zeros_like(SMALL_MASK))
    # two empty slices along dim 2 (and none with exactly one entry)
    two_empty = torch.tensor(
        [[[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]], [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]]
    )
    with pytest.raises(
        ValueError, match=r"^masked_mean: the mask selects no entries in 2 slice\(s\) along dim 2;"
    ):
        masked_mean(SMALL_LOSS, two_empty, dim=2)


def test_masked_normalize_checks_the_constant_by_name():
    for bad in (0.0, -1.0, float("nan"), float("inf"), True, "2", None):
        with pytest.raises(
            ValueError, match=r"^normalize_constant must be a positive finite number, got "
        ):
            masked_normalize(SMALL_LOSS, SMALL_MASK, bad)
    assert masked_normalize(SMALL_LOSS, SMALL_MASK, 2).item() == pytest.approx(
        SMALL_LOSS[SMALL_MASK.bool()].sum().item() / 2
    )
    with pytest.raises(ValueError, match=r"^masked_normalize: the mask selects no entries"):
        masked_normalize(SMALL_LOSS, torch.zeros_like(SMALL_MASK), 2.0)


def test_mask_checks_name_the_argument():
    with pytest.raises(TypeError, match="^tensor must be a torch.Tensor, got list"):
        masked_mean(SMALL_LOSS.tolist(), SMALL_MASK)
    with pytest.raises(TypeError, match="^mask must be a torch.Tensor, got list"):
        masked_mean(SMALL_LOSS, SMALL_MASK.tolist())
    with pytest.raises(ValueError, match=r"^mask must hold only 0 and 1 \(or be bool\)"):
        masked_mean(SMALL_LOSS, SMALL_MASK * 2)


def test_effective_token_weights_use_the_constant_and_name_bad_input():
    deltas = torch.tensor([[1.0, -1.0], [0.5, -2.0]])
    weights = effective_token_weights(
        SMALL_MASK, deltas, "constant_normalizer", normalize_constant=6.0
    )
    torch.testing.assert_close(weights, deltas[:, :, None] / (6.0 * 4) * SMALL_MASK)
    with pytest.raises(ValueError, match=r"^mask must have shape \[batch, trial, pos\] \(3 dims\)"):
        effective_token_weights(SMALL_MASK[0], deltas, "token_mean")
    with pytest.raises(ValueError, match=r"^deltas must have shape \[batch, trial\] \(2 dims\)"):
        effective_token_weights(SMALL_MASK, deltas[0], "token_mean")
    with pytest.raises(
        ValueError,
        match=r"^deltas must be \[batch, trial\] matching mask.*\[2, 1\]",
    ):
        effective_token_weights(SMALL_MASK, deltas[:, :1], "token_mean")


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
            aggregate_loss(SMALL_LOSS, None, aggregation, num_sequences=0)


def test_empty_mask_and_entropy_mask_messages_in_full():
    from pgrl_helpers.masking import aggregate_loss, high_entropy_mask

    with pytest.raises(ValueError, match=r"^mask selects no token.*drop the empty batch"):
        aggregate_loss(torch.ones(1, 1, 2), torch.zeros(1, 1, 2), "token_mean")
    with pytest.raises(ValueError, match=r"^mask selects no token.*no entropy to rank"):
        high_entropy_mask(torch.ones(1, 1, 2), torch.zeros(1, 1, 2), 0.5)
