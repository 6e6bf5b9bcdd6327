"""diagnose(): every finding fires on a run with its planted cause and not on a healthy run.

Real runs (small SortTransformer, seconds each) for every finding; the length-drift and
memorisation cases add a constructed history for the direction a short real run cannot show.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch

from pgrl_helpers import diagnose as dg
from pgrl_helpers.config import TrainConfig
from pgrl_helpers.dedup_task import dedup_exact_reward
from pgrl_helpers.diagnose import CATALOGUE, Finding, diagnose, warnings_only
from pgrl_helpers.sort_task import exact_sort, sort_distance_reward_batch
from pgrl_helpers.training import run_policy_gradient

#: The healthy run: a small SortTransformer on random prompts of length 4, values 0-5.
HEALTHY = TrainConfig(
    model="transformer", prompt_source="random", prompt_length=4, vocab_size=6,
    embedding_dim=32, num_layers=2, num_heads=4, prompts_per_epoch=32, num_responses=8,
    num_epochs=20, num_steps_per_epoch=2, learning_rate=3e-3, eval_every=5,
    num_eval_prompts=30, reward_fn="sort_distance_reward", loss_mode="clipped",
    deltas_mode="centered_rewards",
)  # fmt: skip


def exact_sort_reward(prompts, responses):
    """1 for the exactly sorted response, else 0: float[batch, trial] (a sparse reward)."""
    return exact_sort(prompts, responses).float()


exact_sort_reward.vectorized = True


def flaky_reward(prompts, responses):
    """sort_distance_reward, except about 1 response in 1000 scores 1000 (a reward outlier)."""
    rewards = sort_distance_reward_batch(prompts, responses)
    weights = torch.tensor([7, 31, 131, 521])
    code = (responses.long() * weights).sum(-1) + (prompts.long() * weights.flip(0)).sum(-1)[
        :, None
    ]
    return torch.where(code % 997 == 0, torch.full_like(rewards, 1000.0), rewards)


flaky_reward.vectorized = True


def wrong_answer_penalty(prompts, responses, eos):
    """Notebook 08's length-bias probe: 0 for the exact answer, -1 for anything else."""
    return dedup_exact_reward(prompts, responses, eos) - 1.0


R = dataclasses.replace
#: finding -> (planted-cause config, healthy config of the same length).
PLANTED = {
    "frozen_ratio": (R(HEALTHY, detach_old_log_probs=False), HEALTHY),
    "tied_groups": (
        R(HEALTHY, prompt_length=6, vocab_size=10, reward_fn=exact_sort_reward, num_eval_prompts=100),
        R(HEALTHY, prompt_length=6, vocab_size=10, num_eval_prompts=100),
    ),
    "reward_hacking": (
        R(HEALTHY, num_epochs=40, reward_fn="sort_inclusion_ordering_reward"),
        R(HEALTHY, num_epochs=40),
    ),
    "entropy_collapse": (R(HEALTHY, learning_rate=1e-1), HEALTHY),
    "kl_blowup": (
        R(HEALTHY, kl_coef=0.01, compute_ref_model_period=1000),
        R(HEALTHY, kl_coef=0.1),
    ),
    "clip_high": (R(HEALTHY, epsilon=0.01), HEALTHY),
    "clip_zero": (R(HEALTHY, learning_rate=1e-4), HEALTHY),
    # seed 2: with seeds 0, 1 and 3 the policy learns to hit an outlier response on most
    # steps, so the median grad_norm itself is inflated and no step is a spike relative to it
    "grad_spike": (
        R(HEALTHY, reward_fn=flaky_reward, seed=2),
        R(HEALTHY, reward_fn=flaky_reward, deltas_mode="normalized_rewards", seed=2),
    ),
    "loss_near_zero": (HEALTHY, R(HEALTHY, deltas_mode="rewards", loss_mode="naive")),
    # the lecture's setup with raw rewards (notebook 07, the dashboard's stuck run)
    "plateau": (TrainConfig(num_epochs=30, deltas_mode="rewards"), HEALTHY),
}  # fmt: skip


_RUNS: dict[str, list] = {}


def run(config: TrainConfig):
    """run_policy_gradient, cached per config (several tests share the same runs)."""
    key = repr(config)
    if key not in _RUNS:
        _RUNS[key] = run_policy_gradient(config)
    return _RUNS[key]


