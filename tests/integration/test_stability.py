"""Stability after the target: ``epochs_after_target`` and ``largest_drop_after_target``."""

from __future__ import annotations

import pytest

from pgrl_helpers import training
from pgrl_helpers.config import TrainConfig
from pgrl_helpers.history import History


def scripted_validation(monkeypatch, scores: dict[int, float]) -> list[int]:
    """Make every evaluation return ``scores[epoch]`` (validation and test alike).

    Returns the list the fake appends each evaluated epoch to (the loop's schedule).
    """
    epochs: list[int] = []
    real_evaluate = training._evaluate

    def evaluate(run, history, task, config, epochs_done, step, responses_sampled):
        epochs.append(epochs_done)
        real_evaluate(run, history, task, config, epochs_done, step, responses_sampled)
        value = scores.get(epochs_done, 0.0)
        history[-1]["validation_exact_sort"] = history[-1]["test_exact_sort"] = value
        target = config.target_validation_exact_sort
        return target is not None and value >= target

    monkeypatch.setattr(training, "_evaluate", evaluate)
    return epochs


CONFIG = TrainConfig(
    num_epochs=40, num_steps_per_epoch=1, eval_every=5, target_validation_exact_sort=0.9
)
SCORES = {0: 0.1, 5: 0.5, 10: 0.95, 15: 0.6, 17: 0.92, 20: 0.9, 25: 1.0}


def test_default_stops_at_the_target_so_the_drop_is_zero(monkeypatch):
    epochs = scripted_validation(monkeypatch, SCORES)
    history = training.run_policy_gradient(CONFIG)
    assert epochs == [0, 5, 10]
    assert history.stop_reason == "target" and history.target_epoch == 10
    assert history.largest_drop_after_target() == 0.0


def test_training_continues_after_the_target_and_the_drop_is_recorded(monkeypatch):
    epochs = scripted_validation(monkeypatch, SCORES)
    history = training.run_policy_gradient(
        TrainConfig(**{**vars(CONFIG), "epochs_after_target": 7})
    )
    assert epochs == [0, 5, 10, 15, 17]  # the window's end (epoch 17) is evaluated too
    assert history.stop_reason == "target" and history.target_epoch == 10
    assert history.steps()[-1]["epoch"] == 16  # 17 epochs trained: 10 + 7
    assert history.largest_drop_after_target() == pytest.approx(0.95 - 0.6)
    assert history.largest_drop_after_target("test_exact_sort") == pytest.approx(0.35)


def test_a_window_past_num_epochs_ends_with_the_epochs(monkeypatch):
    scripted_validation(monkeypatch, SCORES)
    config = TrainConfig(**{**vars(CONFIG), "epochs_after_target": 100})
    history = training.run_policy_gradient(config)
    assert history.stop_reason == "max_epochs" and history.target_epoch == 10
    assert history.evals()[-1]["epoch"] == 40
    assert history.largest_drop_after_target() == pytest.approx(0.95 - 0.0)  # epochs 30-40: 0


def test_drop_is_measured_from_the_first_time_the_target_is_reached():
    history = History(CONFIG)
    for epoch, value in ((0, 0.2), (5, 0.99), (10, 1.0), (15, 0.9), (20, 0.3)):
        history.append({"kind": "eval", "epoch": epoch, "validation_exact_sort": value})
    assert history.largest_drop_after_target() is None  # never reached
    history.target_epoch = 5
    assert history.largest_drop_after_target() == pytest.approx(0.99 - 0.3)
    history.target_epoch = 20
    assert history.largest_drop_after_target() == 0.0


@pytest.mark.parametrize(
    ("value", "target"), [(-1, 0.9), (1.5, 0.9), (True, 0.9), ("3", 0.9), (5, None)]
)
def test_bad_epochs_after_target_is_refused_by_name(value, target):
    config = TrainConfig(epochs_after_target=value, target_validation_exact_sort=target)
    with pytest.raises(ValueError, match="epochs_after_target"):
        config.validate()


def test_curve_after_target_starts_at_the_first_evaluation_at_the_target():
    from pgrl_helpers.bench_results import curve_after_target, load_result

    run = {"curve": [(0, 0.1, 0.1), (100, 0.996, 0.9), (200, 0.5, 0.5), (300, 1.0, 1.0)]}
    assert curve_after_target(run, 0.995) == ([0, 100, 200], [0.996, 0.5, 1.0])
    # with the epoch size and the steps per epoch the x axis is optimizer steps
    steps = run | {"responses_per_epoch": 50, "num_steps_per_epoch": 4}
    assert curve_after_target(steps, 0.995) == ([0, 8, 16], [0.996, 0.5, 1.0])
    path, result = load_result("no_such_benchmark")
    assert result is None and path.name == "no_such_benchmark.json"
