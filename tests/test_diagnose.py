"""diagnose(): every finding fires on a run with its planted cause and not on a healthy run.

Real runs (small SortTransformer, seconds each) for every finding; the length-drift and
memorisation cases add a constructed history for the direction a short real run cannot show.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re

import pytest
import torch

from pgrl_helpers import diagnose as dg
from pgrl_helpers.config import TrainConfig
from pgrl_helpers.dedup_task import dedup_exact_reward
from pgrl_helpers.diagnose import (
    CATALOGUE,
    Evidence,
    Finding,
    diagnose,
    format_findings,
    warnings_only,
)
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
    """sort_distance_reward, except about 1 response in 300 scores 1000 (a reward outlier;
    1 in 316 over uniformly drawn prompts and responses, as ``symptoms.flaky_reward``)."""
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
    # the capstone's run A, shorter: beta 1 holds the policy at its reference (issue 39)
    "held_at_reference": (R(HEALTHY, kl_coef=1.0), R(HEALTHY, kl_coef=0.1)),
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
    with pytest.raises(
        ValueError, match="^reward_max must be a positive finite number or None, got 0$"
    ):
        diagnose(hacked, reward_max=0)
    with pytest.raises(
        ValueError, match="^reward_max must be a positive finite number or None, got inf$"
    ):
        diagnose(hacked, reward_max=math.inf)


# --- mutants ---
# Every rule at its thresholds, on constructed histories (tests/MUTATION.md).
#
# The tests above show each finding on a real run; these tests build the records by
# hand (no training, milliseconds) so that each threshold is hit exactly: a rule fires AT its
# documented bound and not just past it (or the other way round, as the module documents),
# each finding's detail and evidence are pinned, and every history error is matched from
# its start so that it names the record and the metric.


DEFAULT = dict(
    loss=1.0, mean_reward=0.5, kl=None, clip_fraction=0.1, entropy=1.0, ratio_mean=1.0,
    grad_norm=1.0, response_length=5.0,
)  # fmt: skip


def steps(n: int, inner: int = 1, **columns) -> list[dict]:
    """n epochs of ``inner`` step records; a column is a constant, a per-epoch list (n) or a
    per-step list (n * inner)."""
    records = []
    for epoch in range(n):
        for i in range(inner):
            k = epoch * inner + i
            record = {"kind": "step", "epoch": epoch, "step": k, "inner_step": i}
            for key, value in {**DEFAULT, **columns}.items():
                if isinstance(value, list):
                    value = value[k] if len(value) == n * inner and inner > 1 else value[epoch]
                record[key] = value
            records.append(record)
    return records


def evals(exact, proxy=None, train=None, epochs=None) -> list[dict]:
    out = []
    for k, value in enumerate(exact):
        record = {
            "kind": "eval", "epoch": k if epochs is None else epochs[k], "step": k,
            "validation_exact_sort": value,
            "validation_mean_reward": 0.0 if proxy is None else proxy[k],
        }  # fmt: skip
        if train is not None:
            record["train_exact_sort"] = train[k]
        out.append(record)
    return out


def finding_names(history) -> list[str]:
    return [f.name for f in diagnose(history)]


def only(history, name) -> Finding:
    found = [f for f in diagnose(history) if f.name == name]
    assert len(found) == 1, [str(f) for f in diagnose(history)]
    return found[0]


def test_a_quiet_history_has_no_finding():
    assert diagnose(steps(8)) == []
    assert diagnose(tuple(steps(8, inner=2))) == []  # a tuple is a history too


# ---- zero gradient: frozen ratio or tied groups ---------------------------------------


def test_zero_gradient_with_the_same_reward_is_tied_groups():
    f = only(steps(10, grad_norm=0.0), "tied_groups")
    assert f.detail == (
        "10 of 10 steps have grad_norm <= 1e-10 and ratio 1; the same mean reward (0.5) every epoch"
    )
    assert [e.metric for e in f.evidence] == ["mean_reward", "grad_norm", "ratio_mean"]
    assert f.evidence[1] == Evidence("grad_norm", (0, 2, 4, 5, 7, 9), (0.0,) * 6)
    assert f.severity == "warning" and finding_names(steps(10, grad_norm=0.0)) == ["tied_groups"]


def test_zero_gradient_counts_at_the_bounds():
    # grad_norm == ZERO_GRAD is zero; 9 of 10 zero steps (exactly 90 %) are enough
    grads = [1e-10] * 9 + [1.0]
    rewards = [0.1 * k for k in range(10)]
    f = only(steps(10, grad_norm=grads, mean_reward=rewards), "frozen_ratio")
    assert f.detail == (
        "9 of 10 steps have grad_norm <= 1e-10 and ratio 1; the reward varies between epochs, "
        "so groups are not all tied"
    )
    assert finding_names(steps(10, grad_norm=[0.0] * 8 + [1.0] * 2)) == []
    assert "frozen_ratio" not in finding_names(
        steps(10, grad_norm=[2e-10] * 10, mean_reward=rewards)
    )
    assert [e.metric for e in f.evidence] == ["mean_reward", "grad_norm", "ratio_mean"]


def test_ratio_one_needs_90_percent_of_the_zero_steps():
    rewards = [0.1 * k for k in range(10)]
    nine = [1.0] * 9 + [1.5]
    assert "frozen_ratio" in finding_names(
        steps(10, grad_norm=0.0, ratio_mean=nine, mean_reward=rewards)
    )
    eight = [1.0] * 8 + [1.5] * 2
    assert finding_names(steps(10, grad_norm=0.0, ratio_mean=eight, mean_reward=rewards)) == []
    near = [1 + 5e-7] * 10  # within RATIO_ONE_TOL = 1e-6
    assert "frozen_ratio" in finding_names(
        steps(10, grad_norm=0.0, ratio_mean=near, mean_reward=rewards)
    )
    below = [1 - 5e-7] * 10
    assert "frozen_ratio" in finding_names(
        steps(10, grad_norm=0.0, ratio_mean=below, mean_reward=rewards)
    )
    far = [1 + 2e-6] * 10
    assert finding_names(steps(10, grad_norm=0.0, ratio_mean=far, mean_reward=rewards)) == []


def test_low_entropy_explains_a_zero_gradient_only_below_001_nats():
    rewards = [0.1 * k for k in range(10)]
    f = only(steps(10, grad_norm=0.0, mean_reward=rewards, entropy=0.0099), "tied_groups")
    assert f.detail.endswith("; entropy < 0.01 nats: one response per prompt")
    assert "frozen_ratio" in finding_names(
        steps(10, grad_norm=0.0, mean_reward=rewards, entropy=0.01)
    )


def test_rewards_count_as_the_same_to_9_decimals():
    tiny = [0.1, 0.1 + 2e-10] * 5  # the same to 9 decimals, not to 10
    assert finding_names(steps(10, grad_norm=0.0, mean_reward=tiny)) == ["tied_groups"]
    apart = [0.1, 0.1 + 2e-9] * 5
    assert finding_names(steps(10, grad_norm=0.0, mean_reward=apart)) == ["frozen_ratio"]


def test_logged_tie_fraction_decides_at_099():
    rewards = [0.1 * k for k in range(10)]
    tied = steps(10, grad_norm=0.0, mean_reward=rewards, frac_reward_zero_std=0.99)
    f = only(tied, "tied_groups")
    assert f.detail.endswith("; mean frac_reward_zero_std 0.99")
    assert finding_names(tied) == ["tied_groups"]
    # every group ties and the reward is flat: reported once, not again by _tied_fraction
    assert finding_names(steps(10, grad_norm=0.0, frac_reward_zero_std=1.0)) == ["tied_groups"]
    most = steps(10, grad_norm=0.0, mean_reward=0.5, frac_reward_zero_std=0.98)
    f = only(most, "frozen_ratio")
    assert f.detail.endswith("; only 98% of groups tie on average")
    assert finding_names(most) == ["frozen_ratio", "tied_groups"]  # flat reward, most groups tie
    # a None fraction is not logged: the reward decides
    unlogged = steps(10, grad_norm=0.0, mean_reward=0.5, frac_reward_zero_std=None)
    assert only(unlogged, "tied_groups").detail.endswith("the same mean reward (0.5) every epoch")


def test_zero_gradient_silences_clip_and_loss_notes():
    # reused batches with clip fraction 0, and a reward that moves while the loss is 0
    rewards = [0.1 * k for k in range(10)]
    history = steps(10, inner=2, grad_norm=0.0, clip_fraction=0.0, loss=0.0, mean_reward=rewards)
    assert finding_names(history) == ["frozen_ratio"]


# ---- tied fraction --------------------------------------------------------------------


def test_tied_fraction_at_its_bounds():
    flat = steps(8, frac_reward_zero_std=0.5)
    f = only(flat, "tied_groups")
    assert f.detail == "on average 50% of groups tie and the reward is flat"
    assert [e.metric for e in f.evidence] == ["frac_reward_zero_std", "mean_reward"]
    assert finding_names(steps(8, frac_reward_zero_std=0.49)) == []
    # the reward "moves" at exactly FLAT_REL x its scale: 20 -> 19 is 0.05 x 20
    moving = steps(8, frac_reward_zero_std=0.8, mean_reward=[20.0] * 2 + [19.5] * 4 + [19.0] * 2)
    assert finding_names(moving) == []
    still = steps(8, frac_reward_zero_std=0.8, mean_reward=[20.0] * 2 + [19.5] * 4 + [19.1] * 2)
    assert finding_names(still) == ["tied_groups"]


def test_a_solved_run_may_tie():
    history = steps(8, frac_reward_zero_std=0.8) + evals([0.5, 0.7, 0.9, 0.9])
    assert "tied_groups" not in finding_names(history)
    history = steps(8, frac_reward_zero_std=0.8) + evals([0.5, 0.7, 0.89, 0.89])
    assert "tied_groups" in finding_names(history)


# ---- reward hacking -------------------------------------------------------------------


def test_memorisation_at_a_train_gain_of_exactly_03():
    history = steps(8) + evals([0.05, 0.04, 0.0, 0.05], train=[0.0, 0.1, 0.2, 0.3])
    f = only(history, "reward_hacking")
    assert f.detail == (
        "train exact-sort 0% -> 30% while held-out exact-sort stays at 5.0%: memorisation "
        "of the training prompts"
    )
    assert f.evidence == (
        Evidence("train_exact_sort", (0, 1, 2, 3), (0.0, 0.1, 0.2, 0.3)),
        Evidence("validation_exact_sort", (0, 1, 2, 3), (0.05, 0.04, 0.0, 0.05)),
    )
    less = steps(8) + evals([0.05, 0.04, 0.0, 0.05], train=[0.0, 0.1, 0.2, 0.29])
    assert "reward_hacking" not in finding_names(less)
    gain = steps(8) + evals([0.05, 0.04, 0.0, 0.05], train=[0.2, 0.3, 0.4, 0.45])
    assert "reward_hacking" not in finding_names(gain)  # a gain of 0.25, from a start above 0


def test_stall_is_a_gain_of_at_most_005_over_the_second_half():
    train = [0.0, 0.1, 0.2, 0.5]
    assert "reward_hacking" in finding_names(steps(8) + evals([0.05, 0.04, 0.0, 0.05], train=train))
    moving = steps(8) + evals([0.05, 0.05, 0.0, 0.0625], train=train)
    assert "reward_hacking" not in finding_names(moving)
    # half = len // 2: with 5 evaluations the second half starts at index 2
    five = steps(8) + evals([0.0, 0.3, 0.3, 0.3, 0.35], train=[0.0, 0, 0, 0, 0.5])
    assert "reward_hacking" in finding_names(five)
    solved = steps(8) + evals([0.9, 0.05, 0.0, 0.05], train=train)
    assert "reward_hacking" not in finding_names(solved)
    nearly = steps(8) + evals([0.89, 0.05, 0.0, 0.05], train=train)
    assert "reward_hacking" in finding_names(nearly)


def test_two_evaluations_are_not_enough():
    assert finding_names(steps(8) + evals([0.05, 0.05], train=[0.0, 0.9])) == []
    # evaluations without a held-out exact-sort are skipped, not counted
    assert dg._exact_progress(evals([0.05, None, 0.05])) is None
    progress = dg._exact_progress(evals([0.0, None, 0.1, 0.05], epochs=[0, 2, 4, 6]))
    assert progress == {
        "epochs": [0, 4, 6], "exact": [0.0, 0.1, 0.05], "best": 0.1, "stalled": True,
        "gain": 0.05,
    }  # fmt: skip


def test_proxy_hacking_gain_and_plateau_bounds():
    exact = [0.05, 0.04, 0.0, 0.05]
    f = only(steps(8) + evals(exact, proxy=[0.0, 0.5, 0.98, 1.0]), "reward_hacking")
    assert f.detail == (
        "held-out mean reward 0 -> 1 while held-out exact-sort stalls at 5.0% (best 5.0%): "
        "the proxy rises on unseen prompts too, the goal does not"
    )
    assert f.evidence[0] == Evidence("validation_mean_reward", (0, 1, 2, 3), (0.0, 0.5, 0.98, 1.0))
    # the gain is measured to the last evaluation (0.26 >= 0.25 x 1; to the one before: 0.24)
    late_gain = steps(8) + evals(exact, proxy=[-1.0, -0.8, -0.76, -0.74])
    assert [n for n in finding_names(late_gain) if n != "plateau"] == ["reward_hacking"]
    assert f.evidence[1].metric == "validation_exact_sort"
    # gain exactly PROXY_GAIN_REL x scale (0.25 x 4 = 1) is enough; 0.99 is not
    assert "reward_hacking" in finding_names(steps(8) + evals(exact, proxy=[3.0, 3.5, 4.0, 4.0]))
    assert "reward_hacking" not in finding_names(
        steps(8) + evals(exact, proxy=[3.01, 3.5, 4.0, 4.0])
    )
    # a second-half gain of exactly FLAT_REL x scale (0.05 x 20 = 1) is no plateau
    assert "reward_hacking" not in finding_names(
        steps(8) + evals(exact, proxy=[0.0, 10.0, 19.0, 20.0])
    )
    assert "reward_hacking" in finding_names(steps(8) + evals(exact, proxy=[0.0, 10.0, 19.5, 20.0]))
    # one missing proxy value: no proxy verdict; a missing train value: no memorisation one
    assert "reward_hacking" not in finding_names(
        steps(8) + evals(exact, proxy=[0.0, None, 1.0, 1.0])
    )
    partial = evals(exact, proxy=[0.0, 0.5, 1.0, 1.0], train=[0.0, None, 0.5, 0.9])
    assert "proxy rises" in only(steps(8) + partial, "reward_hacking").detail


def test_proxy_hacking_with_a_known_maximum_at_its_bounds():
    # proxy 0.3 -> 0.8 of a maximum of 1: gain 0.5/0.8 >= 0.25; frac 0.8 = HACK_PROXY_FRAC
    gap = round(0.8 - dg.HACK_GAP, 10)  # exact-sort exactly HACK_GAP below the fraction
    base = steps(8) + evals([0.0, 0.1, 0.2, gap], proxy=[0.3, 0.5, 0.7, 0.8])
    assert "reward_hacking" not in finding_names(base)  # without a maximum: the proxy must flatten
    hit = [x for x in diagnose(base, reward_max=1.0) if x.name == "reward_hacking"]
    assert hit and hit[0].detail == (
        "held-out mean reward 0.3 -> 0.8 (80% of its maximum 1) while held-out exact-sort ends "
        f"at {gap:.1%} (best {gap:.1%}): unseen prompts score near the maximum without being "
        "sorted"
    )
    above = steps(8) + evals([0.0, 0.1, 0.2, gap + 0.001], proxy=[0.3, 0.5, 0.7, 0.8])
    assert "reward_hacking" not in [x.name for x in diagnose(above, reward_max=1.0)]
    low = steps(8) + evals([0.0, 0.1, 0.2, 0.0], proxy=[0.3, 0.5, 0.7, 0.799])
    assert "reward_hacking" not in [x.name for x in diagnose(low, reward_max=1.0)]
    small_gain = steps(8) + evals([0.0, 0.0, 0.0, 0.0], proxy=[0.61, 0.7, 0.75, 0.8])
    assert "reward_hacking" not in [x.name for x in diagnose(small_gain, reward_max=1.0)]
    solved = steps(8) + evals([0.0, 0.5, 0.9, 0.0], proxy=[0.3, 0.5, 0.7, 0.8])
    assert "reward_hacking" not in [x.name for x in diagnose(solved, reward_max=1.0)]


def test_reward_max_is_validated():
    history = steps(8) + evals([0.0, 0.0, 0.0, 0.0])
    for bad in (0, -1.0, float("nan"), "7"):
        with pytest.raises(ValueError, match="reward_max must be"):
            diagnose(history, reward_max=bad)


# ---- plateau ------------------------------------------------------------------------------


def test_plateau_at_its_gain_goal_and_length_bounds():
    # 8 epochs: quarters of 2; reward 1 then late gain exactly PLATEAU_GAIN_REL x max |reward|
    g = dg.PLATEAU_GAIN_REL * 2.0
    reward = [0.0, 0.5, 1.0, 1.5, 2.0 - g, 2.0 - g, 2.0, 2.0]
    stuck = evals([0.0, 0.1, dg.PLATEAU_GOAL - 0.01, 0.2], train=[0.0, 0.0, 0.1, 0.1])
    f = only(steps(8, mean_reward=reward) + stuck, "plateau")
    assert f.detail.startswith("mean reward over the last 2 epochs 2 vs ")
    assert (
        "validation_exact_sort at most 49.0%" in f.detail
        and "train_exact_sort at most 10.0%" in f.detail
    )
    assert [e.metric for e in f.evidence] == [
        "mean_reward",
        "validation_exact_sort",
        "train_exact_sort",
    ]
    more = [0.0, 0.5, 1.0, 1.5, 2.0 - g - 0.01, 2.0 - g - 0.01, 2.0, 2.0]
    assert "plateau" not in finding_names(steps(8, mean_reward=more) + stuck)
    reached = evals([0.0, 0.1, dg.PLATEAU_GOAL, 0.2])
    assert "plateau" not in finding_names(steps(8, mean_reward=reward) + reached)
    train_reached = evals([0.0, 0.1, 0.2, 0.2], train=[0.0, 0.2, dg.PLATEAU_GOAL, 0.3])
    assert "plateau" not in finding_names(steps(8, mean_reward=reward) + train_reached)
    assert "plateau" not in finding_names(steps(7, mean_reward=reward[:7]) + stuck)
    assert "plateau" not in finding_names(
        steps(8, mean_reward=reward)
    )  # no goal metric: no verdict


def test_a_zero_gradient_is_not_also_a_plateau():
    flat = steps(8, mean_reward=0.5, grad_norm=0.0) + evals([0.0, 0.0, 0.0, 0.0])
    assert (
        "plateau" not in finding_names(flat)
        and "frozen_ratio" in finding_names(flat)
        or "tied_groups" in finding_names(flat)
    )


# ---- entropy collapse -----------------------------------------------------------------


def test_entropy_collapse_below_5_percent_of_the_first_epoch():
    entropy = [20.0, 10.0, 5.0, 2.0, 1.5, 1.0, 0.99, 0.99]
    f = only(steps(8, entropy=entropy), "entropy_collapse")
    assert f.detail == ("entropy 20 -> 0.99 nats (late mean) and the reward stopped improving")
    assert f.evidence == (
        Evidence("entropy", (0, 1, 3, 4, 6, 7), (20.0, 10.0, 2.0, 1.5, 0.99, 0.99)),
    )
    at_bound = [20.0, 10.0, 5.0, 2.0, 1.5, 1.0, 1.0, 1.0]  # late mean == 0.05 x 20
    assert finding_names(steps(8, entropy=at_bound)) == []
    assert finding_names(steps(8, entropy=[0.0] * 8)) == []
    assert finding_names(steps(8, entropy=[-1.0] + [-2.0] * 7)) == []
    # only the first epoch's entropy decides whether there is a scale to collapse from
    assert finding_names(steps(8, entropy=[0.0] + [-1.0] * 7)) == []
    assert finding_names(steps(8, entropy=[-1.0, 1.0] + [-1.0] * 6)) == []
    assert finding_names(steps(8, entropy=[1.0, 0.5] + [0.01] * 6)) == ["entropy_collapse"]


def test_entropy_collapse_needs_a_stuck_reward_or_a_stall():
    entropy = [20.0, 10.0, 5.0, 2.0, 1.5, 1.0, 0.5, 0.5]
    # reward second half: gains exactly 0.05 x scale (20) -> still "stuck"? no: > is moving
    stuck = [0.0] * 4 + [19.0, 19.5, 20.0, 20.0]
    assert "entropy_collapse" in finding_names(steps(8, entropy=entropy, mean_reward=stuck))
    moving = [0.0] * 4 + [18.9, 19.5, 20.0, 20.0]
    assert "entropy_collapse" not in finding_names(steps(8, entropy=entropy, mean_reward=moving))
    stalled = steps(8, entropy=entropy) + evals([0.05, 0.04, 0.0, 0.05])
    f = only(stalled, "entropy_collapse")
    assert f.detail == (
        "entropy 20 -> 0.5 nats (late mean) and held-out exact-sort stalled at 5.0%"
    )
    learning = steps(8, entropy=entropy) + evals([0.05, 0.05, 0.0, 0.5])
    assert "entropy_collapse" not in finding_names(learning)
    solved = steps(8, entropy=entropy) + evals([0.9, 0.05, 0.0, 0.05])
    assert "entropy_collapse" not in finding_names(solved)


# ---- KL blow-up -----------------------------------------------------------------------


def test_kl_blowup_per_token_above_05():
    kl = [0.0, 1.0, 2.0, 2.0, 2.5, 2.5, 3.0, 3.0, 0.0, 9.0] * 2  # per step, 2 steps an epoch
    lengths = [4.0] * 18 + [0.0, 0.0]  # empty responses are left out (no division by 0)
    f = only(steps(10, inner=2, kl=kl, response_length=lengths), "kl_blowup")
    # per-token values of the 18 real steps; late = mean of the last 18 // 4 = 4
    assert f.detail == "late KL 0.688 nats per token > 0.5 nats per token"
    # evidence in the same unit: per-epoch means of kl / length, the empty epoch 9 left out
    assert f.evidence[0].metric == "kl per token (nats)"
    assert f.evidence[0].epochs == (0, 2, 3, 5, 6, 8)
    assert f.evidence[0].values == (0.125, 0.625, 0.75, 0.125, 0.5, 0.75)
    at_bound = steps(8, kl=[0.0] * 6 + [2.0] * 2, response_length=4.0)  # 0.5 per token
    assert finding_names(at_bound) == []
    assert finding_names(steps(8, kl=[None] * 6 + [9.0] * 2, response_length=4.0)) == ["kl_blowup"]
    assert finding_names(steps(8, kl=[0.0] * 6 + [0.6] * 2, response_length=1.0)) == ["kl_blowup"]


# ---- held at the reference -------------------------------------------------------------


def held(n=8, entropy=1.0, kl=0.04, response_length=4.0, exact=(0.0, 0.0, 0.1), **columns):
    """KL logged at every step (0.01 nats per token), entropy flat, held-out at most 10%."""
    return steps(n, entropy=entropy, kl=kl, response_length=response_length, **columns) + evals(
        list(exact)
    )


def test_held_at_reference_at_its_bounds():
    f = only(held(), "held_at_reference")
    assert f.detail == (
        "entropy 1 -> 1 nats (late mean, 100% of its start) with the KL to the reference at "
        "0.01 nats per token (late mean) and non-zero gradients, while held-out exact-sort at "
        "most 10.0%"
    )
    assert [e.metric for e in f.evidence] == ["entropy", "kl per token (nats)"]
    # entropy: the late mean (last 2 of 8 epochs) at 0.9 of the first epoch still counts
    assert "held_at_reference" in finding_names(held(entropy=[1.0] * 6 + [0.9] * 2))
    assert "held_at_reference" not in finding_names(held(entropy=[1.0] * 6 + [0.89] * 2))
    # KL: at most 0.02 nats per token (late mean)
    assert "held_at_reference" in finding_names(held(kl=0.08))
    assert "held_at_reference" not in finding_names(held(kl=0.0801))
    # the goal: held-out exact-sort below PLATEAU_GOAL (0.5)
    assert "held_at_reference" in finding_names(held(exact=(0.0, 0.2, 0.49)))
    assert "held_at_reference" not in finding_names(held(exact=(0.0, 0.2, 0.5)))
    # no KL term logged (kl_coef 0), or logged on fewer than 90% of the steps: not this finding
    assert "held_at_reference" not in finding_names(held(kl=None))
    assert "held_at_reference" in finding_names(held(n=10, kl=[None] + [0.04] * 9))
    assert "held_at_reference" not in finding_names(held(n=10, kl=[None] * 2 + [0.04] * 8))
    # a zero gradient is the frozen ratio's (or tied groups'), not this one
    assert "held_at_reference" not in finding_names(held(grad_norm=0.0))
    # without evaluations: the reward must not move
    flat = steps(8, kl=0.04, response_length=4.0)
    assert finding_names(flat) == ["held_at_reference"]
    assert only(flat, "held_at_reference").detail.endswith("while the reward barely moves")
    rising = steps(8, kl=0.04, response_length=4.0, mean_reward=[0.0] * 4 + [1.0] * 4)
    assert "held_at_reference" not in finding_names(rising)


def test_held_at_reference_names_the_kl_cause_on_the_capstone_run_a():
    """The review's case (issue 39): diagnose() pointed at the learning rate on run A."""
    from pgrl_helpers import checks

    found = diagnose(checks.broken_run("A"), reward_max=4)
    assert found[0].name == "held_at_reference", [f.name for f in found]
    assert "kl_coef" in found[0].causes and "lower kl_coef" in found[0].fixes
    for run_name in ("B", "C"):
        assert "held_at_reference" not in names(diagnose(checks.broken_run(run_name)))


