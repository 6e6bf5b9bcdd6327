"""Which of the tuned lecture setup's four changes matter? An ablation, plus the reproduction.

Notebook 07 makes the lecture's toy policy (``LectureModel``, 3 fixed prompts, G = 10,
100 epochs x 10 steps, centered deltas) sort all 3 training prompts by changing four things:

* ``init``: the initial embedding scaled by 0.3 (a high-entropy start);
* ``reward``: ``sort_distance_reward`` instead of ``sort_inclusion_ordering_reward``;
* ``loss``: the clipped loss (eps 0.2) instead of the naive one;
* ``lr``: Adam learning rate 1e-2 instead of 1e-3.

Part 1 (ablation): every change alone on top of the lecture setup, and every change alone
removed from the tuned setup, over ``SEEDS`` (10 seeds). Reported per setting: the number of
seeds whose greedy policy sorts all 3 training prompts, the mean number of prompts sorted,
the final mean reward as a fraction of the reward's maximum, the final entropy.

Part 2 (reproduction): the lecture's setup in each delta mode over the same seeds: per mode the
median (range) of the final mean reward and the seeds sorting all 3, and every pair of modes
compared seed by seed (exact paired sign-flip test; Holm's step-down correction over the six
comparisons, each test's smallest possible p stated). The lecture prints no final numbers to set
beside these: its verdicts are in words (``lecture_17.py``, ``experiments()``), and it trains
three modes, never ``max_rewards``.

Writes results/lecture_ablation.json and results/lecture_ablation.md. ``--reuse`` takes the
per-seed runs of settings already in the JSON file (same code, same seeds) and runs only the
missing ones; ``--retable`` trains nothing: it recomputes the tables, the comparisons and the
markdown from the per-seed runs stored in the JSON file (its machine record is kept).

    python benchmarks/bench_lecture_ablation.py [--quick] [--seeds S ...] [--reuse | --retable]
        [--out DIR]
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from pathlib import Path

import torch
from _common import RESULTS_DIR, markdown_table, output_dir, parse_args, save, setup

from pgrl_helpers.config import TrainConfig
from pgrl_helpers.seed_stats import compare_seeds, pair_by_seed
from pgrl_helpers.training import run_policy_gradient

NAME = "lecture_ablation"
SEEDS = tuple(range(10))
INIT_SCALE = 0.3
#: The lecture's setup (``TrainConfig``'s defaults: centered deltas, the naive loss), evaluated
#: once at the end.
LECTURE = TrainConfig.preset("lecture", eval_every=100)
#: The four changes of notebook 07's tuned setup (``init`` is applied to the model).
CHANGES: dict[str, dict] = {
    "init": {},
    "reward": dict(reward_fn="sort_distance_reward"),
    "loss": dict(loss_mode="clipped", epsilon=0.2),
    "lr": dict(learning_rate=1e-2),
}
DESCRIPTION = {
    "init": f"initial embedding x {INIT_SCALE}",
    "reward": "sort_distance_reward",
    "loss": "clipped loss (eps 0.2)",
    "lr": "learning rate 1e-2",
}
MAX_REWARD = {"sort_distance_reward": 3.0, "sort_inclusion_ordering_reward": 5.0}
MODES = ("rewards", "centered_rewards", "normalized_rewards", "max_rewards")
ALPHA = 0.05
#: The lecture's verdicts, in its words (``lecture_17.py``, ``experiments()``): it prints no
#: final numbers, and it trains ``rewards``, ``centered_rewards`` and ``normalized_rewards`` only.
LECTURE_VERDICTS = (
    'raw rewards "haven\'t really learned sorting very well", centred "better, but … '
    'stuck in local optima", normalised "not much difference" (`lecture_17.py`, '
    "`experiments()`); it never trains `max_rewards` (its code computes that mode's deltas on "
    "one batch only)"
)


def settings() -> dict[str, frozenset]:
    """Setting name -> the set of changes switched on."""
    everything = frozenset(CHANGES)
    out = {"lecture (none on)": frozenset()}
    out.update({f"only {c} on": frozenset({c}) for c in CHANGES})
    out.update({f"all but {c} (tuned without {c})": everything - {c} for c in CHANGES})
    out["tuned (all four on)"] = everything
    out["init + reward only (notebook 07's 'two changes')"] = frozenset({"init", "reward"})
    return out


#: A quick run: 2 epochs of 2 steps (two seeds: the reproduction needs a seed spread).
QUICK = dict(num_epochs=2, num_steps_per_epoch=2, eval_every=2)


def run_one(changes: frozenset, seed: int, base: TrainConfig = LECTURE) -> dict:
    overrides = {}
    for name in sorted(changes):
        overrides.update(CHANGES[name])
    config = dataclasses.replace(base, seed=seed, **overrides)
    model = config.build_policy()
    if "init" in changes:
        with torch.no_grad():
            model.embedding.weight.mul_(INIT_SCALE)
    history = run_policy_gradient(config, policy=model)
    last_eval = history.evals()[-1]
    last_step = history.steps()[-1]
    return {
        "seed": seed,
        "train_sorted": round(last_eval["train_exact_sort"] * 3),
        "final_mean_reward": last_step["mean_reward"],
        "final_reward_fraction": last_step["mean_reward"] / MAX_REWARD[config.reward_fn],
        "final_entropy": last_step["entropy"],
    }


def summarise(runs: list[dict]) -> dict:
    return {
        "seeds_all_3_sorted": sum(r["train_sorted"] == 3 for r in runs),
        "num_seeds": len(runs),
        "mean_prompts_sorted": statistics.mean(r["train_sorted"] for r in runs),
        "mean_reward_fraction": statistics.mean(r["final_reward_fraction"] for r in runs),
        "mean_entropy": statistics.mean(r["final_entropy"] for r in runs),
    }


def holm(p_values: list[float], alpha: float = ALPHA) -> list[tuple[float, bool]]:
    """Holm's step-down correction for m tests (Holm 1979, "A simple sequentially rejective
    multiple test procedure", Scand. J. Statist. 6, 65-70): the k-th smallest p (k = 0, 1, ...)
    is compared with alpha / (m - k); the nulls are rejected up to the first p that is not below
    its threshold, which and every larger p are kept. Returns (threshold, rejected) per p, in the
    input order (equal p-values keep their input order)."""
    out: list[tuple[float, bool]] = [(alpha, False)] * len(p_values)
    still = True
    for k, i in enumerate(sorted(range(len(p_values)), key=lambda j: p_values[j])):
        threshold = alpha / (len(p_values) - k)
        still = still and p_values[i] < threshold
        out[i] = (threshold, still)
    return out


def sign_flip_floor(a: list[float], b: list[float]) -> tuple[int, float]:
    """(k, smallest p): k = the paired seeds whose values differ, and the smallest p the exact
    sign-flip test (``seed_stats.paired_permutation_p_value``) can give on these pairs, 2 / 2^k
    (1 when k = 0). A seed where a and b are equal adds the same to every signed sum, so it
    cannot lower p: with 10 paired seeds of which 4 differ, p >= 2/16 = 0.125 whatever the data."""
    k = sum(x != y for x, y in zip(a, b))
    return k, (2 / 2**k if k else 1.0)


def mode_comparisons(reproduction: dict, alpha: float = ALPHA) -> list[dict]:
    """Every pair of delta modes on the final mean reward, paired by seed: the exact sign-flip p
    (``compare_seeds(..., paired=True)``), the test's smallest possible p, Holm's threshold at
    its rank over all the pairs, and the verdict."""
    final = {
        m: {run["seed"]: run["final_mean_reward"] for run in v["runs"]}
        for m, v in reproduction.items()
    }
    modes = list(final)
    rows = []
    for i, a in enumerate(modes):
        for b in modes[i + 1 :]:
            seeds, x, y = pair_by_seed(final[a], final[b])
            result = compare_seeds(x, y, a, b, paired=True, alpha=alpha)
            k, floor = sign_flip_floor(x, y)
            rows.append(
                {
                    "a": a,
                    "b": b,
                    "paired_seeds": len(seeds),
                    "seeds_that_differ": k,
                    "smallest_possible_p": floor,
                    "p_value": result["p_value"],
                    "mean_difference": statistics.fmean(x) - statistics.fmean(y),
                }
            )
    for row, (threshold, rejected) in zip(rows, holm([r["p_value"] for r in rows], alpha)):
        row["holm_threshold"] = threshold
        row["rejected"] = rejected
        if rejected:
            higher = row["a"] if row["mean_difference"] > 0 else row["b"]
            row["verdict"] = f"{higher} ends higher, beyond seed noise"
        elif row["smallest_possible_p"] >= threshold:  # it could not reject, whatever the data
            row["verdict"] = (
                f"undecided: {row['seeds_that_differ']} differing seeds cannot reach p < "
                f"{threshold:.3g} (smallest possible p = {row['smallest_possible_p']:.3g})"
            )
        else:
            row["verdict"] = f"no difference detected at {threshold:.3g} (p = {row['p_value']:.3g})"
    return rows


def reproduction_entry(runs: list[dict]) -> dict:
    """One delta mode's runs with the median and range of their final mean reward."""
    rewards = [r["final_mean_reward"] for r in runs]
    return {
        "runs": runs,
        "median": statistics.median(rewards),
        "min": min(rewards),
        "max": max(rewards),
        "seeds_all_3_sorted": sum(r["train_sorted"] == 3 for r in runs),
    }


