"""The training dashboard (pgrl_helpers.ui.dashboard), driven through its widget objects."""

from __future__ import annotations

import dataclasses
import html

import ipywidgets
import pytest

from pgrl_helpers.config import TrainConfig
from pgrl_helpers.history import History
from pgrl_helpers.training import run_policy_gradient
from pgrl_helpers.ui.dashboard import (
    TrainingDashboard,
    format_diagnosis,
    format_runs_table,
    make_dashboard,
    summarize_history,
)
from pgrl_helpers.ui.figures import plot_histories
from pgrl_helpers.ui.gae_widget import gae_curves, make_gae_widget, plot_gae_runs

#: Tiny runs: a couple of epochs of the lecture setup take well under a second.
TINY = TrainConfig(num_epochs=2, num_steps_per_epoch=2, eval_every=1)


def tiny_dashboard(**kwargs) -> TrainingDashboard:
    kwargs.setdefault("redraw_every", 1000)  # draw once at the end: keeps tests fast
    return make_dashboard(base_config=TINY, synchronous=True, **kwargs)


def test_dashboard_is_a_layout_of_live_controls():
    dash = tiny_dashboard()
    assert isinstance(dash, ipywidgets.VBox)
    assert isinstance(dash.deltas_mode, ipywidgets.Dropdown)
    assert isinstance(dash.loss_mode, ipywidgets.Dropdown)
    assert isinstance(dash.model, ipywidgets.Dropdown)
    assert isinstance(dash.progress, ipywidgets.IntProgress)
    assert isinstance(dash.plot, ipywidgets.Output)
    for button in (dash.train_button, dash.stop_button):
        assert isinstance(button, ipywidgets.Button)
    assert dash.stop_button.disabled, "Stop is only enabled while a run is in progress"
    # the controls start at the base config's values
    assert dash.config_from_widgets() == dataclasses.replace(TINY, eval_every=1, progress=False)


def test_train_uses_exactly_the_widget_settings_and_updates_plot_and_history():
    dash = tiny_dashboard()
    dash.deltas_mode.value = "max_rewards"
    dash.loss_mode.value = "clipped"
    dash.kl_coef.value = 0.1
    dash.epsilon.value = 0.3
    dash.num_responses.value = 4
    dash.learning_rate.value = 0.01
    dash.num_epochs.value = 3
    dash.num_steps_per_epoch.value = 1
    dash.seed.value = 7
    dash.train_button.click()

    assert len(dash.runs) == 1 and dash.runs[0].error is None
    config = dash.runs[0].config
    history = dash.runs[0].history
    assert history.config is config, "the recorded config is the one the run used"
    expected = dict(deltas_mode="max_rewards", loss_mode="clipped", kl_coef=0.1, epsilon=0.3)
    expected.update(num_responses=4, num_epochs=3, num_steps_per_epoch=1, seed=7, model="lecture")
    for name, value in expected.items():
        assert getattr(config, name) == pytest.approx(value), name
    assert config.learning_rate == pytest.approx(0.01, rel=1e-6)
    # the run really used them: 3 epochs x 1 step, KL recorded, G=4 responses per prompt
    steps = history.steps()
    assert len(steps) == 3 and all(s["kl"] is not None for s in steps)
    assert history.evals()[-1]["responses_sampled"] == 3 * 3 * 4
    # progress bar full, plot drawn (one PNG), table lists the run
    assert dash.progress.value == dash.progress.max == 3
    assert dash.redraw_count >= 1
    assert len(dash.plot.outputs) == 1 and "image/png" in dash.plot.outputs[0]["data"]
    assert "max_rewards/clipped/lecture" in dash.table.value
    assert "done" in dash.message.value


def test_run_history_overlays_earlier_runs():
    dash = tiny_dashboard()
    dash.train_button.click()
    dash.deltas_mode.value = "rewards"
    dash.train_button.click()
    assert [r.config.deltas_mode for r in dash.runs] == ["centered_rewards", "rewards"]
    assert len(dash.histories) == 2
    assert "<training plot: 2 run(s)>" in dash.plot.outputs[0]["data"]["text/plain"]
    dash.clear_button.click()
    assert dash.runs == [] and dash.plot.outputs == ()


@pytest.mark.parametrize(
    "setting, value, words",
    [
        ("num_responses", 1, "needs num_responses (G) >= 2"),
        ("epsilon", 0.5, None),  # valid: a control to show that only bad settings complain
    ],
)
def test_invalid_combination_shows_a_message_not_a_traceback(setting, value, words):
    dash = tiny_dashboard()
    dash.deltas_mode.value = "normalized_rewards"
    getattr(dash, setting).__setattr__("value", value)
    dash.train_button.click()  # must not raise
    if words is None:
        assert len(dash.runs) == 1 and "done" in dash.message.value
    else:
        assert dash.runs == [], "no run starts with invalid settings"
        assert words in html.unescape(dash.message.value) and "Cannot train" in dash.message.value
        assert "b00020" in dash.message.value  # shown in red