# ---- clip fraction --------------------------------------------------------------------


def test_clip_high_at_a_median_of_03_over_the_reused_steps():
    clip = [0.9, 0.3] * 8  # inner step 0 (never reused) at 0.9
    f = only(steps(8, inner=2, clip_fraction=clip), "clip_high")
    assert f.detail == "median clip fraction 0.30 over 8 steps"
    assert f.evidence == (Evidence("clip_fraction", (0, 1, 3, 4, 6, 7), (0.3,) * 6),)
    assert finding_names(steps(8, inner=2, clip_fraction=[0.9, 0.29] * 8)) == []
    assert finding_names(steps(8, clip_fraction=0.9)) == []  # one step per batch: ratio 1


def test_clip_zero_needs_5_reused_steps():
    f = only(steps(5, inner=2, clip_fraction=[0.5, 0.0] * 5), "clip_zero")
    assert f.detail == "clip fraction 0 at all 5 steps that reuse a batch"
    assert [e.metric for e in f.evidence] == ["clip_fraction", "ratio_mean"]
    assert f.evidence[1] == Evidence("ratio_mean", (0, 1, 2, 3, 4), (1.0,) * 5)
    assert finding_names(steps(4, inner=2, clip_fraction=[0.5, 0.0] * 4)) == []
    assert finding_names(steps(5, inner=2, clip_fraction=[0.5, 0.0] * 4 + [0.5, 0.01])) == []


