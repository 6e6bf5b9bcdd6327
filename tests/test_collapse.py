"""pgrl_helpers.collapse: the one "collapsed" rule (entropy, training reward and validation,
never the test set)."""

from __future__ import annotations

import inspect
import json
import math
from pathlib import Path

import pytest

from pgrl_helpers import collapse
from pgrl_helpers.collapse import (
    ENTROPY_THRESHOLD,
    REWARD_MARGIN,
    TAIL_EPOCHS,
    end_entropy,
    end_training_reward,
    is_collapsed,
)

LOW, HIGH = [0.5, 0.3, 0.05, 0.04, 0.03, 0.02, 0.01], [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4]
STUCK = 0.8  # a training reward that plateaued well below the maximum of 1

#: (validation curve, entropy per epoch, target, expected label, why); training reward STUCK
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


#: (training reward per epoch, expected label, why) for a run that is otherwise collapsed:
#: validation [0.2, 0.5, 0.6] below the target 0.9, entropy LOW
REWARD_CASES = [
    ([0.3, 0.5, 0.7, 0.8, 0.8, 0.8, 0.8], True, "reward plateaued below the maximum"),
    ([0.3, 0.5, 0.9, 1.0, 1.0, 1.0, 1.0], False, "reached the training reward maximum"),
    ([0.3, 0.5, 1.0, 1.0, 0.75, 1.0, 1.0], False, "tail mean 0.95: at the line is reached"),
    ([0.3, 0.5, 1.0, 1.0, 0.74, 1.0, 1.0], True, "tail mean 0.948: just below the line"),
    ([1.0, 1.0, 0.5, 0.6, 0.6, 0.6, 0.6], True, "was at the maximum, fell back: the end counts"),
    ([0.1, 0.1, 1.0, 1.0, 1.0, 1.0, 1.0], False, "only the last 5 epochs"),
]


def _stuck(entropy):
    return [STUCK] * len(entropy)


@pytest.mark.parametrize("validation, entropy, target, expected, why", CASES)
def test_rule_on_hand_made_runs(validation, entropy, target, expected, why):
    label = is_collapsed(validation, entropy, target, training_reward=_stuck(entropy))
    assert label is expected, why


@pytest.mark.parametrize("reward, expected, why", REWARD_CASES)
def test_a_run_at_the_training_reward_maximum_is_not_collapsed(reward, expected, why):
    assert is_collapsed([0.2, 0.5, 0.6], LOW, 0.9, training_reward=reward) is expected, why


def test_reward_max_scales_the_line():
    # sort_distance_reward pays up to 5: 4.8 of 5 is within 5% of the maximum, 4.7 is not
    assert not is_collapsed([0.2], LOW, 0.9, training_reward=[4.8] * 7, reward_max=5)
    assert is_collapsed([0.2], LOW, 0.9, training_reward=[4.7] * 7, reward_max=5)
    assert is_collapsed([0.2], LOW, 0.9, training_reward=[0.94] * 7)  # default maximum 1
    assert not is_collapsed([0.2], LOW, 0.9, training_reward=[0.96] * 7)


NOTEBOOK_08_SETTING = "G=16, entropy 0.05 (notebook 08)"


