"""trl_diagnose and ``python -m pgrl_helpers.diagnose``: each planted fault of a real TRL run is
named, the healthy run gets no warning, exit codes 0 / 1 / 2, a saved History works too.

The logs under benchmarks/results/trl_logs/ are TRL 1.16 GRPOTrainer runs of notebook 14's
checkpoint (seed 3, a reported seed of benchmarks/bench_trl_detectors.py), as TRL wrote them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pgrl_helpers import trl_diagnose as td
from pgrl_helpers import trl_log

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "benchmarks" / "results" / "trl_logs"
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_trl_detectors import FAULTS  # noqa: E402


def names(path, **kw) -> list[str]:
    return [f.name for f in td.diagnose_path(path, **kw).findings if f.severity == "warning"]


@pytest.mark.parametrize("fault", [f for f in FAULTS if f != "healthy"])
def test_each_committed_fault_gets_its_finding(fault):
    assert FAULTS[fault][3] in names(LOGS / fault)


def test_the_healthy_run_gets_no_warning_only_the_loss_note():
    report = td.diagnose_path(LOGS / "healthy")
    assert [(f.name, f.severity) for f in report.findings] == [("loss_near_zero", "info")]
    assert "kl_blowup" in report.skipped and "frozen_ratio" in report.skipped


def test_zero_signal_faults_are_told_apart_and_get_nothing_else():
    for fault in ("constant_reward", "prompt_only_reward", "temperature_zero"):
        assert names(LOGS / fault) == [FAULTS[fault][3]]


def test_evidence_names_trl_metrics_and_steps():
    (f,) = [f for f in td.diagnose_path(LOGS / "truncation").findings if f.name == "truncation"]
    assert f.evidence[0].metric == "completions/clipped_ratio" and f.evidence[0].axis == "step"
    assert f.evidence[0].epochs[0] == 1 and f.evidence[0].epochs[-1] == 30
    assert "max_completion_length" in f.fixes and "mask_truncated_completions" in f.fixes


# ---------------------------------------------------------------- rules on constructed logs


def steps(n=12, **series) -> list[dict]:
    """n healthy-looking records; ``series``: key -> list of n values (or one value)."""
    out = []
    for i in range(n):
        r = {"step": i + 1, "mean_reward": 1.0, "reward_std": 0.4, "frac_reward_zero_std": 0.0,
             "grad_norm": 0.5, "loss": 0.01, "entropy": 0.3, "response_length": 4.5,
             "truncated_fraction": 0.0, "clip_fraction": 0.0}  # fmt: skip
        for key, values in series.items():
            r[key] = values[i] if isinstance(values, list) else values
        out.append(r)
    return out


def rule_names(records, reward_max=None) -> list[str]:
    return [f.name for f in td._rules(records, reward_max)]


def test_healthy_constructed_log_gets_only_the_info_note():
    assert rule_names(steps()) == ["loss_near_zero"]


def test_zero_signal_needs_the_first_step_a_later_collapse_is_not_a_setup_bug():
    late_zero = [0.5] + [0.0] * 11
    assert "constant_reward" not in rule_names(steps(grad_norm=late_zero, reward_std=late_zero))
    assert rule_names(steps(grad_norm=0.0, reward_std=0.0)) == ["constant_reward"]
    assert rule_names(steps(grad_norm=0.0, entropy=0.0)) == ["identical_rollouts"]
    assert rule_names(steps(grad_norm=2e-8)) == ["no_variance_within_groups"]
    # TRL's own count of tied groups is enough, without the gradient
    assert rule_names(steps(frac_reward_zero_std=1.0)) == ["no_variance_within_groups"]


def test_thresholds_of_the_single_metric_rules():
    assert "truncation" in rule_names(steps(truncated_fraction=0.5))
    assert "truncation" not in rule_names(steps(truncated_fraction=0.49))
    assert "saturated_groups" in rule_names(steps(frac_reward_zero_std=0.5))
    assert "saturated_groups" not in rule_names(steps(frac_reward_zero_std=0.49))
    assert "kl_blowup" in rule_names(steps(kl_per_token=0.51))
    assert "kl_blowup" not in rule_names(steps(kl_per_token=0.5))
    assert "clip_high" in rule_names(steps(clip_fraction=0.3))
    assert "length_drift" in rule_names(steps(response_length=[4.0] + [6.0] * 11))
    assert "length_drift" not in rule_names(steps(response_length=[4.0] + [5.9] * 11))
    spike = [0.5] * 11 + [10.0]
    assert "grad_spike" in rule_names(steps(grad_norm=spike))
    assert "grad_spike" not in rule_names(steps(grad_norm=[0.5] * 11 + [9.9]))
    collapse = [1.0] + [0.0] * 11
    assert "reward_collapse" in rule_names(steps(mean_reward=collapse, reward_std=0.4))
    # a drop smaller than 2 x the first step's reward_std is noise
    assert "reward_collapse" not in rule_names(steps(mean_reward=collapse, reward_std=0.51))
    entropy = [0.3] + [0.01] * 11
    assert "entropy_collapse" in rule_names(steps(entropy=entropy, mean_reward=0.5))
    assert "reward_stalled" in rule_names(steps(mean_reward=0.2), reward_max=1.2)
    assert "reward_stalled" not in rule_names(steps(mean_reward=0.2))


def test_loss_near_zero_is_a_note_and_only_with_a_nonzero_gradient():
    (note,) = [f for f in td._rules(steps(), None) if f.name == "loss_near_zero"]
    assert note.severity == "info"
    assert "loss_near_zero" not in rule_names(steps(loss=0.1))


# ---------------------------------------------------------------- the command line


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pgrl_helpers.diagnose", *map(str, args)],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip


def test_cli_exit_codes_and_lines():
    fault = cli(LOGS / "truncation")
    assert fault.returncode == 1, fault.stderr
    lines = fault.stdout.strip().splitlines()
    assert lines[0].startswith("warning ") and lines[-1].startswith("verdict: ")
    assert any(line.startswith("warning truncation (steps 1-30)") for line in lines)
    assert any(line.startswith("not logged: kl") for line in lines)
    healthy = cli(LOGS / "healthy" / "trainer_state.json")
    assert healthy.returncode == 0, healthy.stdout
    assert healthy.stdout.strip().splitlines()[-1].startswith("verdict: no warning")
    out = json.loads(cli(LOGS / "constant_reward", "--json").stdout)
    assert [f["name"] for f in out["findings"]] == ["constant_reward"] and out["warnings"] == 1


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "other.json").write_text(json.dumps({"model": "x"}))
    (tmp_path / "empty.json").write_text(json.dumps({"log_history": []}))
    (tmp_path / "text.json").write_text("hello")
    (tmp_path / "history.json").write_text(json.dumps([]))
    for path in ("missing.json", "other.json", "empty.json", "text.json", "history.json", ""):
        result = cli(tmp_path / path)
        assert result.returncode == 2, (path, result.stdout)
        assert result.stdout == "" and result.stderr.count("\n") == 1
        assert result.stderr.startswith("error: ")


def test_cli_reads_a_saved_history(tmp_path, tiny_config):
    from pgrl_helpers.training import run_policy_gradient

    history = run_policy_gradient(tiny_config("transformer", num_epochs=2))
    (tmp_path / "h.json").write_text(json.dumps(list(history)))
    result = cli(tmp_path / "h.json", "--json")
    assert result.returncode in (0, 1), result.stderr
    from pgrl_helpers.diagnose import diagnose

    expected = [f.name for f in diagnose(list(history))]
    assert [f["name"] for f in json.loads(result.stdout)["findings"]] == expected
    (tmp_path / "bad.json").write_text(json.dumps([{"kind": "step"}]))
    assert cli(tmp_path / "bad.json").returncode == 2


def test_reader_errors_are_trl_log_errors(tmp_path):
    with pytest.raises(trl_log.TrlLogError):
        td.diagnose_path(tmp_path / "absent")
