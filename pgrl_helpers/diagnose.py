"""``diagnose(history)``: read a run's logged metrics and name what went wrong.

Each rule below looks only at the records of a history (``history.METRICS``: 'step' and
'eval' records) and returns a ``Finding`` naming the symptom, the evidence (metric, epochs,
values), the likely causes and what to try. Severity 'warning' means something is wrong;
'info' is a note about a metric that looks alarming but is normal. A healthy run yields no
warning; the one info note it may get is ``loss_near_zero`` (with centred deltas the loss
sits near 0 while the reward climbs: it is there to stop you debugging a healthy run).

How a trend is measured: step metrics are averaged per epoch; "early" is the mean of the
first quarter of the epochs and "late" the mean of the last quarter; a metric "moves" when
|late - early| >= ``MOVE_REL`` x its largest absolute value in the run. Held-out exact-sort
"stalls" when the best value of the second half of the evaluations beats the value at the
half-way evaluation by at most ``EXACT_STALL``; a run is "solved" once held-out exact-sort
reached ``SOLVED``. Every threshold is a module constant, documented where it is defined.
The texts of each finding (symptom, causes, fixes, metric to watch with TRL's name) live in
``symptoms.CATALOGUE``.

The optional step metric ``frac_reward_zero_std`` (fraction of prompt groups whose G rewards
all tie; TRL's name) is used when the history has it. Without it, tied groups are
recognised only in the extreme case: the gradient is exactly zero and either the reward is
the same every epoch or the policy samples one response (entropy ~ 0).

Taught in notebook 13.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ._validate import check_number
from .symptoms import CATALOGUE, catalogue_table

__all__ = [
    "CATALOGUE",
    "Evidence",
    "Finding",
    "catalogue_table",
    "diagnose",
    "format_findings",
    "warnings_only",
]

#: grad_norm at or below this is an exactly zero gradient (float rounding gives ~1e-9 at most
#: through a nonzero loss; an all-zero delta or a frozen ratio gives 0.0).
ZERO_GRAD = 1e-10
#: Fraction of the steps that must have a zero gradient for the zero-gradient findings.
ZERO_GRAD_FRAC = 0.9
#: |ratio_mean - 1| at or below this counts as a ratio of exactly 1.
RATIO_ONE_TOL = 1e-6
#: Mean entropy (nats) below which the policy samples practically one response per prompt.
ONE_RESPONSE_ENTROPY = 0.01
#: Mean frac_reward_zero_std over the run at or above which tied groups explain a flat reward.
TIED_FRAC = 0.5
#: Mean frac_reward_zero_std over the zero-gradient steps at or above which ties explain an
#: exactly zero gradient: one group whose rewards differ has nonzero deltas, so only (nearly)
#: every group tying can zero the gradient; otherwise the ratio is frozen.
ALL_TIED_FRAC = 0.99
#: A metric "moves" when |late - early| >= MOVE_REL x max |value|; it is "flat" below FLAT_REL.
MOVE_REL = 0.1
FLAT_REL = 0.05
#: Loss "near zero": median |loss| <= LOSS_ZERO_REL x the reward's change over the run.
LOSS_ZERO_REL = 0.05
#: Reward hacking (the proxy branch) needs the held-out proxy reward to gain >=
#: PROXY_GAIN_REL x its max |value| over the run and, when the reward's maximum is known
#: (``reward_max``, or the history's config with a built-in reward), to end at >=
#: HACK_PROXY_FRAC of that maximum while held-out exact-sort ends at least HACK_GAP below
#: that fraction: most held-out answers score (nearly) the maximum without being sorted.
#: Without a known maximum: the old rule, the proxy gains and then plateaus (second half gains
#: < FLAT_REL x max |value|) while exact-sort stalls. HACK_PROXY_FRAC and HACK_GAP were
#: chosen on the tuning seeds (0-9) of benchmarks/bench_detectors.py, never on the seeds it
#: reports: there the loophole runs ended with a gap of 0.58 or more and the healthy and fixed
#: runs with 0.52 or less (HACK_GAP is the midpoint), and every loophole run ended at >= 0.85 of
#: the maximum.
PROXY_GAIN_REL = 0.25
HACK_PROXY_FRAC = 0.8
HACK_GAP = 0.55
#: Plateau: the mean reward of the last quarter of the epochs gains at most PLATEAU_GAIN_REL x
#: max |reward| over the quarter before it, while the goal (held-out exact-sort, and train
#: exact-sort when logged) never reached PLATEAU_GOAL. Needs PLATEAU_MIN_EPOCHS epochs.
#: PLATEAU_GAIN_REL is the midpoint between the largest gain of the stuck lecture runs (0.057)
#: and the smallest of the healthy runs (0.122) on the tuning seeds of bench_detectors.py.
PLATEAU_GAIN_REL = 0.09
PLATEAU_GOAL = 0.5
PLATEAU_MIN_EPOCHS = 8
#: Held-out exact-sort stalls when the second half of the evals gains at most this much.
EXACT_STALL = 0.05
#: Held-out exact-sort at which a run counts as solved (no stall findings after that).
SOLVED = 0.9
#: Memorisation: train exact-sort (lecture prompts) gains at least this while held-out stalls.
MEMO_TRAIN_GAIN = 0.3
#: Entropy collapse: late entropy below this fraction of the first epoch's entropy.
ENTROPY_COLLAPSE_REL = 0.05
#: KL blow-up: late mean of kl / response_length (nats per token) above this.
KL_PER_TOKEN_MAX = 0.5
#: Clip fraction "near 1": median over the steps that reuse a batch (inner_step > 0).
CLIP_HIGH = 0.3
#: Clip fraction "pinned at 0" needs at least this many steps that reuse a batch.
CLIP_ZERO_MIN_STEPS = 5
#: Response length drift: |late - first epoch| >= this fraction of the first epoch's length ...
LENGTH_DRIFT_REL = 0.5
#: ... unless held-out exact-sort rose by this much (then the length change is learning).
LENGTH_LEARNING_GAIN = 0.2
#: Exploding gradient: max grad_norm >= GRAD_SPIKE_REL x median grad_norm (>= 10 steps).
GRAD_SPIKE_REL = 20.0
#: Held at the reference (a KL penalty too strong): the KL term is logged on at least
#: HELD_KL_LOGGED of the steps, the gradient is not zero, late entropy is still at least
#: HELD_ENTROPY_REL x the first epoch's, late KL is at most HELD_KL_PER_TOKEN nats per token,
#: and held-out exact-sort never reached PLATEAU_GOAL. Chosen on tuning seeds 0-3 of
#: benchmarks/bench_detectors.py and the capstone's runs: with beta 1 or 5 the late entropy
#: stayed at 0.99-1.02 of its start and the late KL at 0.0002-0.003 nats per token; with
#: beta 0.1, or none, entropy fell to 0.27-0.64 of its start and the KL rose to 0.23-0.27.
HELD_KL_LOGGED = 0.9
HELD_ENTROPY_REL = 0.9
HELD_KL_PER_TOKEN = 0.02

#: The step metrics diagnose reads (kl may be None when the KL term is off, clip_fraction
#: when the loss never clips).
REQUIRED_STEP_KEYS = (
    "epoch", "step", "inner_step", "loss", "mean_reward", "kl", "clip_fraction",
    "entropy", "ratio_mean", "grad_norm", "response_length",
)  # fmt: skip
OPTIONAL_STEP_KEYS = ("frac_reward_zero_std",)
OPTIONAL_EVAL_KEYS = ("train_exact_sort",)
REQUIRED_EVAL_KEYS = ("epoch", "step", "validation_exact_sort", "validation_mean_reward")


@dataclass(frozen=True)
class Evidence:
    """One metric's values behind a finding: ``metric``, the ``epochs`` and the ``values``.

    ``axis`` names what ``epochs`` counts: 'epoch' (per-epoch means) or 'step' (single steps).
    """

    metric: str
    epochs: tuple
    values: tuple
    axis: str = "epoch"

    def __str__(self) -> str:
        pairs = ", ".join(f"{e}: {v:.3g}" for e, v in zip(self.epochs, self.values))
        return f"{self.metric} by {self.axis} {{{pairs}}}"


@dataclass(frozen=True)
class Finding:
    """One diagnosed problem (or, severity 'info', a note that a symptom is normal)."""

    name: str
    severity: str
    symptom: str
    detail: str
    evidence: tuple[Evidence, ...] = field(default_factory=tuple)
    causes: str = ""
    fixes: str = ""
    watch: str = ""

    def __str__(self) -> str:
        lines = [f"[{self.severity}] {self.name}: {self.symptom}", f"  evidence: {self.detail}"]
        lines += [f"    {e}" for e in self.evidence]
        lines += [f"  likely causes: {self.causes}", f"  try: {self.fixes}"]
        return "\n".join(lines + [f"  watch: {self.watch}"])


def _finding(name: str, detail: str, *evidence: Evidence, severity: str = "warning") -> Finding:
    symptom, causes, fixes, watch = CATALOGUE[name]
    return Finding(name, severity, symptom, detail, tuple(evidence), causes, fixes, watch)


def format_findings(findings: list[Finding]) -> str:
    """Findings as plain text, one block each ('no findings' for an empty list).

    Taught in notebook 13.
    """
    return "\n".join(str(f) for f in findings) if findings else "no findings: the run looks healthy"


# --------------------------------------------------------------------------------------
# Reading the history
# --------------------------------------------------------------------------------------


def _check_number(value, key: str, where: str, allow_none: bool) -> None:
    check_number(value, f"history {where}: metric {key!r}", allow_none=allow_none)


def _split(history) -> tuple[list[dict], list[dict]]:
    """Validate ``history`` and return (step records, eval records)."""
    if not isinstance(history, (list, tuple)):
        raise TypeError(f"history must be a list of records, got {type(history).__name__}")
    if not history:
        raise ValueError("history is empty: diagnose needs the records of a run")
    steps, evals = [], []
    for i, record in enumerate(history):
        if not isinstance(record, dict) or "kind" not in record:
            raise ValueError(f"history record {i} is not a dict with a 'kind': {record!r:.80}")
        kind = record["kind"]
        keys = {"step": REQUIRED_STEP_KEYS, "eval": REQUIRED_EVAL_KEYS}.get(kind)
        if keys is None:
            raise ValueError(f"history record {i} has kind {kind!r}; expected 'step' or 'eval'")
        missing = [k for k in keys if k not in record]
        if missing:
            raise ValueError(f"history record {i} ({kind}) lacks the metrics {missing}")
        for key in keys + (OPTIONAL_STEP_KEYS if kind == "step" else OPTIONAL_EVAL_KEYS):
            if key in record:
                nullable = (
                    key
                    in ("kl", "clip_fraction", "validation_mean_reward")
                    + OPTIONAL_STEP_KEYS
                    + OPTIONAL_EVAL_KEYS
                )
                _check_number(record[key], key, f"record {i}", nullable)
        (steps if kind == "step" else evals).append(record)
    if not steps:
        raise ValueError("history has no 'step' records: diagnose needs at least one epoch")
    return steps, evals


def _per_epoch(steps: list[dict], key: str) -> tuple[list[int], list[float]]:
    """(epochs, mean of ``key`` over each epoch's steps), skipping None values."""
    sums: dict[int, list[float]] = {}
    for r in steps:
        if r.get(key) is not None:
            sums.setdefault(r["epoch"], []).append(r[key])
    epochs = sorted(sums)
    return epochs, [statistics.fmean(sums[e]) for e in epochs]


def _early_late(values: list[float]) -> tuple[float, float]:
    q = max(1, len(values) // 4)
    return statistics.fmean(values[:q]), statistics.fmean(values[-q:])


def _scale(values: list[float]) -> float:
    return max([abs(v) for v in values] + [1e-12])


def _pick(epochs: list, values: list, n: int = 6) -> tuple[tuple, tuple]:
    """Up to n evenly spaced (epoch, value) pairs, first and last included."""
    idx = sorted({round(i * (len(values) - 1) / max(1, n - 1)) for i in range(n)})
    return tuple(epochs[i] for i in idx), tuple(values[i] for i in idx)


def _ev(metric: str, epochs: list, values: list) -> Evidence:
    return Evidence(metric, *_pick(epochs, values))


def _exact_progress(evals: list[dict]) -> dict | None:
    """Held-out exact-sort summary, or None with fewer than 3 evaluations."""
    rows = [r for r in evals if r["validation_exact_sort"] is not None]
    if len(rows) < 3:
        return None
    exact = [r["validation_exact_sort"] for r in rows]
    half = len(exact) // 2
    return {
        "epochs": [r["epoch"] for r in rows],
        "exact": exact,
        "best": max(exact),
        "stalled": max(exact[half:]) - exact[half] <= EXACT_STALL,
        "gain": exact[-1] - exact[0],
    }


# --------------------------------------------------------------------------------------
# The rules
# --------------------------------------------------------------------------------------


def _reward_max(history, reward_max: float | None) -> float | None:
    """The reward's maximum: ``reward_max`` if given, else from the history's config (a
    built-in reward of ``sort_task``), else None."""
    check_number(reward_max, "reward_max", 0, allow_none=True)
    if reward_max is not None:
        return float(reward_max)
    config = getattr(history, "config", None)
    if config is None or config.task != "sort":
        return None
    from .sort_task import max_reward

    try:
        return max_reward(config.reward_fn, config.prompt_length)
    except ValueError:
        return None


def diagnose(history, reward_max: float | None = None) -> list[Finding]:
    """Findings for one run's history (a list of 'step'/'eval' records), root causes first.

    ``reward_max``: the reward's largest value (default: read from ``history.config`` when
    the run used a built-in sort reward); reward hacking uses it. Raises TypeError/ValueError
    naming the problem for an empty or malformed history or a bad ``reward_max``.

    Taught in notebook 13.
    """
    steps, evals = _split(history)
    epochs, reward = _per_epoch(steps, "mean_reward")
    early, late = _early_late(reward)
    reward_move = abs(late - early)
    ctx = {
        "steps": steps,
        "evals": evals,
        "epochs": epochs,
        "reward": reward,
        "reward_moves": reward_move >= MOVE_REL * _scale(reward),
        "reward_move": reward_move,
        "exact": _exact_progress(evals),
        "reward_max": _reward_max(history, reward_max),
    }
    findings = []
    for rule in (_zero_gradient, _tied_fraction, _reward_hacking, _entropy_collapse,
                 _kl_blowup, _held_at_reference, _clip, _length_drift, _grad_spike, _plateau,
                 _loss_near_zero):  # fmt: skip
        findings += rule(ctx)
    return findings


def _zero_gradient(ctx) -> list[Finding]:
    """frozen_ratio or (without frac_reward_zero_std) tied_groups: gradient exactly zero."""
    steps = ctx["steps"]
    zero = [r for r in steps if r["grad_norm"] <= ZERO_GRAD]
    ctx["zero_gradient"] = len(zero) >= ZERO_GRAD_FRAC * len(steps)
    if not ctx["zero_gradient"]:
        return []
    ratio_one = [r for r in zero if abs(r["ratio_mean"] - 1) <= RATIO_ONE_TOL]
    if len(ratio_one) < ZERO_GRAD_FRAC * len(zero):
        return []
    epochs, grad = _per_epoch(steps, "grad_norm")
    evidence = [_ev("grad_norm", epochs, grad), _ev("ratio_mean", *_per_epoch(steps, "ratio_mean"))]
    share = f"{len(zero)} of {len(steps)} steps have grad_norm <= {ZERO_GRAD:g} and ratio 1"
    tied = [r["frac_reward_zero_std"] for r in zero if r.get("frac_reward_zero_std") is not None]
    rewards = {round(r["mean_reward"], 9) for r in zero}
    low_entropy = statistics.fmean(r["entropy"] for r in zero) < ONE_RESPONSE_ENTROPY
    if tied:
        is_tied = statistics.fmean(tied) >= ALL_TIED_FRAC
    else:
        is_tied = len(rewards) == 1 or low_entropy
    ctx["tied_reported"] = is_tied
    reward_ev = _ev("mean_reward", ctx["epochs"], ctx["reward"])
    if is_tied:
        why = (
            f"mean frac_reward_zero_std {statistics.fmean(tied):.2f}"
            if tied
            else (
                f"the same mean reward ({next(iter(rewards)):.3g}) every epoch"
                if len(rewards) == 1
                else f"entropy < {ONE_RESPONSE_ENTROPY} nats: one response per prompt"
            )
        )
        return [_finding("tied_groups", f"{share}; {why}", reward_ev, *evidence)]
    why = "the reward varies between epochs, so groups are not all tied"
    if tied:
        why = f"only {statistics.fmean(tied):.0%} of groups tie on average"
    return [_finding("frozen_ratio", f"{share}; {why}", reward_ev, *evidence)]


def _tied_fraction(ctx) -> list[Finding]:
    """tied_groups from frac_reward_zero_std (when logged) with a flat reward."""
    if ctx.get("tied_reported"):
        return []
    epochs, tied = _per_epoch(ctx["steps"], "frac_reward_zero_std")
    if not tied or statistics.fmean(tied) < TIED_FRAC:
        return []
    early, late = _early_late(ctx["reward"])
    if abs(late - early) >= FLAT_REL * _scale(ctx["reward"]):
        return []
    if ctx["exact"] is not None and ctx["exact"]["best"] >= SOLVED:
        return []  # solved: every group ties because every response is right
    detail = f"on average {statistics.fmean(tied):.0%} of groups tie and the reward is flat"
    reward_ev = _ev("mean_reward", ctx["epochs"], ctx["reward"])
    return [_finding("tied_groups", detail, _ev("frac_reward_zero_std", epochs, tied), reward_ev)]


def _reward_hacking(ctx) -> list[Finding]:
    """Train exact up (memorisation) or held-out proxy up, while held-out exact stalls."""
    exact = ctx["exact"]
    if exact is None or exact["best"] >= SOLVED:
        return []
    evals = [r for r in ctx["evals"] if r["validation_exact_sort"] is not None]
    exact_ev = Evidence("validation_exact_sort", *_pick(exact["epochs"], exact["exact"]))
    train = [r.get("train_exact_sort") for r in evals]
    memorised = None not in train and train[-1] - train[0] >= MEMO_TRAIN_GAIN
    if memorised and exact["stalled"]:
        detail = (
            f"train exact-sort {train[0]:.0%} -> {train[-1]:.0%} while held-out exact-sort "
            f"stays at {exact['exact'][-1]:.1%}: memorisation of the training prompts"
        )
        train_ev = Evidence("train_exact_sort", *_pick(exact["epochs"], train))
        return [_finding("reward_hacking", detail, train_ev, exact_ev)]
    proxy = [r["validation_mean_reward"] for r in evals if r["validation_mean_reward"] is not None]
    if len(proxy) < len(evals):
        return []
    gain = (proxy[-1] - proxy[0]) / _scale(proxy)
    if gain < PROXY_GAIN_REL:
        return []
    top = ctx["reward_max"]
    if top is not None:
        frac = proxy[-1] / top
        if frac < HACK_PROXY_FRAC or exact["exact"][-1] > frac - HACK_GAP:
            return []
        detail = (
            f"held-out mean reward {proxy[0]:.3g} -> {proxy[-1]:.3g} ({frac:.0%} of its "
            f"maximum {top:g}) while held-out exact-sort ends at {exact['exact'][-1]:.1%} "
            f"(best {exact['best']:.1%}): unseen prompts score near the maximum without "
            "being sorted"
        )
    else:
        half = len(proxy) // 2
        if not exact["stalled"] or max(proxy[half:]) - proxy[half] >= FLAT_REL * _scale(proxy):
            return []
        detail = (
            f"held-out mean reward {proxy[0]:.3g} -> {proxy[-1]:.3g} while held-out "
            f"exact-sort stalls at {exact['exact'][-1]:.1%} (best {exact['best']:.1%}): "
            "the proxy rises on unseen prompts too, the goal does not"
        )
    proxy_ev = Evidence("validation_mean_reward", *_pick(exact["epochs"], proxy))
    return [_finding("reward_hacking", detail, proxy_ev, exact_ev)]


def _entropy_collapse(ctx) -> list[Finding]:
    epochs, entropy = _per_epoch(ctx["steps"], "entropy")
    _, late = _early_late(entropy)
    if entropy[0] <= 0 or late >= ENTROPY_COLLAPSE_REL * entropy[0]:
        return []
    exact = ctx["exact"]
    if exact is not None:
        if exact["best"] >= SOLVED or not exact["stalled"]:
            return []
        stuck = f"held-out exact-sort stalled at {exact['exact'][-1]:.1%}"
    else:
        reward = ctx["reward"]
        half = len(reward) // 2
        if max(reward[half:]) - reward[half] > FLAT_REL * _scale(reward):
            return []
        stuck = "the reward stopped improving"
    detail = f"entropy {entropy[0]:.3g} -> {late:.3g} nats (late mean) and {stuck}"
    return [_finding("entropy_collapse", detail, _ev("entropy", epochs, entropy))]


def _kl_blowup(ctx) -> list[Finding]:
    per_token = [
        (r["epoch"], r["kl"] / r["response_length"])
        for r in ctx["steps"]
        if r["kl"] is not None and r["response_length"] > 0
    ]
    if not per_token:
        return []
    _, late = _early_late([v for _, v in per_token])
    if late <= KL_PER_TOKEN_MAX:
        return []
    sums: dict[int, list[float]] = {}
    for epoch, value in per_token:
        sums.setdefault(epoch, []).append(value)
    epochs = sorted(sums)
    kl = [statistics.fmean(sums[e]) for e in epochs]
    detail = f"late KL {late:.3g} nats per token > {KL_PER_TOKEN_MAX} nats per token"
    return [_finding("kl_blowup", detail, _ev("kl per token (nats)", epochs, kl))]


def _held_at_reference(ctx) -> list[Finding]:
    """Gradients flow and the KL term is on, yet the policy never leaves its reference:
    entropy stays at its start, the KL stays near 0, the goal is not reached."""
    steps = ctx["steps"]
    logged = [r for r in steps if r["kl"] is not None and r["response_length"] > 0]
    if len(logged) < HELD_KL_LOGGED * len(steps) or ctx.get("zero_gradient"):
        return []
    epochs, entropy = _per_epoch(steps, "entropy")
    late_entropy = _early_late(entropy)[1]
    if entropy[0] <= 0 or late_entropy < HELD_ENTROPY_REL * entropy[0]:
        return []
    kl_epochs, kl = _per_epoch([{**r, "kl": r["kl"] / r["response_length"]} for r in logged], "kl")
    late_kl = _early_late(kl)[1]
    if late_kl > HELD_KL_PER_TOKEN:
        return []
    exact = ctx["exact"]
    if exact is not None:
        if exact["best"] >= PLATEAU_GOAL:
            return []
        goal = f"held-out exact-sort at most {exact['best']:.1%}"
    elif ctx["reward_moves"]:
        return []
    else:
        goal = "the reward barely moves"
    detail = (
        f"entropy {entropy[0]:.3g} -> {late_entropy:.3g} nats (late mean, "
        f"{late_entropy / entropy[0]:.0%} of its start) with the KL to the reference at "
        f"{late_kl:.2g} nats per token (late mean) and non-zero gradients, while {goal}"
    )
    return [
        _finding(
            "held_at_reference",
            detail,
            _ev("entropy", epochs, entropy),
            _ev("kl per token (nats)", kl_epochs, kl),
        )
    ]


def _clip(ctx) -> list[Finding]:
    reused = [r for r in ctx["steps"] if r["inner_step"] > 0 and r["clip_fraction"] is not None]
    if not reused or ctx.get("zero_gradient"):
        return []  # one step per batch: the ratio is 1 by construction; or nothing moves
    clip = [r["clip_fraction"] for r in reused]
    evidence = _ev("clip_fraction", *_per_epoch(reused, "clip_fraction"))
    if statistics.median(clip) >= CLIP_HIGH:
        detail = f"median clip fraction {statistics.median(clip):.2f} over {len(clip)} steps"
        return [_finding("clip_high", detail, evidence)]
    if len(clip) >= CLIP_ZERO_MIN_STEPS and max(clip) == 0:
        detail = f"clip fraction 0 at all {len(clip)} steps that reuse a batch"
        ratio_ev = _ev("ratio_mean", *_per_epoch(reused, "ratio_mean"))
        return [_finding("clip_zero", detail, evidence, ratio_ev)]
    return []


def _length_drift(ctx) -> list[Finding]:
    epochs, length = _per_epoch(ctx["steps"], "response_length")
    early, late = length[0], _early_late(length)[1]
    if early <= 0 or abs(late - early) < LENGTH_DRIFT_REL * early:
        return []
    exact = ctx["exact"]
    if exact is not None and exact["gain"] >= LENGTH_LEARNING_GAIN:
        return []
    detail = f"mean response length {early:.3g} -> {late:.3g} tokens ({late / early - 1:+.0%})"
    return [_finding("length_drift", detail, _ev("response_length", epochs, length))]


def _grad_spike(ctx) -> list[Finding]:
    steps = ctx["steps"]
    grad = [r["grad_norm"] for r in steps]
    median = statistics.median(grad)
    if len(grad) < 10 or median <= ZERO_GRAD or max(grad) < GRAD_SPIKE_REL * median:
        return []
    worst = max(steps, key=lambda r: r["grad_norm"])
    detail = (
        f"max grad_norm {worst['grad_norm']:.3g} (epoch {worst['epoch']}, step "
        f"{worst['step']}) = {worst['grad_norm'] / median:.0f} x the median {median:.3g}"
    )
    top = sorted(sorted(range(len(grad)), key=grad.__getitem__)[-5:])
    at = tuple(steps[i]["step"] for i in top)
    spikes = Evidence("grad_norm (the 5 largest)", at, tuple(grad[i] for i in top), "step")
    return [_finding("grad_spike", detail, spikes)]


def _plateau(ctx) -> list[Finding]:
    """The reward stopped improving and the goal was never reached (whatever the cause)."""
    reward = ctx["reward"]
    if len(reward) < PLATEAU_MIN_EPOCHS or ctx.get("zero_gradient"):
        return []  # a zero gradient has its own finding
    q = len(reward) // 4
    before, last = statistics.fmean(reward[-2 * q : -q]), statistics.fmean(reward[-q:])
    gain = (last - before) / _scale(reward)
    if gain > PLATEAU_GAIN_REL:
        return []
    evals = ctx["evals"]
    goals = {
        key: [r[key] for r in evals if r.get(key) is not None]
        for key in ("validation_exact_sort", "train_exact_sort")
    }
    goals = {k: v for k, v in goals.items() if v}
    if not goals or any(max(v) >= PLATEAU_GOAL for v in goals.values()):
        return []
    reached = ", ".join(f"{k} at most {max(v):.1%}" for k, v in goals.items())
    detail = (
        f"mean reward over the last {q} epochs {last:.3g} vs {before:.3g} over the {q} before "
        f"({gain:+.1%} of its largest |value|) while {reached} (goal {PLATEAU_GOAL:.0%})"
    )
    evidence = [_ev("mean_reward", ctx["epochs"], reward)]
    for key, values in goals.items():
        epochs = [r["epoch"] for r in evals if r.get(key) is not None]
        evidence.append(_ev(key, epochs, values))
    return [_finding("plateau", detail, *evidence)]


def _loss_near_zero(ctx) -> list[Finding]:
    if not ctx["reward_moves"] or ctx.get("zero_gradient"):
        return []
    median = statistics.median(abs(r["loss"]) for r in ctx["steps"])
    if median > LOSS_ZERO_REL * ctx["reward_move"]:
        return []
    detail = f"median |loss| {median:.2g} while the mean reward moved by {ctx['reward_move']:.3g}"
    reward_ev = _ev("mean_reward", ctx["epochs"], ctx["reward"])
    loss_ev = _ev("loss", *_per_epoch(ctx["steps"], "loss"))
    return [_finding("loss_near_zero", detail, reward_ev, loss_ev, severity="info")]


def warnings_only(findings: list[Finding]) -> list[Finding]:
    """The findings of severity 'warning' (drops the info notes).

    Taught in notebook 13.
    """
    return [f for f in findings if f.severity == "warning"]


if __name__ == "__main__":  # python -m pgrl_helpers.diagnose PATH: see trl_diagnose
    from pgrl_helpers.trl_diagnose import main

    raise SystemExit(main())