# ---- response length ------------------------------------------------------------------


def test_length_drift_at_half_the_first_length():
    lengths = [4.0, 4.5, 5.0, 5.5, 6.0, 6.0, 6.0, 6.0]
    f = only(steps(8, response_length=lengths), "length_drift")
    assert f.detail == "mean response length 4 -> 6 tokens (+50%)"
    assert f.evidence[0].metric == "response_length"
    shorter = [4.0, 3.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0]
    assert only(steps(8, response_length=shorter), "length_drift").detail.endswith("(-50%)")
    assert finding_names(steps(8, response_length=[4.0] + [5.9] * 7)) == []
    assert finding_names(steps(8, response_length=[0.0] + [5.0] * 7)) == []
    assert finding_names(steps(8, response_length=[1.0] + [2.0] * 7)) == ["length_drift"]


def test_length_change_with_learning_is_not_drift():
    lengths = [4.0, 4.5, 5.0, 5.5, 6.0, 6.0, 6.0, 6.0]
    learning = steps(8, response_length=lengths) + evals([0.0, 0.1, 0.1, 0.2])
    assert "length_drift" not in finding_names(learning)
    slow = steps(8, response_length=lengths) + evals([0.0, 0.1, 0.1, 0.19])
    assert "length_drift" in finding_names(slow)
    # the gain is last minus first evaluation
    assert "length_drift" in finding_names(
        steps(8, response_length=lengths) + evals([0.5, 0.5, 0.5, 0.6])
    )