def ablation_row(name: str, entry: dict) -> list:
    on, runs = entry["changes_on"], entry["runs"]
    return [
        name,
        ", ".join(DESCRIPTION[c] for c in CHANGES if c in on) or "-",
        f"{entry['seeds_all_3_sorted']}/{len(runs)}",
        f"{entry['mean_prompts_sorted']:.1f}",
        " ".join(str(r["train_sorted"]) for r in runs),
        f"{entry['mean_reward_fraction']:.2f}",
        f"{entry['mean_entropy']:.2f}",
    ]


def tables(payload: dict) -> dict:
    """Everything derived from the per-seed runs in ``payload`` (its "ablation" and
    "reproduction" runs, "config", "seeds"): the summaries, the tables, the paired comparisons
    of the delta modes and the markdown of lecture_ablation.md. Trains nothing."""
    ablation = {
        name: {
            "changes_on": e["changes_on"],
            "runs": e["runs"],
            **summarise(e["runs"]),
        }
        for name, e in payload["ablation"].items()
    }
    ablation_table = markdown_table(
        [
            "setting",
            "changes on",
            "seeds sorting all 3",
            "mean prompts sorted",
            "prompts sorted per seed",
            "final reward / max",
            "final entropy (nats/token)",
        ],
        [ablation_row(name, e) for name, e in ablation.items()],
    )
    reproduction = {m: reproduction_entry(v["runs"]) for m, v in payload["reproduction"].items()}
    n = max(len(v["runs"]) for v in reproduction.values())
    reproduction_table = markdown_table(
        [
            "delta mode",
            f"final mean reward (of 5): median (range), {n} seeds",
            "seeds sorting all 3",
        ],
        [
            [
                m,
                f"{v['median']:.2f} ({v['min']:.2f}-{v['max']:.2f})",
                f"{v['seeds_all_3_sorted']}/{len(v['runs'])}",
            ]
            for m, v in reproduction.items()
        ],
    )
    comparisons = mode_comparisons(reproduction)
    comparisons_table = markdown_table(
        [
            "pair (final mean reward, paired by seed)",
            "seeds that differ (k)",
            "smallest possible p (2/2^k)",
            "exact paired sign-flip p",
            "Holm threshold",
            "verdict",
        ],
        [
            [
                f"{c['a']} vs {c['b']}",
                f"{c['seeds_that_differ']} of {c['paired_seeds']}",
                f"{c['smallest_possible_p']:.3g}",
                f"{c['p_value']:.3g}",
                f"{c['holm_threshold']:.3g}",
                c["verdict"],
            ]
            for c in comparisons
        ],
    )
    beyond = [f"{c['a']} vs {c['b']}" for c in comparisons if c["rejected"]]
    unreachable = [
        c
        for c in comparisons
        if not c["rejected"] and c["smallest_possible_p"] >= c["holm_threshold"]
    ]
    kept = len(comparisons) - len(beyond)
    comparisons_text = (
        f"Every pair of the {len(reproduction)} delta modes: {len(comparisons)} comparisons, "
        "each an exact paired sign-flip test (`seed_stats.compare_seeds(..., paired=True)`), "
        f"with Holm's step-down correction at {ALPHA} (Holm 1979): the j-th smallest p "
        f"(j = 0, 1, ...) must lie below {ALPHA}/({len(comparisons)} - j), and the first that "
        "does not stops the rejections. Each test's floor: a seed where two modes end equal "
        "cannot move the test, so a pair whose final rewards differ on k seeds cannot give p "
        f"below 2/2^k (with all {n} seeds differing: {2 / 2**n:.3g}). Beyond seed noise after "
        f"the correction: {', '.join(beyond) or 'none'}; of the {'other ' if beyond else ''}"
        f"{kept} {'pair' if kept == 1 else 'pairs'}, {len(unreachable)} "
        f"{'is' if len(unreachable) == 1 else 'are'} undecided (the test's smallest possible p "
        "is not below its threshold, so it could not reject whatever the data) and "
        f"{kept - len(unreachable)} show no difference at their threshold"
        + ". Neither kind of pair is ranked: an undecided test says nothing, and a difference "
        "not detected is not evidence that the two modes are equal."
    )
    config, seeds = payload["config"], payload["seeds"]
    header = (
        f"LectureModel, 3 lecture prompts, G {config['num_responses']}, "
        f"{config['num_epochs']} epochs x {config['num_steps_per_epoch']} steps, seeds "
        f"{seeds[0]}-{seeds[-1]}; centered deltas unless stated."
    )
    lecture_text = (
        "The lecture prints no final numbers to set beside these; its verdicts are in words: "
        + LECTURE_VERDICTS
        + "."
    )
    markdown = "\n\n".join(
        [
            "# Lecture setup: ablation of the four changes, and the reproduction per mode",
            header,
            "## Ablation",
            ablation_table,
            "## The lecture's setup in each delta mode (no change on)",
            reproduction_table,
            lecture_text,
            comparisons_table,
            comparisons_text,
        ]
    )
    return {
        "ablation": ablation,
        "ablation_table": ablation_table,
        "reproduction": reproduction,
        "reproduction_table": reproduction_table,
        "mode_comparisons": comparisons,
        "comparisons_table": comparisons_table,
        "comparisons_text": comparisons_text,
        "lecture_text": lecture_text,
        "markdown": markdown,
    }