def names(findings: list[Finding]) -> set[str]:
    return {f.name for f in findings}


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_finding_fires_on_planted_cause_and_not_on_healthy_run(name):
    planted, healthy = PLANTED[name]
    found = diagnose(run(planted))
    assert name in names(found), f"{name} missed its planted cause; got {names(found)}"
    finding = next(f for f in found if f.name == name)
    assert finding.evidence and all(len(e.epochs) == len(e.values) > 0 for e in finding.evidence)
    assert finding.causes and finding.fixes and finding.watch
    assert name not in names(diagnose(run(healthy))), f"{name} fired on a healthy run"


def test_healthy_run_has_no_warning_only_the_info_note():
    found = diagnose(run(HEALTHY))
    assert warnings_only(found) == [], [str(f) for f in found]
    assert names(found) <= {"loss_near_zero"}
    assert all(f.severity == "info" for f in found)


def test_freeze_bug_and_tied_groups_are_told_apart():
    frozen = names(diagnose(run(PLANTED["frozen_ratio"][0])))
    tied = names(diagnose(run(PLANTED["tied_groups"][0])))
    assert "frozen_ratio" in frozen and "tied_groups" not in frozen
    assert "tied_groups" in tied and "frozen_ratio" not in tied


def with_tied_fraction(history, value: float) -> list[dict]:
    records = copy.deepcopy(list(history))
    for r in records:
        if r["kind"] == "step":
            r["frac_reward_zero_std"] = value
    return records


def test_frac_reward_zero_std_decides_when_logged():
    # the freeze-bug run with the metric saying no group ties: still the freeze bug
    frozen = with_tied_fraction(run(PLANTED["frozen_ratio"][0]), 0.0)
    assert "frozen_ratio" in names(diagnose(frozen))
    # most (not all) groups tie: the groups that differ would still give a gradient
    mostly = with_tied_fraction(run(PLANTED["frozen_ratio"][0]), 0.75)
    assert "frozen_ratio" in names(diagnose(mostly))
    # the same zero-gradient run, but every group ties: now the ties explain it
    tied = with_tied_fraction(run(PLANTED["frozen_ratio"][0]), 1.0)
    assert names(diagnose(tied)) >= {"tied_groups"} and "frozen_ratio" not in names(diagnose(tied))
    # a slow but moving run where most groups tie and the reward is flat: tied_groups
    slow = with_tied_fraction(run(PLANTED["clip_zero"][0]), 0.8)
    for r in slow:
        if r["kind"] == "step":
            r["mean_reward"] = 0.5
    assert "tied_groups" in names(diagnose(slow))
    assert "tied_groups" not in names(diagnose(with_tied_fraction(run(HEALTHY), 0.8)))


def test_length_drift_from_sequence_mean_aggregation():
    config = TrainConfig(
        model="autoregressive", task="sort_dedup", prompt_source="random", prompt_length=4,
        vocab_size=6, max_response_length=10, embedding_dim=32, num_layers=2, num_heads=4,
        reward_fn=wrong_answer_penalty, deltas_mode="rewards", loss_mode="clipped",
        num_responses=8, prompts_per_epoch=16, num_epochs=8, num_steps_per_epoch=2,
        learning_rate=3e-3, eval_every=4, num_eval_prompts=10, loss_aggregation="sequence_mean",
    )  # fmt: skip
    history = run(config)
    assert "length_drift" in names(diagnose(history))
    # the same records with the length held at its first value: no drift
    steady = copy.deepcopy(list(history))
    for r in steady:
        if r["kind"] == "step":
            r["response_length"] = history[1]["response_length"] * (1 + 0.01 * (r["epoch"] % 3))
    assert "length_drift" not in names(diagnose(steady))


def test_memorisation_of_the_lecture_prompts_in_a_real_run():
    # notebook 07's tuned lecture model: sorts its 3 training prompts, no unseen ones
    config = TrainConfig(reward_fn="sort_distance_reward", loss_mode="clipped", learning_rate=1e-2)
    model = config.build_policy()
    with torch.no_grad():
        model.embedding.weight.mul_(0.3)  # notebook 07's high-entropy start
    history = run_policy_gradient(config, policy=model)
    assert history.evals()[-1]["train_exact_sort"] == 1.0
    found = [f for f in diagnose(history) if f.name == "reward_hacking"]
    assert found and "memorisation" in found[0].detail, [str(f) for f in diagnose(history)]
    # the proxy-hacking run has no training-prompt metric: it gets the other explanation
    hacked = [f for f in diagnose(run(PLANTED["reward_hacking"][0])) if f.name == "reward_hacking"]
    assert "memorisation" not in hacked[0].detail and "near the maximum" in hacked[0].detail