# ---- gradient spikes ------------------------------------------------------------------


def test_grad_spike_at_20_times_the_median_with_10_steps():
    grads = [1.0, 2.0, 1.0, 20.0, 1.0, 1.0, 3.0, 1.0, 1.0, 5.0]
    f = only(steps(10, grad_norm=grads), "grad_spike")
    assert f.detail == "max grad_norm 20 (epoch 3, step 3) = 20 x the median 1"
    assert f.evidence == (
        Evidence("grad_norm (the 5 largest)", (1, 3, 6, 8, 9), (2.0, 20.0, 3.0, 1.0, 5.0), "step"),
    )
    assert str(f.evidence[0]).startswith("grad_norm (the 5 largest) by step {1: 2, 3: 20")
    # median 2, 11 steps: the ratio is max / median, the evidence the 5 largest
    f = only(steps(11, grad_norm=[2.0] * 10 + [40.0]), "grad_spike")
    assert f.detail == "max grad_norm 40 (epoch 10, step 10) = 20 x the median 2"
    assert f.evidence[0].epochs == (6, 7, 8, 9, 10)
    assert finding_names(steps(10, grad_norm=[1.0] * 9 + [19.9])) == []
    assert finding_names(steps(9, grad_norm=[1.0] * 8 + [100.0])) == []
    # a median of exactly ZERO_GRAD is a zero gradient: no spike relative to it
    tiny = [1e-10] * 6 + [1.0] * 4
    assert "grad_spike" not in finding_names(
        steps(10, grad_norm=tiny, mean_reward=[0.1 * k for k in range(10)])
    )
    assert "grad_spike" in finding_names(steps(10, grad_norm=[2e-10] * 6 + [1.0] * 4))


