"""The capstone's diagnosis rules: what each cause's symptom looks like in a history.

``_facts`` reads a history at one epoch (``by_epoch``: {epoch: its step records}); each
``_rule_*`` says whether those facts show its cause's symptom (None) or what they show instead.
``checks/capstone.py`` states the same rules in words (``CAUSES``) and applies them in
``check_diagnosis``. Kept apart from capstone.py only for its length.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

#: The metrics a diagnosis may cite: logged per optimizer step, or per evaluation.
STEP_METRICS = ("entropy", "grad_norm", "frac_reward_zero_std", "mean_reward", "ratio_mean", "kl")
EVAL_METRICS = ("validation_exact_sort", "train_exact_sort")


def _mean(records: list[dict], key: str):
    values = [r.get(key) for r in records]
    return None if any(v is None for v in values) else statistics.fmean(values)


def _facts(history, by_epoch: dict, metric: str, epoch: int, vocab_size: int) -> dict:
    """What the rules read at ``epoch``: for a step metric the steps of that epoch, for an
    eval metric (epoch = epochs completed) the steps of the last epoch completed."""
    steps = [r for k in sorted(by_epoch) for r in by_epoch[k]]
    e = epoch if metric in STEP_METRICS else max(0, min(epoch - 1, max(by_epoch)))
    here = by_epoch[e]
    upto = [r for r in steps if r["epoch"] <= e]
    evals = [r for r in history.evals() if r["epoch"] <= e + 1]
    first5 = [r for r in steps if r["epoch"] < 5]
    last5 = [r for r in steps if e - 4 <= r["epoch"] <= e]
    entropy0 = steps[0]["entropy"]
    return {
        "epoch": epoch,
        "step_epoch": e,
        "entropy": _mean(here, "entropy"),
        "entropy0": entropy0,
        "entropy_kept": _mean(here, "entropy") / entropy0 if entropy0 > 0 else 0.0,
        "vocab_size": vocab_size,
        "entropy_max": math.log(vocab_size),
        "entropy_steady": all(
            abs(_mean(by_epoch[k], "entropy") - entropy0) <= 0.01 * entropy0
            for k in by_epoch
            if k <= e
        ),
        "grad": _mean(here, "grad_norm"),
        "grad0": steps[0]["grad_norm"],
        "grad_zero_since_start": all(r["grad_norm"] == 0.0 for r in upto),
        "ratio_one_since_start": all(abs(r["ratio_mean"] - 1.0) <= 1e-6 for r in upto),
        "ties": _mean(here, "frac_reward_zero_std"),
        "kl_logged": all(r.get("kl") is not None for r in here),
        "reward_rise": _mean(last5, "mean_reward") - _mean(first5, "mean_reward"),
        "validation": evals[-1]["validation_exact_sort"] if evals else 0.0,
        "train_exact_sort": evals[-1].get("train_exact_sort") if evals else None,
        "stop_reason": history.stop_reason,
    }


def _pct(x: float) -> str:
    return f"{x:.1%}" if x < 0.1 else f"{x:.0%}"


#: cause -> (the metrics its evidence may cite, rule(facts, metric) -> None when the history
#: shows the symptom at that epoch, else what it shows instead)
def _rule_lr(f, metric):
    if f["entropy_kept"] > 0.1:
        return f"entropy there is {_pct(f['entropy_kept'])} of its start, not below 10%"
    if f["validation"] >= 0.5:
        return f"validation exact-sort is already {f['validation']:.0%}: a policy that sorts"
    if metric == "frac_reward_zero_std" and f["ties"] < 0.9:
        return f"frac_reward_zero_std there is {f['ties']:.2f}, below 0.9"
    if metric == "grad_norm" and f["grad"] > 0.01 * f["grad0"]:
        return f"grad_norm there is {f['grad']:.3g}, above 1% of its start ({f['grad0']:.3g})"
    return None


def _rule_detach(f, metric):
    if not f["grad_zero_since_start"]:
        return (
            "grad_norm is not exactly 0 at every step from the first one "
            f"(the first step's is {f['grad0']:.3g})"
        )
    if metric == "ratio_mean" and not f["ratio_one_since_start"]:
        return "ratio_mean is not exactly 1 at every step from the first one"
    if metric == "entropy" and not f["entropy_steady"]:
        return "entropy leaves 1% of its start at some epoch up to this one"
    return None


def _rule_kl(f, metric):
    if not f["kl_logged"]:
        return "the kl column is not logged (None): there is no KL penalty in the loss"
    if f["epoch"] < 10:
        return f"epoch {f['epoch']} is too early to say the policy is held: name epoch 10 or later"
    if not f["grad"] > 0:
        return "grad_norm is 0 there: nothing pulls, so nothing is held back"
    if f["entropy_kept"] < 0.9:
        return f"entropy there is {_pct(f['entropy_kept'])} of its start: the policy has moved"
    if f["validation"] >= 0.2:
        return f"validation exact-sort is already {f['validation']:.0%}"
    return None


def _rule_entropy_bonus(f, metric):
    if f["kl_logged"]:
        return "a KL penalty is logged (kl is not None), which holds entropy near its start too"
    if not f["grad"] > 0:
        return "grad_norm is 0 there: no bonus pushes anything"
    if f["entropy"] < 0.9 * f["entropy_max"] or f["entropy"] < f["entropy0"]:
        return (
            f"entropy there is {f['entropy']:.3g} nats, not pushed up to 90% of ln "
            f"{f['vocab_size']} = {f['entropy_max']:.3g} and above its start "
            f"({f['entropy0']:.3g})"
        )
    return None


def _rule_representation(f, metric):
    if f["epoch"] < 20:
        return f"epoch {f['epoch']} is too early for a plateau: name epoch 20 or later"
    if f["reward_rise"] < 0.3:
        return f"the mean reward has risen only {f['reward_rise']:+.2f} over its first 5 epochs"
    if f["entropy_kept"] >= 0.9:
        return f"entropy is still {_pct(f['entropy_kept'])} of its start: nothing was learned"
    if f["ties"] >= 0.5 or not f["grad"] > 0:
        return "the groups tie and the gradient is gone: that is not a model learning a shortcut"
    if f["validation"] >= 0.5:
        return f"validation exact-sort is {f['validation']:.0%}"
    return None


def _rule_group(f, metric):
    if f["ties"] < 0.3:
        return f"frac_reward_zero_std there is {f['ties']:.2f}, below 0.3"
    if f["entropy_kept"] < 0.5:
        return (
            f"those ties come with entropy at {_pct(f['entropy_kept'])} of its start: a policy "
            "that answers the same way every time ties any group, however large"
        )
    if not f["grad"] > 0:
        return "grad_norm is 0 there"
    return None


def _rule_budget(f, metric):
    if f["validation"] < 0.3:
        return f"validation exact-sort is {f['validation']:.0%} there: learning is not proceeding"
    if f["stop_reason"] == "target":
        return "the run reached its stop"
    return None


def _rule_three_prompts(f, metric):
    if f["train_exact_sort"] is None:
        return "train_exact_sort is not logged (None): the run did not train on the lecture's 3"
    if f["train_exact_sort"] < 0.5 or f["validation"] >= 0.2:
        return "train_exact_sort is below 50% or validation is 20% or more"
    return None


_RULES: dict[str, tuple[tuple[str, ...], Callable]] = {
    "learning_rate_too_high": (("entropy", "frac_reward_zero_std", "grad_norm"), _rule_lr),
    "old_log_probs_not_detached": (("grad_norm", "ratio_mean", "entropy"), _rule_detach),
    "kl_penalty_too_strong": (("kl", "entropy", "validation_exact_sort"), _rule_kl),
    "entropy_bonus_too_strong": (("entropy",), _rule_entropy_bonus),
    "policy_cannot_represent_sorting": (
        ("mean_reward", "validation_exact_sort"),
        _rule_representation,
    ),
    "group_too_small": (("frac_reward_zero_std",), _rule_group),
    "budget_too_small": (("validation_exact_sort",), _rule_budget),
    "trains_on_three_prompts": (("train_exact_sort",), _rule_three_prompts),
}