def test_memorisation_is_reported_as_reward_hacking_with_its_own_evidence():
    history = copy.deepcopy(list(run(HEALTHY)))
    evals = [r for r in history if r["kind"] == "eval"]
    for k, r in enumerate(evals):  # held-out flat, training prompts learnt
        r["validation_exact_sort"], r["validation_mean_reward"] = 0.03, 1.0
        r["train_exact_sort"] = min(1.0, k / 3)
    found = [f for f in diagnose(history) if f.name == "reward_hacking"]
    assert found and "memorisation" in found[0].detail
    assert found[0].evidence[0].metric == "train_exact_sort"


def test_every_catalogue_entry_is_reachable_and_the_table_lists_it():
    assert set(PLANTED) | {"tied_groups", "length_drift"} == set(CATALOGUE)
    table = dg.catalogue_table()
    for name in CATALOGUE:
        assert f"`{name}`" in table
    for trl_name in ("frac_reward_zero_std", "clip_ratio/region_mean", "completions/mean_length"):
        assert trl_name in table


def test_finding_prints_symptom_evidence_causes_and_fix():
    text = str(diagnose(run(PLANTED["frozen_ratio"][0]))[0])
    for part in ("[warning] frozen_ratio", "evidence:", "grad_norm by epoch", "likely causes:"):
        assert part in text
    assert "try:" in text and "detach" in text
    assert dg.format_findings([]).startswith("no findings")


@pytest.mark.parametrize(
    "history, error, words",
    [
        ([], ValueError, "history is empty"),
        ("not a history", TypeError, "history must be a list"),
        ([{"epoch": 0}], ValueError, "record 0 is not a dict with a 'kind'"),
        ([{"kind": "train"}], ValueError, "kind 'train'"),
        ([{"kind": "step", "epoch": 0}], ValueError, "lacks the metrics"),
        ([{"kind": "eval", "epoch": 0, "step": 0, "validation_exact_sort": 0.0,
           "validation_mean_reward": 0.0}], ValueError, "no 'step' records"),
    ],
)  # fmt: skip
def test_empty_or_malformed_history_raises_a_clear_error(history, error, words):
    with pytest.raises(error, match=words):
        diagnose(history)


def test_non_finite_metric_is_named():
    history = copy.deepcopy(list(run(HEALTHY)))
    history[3]["entropy"] = math.nan
    with pytest.raises(ValueError, match="record 3: metric 'entropy' must be a finite number"):
        diagnose(history)
    history = copy.deepcopy(list(run(HEALTHY)))
    history[0]["train_exact_sort"] = "all"  # an eval record
    with pytest.raises(ValueError, match="record 0: metric 'train_exact_sort'"):
        diagnose(history)


def test_the_lecture_stuck_run_is_not_called_healthy():
    """3 of 5 reward and nothing sorted must not get 'no findings'."""
    history = run(PLANTED["plateau"][0])
    assert history.evals()[-1]["train_exact_sort"] == 0.0
    text = dg.format_findings(diagnose(history))
    assert "looks healthy" not in text and "plateau" in text


def clear_hacking_history(reward_max_in_config: bool):
    """A loophole run as the issue describes it: held-out reward 3.9 -> 6.4 of 7 (still
    rising at the end), held-out exact-sort ends at 0%."""
    history = copy.deepcopy(list(run(HEALTHY)))
    evals = [r for r in history if r["kind"] == "eval"]
    proxy = [3.9 + (6.4 - 3.9) * k / (len(evals) - 1) for k in range(len(evals))]
    for r, p in zip(evals, proxy):
        r["validation_mean_reward"], r["validation_exact_sort"] = p, 0.0
    return history


def test_reward_hacking_fires_on_the_clear_case_with_a_known_maximum():
    history = clear_hacking_history(True)
    assert "reward_hacking" in names(diagnose(history, reward_max=7))
    # without the maximum the proxy must plateau first, and it is still rising here
    assert "reward_hacking" not in names(diagnose(history))
    # the same numbers on a 4-point reward would be above its maximum: sort_distance is
    # maximal only when sorted, so 6.4 of 7 is the loophole's signature, not a healthy run's
    healthy = diagnose(run(HEALTHY), reward_max=4)
    assert "reward_hacking" not in names(healthy)


def test_reward_max_comes_from_the_run_config():
    hacked = run(PLANTED["reward_hacking"][0])
    assert hacked.config.reward_fn == "sort_inclusion_ordering_reward"
    assert names(diagnose(hacked)) == names(diagnose(hacked, reward_max=7))
    with pytest.raises(ValueError, match="reward_max must be > 0"):
        diagnose(hacked, reward_max=0)
    with pytest.raises(ValueError, match="reward_max must be a finite number"):
        diagnose(hacked, reward_max=math.inf)