def test_transformer_with_lecture_model_defaults_is_valid():
    dash = tiny_dashboard()
    dash.model.value = "transformer"
    config = dash.config_from_widgets()
    config.validate()
    assert config.embedding_dim % config.num_heads == 0


def test_stop_button_ends_a_background_run_early():
    dash = make_dashboard(base_config=dataclasses.replace(TINY, num_epochs=400))
    dash.num_epochs.value = 400
    stop_at = {}

    def press_stop_once(change):  # press Stop from inside the run, at the 2nd epoch
        if change["new"] == 2 and not stop_at:
            stop_at["epoch"] = change["new"]
            dash.stop_button.click()

    dash.progress.observe(press_stop_once, names="value")
    dash.train_button.click()
    dash.wait(timeout=60)
    assert not dash.running
    history = dash.runs[0].history
    assert history.stop_reason == "callback"
    assert history.steps()[-1]["epoch"] < 399
    assert "stopped" in dash.message.value and not dash.train_button.disabled


def test_plain_functions_match_the_dashboard():
    history = run_policy_gradient(TINY)
    row = summarize_history(history)
    assert row["epochs"] == 2 and row["steps"] == 4
    assert row["final_mean_reward"] == history.steps()[-1]["mean_reward"]
    table = format_runs_table([history])
    assert "centered_rewards/naive/lecture" in table
    fig = plot_histories([history, history])
    assert len(fig.axes) == 3
    assert len(fig.axes[0].lines) == 2  # one line per run
    widths = [line.get_linewidth() for line in fig.axes[0].lines]
    assert widths[0] < widths[1], "the last run is drawn bold"
    fig = plot_histories([history, history], highlight_last=False)
    assert len({line.get_linewidth() for line in fig.axes[0].lines}) == 1
    with pytest.raises(TypeError, match="History"):
        summarize_history([{"kind": "step"}])
    with pytest.raises(ValueError, match="labels"):
        plot_histories([history], labels=["a", "b"])
    with pytest.raises(TypeError, match="TrainConfig"):
        make_dashboard(base_config={"num_epochs": 2})


def test_a_failing_run_shows_the_error_and_re_enables_train(monkeypatch):
    import pgrl_helpers.ui.dashboard as widgets_module

    def explode(config, callback=None, model=None):
        raise FloatingPointError("non-finite loss at epoch 3")

    monkeypatch.setattr(widgets_module, "run_policy_gradient", explode)
    dash = tiny_dashboard()
    dash.train_button.click()  # must not raise
    assert "Training failed" in dash.message.value and "non-finite loss" in dash.message.value
    assert dash.runs[0].error.startswith("FloatingPointError")
    assert not dash.train_button.disabled and dash.stop_button.disabled


def test_dashboard_shows_diagnose_findings_for_the_run_just_trained():
    # the freeze bug planted in the base config: the findings panel must name it
    frozen = dataclasses.replace(
        TINY, num_epochs=4, loss_mode="clipped", detach_old_log_probs=False
    )
    dash = make_dashboard(base_config=frozen, synchronous=True, redraw_every=1000)
    assert dash.findings.value == "" and dash.findings in dash.children
    dash.train_button.click()
    assert "diagnose() of run 1" in dash.findings.value
    assert "frozen_ratio" in dash.findings.value and "(warning)" in dash.findings.value
    # a second run without the bug replaces the panel: it is about the run just trained
    dash.base_config = dataclasses.replace(frozen, detach_old_log_probs=True)
    dash.train_button.click()
    assert "diagnose() of run 2" in dash.findings.value
    assert "frozen_ratio" not in dash.findings.value
    dash.clear_button.click()
    assert dash.findings.value == ""
    # the plain function gives the same text without a widget
    assert "frozen_ratio" in format_diagnosis(run_policy_gradient(frozen))
    assert "frozen_ratio" not in format_diagnosis(run_policy_gradient(TINY))


def test_format_diagnosis_explains_a_history_it_cannot_read():
    history = History(TINY)  # a run stopped before its first optimizer step
    history.append(
        {"kind": "eval", "epoch": 0, "step": 0, "validation_exact_sort": 0.0,
         "validation_mean_reward": 0.0}
    )  # fmt: skip
    text = format_diagnosis(history)
    assert "cannot diagnose" in text and "no &#x27;step&#x27; records" in text
    with pytest.raises(TypeError, match="expected a History"):
        format_diagnosis([{"kind": "step"}])


