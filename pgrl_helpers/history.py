"""The run's history: a list of dict records, every metric defined once in ``METRICS``.

``run_policy_gradient`` returns a ``History``: one ``"step"`` record per optimizer step
and one ``"eval"`` record per evaluation. ``history_columns`` turns the records of one
kind into columns for plotting.

What happened and what is running are kept apart: ``History`` holds the records and the
run's bookkeeping (config, stop reason, counts); ``Run`` (``history.run``) holds the
objects the loop works with and reads back (the policy, the frozen reference, the
advantage estimator, the held-out prompts), for a caller to inspect once the run is done.

Taught in notebook 07; also used in notebooks 08, 10, 12, 13.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._validate import check_choice

#: Every metric the history records, defined once (name -> one-line description).
METRICS: dict[str, str] = {
    "kind": "'step' (one optimizer step) or 'eval' (a held-out evaluation)",
    "epoch": "step: index of the epoch (0-based); eval: number of epochs completed",
    "step": "step: index of the optimizer step (0-based, over the run); eval: steps done",
    "inner_step": "index of the step within its epoch, 0 .. num_steps_per_epoch - 1",
    "loss": "the minimised loss: policy loss + kl_coef * KL - entropy_coef * entropy",
    "mean_reward": "mean reward of the epoch's sampled responses (all prompts, all G)",
    "kl": "KL(policy || reference) per response, by kl_estimator; None when kl_coef is 0",
    "clip_fraction": "loss modes that clip ('clipped', 'dual_clip'): fraction of real tokens whose "
    "gradient a clip cuts, ratio above 1 + epsilon_high with delta > 0 or below 1 - epsilon with "
    "delta < 0 ('dual_clip' also: delta < 0 and ratio above dual_clip_c); None for the modes that "
    "never cut a gradient (naive, unclipped, cispo, sapo, kl_cov)",
    "weight_clip_fraction": "'cispo' only: fraction of real tokens whose importance weight is "
    "clipped (ratio outside [1 - epsilon, 1 + epsilon_high]); their gradient is kept, only scaled",
    "frac_reward_zero_std": "fraction of prompt groups whose G rewards all tie (zero "
    "centred deltas: no gradient from that prompt); TRL's name",
    "entropy": "mean entropy (nats) of the policy over output positions of the epoch's prompts",
    "ratio_mean": "mean per-token ratio pi / pi_old over real tokens; pi_old is the policy that "
    "sampled the batch, except for the 'stale' source with off_policy_correction 'recompute', "
    "'tis' or 'mis', where it is the trainer's policy when the batch arrived",
    "grad_norm": "L2 norm of the gradient of the loss over all parameters",
    "response_length": "mean real tokens (mask 1, EOS included) per sampled response: "
    "prompt_length for the fixed-length sort; for 'tool_compare' the policy's own 3 of its 6 "
    "slots (5 with mask_tool_tokens False, the planted bug)",
    "responses_sampled": "number of responses sampled so far (epochs x prompts x G)",
    "validation_exact_sort": "fraction of VALIDATION prompts (held-out keys) answered exactly, "
    "greedy; the only number the stopping rule reads",
    "validation_mean_reward": "mean reward of the greedy responses on the validation prompts",
    "test_exact_sort": "fraction of TEST prompts (held-out keys, disjoint from validation) "
    "answered exactly, greedy; logged for reporting, never read by the stopping rule",
    "test_mean_reward": "mean reward of the greedy responses on the test prompts",
    "train_exact_sort": "fraction of the lecture's training prompts sorted greedily (else None)",
    "ess_fraction": "'stale' source: Kong's effective sample size of the weights pi_train / "
    "pi_sampler (tokens or sequences, by correction_level) over their count, in (0, 1]",
    "is_weight_max": "'stale' source: largest importance weight pi_train / pi_sampler",
    "is_cut_fraction": "'stale' source: fraction of weights above correction_cap or, when "
    "correction_cap_low is set, below it (TIS truncates them, MIS drops them)",
    "dynamic_sampling_draws": "dynamic sampling with dynamic_sampling_max_draws > 0: extra "
    "batches drawn this epoch to refill the non-tied groups",
    "dynamic_sampling_fill": "dynamic sampling with dynamic_sampling_max_draws > 0: non-tied "
    "groups kept / prompts per epoch (1: the batch was refilled)",
    "time_sampling": "profile_time: seconds this epoch spent drawing prompts and sampling "
    "(reference refresh included)",
    "time_reward": "profile_time: seconds scoring, filtering and computing deltas",
    "time_log_probs": "profile_time: seconds freezing old (and reference) log-probs",
    "time_optimizer": "profile_time: seconds in the epoch's optimizer steps",
    "time_evaluation": "profile_time: seconds in the held-out evaluation (0 if none ran)",
}

#: The phases of ``profile_time``, in loop order (each logged as ``time_<phase>``).
PHASES = ("sampling", "reward", "log_probs", "optimizer", "evaluation")

STEP_KEYS = (
    "kind",
    "epoch",
    "step",
    "inner_step",
    "loss",
    "mean_reward",
    "kl",
    "clip_fraction",
    "entropy",
    "ratio_mean",
    "grad_norm",
    "response_length",
    "frac_reward_zero_std",
)
#: Step keys present only in some runs: CISPO's weight clipping, the 'stale' source's
#: weights, the time profile.
OPTIONAL_STEP_KEYS = (
    "weight_clip_fraction",
    "ess_fraction",
    "is_weight_max",
    "is_cut_fraction",
    "dynamic_sampling_draws",
    "dynamic_sampling_fill",
    *(f"time_{phase}" for phase in PHASES),
)
EVAL_KEYS = (
    "kind",
    "epoch",
    "step",
    "responses_sampled",
    "validation_exact_sort",
    "validation_mean_reward",
    "train_exact_sort",
    "test_exact_sort",
    "test_mean_reward",
)


#: Why a run ended (``History.stop_reason``): all ``num_epochs`` done; validation reached
#: ``target_validation_exact_sort`` (and ``epochs_after_target`` more epochs ran); the
#: callback returned True or "stop".
STOP_REASONS = ("max_epochs", "target", "callback")

#: The metrics ``History.__repr__`` shows of the last step and the last evaluation.
REPR_STEP_KEYS = ("epoch", "mean_reward", "loss", "grad_norm")
REPR_EVAL_KEYS = ("epoch", "validation_exact_sort", "test_exact_sort")


@dataclass
class Run:
    """What is running: the objects the loop works with and reads back, one per run.

    ``model`` the policy being trained; ``ref_model`` the current frozen reference (None
    without a KL term); ``advantage_estimator`` the run's estimator object
    (``registry.build_estimator``; for 'gae' it holds the critic ``.critic`` and its
    per-epoch ``.value_losses``); ``validation_prompts`` int[n, prompt_pos] (the validation
    set, the only one the stopping rule reads); ``test_prompts`` int[n, prompt_pos] (the
    test set, disjoint from validation by key); ``train_prompts`` int[batch, prompt_pos]
    (the lecture prompts, or the last random batch); ``score_test`` (False: the held-out
    evaluations skip the test set, ``run_policy_gradient(..., score_test=False)``);
    ``optimizer``, ``generators`` ({'prompt', 'sample'}) and ``counters`` ({'step',
    'responses_sampled'}): what ``training.loop_state`` saves to resume a run. A finished
    run's are ``history.run.model``, ``history.run.validation_prompts``, ...
    """

    model: torch.nn.Module | None = None
    ref_model: torch.nn.Module | None = None
    advantage_estimator: object = None
    validation_prompts: torch.Tensor | None = None
    test_prompts: torch.Tensor | None = None
    train_prompts: torch.Tensor | None = None
    score_test: bool = True
    optimizer: object = None
    generators: dict | None = None
    counters: dict | None = None


class History(list):
    """What happened in a run: its records (a plain list of dicts) and its bookkeeping.

    Attributes: ``config``; ``run`` (a ``Run``: the model, the reference, the estimator
    and the prompt sets the loop used); ``ref_refresh_epochs`` (epochs at which the
    reference was refreshed); ``heldout_keys`` int64[2n] (the task's keys of the validation
    and test sets); ``num_train_prompts`` (prompts trained on, all epochs);
    ``train_prompts_with_heldout_key`` (how many of those had a held-out key: 0 by
    construction, counted so anyone can verify it); ``stop_reason`` (why the run ended: one
    of ``STOP_REASONS``, None while it runs); ``target_epoch`` (epochs done when validation
    first reached the target, or None). Its repr is a summary (record counts, stop reason,
    the last step's and the last evaluation's main metrics), not every record:
    ``list(history)`` has those.
    """

    def __init__(self, config, run: Run | None = None):
        super().__init__()
        self.config = config
        self.run = Run() if run is None else run
        self.ref_refresh_epochs: list[int] = []
        self.heldout_keys: torch.Tensor | None = None
        self.num_train_prompts = 0
        self.train_prompts_with_heldout_key = 0
        self.stop_reason: str | None = None
        #: epochs done when validation first reached ``target_validation_exact_sort`` (or None)
        self.target_epoch: int | None = None

    def __repr__(self) -> str:
        """'History(12 records: 10 steps, 2 evals; stop_reason='max_epochs'; last step ...)'."""
        steps, evals = self.steps(), self.evals()
        parts = [
            f"{len(self)} records: {len(steps)} steps, {len(evals)} evals",
            f"stop_reason={self.stop_reason!r}",
        ]
        for name, records, keys in (
            ("step", steps, REPR_STEP_KEYS),
            ("eval", evals, REPR_EVAL_KEYS),
        ):
            if records:
                shown = ", ".join(f"{k}={_short(records[-1].get(k))}" for k in keys)
                parts.append(f"last {name}: {shown}")
        return f"History({'; '.join(parts)})"

    def record_training_prompts(self, prompts: torch.Tensor, keys: torch.Tensor) -> None:
        """Count a training batch's prompts int[batch, prompt_pos] and those whose key is held
        out; the batch becomes ``run.train_prompts`` (the last one drawn)."""
        self.run.train_prompts = prompts
        self.num_train_prompts += prompts.shape[0]
        self.train_prompts_with_heldout_key += int(torch.isin(keys, self.heldout_keys).sum())

    def steps(self) -> list[dict]:
        """The step records."""
        return [r for r in self if r["kind"] == "step"]

    def evals(self) -> list[dict]:
        """The eval records."""
        return [r for r in self if r["kind"] == "eval"]

    def largest_drop_after_target(self, key: str = "validation_exact_sort") -> float | None:
        """Largest fall of ``key`` below its value when validation first reached the target.

        max over evaluations at or after ``target_epoch`` of (value at target - value); 0
        when it never fell, None when the target was never reached. With
        ``epochs_after_target`` = 0 the run stops at the target, so this is 0 by construction.
        """
        if self.target_epoch is None:
            return None
        after = [r[key] for r in self.evals() if r["epoch"] >= self.target_epoch]
        return max(after[0] - value for value in after)


def _short(value) -> str:
    """A metric for ``History.__repr__``: floats to 4 significant digits."""
    return f"{value:.4g}" if isinstance(value, float) else repr(value)


def history_columns(history: list[dict], kind: str = "step") -> dict[str, list]:
    """Records of one kind ('step' or 'eval') as columns: {metric name: list of values}.

    Handy for plotting without pandas: ``cols = history_columns(h, "eval");
    plt.plot(cols["epoch"], cols["validation_exact_sort"])``.

    Taught in notebook 07; also used in notebooks 08, 10, 13.
    """
    check_choice(kind, ("step", "eval"), "record kind")
    records = [r for r in history if r.get("kind") == kind]
    keys = STEP_KEYS if kind == "step" else EVAL_KEYS
    if kind == "step":
        keys += tuple(k for k in OPTIONAL_STEP_KEYS if any(k in r for r in records))
    return {key: [r.get(key) for r in records] for key in keys}


def per_epoch(history: list[dict], metric: str) -> list:
    """One value of a step metric per epoch: the value at each epoch's first optimizer step.

    Epoch-level metrics (``mean_reward``, ``response_length``, ``frac_reward_zero_std``) are
    the same at every inner step of an epoch; this picks them once. Raises ValueError for a
    name that is not a step metric.

    Taught in notebook 07; also used in notebook 08.
    """
    if metric not in STEP_KEYS:
        raise ValueError(
            f"unknown step metric {metric!r}; step metrics are: {', '.join(STEP_KEYS)}"
        )
    return [r[metric] for r in history if r.get("kind") == "step" and r["inner_step"] == 0]
