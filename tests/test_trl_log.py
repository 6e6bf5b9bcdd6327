"""trl_log: TRL's trainer_state.json -> step records under our names; what is missing is said."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pgrl_helpers import trl_log

LOGS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "trl_logs"


def entry(step: int, **extra) -> dict:
    """A log_history entry as TRL 1.16 writes one (beta = 0: no 'kl')."""
    base = {
        "loss": 0.01, "grad_norm": 0.5, "learning_rate": 1e-4, "num_tokens": 100.0 * step,
        "completions/mean_length": 4.5, "completions/clipped_ratio": 0.0,
        "completions/mean_terminated_length": 4.5, "rewards/correctness_reward/mean": 0.8,
        "rewards/correctness_reward/std": 0.4, "reward": 0.96, "reward_std": 0.45,
        "frac_reward_zero_std": 0.0, "entropy": 0.3, "clip_ratio/region_mean": 0.0,
        "clip_ratio/low_mean": 0.0, "clip_ratio/high_mean": 0.0, "epoch": step / 10, "step": step,
    }  # fmt: skip
    base.update(extra)
    return base


def state(*entries) -> dict:
    return {"global_step": len(entries), "log_history": list(entries)}


def test_read_log_maps_every_key_to_ours_and_skips_summary_and_eval_entries():
    summary = {"train_runtime": 3.0, "train_loss": 0.01, "epoch": 1.0, "step": 2}
    log = trl_log.read_log(state(entry(1), entry(2, reward=0.5), {"eval_loss": 0.1}, summary))
    assert [r["step"] for r in log.steps] == [1, 2]
    assert log.eval_records == 1
    r = log.steps[1]
    assert r["mean_reward"] == 0.5 and r["reward_std"] == 0.45 and r["truncated_fraction"] == 0.0
    assert r["response_length"] == 4.5 and r["clip_fraction"] == 0.0 and r["grad_norm"] == 0.5
    assert r["reward/correctness_reward/mean"] == 0.8
    assert log.reward_functions == ["correctness_reward"]
    assert "kl_per_token" not in r  # not logged: not guessed
    assert list(log.missing) == ["kl"]


def test_a_missing_metric_is_reported_with_its_reason_never_filled_in():
    old = [{k: v for k, v in entry(s).items() if k != "frac_reward_zero_std"} for s in (1, 2)]
    log = trl_log.read_log(state(*old))
    assert (
        "frac_reward_zero_std" in log.missing and "older TRL" in log.missing["frac_reward_zero_std"]
    )
    assert all("frac_reward_zero_std" not in r for r in log.steps)
    with_kl = trl_log.read_log(state(entry(1, kl=0.02)))
    assert "kl" not in with_kl.missing and with_kl.steps[0]["kl_per_token"] == 0.02


def test_nan_and_null_values_read_as_none():
    log = trl_log.read_log(state(entry(1, entropy=None), entry(2, entropy=float("nan"))))
    assert [r["entropy"] for r in log.steps] == [None, None]
    assert "entropy" in log.missing


@pytest.mark.parametrize(
    "bad, message",
    [
        ([1, 2], "not a trainer state"),
        ({"global_step": 3}, "not a trainer state"),
        ({"log_history": []}, "no GRPO training step"),
        ({"log_history": [{"train_runtime": 1.0, "step": 1}]}, "no GRPO training step"),
        ({"log_history": [{"loss": 0.1, "step": 1}]}, "no GRPO training step"),
        ({"log_history": ["x"]}, "not a dict"),
    ],
)
def test_bad_states_raise_one_clear_line(bad, message):
    with pytest.raises(trl_log.TrlLogError, match=message) as err:
        trl_log.read_log(bad, "x.json")
    assert "\n" not in str(err.value)


def test_find_trainer_state_reads_a_file_a_checkpoint_or_the_latest_checkpoint(tmp_path):
    out = tmp_path / "run"
    for n in (2, 10, 9):  # numeric order: checkpoint-10 is the latest, not checkpoint-9
        (out / f"checkpoint-{n}").mkdir(parents=True)
        (out / f"checkpoint-{n}" / "trainer_state.json").write_text(json.dumps(state(entry(n))))
    (out / "checkpoint-11").mkdir()  # no trainer_state.json: skipped
    latest = out / "checkpoint-10" / "trainer_state.json"
    assert trl_log.find_trainer_state(out) == latest
    assert trl_log.find_trainer_state(out / "checkpoint-2").name == "trainer_state.json"
    assert trl_log.find_trainer_state(latest) == latest
    assert trl_log.load(out).steps[0]["step"] == 10
    with pytest.raises(trl_log.TrlLogError, match="no such file"):
        trl_log.find_trainer_state(tmp_path / "nope")
    with pytest.raises(trl_log.TrlLogError, match="neither trainer_state.json"):
        trl_log.find_trainer_state(out / "checkpoint-11")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(trl_log.TrlLogError, match="not JSON"):
        trl_log.load(tmp_path / "bad.json")


def test_committed_trl_logs_read_with_every_expected_metric_but_kl():
    healthy = trl_log.load(LOGS / "healthy")
    assert len(healthy.steps) == 30 and healthy.global_step == 30
    assert list(healthy.missing) == ["kl"]  # beta = 0
    assert healthy.reward_functions == ["correctness_reward", "format_reward"]
    assert "kl" not in trl_log.load(LOGS / "kl_blowup").missing


def test_metric_table_names_every_mapped_key():
    table = trl_log.metric_table()
    assert all(f"`{key}`" in table for key in trl_log.METRIC_MAP)
    assert set(trl_log.UNAVAILABLE) == {
        "frozen_ratio", "reward_hacking", "plateau", "held_at_reference", "clip_zero"
    }  # fmt: skip
