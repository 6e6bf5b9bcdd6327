"""Checker: a training configuration that reaches the held-out target."""

from __future__ import annotations

from collections.abc import Callable

from ._core import (
    _call,
    _Failed,
    _run,
)

# --------------------------------------------------------------------------------------
# Exercise: pick a training configuration that reaches a held-out target
# --------------------------------------------------------------------------------------

#: The training exercise: greedy exact-sort rate on the held-out prompts to reach ...
TRAINING_TARGET = 0.8
#: ... within this many sampled responses (epochs x prompts per epoch x G).
TRAINING_BUDGET = 20_000
#: The task is fixed: the lecture's prompt length and vocabulary, and the default held-out set.
TRAINING_TASK = {"prompt_length": 3, "vocab_size": 5, "eval_seed": 12345, "num_eval_prompts": None}

_training_cache: dict[str, tuple[float, int, str]] = {}


def _training_outcome(config) -> tuple[float, int, str]:
    """(best held-out exact-sort, responses sampled when reached/at the end, stop reason)."""
    from ..training import run_policy_gradient

    key = repr(config)
    if key not in _training_cache:
        history = run_policy_gradient(config)
        evals = history.evals()
        best = max(evals, key=lambda r: r["heldout_exact_sort"])
        _training_cache[key] = (
            best["heldout_exact_sort"],
            best["responses_sampled"],
            str(history.stop_reason),
        )
    return _training_cache[key]


def check_training_config(fn: Callable, *, seed: int | None = None, strict: bool = False):
    """fn() -> TrainConfig whose run reaches TRAINING_TARGET held-out greedy exact-sort
    within TRAINING_BUDGET sampled responses. ``seed`` replaces the config's seed when given
    (the hidden test reruns the config with another seed). Results are cached per config."""
    from dataclasses import replace

    from ..training import TrainConfig

    def diagnose() -> str:
        config = _call(fn)
        if not isinstance(config, TrainConfig):
            raise _Failed(f"my_config() returned {type(config).__name__}, expected a TrainConfig")
        for name, value in TRAINING_TASK.items():
            if getattr(config, name) != value:
                raise _Failed(
                    f"the task and the held-out set are fixed: leave {name} at {value!r} "
                    f"(got {getattr(config, name)!r})"
                )
        try:
            config.validate()
        except (TypeError, ValueError) as err:
            raise _Failed(f"the config is invalid: {err}") from err
        budget = config.num_epochs * config.batch_prompts * config.num_responses
        if budget > TRAINING_BUDGET:
            raise _Failed(
                f"over budget: num_epochs x prompts per epoch x num_responses = "
                f"{config.num_epochs} x {config.batch_prompts} x {config.num_responses} = "
                f"{budget:,} sampled responses, more than {TRAINING_BUDGET:,}"
            )
        run = replace(config, target_heldout_exact_sort=TRAINING_TARGET, progress=False)
        if seed is not None:
            run = replace(run, seed=config.seed + seed)
        best, responses, _ = _training_outcome(run)
        seed_note = "" if seed is None else f" (rerun with seed {run.seed})"
        if best >= TRAINING_TARGET:
            return (
                f"held-out greedy exact-sort {best:.0%} >= {TRAINING_TARGET:.0%} after "
                f"{responses:,} sampled responses (budget {TRAINING_BUDGET:,}){seed_note}"
            )
        hints = []
        if config.model == "lecture":
            hints.append(
                "the lecture's model decodes every position from one linear code and cannot "
                "represent sorting: try model='transformer'"
            )
        if config.prompt_source == "lecture":
            hints.append(
                "prompt_source='lecture' trains on 3 prompts only, which teaches 3 answers, "
                "not sorting: try 'random'"
            )
        if not config.detach_old_log_probs and config.loss_mode != "naive":
            hints.append(
                "detach_old_log_probs=False is the freeze pitfall: the ratio has no gradient"
            )
        raise _Failed(
            f"best held-out greedy exact-sort was {best:.0%}, below the target "
            f"{TRAINING_TARGET:.0%}{seed_note}"
            + (
                "; " + "; ".join(hints)
                if hints
                else "; try more epochs, a larger group or another learning rate"
            )
        )

    return _run("my_config", diagnose, strict)
