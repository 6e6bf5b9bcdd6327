"""Tests of the training loop (pgrl_helpers.training) and SortTransformer."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from pgrl_helpers import training
from pgrl_helpers.config import TrainConfig
from pgrl_helpers.history import EVAL_KEYS, METRICS, STEP_KEYS, history_columns
from pgrl_helpers.models import SortTransformer
from pgrl_helpers.sort_task import lecture_prompts
from pgrl_helpers.task import encode_prompts
from pgrl_helpers.training import NonFiniteError, heldout_split, run_policy_gradient


def transformer_config(**overrides) -> TrainConfig:
    """A small, fast transformer run on random prompts of length 5 (values 0-9)."""
    settings = dict(
        model="transformer",
        prompt_source="random",
        prompt_length=5,
        vocab_size=10,
        embedding_dim=32,
        reward_fn="sort_distance_reward",
        num_responses=8,
        prompts_per_epoch=32,
        num_epochs=10,
        num_steps_per_epoch=4,
        loss_mode="clipped",
        eval_every=5,
        num_eval_prompts=500,
        seed=0,
    )
    settings.update(overrides)
    return TrainConfig(**settings)


def lecture_config(**overrides) -> TrainConfig:
    settings = dict(num_epochs=6, num_steps_per_epoch=3, eval_every=3)
    settings.update(overrides)
    return TrainConfig(**settings)


def test_short_transformer_run_beats_untrained_on_heldout():
    # margin: +1.0 mean reward (of 5) on 500 held-out prompts after 10 epochs;
    # measured: 0.3 untrained -> about 2.5 trained
    history = run_policy_gradient(transformer_config())
    evals = history.evals()
    assert evals[0]["epoch"] == 0 and evals[-1]["epoch"] == 10
    gain = evals[-1]["validation_mean_reward"] - evals[0]["validation_mean_reward"]
    assert gain > 1.0, f"held-out mean reward rose by only {gain:.3f}"


def test_reference_model_frozen_and_refreshed_on_schedule():
    config = lecture_config(num_epochs=7, kl_coef=0.1, compute_ref_model_period=3)
    end_of_epoch_model = {-1: {k: v.clone() for k, v in config.build_policy().state_dict().items()}}
    ref_seen = {}

    def callback(epoch, history):
        ref = history.run.ref_model
        assert ref is not history.run.model
        assert not ref.training
        assert all(not p.requires_grad and p.grad is None for p in ref.parameters())
        ref_seen[epoch] = (id(ref), {k: v.clone() for k, v in ref.state_dict().items()})
        end_of_epoch_model[epoch] = {
            k: v.clone() for k, v in history.run.model.state_dict().items()
        }

    history = run_policy_gradient(config, callback=callback)
    assert history.ref_refresh_epochs == [0, 3, 6]
    for epoch, (ref_id, ref_state) in ref_seen.items():
        refreshed_at = max(e for e in history.ref_refresh_epochs if e <= epoch)
        # the reference equals the policy as it was when the epoch `refreshed_at` began ...
        for name, value in ref_state.items():
            assert torch.equal(value, end_of_epoch_model[refreshed_at - 1][name]), (epoch, name)
        # ... and is the very same object for the whole period (not rebuilt each epoch)
        assert ref_id == ref_seen[refreshed_at][0]
    # the policy did move away from its reference, so the check above is not vacuous
    moved = any(
        not torch.equal(end_of_epoch_model[6][k], end_of_epoch_model[2][k])
        for k in end_of_epoch_model[6]
    )
    assert moved
    assert all(r["kl"] is not None and r["kl"] >= 0 for r in history.steps())


def test_no_reference_model_without_kl_penalty():
    history = run_policy_gradient(lecture_config())
    assert history.run.ref_model is None and history.ref_refresh_epochs == []
    assert all(r["kl"] is None for r in history.steps())


@pytest.mark.parametrize("loss_mode", ["unclipped", "clipped"])
def test_ratio_gradient_nonzero_when_old_log_probs_frozen(loss_mode):
    history = run_policy_gradient(lecture_config(loss_mode=loss_mode, num_epochs=2))
    steps = history.steps()
    first, second = steps[0], steps[1]
    assert first["inner_step"] == 0 and second["inner_step"] == 1
    assert first["ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    assert first["grad_norm"] > 1e-3
    # after one optimizer step the policy differs from the one that sampled the batch
    assert abs(second["ratio_mean"] - 1.0) > 1e-4


def test_naive_and_ratio_losses_have_the_same_first_gradient():
    norms = [
        run_policy_gradient(lecture_config(loss_mode=mode, num_epochs=1)).steps()[0]["grad_norm"]
        for mode in ("naive", "unclipped", "clipped")
    ]
    assert norms[1] == pytest.approx(norms[0], rel=1e-5)
    assert norms[2] == pytest.approx(norms[0], rel=1e-5)


def test_freeze_pitfall_gives_zero_gradient_and_no_learning():
    config = lecture_config(loss_mode="unclipped", num_epochs=3, detach_old_log_probs=False)
    before = {k: v.clone() for k, v in config.build_policy().state_dict().items()}
    history = run_policy_gradient(config)
    assert all(r["grad_norm"] == 0.0 for r in history.steps())
    after = history.run.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    # the same run with frozen old log-probs does learn
    fixed = run_policy_gradient(dataclasses.replace(config, detach_old_log_probs=True))
    assert fixed.steps()[0]["grad_norm"] > 1e-3


def test_same_seed_same_history_and_other_seed_differs():
    config = transformer_config(num_epochs=3, kl_coef=0.05, compute_ref_model_period=2)
    first = run_policy_gradient(config)
    second = run_policy_gradient(config)
    assert list(first) == list(second)
    other = run_policy_gradient(dataclasses.replace(config, seed=1))
    assert list(other) != list(first)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"deltas_mode": "zscore"}, "valid values are: rewards, centered_rewards"),
        ({"loss_mode": "ppo"}, "naive, unclipped, clipped"),
        ({"kl_estimator": "k4"}, "k1, k2, k3"),
        ({"model": "mlp"}, "lecture, transformer"),
        ({"prompt_source": "file"}, "lecture, random"),
        ({"reward_fn": "exact"}, "sort_distance_reward"),
        ({"deltas_mode": "normalized_rewards", "num_responses": 1}, "num_responses"),
        ({"deltas_mode": "loo_rewards", "num_responses": 1}, "G"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"learning_rate": -1e-3}, "learning_rate"),
        ({"num_epochs": 0}, "num_epochs"),
        ({"num_steps_per_epoch": 0}, "num_steps_per_epoch"),
        ({"loss_mode": "clipped", "epsilon": 0.0}, "epsilon"),
        ({"loss_mode": "clipped", "epsilon": float("inf")}, "epsilon"),
        ({"advantage_estimator": "value"}, "advantage_estimator"),
        ({"importance_sampling_level": "word"}, "importance_sampling_level"),
        ({"batch_filter": "top"}, "batch_filter"),
        ({"rollout_source": "replay"}, "rollout_source"),
        ({"kl_coef": -0.1}, "kl_coef"),
        ({"entropy_coef": -0.1}, "entropy_coef"),
        ({"prompt_length": 4}, "prompt_source 'lecture'"),
        ({"prompts_per_epoch": 8}, "prompts_per_epoch"),
        ({"model": "transformer", "embedding_dim": 30}, "divisible"),
        ({"target_validation_exact_sort": 1.5}, "target_validation_exact_sort"),
    ],
)
def test_bad_config_raises_before_training(overrides, message):
    calls = []
    with pytest.raises(ValueError, match=message):
        run_policy_gradient(lecture_config(**overrides), callback=lambda e, h: calls.append(e))
    assert calls == []


def test_given_model_must_fit_config():
    with pytest.raises(ValueError, match="does not fit"):
        run_policy_gradient(lecture_config(), policy=SortTransformer(10, 5, d_model=16, seed=0))


def test_non_finite_rewards_raise_naming_the_epoch():
    def broken_reward(prompt, response):
        return float("nan")

    with pytest.raises(ValueError, match="evaluation after 0 epochs: rewards contains"):
        run_policy_gradient(lecture_config(reward_fn=broken_reward))
    calls = []

    def nan_after_first_call(prompt, response):
        calls.append(1)
        # the first evaluation scores 31 validation + 31 test + 3 training prompts
        return float("nan") if len(calls) > 65 else 1.0

    with pytest.raises(ValueError, match="rewards at epoch 0, step 0: rewards contains"):
        run_policy_gradient(lecture_config(reward_fn=nan_after_first_call))


def test_non_finite_loss_raises_naming_epoch_and_step():
    # a huge learning rate blows the lecture model up within a few steps
    config = lecture_config(learning_rate=1e30, num_epochs=20, reward_fn="sort_distance_reward")
    with pytest.raises(NonFiniteError, match=r"epoch \d+, step \d+"):
        run_policy_gradient(config)


def test_heldout_prompts_distinct_and_never_trained_on():
    config = transformer_config(
        prompt_length=3, vocab_size=6, num_eval_prompts=8, num_epochs=20, num_steps_per_epoch=1
    )
    heldout = heldout_split(config)[0]
    multisets = {tuple(sorted(p)) for p in heldout.tolist()}
    assert heldout.shape == (8, 3) and len(multisets) == 8  # one prompt per held-out multiset
    seen = set()

    def callback(epoch, history):
        seen.update(tuple(sorted(p)) for p in history.run.train_prompts.tolist())

    run_policy_gradient(config, callback=callback)
    assert len(seen) > 25  # most of the 56 - 16 allowed multisets were drawn ...
    assert not seen & multisets  # ... and none of the held-out ones
    # the lecture's training prompts are kept out of its held-out set too
    lecture_heldout = set(encode_prompts(heldout_split(TrainConfig())[0], 5).tolist())
    assert len(lecture_heldout) == 31  # a quarter of the 125 prompts
    assert not set(encode_prompts(lecture_prompts(), 5).tolist()) & lecture_heldout


def test_history_columns_and_metric_names():
    history = run_policy_gradient(lecture_config())
    steps = history_columns(history, "step")
    evals = history_columns(history, "eval")
    assert len(steps["loss"]) == 6 * 3 and steps["step"] == list(range(18))
    assert evals["epoch"] == [0, 3, 6]
    assert all(v is not None for v in evals["train_exact_sort"])
    assert set(STEP_KEYS) | set(EVAL_KEYS) <= set(METRICS)
    for record in history:
        assert set(record) == set(STEP_KEYS if record["kind"] == "step" else EVAL_KEYS)
    with pytest.raises(ValueError, match="step, eval"):
        history_columns(history, "epoch")


def test_callback_and_target_stop_early():
    history = run_policy_gradient(lecture_config(), callback=lambda epoch, h: epoch == 1)
    assert history.stop_reason == "callback" and history.steps()[-1]["epoch"] == 1
    history = run_policy_gradient(
        transformer_config(num_epochs=40, eval_every=1, target_validation_exact_sort=0.05)
    )
    assert history.stop_reason == "target"
    assert history.evals()[-1]["validation_exact_sort"] >= 0.05
    assert history.evals()[-1]["epoch"] < 40


def test_sort_transformer_shapes_seed_and_permutation_invariance():
    model = SortTransformer(10, 5, d_model=32, seed=3)
    prompts = torch.randint(0, 10, (7, 5), generator=torch.Generator().manual_seed(0))
    logits = model(prompts)
    assert logits.shape == (7, 5, 10) and model.vocab_size == 10
    assert torch.equal(logits, SortTransformer(10, 5, d_model=32, seed=3)(prompts))
    assert not torch.equal(logits, SortTransformer(10, 5, d_model=32, seed=4)(prompts))
    shuffled = prompts[:, torch.tensor([4, 2, 0, 1, 3])]
    torch.testing.assert_close(model(shuffled), logits, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="length 5"):
        model(prompts[:, :4])
    with pytest.raises(ValueError, match="divisible"):
        SortTransformer(10, 5, d_model=30, num_heads=4)


def test_a_stopped_run_resumed_from_its_loop_state_has_the_uninterrupted_history(tiny_config):
    """Issue 46, item 6: stop after 2 of 4 epochs in a callback, save ``loop_state`` (through
    ``torch.save``), rebuild the policy, resume: every record (the phase timings aside) and
    count equals the uninterrupted run's, and so do the final parameters."""
    import io

    config = tiny_config("lecture", num_epochs=4, eval_every=2, seed=3)
    whole = training.run_policy_gradient(config)
    saved = {}

    def stop_after_two(epoch, history):
        if epoch == 1:
            buffer = io.BytesIO()
            torch.save(training.loop_state(history), buffer)
            saved["state"] = buffer.getvalue()
            return "stop"
        return None

    first = training.run_policy_gradient(config, stop_after_two)
    assert first.stop_reason == "callback" and first.steps()[-1]["epoch"] == 1
    state = torch.load(io.BytesIO(saved["state"]), weights_only=False)
    resumed = training.run_policy_gradient(config, resume=state)
    assert [dict(r) for r in resumed] == [dict(r) for r in whole]
    assert resumed.num_train_prompts == whole.num_train_prompts
    assert resumed.stop_reason == whole.stop_reason == "max_epochs"
    for a, b in zip(whole.run.model.parameters(), resumed.run.model.parameters()):
        assert torch.equal(a, b)


def test_loop_state_refuses_what_it_does_not_save(tiny_config):
    config = tiny_config("lecture", num_epochs=1, kl_coef=0.04)
    history = training.run_policy_gradient(config)
    with pytest.raises(ValueError, match="kl_coef 0"):
        training.loop_state(history)