# ---- loss near zero -------------------------------------------------------------------


def test_loss_near_zero_is_an_info_note_at_its_bound():
    rewards = [0.0, 0.0, 0.5, 0.5, 0.5, 0.5, 1.0, 1.0]  # early 0, late 1: moves by 1
    f = only(steps(8, mean_reward=rewards, loss=[0.05, -0.05] * 4), "loss_near_zero")
    assert f.severity == "info"
    assert f.detail == "median |loss| 0.05 while the mean reward moved by 1"
    assert [e.metric for e in f.evidence] == ["mean_reward", "loss"]
    assert f.evidence[1].values == (0.05, -0.05, -0.05, 0.05, 0.05, -0.05)
    assert finding_names(steps(8, mean_reward=rewards, loss=0.0501)) == []
    moved_2 = [0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0]  # moves by 2: |loss| up to 0.1 is near 0
    assert finding_names(steps(8, mean_reward=moved_2, loss=0.09)) == ["loss_near_zero"]
    # the reward must move by MOVE_REL x its scale: exactly 0.1 x 10 = 1 does
    moved = [9.0, 9.0, 9.5, 9.5, 9.5, 9.5, 10.0, 10.0]
    assert finding_names(steps(8, mean_reward=moved, loss=0.0)) == ["loss_near_zero"]
    barely = [9.01, 9.01, 9.5, 9.5, 9.5, 9.5, 10.0, 10.0]
    assert finding_names(steps(8, mean_reward=barely, loss=0.0)) == []


