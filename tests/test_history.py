"""History (pgrl_helpers.history): a short repr and a stop reason for every finished run."""

from __future__ import annotations

from pgrl_helpers.history import STOP_REASONS, History
from pgrl_helpers.training import run_policy_gradient


def test_a_run_that_uses_every_epoch_says_so(tiny_config):
    history = run_policy_gradient(tiny_config("lecture", num_epochs=2))
    assert history.stop_reason == "max_epochs" in STOP_REASONS
    assert history.steps()[-1]["epoch"] == 1  # it did run both epochs


def test_every_stop_reason_is_one_of_the_documented_ones(tiny_config):
    target = run_policy_gradient(
        tiny_config("lecture", target_validation_exact_sort=1e-9, num_epochs=20)
    )  # any positive validation score stops it; an untrained one may already have it
    callback = run_policy_gradient(tiny_config("lecture"), callback=lambda epoch, h: "stop")
    assert (target.stop_reason, callback.stop_reason) == ("target", "callback")
    assert set(STOP_REASONS) == {"max_epochs", "target", "callback"}


def test_the_repr_summarises_instead_of_listing_every_record(tiny_config):
    history = run_policy_gradient(tiny_config("lecture", num_epochs=4))
    text = repr(history)
    steps, evals = history.steps(), history.evals()
    assert text.startswith(f"History({len(history)} records: {len(steps)} steps, ")
    assert f"{len(evals)} evals; stop_reason='max_epochs'" in text
    last_step, last_eval = steps[-1], evals[-1]
    assert f"last step: epoch={last_step['epoch']}, mean_reward={last_step['mean_reward']:.4g}" in (
        text
    )
    assert f"validation_exact_sort={last_eval['validation_exact_sort']:.4g}" in text
    assert len(text) < 400, len(text)  # a list's repr of the same run is thousands
    assert len(list.__repr__(history)) > 10 * len(text)
    assert str(history) == text


def test_the_repr_of_an_empty_history():
    assert repr(History(config=None)) == "History(0 records: 0 steps, 0 evals; stop_reason=None)"