# ---- the gamma / lambda widget of notebook 10 ------------------------------------------

#: A PPO run of a few epochs on the smallest autoregressive task (well under a second each).
TINY_PPO = TrainConfig(
    model="autoregressive", task="sort_dedup", prompt_source="random", prompt_length=3,
    vocab_size=4, embedding_dim=8, num_layers=1, num_heads=2, reward_fn="dedup_position_reward",
    loss_mode="clipped", num_responses=4, prompts_per_epoch=4, num_epochs=3,
    num_steps_per_epoch=1, eval_every=3, num_eval_prompts=8, advantage_estimator="gae",
)  # fmt: skip


def test_gae_widget_initial_render_is_the_base_run():
    widget = make_gae_widget(TINY_PPO)
    assert isinstance(widget, ipywidgets.VBox) and len(widget.runs) == 1
    assert (widget.gamma.value, widget.lam.value) == (TINY_PPO.gamma, TINY_PPO.gae_lambda)
    direct = run_policy_gradient(TINY_PPO)
    assert widget.runs[0].steps() == direct.steps()  # the fixed run: same seed, same history
    assert gae_curves(widget.runs[0]) == gae_curves(direct)
    assert len(widget.plot.outputs) == 1 and "image/png" in widget.plot.outputs[0]["data"]
    assert "γ=1, λ=0.95" in widget.table.value


def test_gae_widget_click_trains_with_the_sliders_gamma_and_lambda():
    widget = make_gae_widget(TINY_PPO, initial_run=False)
    assert widget.runs == [] and widget.plot.outputs == ()
    widget.gamma.value, widget.lam.value = 0.9, 0.0
    widget.run_button.click()
    widget.lam.value = 1.0
    widget.run_button.click()
    (h0, h1) = widget.runs
    assert (h0.config.gamma, h0.config.gae_lambda) == (0.9, 0.0)
    assert (h1.config.gamma, h1.config.gae_lambda) == (0.9, 1.0)
    c0, c1 = gae_curves(h0), gae_curves(h1)
    assert len(c0["value_loss"]) == len(c0["advantage_variance"]) == len(c0["epoch"]) == 3
    # epoch 1 has the same rollout and critic in both runs: only lambda differs
    assert c0["mean_reward"][0] == c1["mean_reward"][0]
    assert c0["advantage_variance"][0] != pytest.approx(c1["advantage_variance"][0])
    assert "2 run(s)" in widget.plot.outputs[0]["data"]["text/plain"]
    assert "γ=0.9, λ=0" in widget.table.value and "γ=0.9, λ=1" in widget.table.value
    assert "Run 2 done" in widget.message.value


def test_gae_widget_and_curves_refuse_a_run_without_a_critic():
    with pytest.raises(ValueError, match="advantage_estimator='gae'"):
        make_gae_widget(dataclasses.replace(TINY_PPO, advantage_estimator="group"))
    with pytest.raises(ValueError, match="advantage_estimator='gae'"):
        gae_curves(run_policy_gradient(TINY))
    with pytest.raises(ValueError, match="needs 3 axes"):
        plot_gae_runs([], axes=[None])


# ------------------------------------------------------------------ a dashboard that cannot mislead


def test_the_legend_sits_outside_every_panel():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from pgrl_helpers.ui.figures import figure_png

    histories = [run_policy_gradient(TINY) for _ in range(4)]
    fig = plot_histories(histories)
    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    assert all(ax.get_legend() is None for ax in fig.axes), "no legend inside a panel"
    (legend,) = fig.legends
    assert len(legend.get_texts()) == 4
    box = legend.get_window_extent(renderer)
    for ax in fig.axes:
        assert not box.overlaps(ax.get_tightbbox(renderer)), "the legend covers a panel"
    png = figure_png(fig)  # saved with the legend (bbox 'tight'), not cut off
    import io

    from matplotlib.image import imread

    height = imread(io.BytesIO(png)).shape[0]
    assert height > fig.get_figheight() * fig.dpi, "the PNG must extend below to the legend"


def test_png_output_is_one_display_of_the_png_bytes():
    import base64

    from pgrl_helpers.ui.figures import png_output

    (shown,) = png_output(b"\x89PNG fake", "<a plot>")
    assert shown["output_type"] == "display_data" and shown["metadata"] == {}
    assert base64.b64decode(shown["data"]["image/png"]) == b"\x89PNG fake"
    assert shown["data"]["text/plain"] == "<a plot>"
    (bare,) = png_output(b"png")
    assert set(bare["data"]) == {"image/png"}, "no text/plain unless given"