def test_early_and_late_are_quarters_of_at_least_one_epoch():
    # 3 epochs: q = max(1, 0) = 1: early = epoch 0, late = epoch 2
    assert finding_names(steps(3, mean_reward=[0.0, 5.0, 1.0], loss=0.0)) == ["loss_near_zero"]
    # 8 epochs: q = 2
    f = only(steps(8, mean_reward=[0.0, 2.0, 7.0, 7.0, 7.0, 7.0, 7.0, 4.0], loss=0.0),
             "loss_near_zero")  # fmt: skip
    assert f.detail == "median |loss| 0 while the mean reward moved by 4.5"


def test_tiny_scales_still_count():
    # the scale is floored at 1e-12: a move of 0.1 x 1e-12 counts, a smaller one does not
    assert finding_names(steps(4, mean_reward=[0.0, 0.0, 0.0, 1e-13], loss=0.0)) == [
        "loss_near_zero"
    ]
    assert finding_names(steps(4, mean_reward=[0.0, 0.0, 0.0, 0.9e-13], loss=0.0)) == []


# ---- order, printing, errors ----------------------------------------------------------


def test_findings_come_root_causes_first():
    entropy = [20.0, 10.0, 5.0, 2.0, 1.5, 1.0, 0.5, 0.5]
    history = steps(
        10, entropy=entropy + [0.5, 0.5], kl=[9.0] * 10, response_length=[4.0] + [8.0] * 9,
        grad_norm=[1.0] * 9 + [30.0], mean_reward=[0.0, 0, 1, 1, 1, 1, 1, 1, 2, 2], loss=0.0,
    ) + evals([0.05, 0.04, 0.0, 0.05], train=[0.0, 0.1, 0.2, 0.3])  # fmt: skip
    assert finding_names(history) == [
        "reward_hacking", "entropy_collapse", "kl_blowup", "length_drift", "grad_spike",
        "loss_near_zero",
    ]  # fmt: skip


