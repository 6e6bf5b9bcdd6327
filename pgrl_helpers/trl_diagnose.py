"""Diagnose any GRPO run from its logs: TRL's ``trainer_state.json`` or a saved History.

    python -m pgrl_helpers.diagnose PATH [--json] [--reward-max X]

PATH: a ``trainer_state.json`` written by TRL's ``GRPOTrainer`` (1.16 here), a folder holding
one (a ``checkpoint-N`` folder, or TRL's ``output_dir``: the largest N is read), or a saved
History (a JSON list of our loop's records, ``json.dump(list(history), f)``), which
``diagnose.diagnose`` reads. Prints one line per finding (name, steps, evidence, the fix in
TRL's setting names), the metrics the run did not log, and a one-line verdict. Exit status:
0 no warning (info notes, such as a loss near 0 with a nonzero gradient, do not count),
1 at least one warning, 2 unreadable input (one line on stderr says why).

Each TRL rule reads the records of ``trl_log.read_log`` (our names, ``trl_log.METRIC_MAP``).
"From the start" means on the first logged step and on at least ``MOST`` of the steps: a
broken setup shows at step 1, a run that breaks later is a different finding. The thresholds
are the module constants; those marked *tuning* were set looking only at the tuning seeds
(0-2) of ``benchmarks/bench_trl_detectors.py``, whose other seeds report the rates.

A quirk of TRL worth knowing (measured there): ``frac_reward_zero_std`` counts a group as tied
only when its float std is within 1e-8 of 0, and G equal non-integer rewards (1.2, 2/3) have a
float32 std of about 1e-7, so fully tied groups can read as 0 % tied. The zero-signal rules
below therefore read the gradient norm too.

Taught in notebook 13.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import trl_log
from .diagnose import Evidence, Finding

__all__ = ["TRL_CATALOGUE", "Report", "diagnose_log", "diagnose_path", "main"]

#: Share of the steps a "from the start" rule needs (the first step always included).
MOST = 0.9
#: A gradient norm at or below this is zero: tied float rewards give ~1e-8 (measured), a
#: learning step of this checkpoint 0.1-1.7.
NO_GRAD = 1e-6
#: reward_std at or below this: every completion of the step scored the same.
NO_STD = 1e-6
#: Mean per-token entropy (nats) below which sampling is deterministic in effect.
NO_ENTROPY = 0.01
#: Mean frac_reward_zero_std at or above which half the groups give no signal (notebook 13).
SATURATED_FRAC = 0.5
#: Late mean of completions/clipped_ratio at or above which most replies are cut (tuning:
#: healthy runs <= 0.05, a cap of 3 tokens 0.8-0.9).
TRUNCATED = 0.5
#: Reward collapse: the first step's reward (the starting policy) minus the late mean is at
#: least COLLAPSE_REL x max |reward| and at least COLLAPSE_STD x the first step's reward_std
#: (when logged), so a noisy reward near 0 does not count (tuning: healthy runs dropped at
#: most 0.5 x their first reward_std, learning rate 3e-2 runs 2.8 x).
COLLAPSE_REL = 0.5
COLLAPSE_STD = 2.0
#: KL blow-up: late mean of TRL's kl (nats per token) above this (notebook 13's value).
KL_PER_TOKEN_MAX = 0.5
#: Entropy collapse: late entropy below this fraction of the first step's.
ENTROPY_COLLAPSE_REL = 0.05
#: Clip fraction high: median clip_ratio/region_mean at or above this.
CLIP_HIGH = 0.3
#: Length drift: |late mean - first step| >= this fraction of the first step's length.
LENGTH_DRIFT_REL = 0.5
#: Gradient spike: max grad_norm >= this x the median (needs 10 steps).
GRAD_SPIKE_REL = 20.0
#: Loss near zero (info): median |loss| <= this x the median reward_std, gradient not zero.
LOSS_ZERO_REL = 0.05
#: Stalled (needs --reward-max): the reward moves less than STALL_REL x reward_max between
#: the first and last quarter and ends below STALL_GOAL x reward_max.
STALL_REL = 0.05
STALL_GOAL = 0.5

#: name -> (symptom, likely causes, fix in TRL's setting names, metrics to watch).
TRL_CATALOGUE: dict[str, tuple[str, str, str, str]] = {
    "constant_reward": (
        "every completion of every step scores the same: advantages, loss and gradient are 0",
        "a reward function that returns a constant (a parse that always fails, a wrong "
        "column name in the dataset, a placeholder left in)",
        "print a few (completion, reward) pairs; fix the reward_funcs so that a better "
        "completion scores higher",
        "reward_std, rewards/<f>/std, grad_norm",
    ),
    "identical_rollouts": (
        "the G completions of a prompt are the same: no group differs, the gradient is 0",
        "sampling is deterministic: temperature ~0, top_k=1, do_sample off in "
        "generation_kwargs, or one seed reused for each completion of a prompt",
        "temperature 0.7-1.0 (GRPOConfig.temperature), top_k=0 / top_p=1.0, do not pass one "
        "seed per completion to the generator",
        "entropy, frac_reward_zero_std, grad_norm",
    ),
    "no_variance_within_groups": (
        "rewards differ between prompts but never within a group: every advantage is 0",
        "a reward that reads only the prompt (or the dataset row) and not the completion, or "
        "identical completions from one seed reused per completion (entropy looks normal)",
        "make the reward score the completion; check that the G completions of a prompt "
        "differ (log_completions=True)",
        "grad_norm, frac_reward_zero_std, rewards/<f>/std",
    ),
    "saturated_groups": (
        "half or more of the groups tie (all right or all wrong): they give no signal",
        "prompts too hard (every completion wrong) or too easy (every one right) for the "
        "current policy, a 0/1 reward, num_generations too small",
        "filter the dataset to prompts the policy solves sometimes (DAPO's dynamic "
        "sampling: drop groups whose rewards tie), a partial-credit reward, larger "
        "num_generations",
        "frac_reward_zero_std, reward",
    ),
    "truncation": (
        "most completions hit max_completion_length: cut-off replies",
        "max_completion_length too small for the answer, or a policy that stopped ending "
        "its turn (a drift or a collapse)",
        "raise max_completion_length; mask_truncated_completions=True keeps cut replies "
        "out of the loss (DAPO)",
        "completions/clipped_ratio, completions/mean_terminated_length",
    ),
    "reward_collapse": (
        "the reward fell far below where the run started",
        "learning_rate too high (the policy left what it could do), no KL (beta=0) and no "
        "gradient clipping",
        "lower learning_rate (1e-6 to 1e-5 for billion-parameter models; here 1e-4), keep "
        "max_grad_norm=1.0, beta > 0 if the policy must stay near its start",
        "reward, entropy, completions/clipped_ratio",
    ),
    "kl_blowup": (
        "KL to the reference blew up: the policy ran far from its start",
        "beta too small for the learning_rate, a learning_rate too high",
        "raise beta or lower learning_rate",
        "kl",
    ),
    "entropy_collapse": (
        "entropy collapsed to near 0 while the reward did not improve",
        "learning_rate too high, num_iterations > 1 with a loose clip, no entropy control",
        "lower learning_rate, epsilon_high (clip-higher, DAPO), fewer num_iterations",
        "entropy",
    ),
    "clip_high": (
        "clip_ratio/region_mean above 0.3: many tokens' gradients are cut off",
        "epsilon too small, learning_rate too high, num_iterations or steps_per_generation large",
        "epsilon 0.2, lower learning_rate, fewer num_iterations",
        "clip_ratio/region_mean, clip_ratio/low_mean, clip_ratio/high_mean",
    ),
    "length_drift": (
        "completion length drifted by half or more of its start",
        "a loss_type with a length bias (grpo: per-sequence mean), a reward that pays for "
        "length, or a policy that stopped ending its turn",
        "loss_type dapo (token-level) or dr_grpo; overlong shaping; check the reward",
        "completions/mean_length, completions/clipped_ratio",
    ),
    "grad_spike": (
        "gradient norm spikes far above the run's median",
        "reward outliers with scale_rewards='none', a learning_rate too high",
        "max_grad_norm (default 1.0), scale_rewards='group', clip or fix the reward",
        "grad_norm",
    ),
    "reward_stalled": (
        "the reward stays flat below half its maximum",
        "prompts too hard, a reward the policy cannot reach, learning_rate too small",
        "easier prompts first, a partial-credit reward, a larger learning_rate",
        "reward, frac_reward_zero_std",
    ),
    "loss_near_zero": (
        "loss near 0 while the gradient is not (normal for GRPO)",
        "advantages are centred within each group (they sum to 0) and the ratio is 1 on "
        "fresh samples, so the loss value sits near 0; the gradient is not 0",
        "nothing: watch reward and a held-out metric, not the loss",
        "reward, grad_norm",
    ),
}


@dataclass
class Report:
    """What ``diagnose_path`` found: the findings, the log read, what could not be checked."""

    findings: list[Finding]
    log: trl_log.TrlLog | None = None
    skipped: dict[str, str] = field(default_factory=dict)
    source: str = ""


def _finding(name: str, detail: str, *evidence, severity: str = "warning") -> Finding:
    symptom, causes, fixes, watch = TRL_CATALOGUE[name]
    return Finding(name, severity, symptom, detail, tuple(evidence), causes, fixes, watch)


def _series(steps: list[dict], key: str) -> tuple[list, list]:
    rows = [(r["step"], r[key]) for r in steps if r.get(key) is not None]
    return [s for s, _ in rows], [v for _, v in rows]


def _ev(steps: list[dict], key: str, trl_key: str, n: int = 6) -> Evidence:
    at, values = _series(steps, key)
    idx = sorted({round(i * (len(values) - 1) / max(1, n - 1)) for i in range(n)})
    return Evidence(trl_key, tuple(at[i] for i in idx), tuple(values[i] for i in idx), "step")


def _late(values: list) -> float:
    return statistics.fmean(values[-max(1, len(values) // 4) :])


def _from_start(steps: list[dict], test) -> bool:
    hits = [bool(test(r)) for r in steps]
    return hits[0] and sum(hits) >= MOST * len(hits)


def _zero_signal(steps: list[dict]) -> list[Finding]:
    """constant_reward, identical_rollouts, no_variance_within_groups: no signal from step 1."""
    grad_zero = all(r.get("grad_norm") is not None for r in steps) and _from_start(
        steps, lambda r: r["grad_norm"] <= NO_GRAD
    )
    tied = _from_start(steps, lambda r: (r.get("frac_reward_zero_std") or 0) >= 0.99)
    if not (grad_zero or tied):
        return []
    n = len(steps)
    share = sum(r.get("grad_norm") is not None and r["grad_norm"] <= NO_GRAD for r in steps)
    evidence = [_ev(steps, "grad_norm", "grad_norm")]
    if any(r.get("frac_reward_zero_std") is not None for r in steps):
        evidence.append(_ev(steps, "frac_reward_zero_std", "frac_reward_zero_std"))
    detail = f"grad_norm <= {NO_GRAD:g} at {share} of {n} steps, the first included"
    if any(r.get("entropy") is not None for r in steps) and _from_start(
        steps, lambda r: r.get("entropy") is not None and r["entropy"] <= NO_ENTROPY
    ):
        e = _ev(steps, "entropy", "entropy")
        return [_finding("identical_rollouts", f"{detail}; entropy <= {NO_ENTROPY}", e, *evidence)]
    if _from_start(steps, lambda r: r.get("reward_std") is not None and r["reward_std"] <= NO_STD):
        r = _ev(steps, "reward_std", "reward_std")
        return [_finding("constant_reward", f"{detail}; reward_std <= {NO_STD:g}", r, *evidence)]
    r = _ev(steps, "reward_std", "reward_std")
    why = f"{detail}; reward_std > 0 (rewards differ between prompts)"
    return [_finding("no_variance_within_groups", why, r, *evidence)]


def _rules(steps: list[dict], reward_max: float | None) -> list[Finding]:
    found = _zero_signal(steps)
    silent = bool(found)
    reward = [r["mean_reward"] for r in steps if r["mean_reward"] is not None]
    scale = max([abs(v) for v in reward] + [1e-12])
    _, frac = _series(steps, "frac_reward_zero_std")
    if frac and not silent and statistics.fmean(frac) >= SATURATED_FRAC:
        detail = (f"on average {statistics.fmean(frac):.0%} of groups tie; mean reward "
                  f"{statistics.fmean(reward):.3g} (low: too hard; at its maximum: too easy)")  # fmt: skip
        found.append(_finding("saturated_groups", detail, _ev(steps, "frac_reward_zero_std",
                              "frac_reward_zero_std"), _ev(steps, "mean_reward", "reward")))  # fmt: skip
    _, cut = _series(steps, "truncated_fraction")
    if cut and _late(cut) >= TRUNCATED:
        detail = f"late mean completions/clipped_ratio {_late(cut):.0%} (>= {TRUNCATED:.0%})"
        found.append(_finding("truncation", detail, _ev(steps, "truncated_fraction",
                              "completions/clipped_ratio")))  # fmt: skip
    if len(reward) >= 4 and steps[0]["mean_reward"] is not None:
        drop, std0 = steps[0]["mean_reward"] - _late(reward), steps[0].get("reward_std") or 0.0
        if drop >= COLLAPSE_REL * scale and drop >= COLLAPSE_STD * std0:
            detail = (f"first step {steps[0]['mean_reward']:.3g} (reward_std {std0:.3g}), late "
                      f"mean {_late(reward):.3g}")  # fmt: skip
            found.append(_finding("reward_collapse", detail, _ev(steps, "mean_reward", "reward")))
    _, kl = _series(steps, "kl_per_token")
    if kl and _late(kl) > KL_PER_TOKEN_MAX:
        detail = f"late mean kl {_late(kl):.3g} nats per token > {KL_PER_TOKEN_MAX}"
        found.append(_finding("kl_blowup", detail, _ev(steps, "kl_per_token", "kl")))
    _, ent = _series(steps, "entropy")
    half = len(reward) // 2
    improving = reward and max(reward[half:]) - reward[half] > 0.05 * scale
    if ent and ent[0] > NO_ENTROPY and _late(ent) < ENTROPY_COLLAPSE_REL * ent[0] and not improving:
        detail = f"entropy {ent[0]:.3g} -> {_late(ent):.3g} nats (late mean)"
        found.append(_finding("entropy_collapse", detail, _ev(steps, "entropy", "entropy")))
    _, clip = _series(steps, "clip_fraction")
    if clip and statistics.median(clip) >= CLIP_HIGH:
        detail = f"median clip_ratio/region_mean {statistics.median(clip):.2f}"
        found.append(_finding("clip_high", detail, _ev(steps, "clip_fraction",
                              "clip_ratio/region_mean")))  # fmt: skip
    _, length = _series(steps, "response_length")
    if length and length[0] > 0 and abs(_late(length) - length[0]) >= LENGTH_DRIFT_REL * length[0]:
        detail = f"mean length {length[0]:.3g} -> {_late(length):.3g} tokens (late mean)"
        found.append(_finding("length_drift", detail, _ev(steps, "response_length",
                              "completions/mean_length")))  # fmt: skip
    at, grad = _series(steps, "grad_norm")
    if len(grad) >= 10 and statistics.median(grad) > NO_GRAD:
        med = statistics.median(grad)
        if max(grad) >= GRAD_SPIKE_REL * med:
            worst = at[grad.index(max(grad))]
            detail = (
                f"max grad_norm {max(grad):.3g} at step {worst} = {max(grad) / med:.0f} x median"
            )
            found.append(_finding("grad_spike", detail, _ev(steps, "grad_norm", "grad_norm")))
    if reward_max is not None and len(reward) >= 8:
        q = len(reward) // 4
        first, last = statistics.fmean(reward[:q]), statistics.fmean(reward[-q:])
        if abs(last - first) < STALL_REL * reward_max and last < STALL_GOAL * reward_max:
            detail = (
                f"reward {first:.3g} -> {last:.3g} (first / last quarter) of max {reward_max:g}"
            )
            found.append(_finding("reward_stalled", detail, _ev(steps, "mean_reward", "reward")))
    _, loss = _series(steps, "loss")
    _, std = _series(steps, "reward_std")
    if not silent and grad and loss and std and statistics.median(grad) > NO_GRAD:
        median_loss = statistics.median(abs(v) for v in loss)
        if median_loss <= LOSS_ZERO_REL * statistics.median(std):
            detail = (f"median |loss| {median_loss:.2g}, median grad_norm "
                      f"{statistics.median(grad):.2g}")  # fmt: skip
            found.append(_finding("loss_near_zero", detail, _ev(steps, "loss", "loss"),
                                  severity="info"))  # fmt: skip
    return found


def diagnose_log(log: trl_log.TrlLog, reward_max: float | None = None) -> Report:
    """The findings of a TRL log; ``skipped``: the rules that could not run, and why."""
    skipped = {name: f"needs {key}: {why}" for key, why in log.missing.items()
               for name in _NEEDS.get(key, ())}  # fmt: skip
    if reward_max is None:
        skipped["reward_stalled"] = "needs the reward's maximum (--reward-max)"
    skipped.update({name: why for name, why in trl_log.UNAVAILABLE.items()})
    return Report(_rules(log.steps, reward_max), log, skipped, log.path)


_NEEDS = {
    "kl": ("kl_blowup",),
    "frac_reward_zero_std": ("saturated_groups",),
    "completions/clipped_ratio": ("truncation",),
    "entropy": ("entropy_collapse", "identical_rollouts"),
    "clip_ratio/region_mean": ("clip_high",),
    "completions/mean_length": ("length_drift",),
    "grad_norm": ("grad_spike", "identical_rollouts", "no_variance_within_groups"),
}


def diagnose_path(path, reward_max: float | None = None) -> Report:
    """Read PATH (module docstring) and diagnose it. Raises ``trl_log.TrlLogError`` (one
    line) for anything that is neither a TRL trainer state nor a saved History."""
    file = trl_log.find_trainer_state(path)
    try:
        data = json.loads(file.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise trl_log.TrlLogError(f"{file}: not JSON ({err.__class__.__name__})") from None
    if isinstance(data, list):  # a saved History: our own records
        from .diagnose import diagnose

        if not data:
            raise trl_log.TrlLogError(f"{file}: an empty history")
        try:
            return Report(diagnose(data, reward_max), None, {}, str(file))
        except (TypeError, ValueError) as err:
            raise trl_log.TrlLogError(f"{file}: not a saved History ({err})") from None
    return diagnose_log(trl_log.read_log(data, str(file)), reward_max)


def _line(f: Finding) -> str:
    at = sorted({s for e in f.evidence for s in e.epochs})
    where = f"steps {at[0]}-{at[-1]}" if at else ""
    kind = "note" if f.severity == "info" else "warning"
    return f"{kind} {f.name} ({where}): {f.symptom}; {f.detail}; fix: {f.fixes}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m pgrl_helpers.diagnose",
                                description=__doc__.splitlines()[0])  # fmt: skip
    p.add_argument("path", help="trainer_state.json, a folder holding one, or a saved History")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--reward-max", type=float, default=None, help="the reward's maximum")
    args = p.parse_args(argv)
    try:
        report = diagnose_path(args.path, args.reward_max)
    except trl_log.TrlLogError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    warnings = [f for f in report.findings if f.severity == "warning"]
    missing = report.log.missing if report.log else {}
    if args.json:
        out = {"source": report.source, "findings": [asdict(f) for f in report.findings],
               "missing_metrics": missing, "skipped": report.skipped,
               "warnings": len(warnings)}  # fmt: skip
        print(json.dumps(out, indent=1))
    else:
        for f in report.findings:
            print(_line(f))
        if missing:
            print("not logged: " + "; ".join(f"{k} ({why})" for k, why in missing.items()))
        names = ", ".join(f.name for f in warnings)
        n = len(report.log.steps) if report.log else len(report.findings)
        what = f"{n} logged steps" if report.log else "a saved History"
        print(f"verdict: {len(warnings)} warning(s): {names}" if warnings
              else f"verdict: no warning on {what} of {Path(report.source).name}")  # fmt: skip
    return 1 if warnings else 0