#: Keys of older results files that ``retable_stored`` drops (the lecture-number comparison).
STALE_KEYS = ("mode_order_ours", "mode_order_lecture", "order_line")


def write(derived: dict, out_dir) -> None:
    """out_dir/lecture_ablation.md from ``derived`` (see ``tables``)."""
    print(derived["markdown"])
    (Path(out_dir) / f"{NAME}.md").write_text(derived["markdown"] + "\n")


def retable_stored(out_dir=RESULTS_DIR) -> dict:
    """Recompute every table, summary and comparison of out_dir/lecture_ablation.json (and its
    markdown) from the per-seed runs stored in it; train nothing, keep its machine record."""
    path = Path(out_dir) / f"{NAME}.json"
    payload = json.loads(path.read_text())
    derived = tables(payload)
    for key in STALE_KEYS:
        payload.pop(key, None)
    payload.update({k: v for k, v in derived.items() if k != "markdown"})
    payload["retabled_utc"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    path.write_text(json.dumps(payload, indent=2) + "\n")
    write(derived, out_dir)
    return payload


def main(
    quick: bool = False,
    seeds=None,
    out_dir=RESULTS_DIR,
    *,
    reuse: bool = False,
    retable: bool = False,
) -> dict:
    """Every setting and every delta mode on ``seeds`` (default ``SEEDS``; ``quick``: seeds 0
    and 1, ``QUICK`` sizes); ``reuse``: keep the runs already in out_dir/lecture_ablation.json;
    ``retable``: train nothing, recompute that file's tables from its runs."""
    if retable:
        return retable_stored(out_dir)
    out_dir = output_dir(out_dir, quick)
    setup()
    seeds = tuple(seeds) if seeds else (SEEDS[:2] if quick else SEEDS)
    lecture = dataclasses.replace(LECTURE, **QUICK) if quick else LECTURE
    previous = {}
    if reuse and (out_dir / f"{NAME}.json").exists():
        previous = json.loads((out_dir / f"{NAME}.json").read_text())
    ablation = {}
    for name, on in settings().items():
        old = previous.get("ablation", {}).get(name)
        if (
            old
            and old["changes_on"] == sorted(on)
            and [r["seed"] for r in old["runs"]] == list(seeds)
        ):
            runs = old["runs"]
        else:
            runs = [run_one(on, s, lecture) for s in seeds]
        ablation[name] = {"changes_on": sorted(on), "runs": runs}
        print(ablation_row(name, {**ablation[name], **summarise(runs)}), flush=True)

    reproduction = {}
    for mode in MODES:
        base = dataclasses.replace(lecture, deltas_mode=mode)
        old = previous.get("reproduction", {}).get(mode)
        if old and [r["seed"] for r in old["runs"]] == list(seeds):
            runs = old["runs"]
        else:
            runs = [run_one(frozenset(), s, base) for s in seeds]
        reproduction[mode] = {"runs": runs}
        print(mode, [r["final_mean_reward"] for r in runs], flush=True)
    payload = {
        "config": {k: v for k, v in dataclasses.asdict(lecture).items()},
        "init_scale": INIT_SCALE,
        "changes": {c: DESCRIPTION[c] for c in CHANGES},
        "seeds": list(seeds),
        "ablation": ablation,
        "reproduction": reproduction,
    }
    derived = tables(payload)
    payload.update({k: v for k, v in derived.items() if k != "markdown"})
    write(derived, out_dir)
    return save(NAME, payload, out_dir)


def add_options(parser) -> None:
    parser.add_argument(
        "--reuse", action="store_true", help="keep the runs already in lecture_ablation.json"
    )
    parser.add_argument(
        "--retable",
        action="store_true",
        help="train nothing: recompute lecture_ablation.json's tables from its stored runs",
    )


def section(r: dict, results_dir=RESULTS_DIR) -> str:
    """The ablation table; the lecture's setup per delta mode (median and range over the seeds,
    the lecture's verdicts in words) and every pair of delta modes compared seed by seed with
    Holm's correction. Derived from the stored per-seed runs by ``tables``."""
    t = tables(r)
    return "\n".join(
        [
            "## Which of the four lecture fixes matter (`bench_lecture_ablation.py`)",
            "",
            f"LectureModel on the lecture's 3 prompts, {len(r['seeds'])} seeds per setting.",
            "",
            t["ablation_table"],
            "",
            "The lecture's setup in each delta mode (no change on), on the same seeds:",
            "",
            t["reproduction_table"],
            "",
            t["lecture_text"],
            "",
            t["comparisons_table"],
            "",
            t["comparisons_text"],
        ]
    )


if __name__ == "__main__":
    main(**parse_args(add_options))