def test_a_finding_prints_every_part():
    f = dg._finding("clip_zero", "the detail", Evidence("m", (0, 1), (0.5, 2.0), "step"))
    symptom, causes, fixes, watch = CATALOGUE["clip_zero"]
    assert f == Finding("clip_zero", "warning", symptom, "the detail",
                        (Evidence("m", (0, 1), (0.5, 2.0), "step"),), causes, fixes, watch)  # fmt: skip
    assert str(f) == (
        f"[warning] clip_zero: {symptom}\n  evidence: the detail\n    m by step {{0: 0.5, 1: 2}}\n"
        f"  likely causes: {causes}\n  try: {fixes}\n  watch: {watch}"
    )
    g = dg._finding("loss_near_zero", "d", severity="info")
    assert g.severity == "info" and g.evidence == ()
    assert format_findings([f, g]) == f"{f}\n{g}"
    assert format_findings([]) == "no findings: the run looks healthy"
    assert dg.warnings_only([g, f, g]) == [f]
    assert str(Evidence("x", (3,), (0.123456,))) == "x by epoch {3: 0.123}"


def test_pick_spreads_up_to_six_points():
    assert dg._pick(list(range(3)), [1.0, 2.0, 3.0]) == ((0, 1, 2), (1.0, 2.0, 3.0))
    assert dg._pick(list(range(11)), list(range(11))) == ((0, 2, 4, 6, 8, 10),) * 2
    assert dg._pick([5], [7.0]) == ((5,), (7.0,))
    assert dg._pick(list(range(5)), list(range(5)), n=2) == ((0, 4),) * 2
    assert dg._pick(list(range(5)), list(range(5)), n=1) == ((0,),) * 2
    assert dg._pick(list(range(9)), list(range(9)), n=3) == ((0, 4, 8),) * 2


