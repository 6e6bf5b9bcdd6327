"""History (pgrl_helpers.history): a short repr and a stop reason for every finished run; the
run's objects (``Run``) kept apart from its records."""

from __future__ import annotations

import dataclasses

import torch

from pgrl_helpers.history import STOP_REASONS, History, Run
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


def test_what_happened_and_what_is_running_are_kept_apart(tiny_config):
    """History holds the records and the counts; the objects the loop used are history.run."""
    assert set(vars(History(config=None))) == {
        "config",
        "run",
        "ref_refresh_epochs",
        "heldout_keys",
        "num_train_prompts",
        "train_prompts_with_heldout_key",
        "stop_reason",
        "target_epoch",
    }
    assert [f.name for f in dataclasses.fields(Run)] == [
        "model",
        "ref_model",
        "advantage_estimator",
        "validation_prompts",
        "test_prompts",
        "train_prompts",
        "score_test",
        "optimizer",
        "generators",
        "counters",
    ]
    config = tiny_config("lecture", num_epochs=2, kl_coef=0.1)
    history = run_policy_gradient(config)
    run = history.run
    assert isinstance(run, Run) and isinstance(run.model, torch.nn.Module)
    assert run.ref_model is not run.model and not run.ref_model.training
    assert callable(run.advantage_estimator) and hasattr(run.advantage_estimator, "after_epoch")
    assert run.validation_prompts.shape[0] == run.test_prompts.shape[0] == config.heldout_size
    assert torch.equal(
        history.heldout_keys,
        config.build_task().prompt_key(torch.cat([run.validation_prompts, run.test_prompts])),
    )
    assert torch.equal(run.train_prompts, config.build_task().fixed_prompts)  # lecture prompts
    assert not hasattr(history, "model") and not hasattr(history, "validation_prompts")


def test_recording_training_prompts_counts_them_and_keeps_the_last_batch():
    history = History(config=None)
    history.heldout_keys = torch.tensor([5, 7])
    first, last = torch.tensor([[1, 2], [3, 4]]), torch.tensor([[5, 6]])
    history.record_training_prompts(first, torch.tensor([1, 5]))
    history.record_training_prompts(last, torch.tensor([7]))
    assert history.run.train_prompts is last
    assert (history.num_train_prompts, history.train_prompts_with_heldout_key) == (3, 2)
    shared = Run()
    assert History(None, shared).run is shared and History(None).run is not shared
