"""Read a TRL ``GRPOTrainer`` run's ``trainer_state.json`` into step records (notebook 13).

TRL (1.16 here) logs its metrics through the ``transformers`` Trainer: every ``logging_steps``
optimizer steps one dict joins ``trainer.state.log_history``, and every checkpoint writes the
state, that list included, to ``checkpoint-N/trainer_state.json``. ``read_log`` turns those
dicts into records under our names (``METRIC_MAP``), says which metrics the run did not log
(``TrlLog.missing``: an older TRL, ``beta = 0``, a loss without clipping), and never fills one
in. ``find_trainer_state`` accepts the file, a checkpoint folder, or TRL's ``output_dir`` (the
checkpoint with the largest N).

What TRL logs and we do not, and the reverse: TRL has no ratio mean (so notebook 13's
``frozen_ratio`` cannot run; TRL computes old log-probs itself) and no held-out goal metric
(``reward_hacking``, ``plateau`` and ``held_at_reference`` need one, see ``UNAVAILABLE``); our
loop has no ``reward_std``, ``completions/clipped_ratio`` or per-function rewards.

Taught in notebook 13.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "METRIC_MAP",
    "UNAVAILABLE",
    "TrlLog",
    "TrlLogError",
    "find_trainer_state",
    "metric_table",
    "read_log",
]

#: TRL 1.16 log key -> (our record key, what it is / where it differs from ours).
#: ``rewards/<f>/mean|std`` (one per reward function f) become ``reward/<f>/mean|std``.
METRIC_MAP: dict[str, tuple[str, str]] = {
    "reward": ("mean_reward", "mean weighted reward over every completion of the step"),
    "reward_std": ("reward_std", "std over all completions of the step (not within groups)"),
    "frac_reward_zero_std": (
        "frac_reward_zero_std",
        "share of prompt groups whose G rewards all tie (std 0): no signal from them",
    ),
    "completions/mean_length": ("response_length", "mean completion length in tokens"),
    "completions/clipped_ratio": (
        "truncated_fraction",
        "share of completions cut at max_completion_length (no end of turn)",
    ),
    "completions/mean_terminated_length": (
        "terminated_length",
        "mean length of the completions that ended their turn",
    ),
    "entropy": ("entropy", "mean per-token entropy of the completions (nats)"),
    "kl": ("kl_per_token", "k3 KL to the reference, mean per token; logged only when beta != 0"),
    "clip_ratio/region_mean": ("clip_fraction", "share of tokens whose ratio was clipped"),
    "clip_ratio/low_mean": ("clip_fraction_low", "clipped below 1 - epsilon"),
    "clip_ratio/high_mean": ("clip_fraction_high", "clipped above 1 + epsilon_high"),
    "grad_norm": ("grad_norm", "gradient norm before clipping at max_grad_norm (Trainer)"),
    "loss": ("loss", "the training loss (Trainer); not a progress measure for GRPO"),
    "learning_rate": ("learning_rate", "the scheduler's rate at that step (Trainer)"),
    "num_tokens": ("num_tokens", "tokens seen so far (prompts and completions)"),
    "sampling/importance_sampling_ratio/mean": (
        "is_ratio_mean",
        "vLLM sampler vs trainer probabilities (vLLM with importance sampling correction only)",
    ),
    "sampling/importance_sampling_ratio/min": ("is_ratio_min", "as above, the minimum"),
    "sampling/importance_sampling_ratio/max": ("is_ratio_max", "as above, the maximum"),
}
#: Without these a record is not a GRPO training step.
REQUIRED = ("loss", "reward")
#: Metrics a detector reads; absent ones are reported with the likely reason.
EXPECTED: dict[str, str] = {
    "grad_norm": "not logged by this Trainer version",
    "reward_std": "an older TRL",
    "frac_reward_zero_std": "an older TRL (it logs no share of tied groups)",
    "completions/mean_length": "an older TRL",
    "completions/clipped_ratio": "an older TRL",
    "entropy": "an older TRL",
    "kl": "beta = 0 (TRL's default): no reference model, no KL logged",
    "clip_ratio/region_mean": "a loss_type without the clipped ratio (cispo, sapo, vespo) or an "
    "older TRL",
}
#: Notebook 13's detectors that cannot run on TRL's metrics, and why.
UNAVAILABLE: dict[str, str] = {
    "frozen_ratio": "TRL logs no ratio mean; TRL computes the old log-probs itself, without "
    "gradients, so the bug cannot happen inside GRPOTrainer",
    "reward_hacking": "needs a held-out goal metric next to the reward; TRL logs the training "
    "reward only (add a TrainerCallback that scores a validation set, as notebook 14)",
    "plateau": "needs a goal metric to tell 'stuck' from 'done'; the TRL detector "
    "reward_stalled reads --reward-max instead",
    "held_at_reference": "needs a goal metric; TRL's kl and entropy alone cannot tell a strong "
    "beta from a finished run",
    "clip_zero": "needs to know whether batches are reused (num_iterations, "
    "steps_per_generation): not in trainer_state.json",
}


class TrlLogError(ValueError):
    """The input is not a readable TRL trainer state (the message says why, in one line)."""


@dataclass
class TrlLog:
    """A TRL run's training steps under our names.

    ``steps``: one dict per logged training step ('step' and the keys of ``METRIC_MAP``
    present, under our names, and ``reward/<f>/mean|std`` per reward function); ``missing``:
    TRL key -> the likely reason it is absent; ``reward_functions``: the reward functions'
    names; ``path``: the file read; ``eval_records``: how many evaluation dicts were skipped."""

    steps: list[dict]
    missing: dict[str, str] = field(default_factory=dict)
    reward_functions: list[str] = field(default_factory=list)
    path: str = ""
    global_step: int = 0
    eval_records: int = 0


def find_trainer_state(path) -> Path:
    """The trainer_state.json for ``path``: the file itself, ``path/trainer_state.json``, or the
    one of the ``checkpoint-N`` subfolder with the largest N (TRL's ``output_dir``)."""
    path = Path(path)
    if not path.exists():
        raise TrlLogError(f"{path}: no such file or folder")
    if path.is_file():
        return path
    if (path / "trainer_state.json").is_file():
        return path / "trainer_state.json"
    checkpoints = [
        (int(m[1]), p)
        for p in path.iterdir()
        if (m := re.fullmatch(r"checkpoint-(\d+)", p.name)) and (p / "trainer_state.json").is_file()
    ]
    if not checkpoints:
        raise TrlLogError(
            f"{path}: a folder with neither trainer_state.json nor checkpoint-N/trainer_state.json"
        )
    return max(checkpoints)[1] / "trainer_state.json"


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return None if math.isnan(value) else float(value)


def read_log(state, path: str = "") -> TrlLog:
    """A ``TrlLog`` from a trainer state (the parsed JSON dict). Raises ``TrlLogError`` for
    anything else, a state without ``log_history``, or one without a GRPO training step."""
    if not isinstance(state, dict) or not isinstance(state.get("log_history"), list):
        raise TrlLogError(f"{path or 'input'}: not a trainer state (no 'log_history' list)")
    steps, evals, functions = [], 0, []
    for entry in state["log_history"]:
        if not isinstance(entry, dict):
            raise TrlLogError(f"{path or 'input'}: a log_history entry is not a dict")
        if any(k.startswith("eval_") for k in entry):
            evals += 1
            continue
        if not all(k in entry for k in REQUIRED):
            continue  # the end-of-training summary (train_runtime, ...) or a non-GRPO entry
        record = {"step": entry.get("step")}
        for key, value in entry.items():
            if key in METRIC_MAP:
                record[METRIC_MAP[key][0]] = _number(value)
            elif m := re.fullmatch(r"rewards/(.+)/(mean|std)", key):
                record[f"reward/{m[1]}/{m[2]}"] = _number(value)
                if m[1] not in functions:
                    functions.append(m[1])
        steps.append(record)
    if not steps:
        raise TrlLogError(
            f"{path or 'input'}: the log has no GRPO training step (entries with both "
            f"{' and '.join(REQUIRED)}): an empty log, or not a GRPOTrainer run"
        )
    missing = {
        key: why
        for key, why in EXPECTED.items()
        if all(r.get(METRIC_MAP[key][0]) is None for r in steps)
    }
    return TrlLog(steps, missing, functions, path, int(state.get("global_step") or 0), evals)


def load(path) -> TrlLog:
    """``read_log`` of the trainer state that ``find_trainer_state(path)`` names."""
    file = find_trainer_state(path)
    try:
        state = json.loads(file.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise TrlLogError(f"{file}: not JSON ({err.__class__.__name__})") from None
    return read_log(state, str(file))


def metric_table() -> str:
    """Markdown: TRL log key -> our record key -> what it is."""
    rows = ["| TRL 1.16 log key | our key | what it is |", "|---|---|---|"]
    rows += [f"| `{k}` | `{ours}` | {note} |" for k, (ours, note) in METRIC_MAP.items()]
    rows.append("| `rewards/<f>/mean`, `rewards/<f>/std` | `reward/<f>/mean`, `.../std` | per "
                "reward function f |")  # fmt: skip
    return "\n".join(rows)