def test_per_epoch_means_skip_none():
    records = steps(2, inner=2, kl=[1.0, None, 3.0, 5.0])
    assert dg._per_epoch(records, "kl") == ([0, 1], [1.0, 4.0])
    assert dg._per_epoch(steps(2, kl=None), "kl") == ([], [])


def test_history_errors_name_the_record_and_the_metric():
    step_metrics = re.escape(
        "['step', 'inner_step', 'loss', 'mean_reward', 'kl', 'clip_fraction', 'entropy', "
        "'ratio_mean', 'grad_norm', 'response_length']"
    )
    eval_metrics = re.escape("['step', 'validation_exact_sort', 'validation_mean_reward']")
    cases = [
        ([], ValueError, "^history is empty"),
        ("abc", TypeError, "^history must be a list.*got str"),
        ([{"epoch": 0}], ValueError, r"^history record 0 is not a dict with a 'kind'.*\{'epoch': 0\}"),
        ([3], ValueError, "^history record 0 is not a dict with a 'kind'.*3"),
        (steps(1) + [{"kind": "train"}], ValueError,
         "^history record 1 has kind 'train'.*'step' or 'eval'"),
        ([{"kind": "step", "epoch": 0}], ValueError,
         r"^history record 0 \(step\) lacks the metrics " + step_metrics),
        ([{"kind": "eval", "epoch": 0}], ValueError,
         r"^history record 0 \(eval\) lacks the metrics " + eval_metrics),
        (evals([0.5]), ValueError, "^history has no 'step' records"),
    ]  # fmt: skip
    for history, error, pattern in cases:
        with pytest.raises(error, match=pattern):
            diagnose(history)


@pytest.mark.parametrize(
    "key, value",
    [("entropy", float("nan")), ("loss", float("inf")), ("grad_norm", True), ("loss", None),
     ("ratio_mean", "1"), ("frac_reward_zero_std", "x")],
)  # fmt: skip
def test_a_bad_step_metric_is_named(key, value):
    history = steps(3)
    history[2][key] = value
    pattern = rf"^history record 2: metric {re.escape(repr(key))} .*finite number.*{re.escape(repr(value))}"
    with pytest.raises(ValueError, match=pattern):
        diagnose(history)


def test_which_metrics_may_be_none():
    history = steps(3, kl=None, frac_reward_zero_std=None)
    history += evals([0.1, 0.2, 0.3], proxy=[None, None, None], train=[None, None, None])
    assert diagnose(history) == []
    bad = steps(3) + evals([0.1, 0.2, 0.3])
    bad[4]["validation_exact_sort"] = "x"
    with pytest.raises(ValueError, match="^history record 4: metric 'validation_exact_sort'"):
        diagnose(bad)
    bad[4]["validation_exact_sort"], bad[4]["train_exact_sort"] = 0.1, float("nan")
    with pytest.raises(ValueError, match="^history record 4: metric 'train_exact_sort'"):
        diagnose(bad)
    # a step-only metric on an eval record, or an eval-only one on a step, is not read
    odd = steps(3) + evals([0.1, 0.2, 0.3])
    odd[4]["frac_reward_zero_std"], odd[0]["train_exact_sort"] = "x", "y"
    assert diagnose(odd) == []
    for key in ("epoch", "step", "inner_step"):
        bad = steps(3)
        bad[1][key] = None
        with pytest.raises(ValueError, match=f"^history record 1: metric '{key}' must be"):
            diagnose(bad)