def test_every_offered_option_can_train():
    from pgrl_helpers.ui.dashboard import DASHBOARD_MODELS

    assert "autoregressive" not in DASHBOARD_MODELS, "it cannot train on the sort task"
    dash = tiny_dashboard()
    assert tuple(dash.model.options) == DASHBOARD_MODELS
    for name in ("deltas_mode", "loss_mode", "model", "prompt_source", "reward_fn"):
        control = getattr(dash, name)
        for label_or_value in control.options:
            value = label_or_value[1] if isinstance(label_or_value, tuple) else label_or_value
            fresh = tiny_dashboard()
            getattr(fresh, name).value = value
            fresh.train_button.click()
            assert len(fresh.runs) == 1 and fresh.runs[0].error is None, (name, value)
            assert "done" in fresh.message.value, (name, value, fresh.message.value)


@pytest.mark.parametrize("mode", ["centered_rewards", "batch_normalized_rewards", "loo_rewards"])
def test_g_equals_one_with_a_group_baseline_is_refused(mode):
    dash = tiny_dashboard()
    dash.deltas_mode.value = mode
    dash.num_responses.value = 1
    dash.train_button.click()
    assert dash.runs == [], f"G = 1 with {mode} must not start a run"
    assert "Cannot train" in dash.message.value and "G" in dash.message.value


@pytest.mark.parametrize("mode", ["centered_rewards", "batch_normalized_rewards"])
def test_the_refusal_is_true_such_a_run_never_moves_the_policy(mode):
    # the dashboard refuses through the loop's own check (TrainConfig.validate, from
    # advantages.zero_deltas_reason); that such deltas are all zero is tested in
    # tests/test_advantages.py
    config = dataclasses.replace(TINY, deltas_mode=mode, num_responses=1)
    with pytest.raises(ValueError, match="every delta is 0"):
        run_policy_gradient(config)


def test_g_equals_one_with_raw_rewards_trains():
    config = dataclasses.replace(TINY, deltas_mode="rewards", num_responses=1)
    config.validate()  # raw rewards with G = 1: delta = r, so it trains
    dash = tiny_dashboard()
    dash.deltas_mode.value = "rewards"
    dash.num_responses.value = 1
    dash.train_button.click()
    assert len(dash.runs) == 1 and dash.runs[0].error is None
    assert any(step["grad_norm"] > 0 for step in dash.runs[0].history.steps())


def test_the_default_dashboard_shows_learning_at_once():
    from pgrl_helpers.ui.dashboard import DEFAULT_PRESET

    dash = make_dashboard(synchronous=True, redraw_every=1000)
    assert dash.preset.value == DEFAULT_PRESET == "generalizing transformer"
    assert dash.num_epochs.value <= 200, "a short run: a student waits seconds, not minutes"
    dash.train_button.click()
    history = dash.runs[0].history
    evals = history.evals()
    first, last = evals[0]["validation_exact_sort"], evals[-1]["validation_exact_sort"]
    assert len(history.run.validation_prompts) >= 100, "a held-out score over many prompts"
    assert first < 0.1 and last >= 0.9, (first, last)


def test_presets_set_every_control_and_show_what_the_notebook_teaches():
    from pgrl_helpers.ui.dashboard import PRESETS

    dash = make_dashboard(synchronous=True, redraw_every=1000)
    assert list(dash.preset.options) == list(PRESETS)
    assert set(PRESETS) == {
        "lecture (stuck)",
        "lecture fixed (init + reward)",
        "generalizing transformer",
    }
    dash.preset.value = "lecture (stuck)"
    assert dash.model.value == "lecture" and dash.init_scale.value == 1.0
    assert dash.config_from_widgets().reward_fn == "sort_inclusion_ordering_reward"
    dash.train_button.click()
    stuck = dash.runs[-1].history.evals()[-1]["train_exact_sort"]
    dash.preset.value = "lecture fixed (init + reward)"
    assert dash.init_scale.value == 0.3 and not dash.init_scale.disabled
    assert dash.config_from_widgets().reward_fn == "sort_distance_reward"
    dash.train_button.click()
    fixed = dash.runs[-1].history.evals()[-1]["train_exact_sort"]
    assert stuck < 1.0 and fixed == 1.0, (stuck, fixed)  # notebook 07, sections 1 and 3
    assert "init×0.3" in dash.table.value
    dash.preset.value = "generalizing transformer"
    assert dash.model.value == "transformer" and dash.init_scale.disabled
