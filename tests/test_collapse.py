"""pgrl_helpers.collapse: the one "collapsed" rule (validation + entropy, never the test set)."""

from __future__ import annotations

import inspect
import math

import pytest

from pgrl_helpers import collapse
from pgrl_helpers.collapse import ENTROPY_THRESHOLD, TAIL_EPOCHS, end_entropy, is_collapsed

LOW, HIGH = [0.5, 0.3, 0.05, 0.04, 0.03, 0.02, 0.01], [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4]

#: (validation curve, entropy per epoch, target, expected label, why)
CASES = [
    ([0.2, 0.5, 0.6], LOW, 0.9, True, "deterministic and still wrong"),
    ([0.2, 0.5, 0.95], LOW, 0.9, False, "reached the target: deterministic is fine"),
    ([1.0], LOW, 0.95, False, "review's GSPO seed: validation 1.0, low entropy"),
    ([0.2, 0.5, 0.6], HIGH, 0.9, False, "still exploring"),
    ([0.2, 0.95, 0.6], LOW, 0.9, True, "the last evaluation counts, not the best"),
    ([0.6, 0.2], LOW, 0.9, True, "below target at the end"),
    ([0.2, 0.5, 0.9], LOW, 0.9, False, "exactly at the target is reached"),
    # entropy is high early and low only in the last 5 epochs: the end is what counts
    ([0.1], [2.0] * 10 + [0.01] * 5, 0.9, True, "the tail, not the whole curve"),
    # low early, recovered in the last 5 epochs: not collapsed
    ([0.1], [0.01] * 10 + [0.5] * 5, 0.9, False, "recovered entropy"),
    # the 6th-last epoch is huge, outside the tail: still collapsed
    ([0.1], [9.0] + [0.05] * 5, 0.9, True, "only the last 5 epochs"),
    # one value just above the threshold in the tail: mean decides (0.05*4 + 0.3)/5 = 0.1
    ([0.1], [0.05, 0.05, 0.05, 0.05, 0.3], 0.9, False, "mean at the threshold is not below"),
    ([0.1], [0.05, 0.05, 0.05, 0.05, 0.29], 0.9, True, "mean just below the threshold"),
]


@pytest.mark.parametrize("validation, entropy, target, expected, why", CASES)
def test_rule_on_hand_made_runs(validation, entropy, target, expected, why):
    assert is_collapsed(validation, entropy, target) is expected, why


def test_constants_and_rule_text():
    assert (ENTROPY_THRESHOLD, TAIL_EPOCHS) == (0.1, 5)
    assert "validation" in collapse.RULE and "test" in collapse.RULE


def test_never_reads_a_test_score():
    params = inspect.signature(is_collapsed).parameters
    assert not any("test" in name for name in params)


def test_end_entropy_is_the_tail_mean():
    assert end_entropy([3.0, 1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(3.0)
    assert end_entropy([4.0, 2.0]) == pytest.approx(3.0)  # shorter than the tail: all epochs
    assert end_entropy([1.0, 2.0, 3.0], tail=1) == 3.0


def test_sparse_entropy_log_averages_the_last_epochs():
    # logged every 5 epochs (epochs 5, 10, ..., 150): only epoch 150 lies in the last 5 epochs
    epochs = list(range(5, 151, 5))
    values = [1.0] * 29 + [0.05]
    assert end_entropy(values, entropy_epochs=epochs) == pytest.approx(0.05)
    assert is_collapsed([0.5], values, 0.95, entropy_epochs=epochs)
    # logged every 2 epochs: epochs 146 and 148 and 150 count, 144 does not
    epochs = [144, 146, 148, 150]
    assert end_entropy([9.0, 0.3, 0.0, 0.0], entropy_epochs=epochs) == pytest.approx(0.1)
    assert not is_collapsed([0.5], [9.0, 0.31, 0.0, 0.0], 0.95, entropy_epochs=epochs)
    assert is_collapsed([0.5], [9.0, 0.2, 0.0, 0.0], 0.95, entropy_epochs=epochs)
    with pytest.raises(ValueError, match="one epoch per entropy value"):
        end_entropy([0.1, 0.2], entropy_epochs=[1])
    with pytest.raises(ValueError, match="increase"):
        end_entropy([0.1, 0.2], entropy_epochs=[2, 2])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(validation_exact=[], entropy=[0.1], target=0.9), "validation_exact"),
        (dict(validation_exact=[0.1], entropy=[], target=0.9), "entropy"),
        (dict(validation_exact=[math.nan], entropy=[0.1], target=0.9), "finite"),
        (dict(validation_exact=[0.1], entropy=[math.inf], target=0.9), "finite"),
        (dict(validation_exact=[1.5], entropy=[0.1], target=0.9), r"\[0, 1\]"),
        (dict(validation_exact=[0.1], entropy=[-0.1], target=0.9), ">= 0"),
        (dict(validation_exact=[0.1], entropy=[0.1], target=0.0), "target"),
        (dict(validation_exact=[0.1], entropy=[0.1], target=1.5), "target"),
        (dict(validation_exact=[0.1], entropy=[0.1], target=0.9, tail=0), "tail"),
        (dict(validation_exact=[0.1], entropy=[0.1], target=0.9, tail=True), "tail"),
        (dict(validation_exact=[0.1], entropy=[0.1], target=0.9, entropy_threshold=0), "threshold"),
    ],
)
def test_bad_inputs_name_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        is_collapsed(**kwargs)


# ---- planted bugs: each plausible wrong rule disagrees with at least one case above ----------


def _mutant_entropy_only(validation, entropy, target):  # forgets the validation half
    return end_entropy(entropy) < ENTROPY_THRESHOLD


def _mutant_best_validation(validation, entropy, target):  # reads the best, not the last
    return end_entropy(entropy) < ENTROPY_THRESHOLD and max(validation) < target


def _mutant_whole_curve(validation, entropy, target):  # averages every epoch
    return sum(entropy) / len(entropy) < ENTROPY_THRESHOLD and validation[-1] < target


def _mutant_first_epochs(validation, entropy, target):  # the head instead of the tail
    head = entropy[:TAIL_EPOCHS]
    return sum(head) / len(head) < ENTROPY_THRESHOLD and validation[-1] < target


def _mutant_inclusive(validation, entropy, target):  # <= instead of <
    return end_entropy(entropy) <= ENTROPY_THRESHOLD and validation[-1] <= target


def _mutant_last_epoch(validation, entropy, target):  # one epoch instead of the tail mean
    return entropy[-1] < ENTROPY_THRESHOLD and validation[-1] < target


@pytest.mark.parametrize(
    "mutant",
    [
        _mutant_entropy_only,
        _mutant_best_validation,
        _mutant_whole_curve,
        _mutant_first_epochs,
        _mutant_inclusive,
        _mutant_last_epoch,
    ],
)
def test_cases_catch_planted_bugs(mutant):
    wrong = [why for v, e, t, expected, why in CASES if mutant(v, e, t) is not expected]
    assert wrong, f"{mutant.__name__} passes every case: the cases cannot catch it"