def test_notebook_08_seeds_1_and_3_are_not_collapsed():
    """Review r4's major: seeds 1 and 3 of notebook 08's setting end nearly deterministic and
    below the validation target, but their samples earn ~1.0 on the training prompts (and
    0.95 / 0.98 on test): their work is done, so the rule must not call them collapsed. Seed 2
    (reward stuck near 0.8, one value lost) is the notebook's collapsed example and stays one."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "collapse.json"
    bench = json.loads(path.read_text())
    runs = {r["seed"]: r for r in bench["runs"] if r["setting"] == NOTEBOOK_08_SETTING}

    def label(seed):
        c = runs[seed]["curves"]
        return is_collapsed(
            c["validation_exact"], c["entropy"], bench["target"], training_reward=c["mean_reward"]
        )

    for seed in (1, 3):
        c = runs[seed]["curves"]
        assert end_entropy(c["entropy"]) < ENTROPY_THRESHOLD  # nearly deterministic
        assert c["validation_exact"][-1] < bench["target"]  # below the validation target
        assert end_training_reward(c["mean_reward"]) > 0.98  # but at the reward maximum
        assert label(seed) is False, seed
    assert label(2) is True


def test_constants_and_rule_text():
    assert (ENTROPY_THRESHOLD, TAIL_EPOCHS, REWARD_MARGIN) == (0.1, 5, 0.05)
    assert "validation" in collapse.RULE and "test" in collapse.RULE
    assert "training reward" in collapse.RULE


def test_training_reward_is_required():
    with pytest.raises(TypeError, match="training_reward"):
        is_collapsed([0.2], LOW, 0.9)  # the old rule's call: refused, not silently old


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
    assert is_collapsed([0.5], values, 0.95, training_reward=_stuck(values), entropy_epochs=epochs)
    # the training reward is read on the same logged epochs
    reward = [0.1] * 29 + [1.0]
    assert end_training_reward(reward, reward_epochs=epochs) == 1.0
    assert not is_collapsed([0.5], values, 0.95, training_reward=reward, entropy_epochs=epochs)
    # logged every 2 epochs: epochs 146 and 148 and 150 count, 144 does not
    epochs = [144, 146, 148, 150]
    assert end_entropy([9.0, 0.3, 0.0, 0.0], entropy_epochs=epochs) == pytest.approx(0.1)
    four = [STUCK] * 4
    assert not is_collapsed(
        [0.5], [9.0, 0.31, 0.0, 0.0], 0.95, training_reward=four, entropy_epochs=epochs
    )
    assert is_collapsed(
        [0.5], [9.0, 0.2, 0.0, 0.0], 0.95, training_reward=four, entropy_epochs=epochs
    )
    # a reward logged on other epochs than the entropy (here epochs 140 and 150 only)
    every_5 = list(range(5, 151, 5))
    sparse = [1.0] * 29 + [0.05]
    kwargs = dict(entropy_epochs=every_5, reward_epochs=[140, 150])
    assert not is_collapsed([0.5], sparse, 0.95, training_reward=[0.5, 0.99], **kwargs)
    assert is_collapsed([0.5], sparse, 0.95, training_reward=[0.99, 0.5], **kwargs)
    with pytest.raises(ValueError, match="reward_epochs must give one epoch"):
        is_collapsed([0.5], [0.0], 0.95, training_reward=[0.5, 0.9], reward_epochs=[150])
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
        (dict(validation_exact=[0.1], entropy=[0.1], target=0.9, reward_max=0), "reward_max"),
        (dict(validation_exact=[0.1], entropy=[0.1], target=0.9, reward_margin=1), "reward_margin"),
        (dict(validation_exact=[0.1], entropy=[0.1, 0.1], target=0.9), "same epochs"),
        (
            dict(validation_exact=[0.1], entropy=[0.1], target=0.9, training_reward=[math.nan]),
            "finite",
        ),
    ],
)
def test_bad_inputs_name_the_argument(kwargs, message):
    kwargs.setdefault("training_reward", [STUCK])
    with pytest.raises(ValueError, match=message):
        is_collapsed(**kwargs)


# ---- planted bugs: each plausible wrong rule disagrees with at least one case above ----------
# (mutants take the training reward as a 4th argument; the hand-made CASES use STUCK)


def _mutant_entropy_only(validation, entropy, target, reward=None):  # forgets the validation half
    return end_entropy(entropy) < ENTROPY_THRESHOLD


def _mutant_best_validation(
    validation, entropy, target, reward=None
):  # reads the best, not the last
    return end_entropy(entropy) < ENTROPY_THRESHOLD and max(validation) < target


def _mutant_whole_curve(validation, entropy, target, reward=None):  # averages every epoch
    return sum(entropy) / len(entropy) < ENTROPY_THRESHOLD and validation[-1] < target


def _mutant_first_epochs(validation, entropy, target, reward=None):  # the head instead of the tail
    head = entropy[:TAIL_EPOCHS]
    return sum(head) / len(head) < ENTROPY_THRESHOLD and validation[-1] < target


def _mutant_inclusive(validation, entropy, target, reward=None):  # <= instead of <
    return end_entropy(entropy) <= ENTROPY_THRESHOLD and validation[-1] <= target


def _mutant_last_epoch(
    validation, entropy, target, reward=None
):  # one epoch instead of the tail mean
    return entropy[-1] < ENTROPY_THRESHOLD and validation[-1] < target


def _mutant_ignores_reward(validation, entropy, target, reward=None):  # the old rule (r4)
    return end_entropy(entropy) < ENTROPY_THRESHOLD and validation[-1] < target


def _mutant_best_reward(validation, entropy, target, reward=None):  # the best epoch's reward
    return (
        end_entropy(entropy) < ENTROPY_THRESHOLD
        and max(reward) < 1 - REWARD_MARGIN
        and validation[-1] < target
    )


@pytest.mark.parametrize(
    "mutant",
    [
        _mutant_ignores_reward,
        _mutant_best_reward,
        _mutant_entropy_only,
        _mutant_best_validation,
        _mutant_whole_curve,
        _mutant_first_epochs,
        _mutant_inclusive,
        _mutant_last_epoch,
    ],
)
def test_cases_catch_planted_bugs(mutant):
    wrong = [why for v, e, t, expected, why in CASES if mutant(v, e, t, _stuck(e)) is not expected]
    wrong += [
        why
        for reward, expected, why in REWARD_CASES
        if mutant([0.2, 0.5, 0.6], LOW, 0.9, reward) is not expected
    ]
    assert wrong, f"{mutant.__name__} passes every case: the cases cannot catch it"
