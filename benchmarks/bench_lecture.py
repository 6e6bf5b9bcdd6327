"""Lecture reproduction: the lecture's model, prompts and settings, all four delta modes.

Setup (SPEC, "The lecture's own result"): ``LectureModel`` with embedding_dim 10, the 3
fixed prompts [[1,0,2],[3,2,4],[1,2,3]], vocab 5, G = 10, 100 epochs x 10 steps, Adam
lr 1e-3, naive loss, no KL, inclusion+ordering reward (max 5), seeds 0, 1, 2.
Reported per run: the mean reward of the last epoch's sampled responses and how many
of the 3 training prompts the greedy policy sorts; per setting, the median (range) over the
seeds. The lecture prints no final numbers to compare with: its verdicts are in words
(``lecture_17.py``, ``experiments()``), and it trains three delta modes, never ``max_rewards``.

Then the same model and prompts with other settings, looking for runs that sort all 3.
``--retable`` trains nothing: it rebuilds the two tables of results/lecture_reproduction.json
from the per-seed runs stored in it (its machine record is kept).

    python benchmarks/bench_lecture.py [--quick] [--seeds S ...] [--retable] [--out DIR]
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from _common import RESULTS_DIR, markdown_table, output_dir, parse_args, save, setup  # noqa: E402

from pgrl_helpers.config import TrainConfig  # noqa: E402
from pgrl_helpers.history import history_columns  # noqa: E402
from pgrl_helpers.sort_task import lecture_prompts, sort_inclusion_ordering_reward  # noqa: E402
from pgrl_helpers.training import run_policy_gradient  # noqa: E402

NAME = "lecture_reproduction"
SEEDS = (0, 1, 2)
RATE_SEEDS = tuple(range(10))  # for the success rate of the best setting
#: The lecture's run: ``TrainConfig``'s defaults are the lecture (the recipe "lecture" is empty).
LECTURE = TrainConfig.preset("lecture")
MODES = ("rewards", "centered_rewards", "normalized_rewards", "max_rewards")
#: The lecture's verdicts, in its words (``lecture_17.py``, ``experiments()``): it prints no
#: final numbers, and it trains ``rewards``, ``centered_rewards`` and ``normalized_rewards`` only.
LECTURE_VERDICTS = (
    'raw rewards "haven\'t really learned sorting very well", centred "better, but … '
    'stuck in local optima", normalised "not much difference" (`lecture_17.py`, '
    "`experiments()`); it never trains `max_rewards` (its code computes that mode's deltas on "
    "one batch only)"
)

#: Other settings for the same model and prompts (name -> changes to LECTURE).
FIXES = {
    "sort_distance_reward": dict(reward_fn="sort_distance_reward"),
    "lr 1e-2, clipped eps 0.2": dict(learning_rate=1e-2, loss_mode="clipped", epsilon=0.2),
    "sort_distance, G 50": dict(reward_fn="sort_distance_reward", num_responses=50),
    "embedding_dim 3, sort_distance, G 50, 300 epochs": dict(
        embedding_dim=3, reward_fn="sort_distance_reward", num_responses=50, num_epochs=300
    ),
    "embedding_dim 3, sort_distance, G 50, 300 epochs, entropy_coef 0.02": dict(
        embedding_dim=3,
        reward_fn="sort_distance_reward",
        num_responses=50,
        num_epochs=300,
        entropy_coef=0.02,
    ),
}


def saturated_fraction(config: TrainConfig) -> float:
    """Fraction of (training prompt, output position) pairs where the untrained policy
    puts > 0.99 probability on one token: there sampling never tries anything else and
    the softmax gradient vanishes, so no on-policy setting can move them."""
    with torch.no_grad():
        probs = torch.softmax(config.build_policy()(lecture_prompts()), dim=-1)  # [3, pos, vocab]
    return (probs.max(dim=-1).values > 0.99).float().mean().item()


def sized(config: TrainConfig, quick: bool) -> TrainConfig:
    """``config``, or for a quick run the same with 2 epochs of 2 steps."""
    if not quick:
        return config
    return dataclasses.replace(config, num_epochs=2, num_steps_per_epoch=2, eval_every=2)


def run(config: TrainConfig) -> dict:
    history = run_policy_gradient(config)
    last_eval = history.evals()[-1]
    steps = history_columns(history, "step")
    return {
        "final_mean_reward": steps["mean_reward"][-1],
        "train_sorted": round(last_eval["train_exact_sort"] * 3),
        "validation_exact_sort": last_eval["validation_exact_sort"],
        "final_entropy": steps["entropy"][-1],
        "mean_reward_per_epoch": steps["mean_reward"][:: config.num_steps_per_epoch],
    }


def summarise(label: str, runs: list[dict], max_reward: float) -> list:
    rewards = [r["final_mean_reward"] for r in runs]
    sorted_counts = [r["train_sorted"] for r in runs]
    return [
        label,
        " / ".join(f"{x:.2f}" for x in rewards),
        f"{statistics.median(rewards):.2f} ({min(rewards):.2f}-{max(rewards):.2f}) of "
        f"{max_reward:g}",
        " / ".join(f"{c}/3" for c in sorted_counts),
        f"{sum(r['validation_exact_sort'] for r in runs) / len(runs):.2f}",
    ]


def tables(payload: dict) -> dict:
    """The reproduction table (one row per delta mode) and the fixes table, from the per-seed
    runs stored in ``payload`` ("modes", "fixes", "config", "seeds"). Trains nothing."""
    config = TrainConfig(**payload["config"])
    seeds = payload.get("seeds") or list(range(len(payload["modes"]["rewards"])))
    headers = [
        "setting",
        f"final mean reward (seeds {'/'.join(map(str, seeds))})",
        "median (range)",
        "training prompts sorted (greedy)",
        f"held-out exact-sort ({config.heldout_size} prompts)",
    ]
    rows = [summarise(mode, runs, 5) for mode, runs in payload["modes"].items()]
    fix_rows = []
    for label, fix in payload["fixes"].items():
        reward_fn = fix["changes"].get("reward_fn", config.reward_fn)
        top = 3.0 if reward_fn == "sort_distance_reward" else 5.0
        fix_rows.append(summarise(f"centered_rewards, {label}", fix["runs"], top))
    return {
        "table": markdown_table(headers, rows),
        "fixes_table": markdown_table(headers, fix_rows),
    }


def retable_stored(out_dir=RESULTS_DIR) -> dict:
    """Rebuild the two tables of out_dir/lecture_reproduction.json from its stored per-seed runs;
    train nothing, keep its machine record."""
    path = Path(out_dir) / f"{NAME}.json"
    payload = json.loads(path.read_text())
    payload.update(tables(payload))
    payload["retabled_utc"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(payload["table"], "", payload["fixes_table"], sep="\n")
    return payload


def main(quick: bool = False, seeds=None, out_dir=RESULTS_DIR, *, retable: bool = False) -> dict:
    """The four delta modes, then ``FIXES``, over ``seeds`` (default ``SEEDS``); the success
    rate of two settings over ``RATE_SEEDS``. ``quick``: 2 epochs of 2 steps, one seed.
    ``retable``: train nothing, rebuild out_dir/lecture_reproduction.json's tables."""
    if retable:
        return retable_stored(out_dir)
    out_dir = output_dir(out_dir, quick)
    setup()
    seeds = tuple(seeds) if seeds else (SEEDS[:1] if quick else SEEDS)
    rate_seeds = RATE_SEEDS[:2] if quick else RATE_SEEDS
    base = sized(LECTURE, quick)
    results = {}
    for mode in MODES:
        config = dataclasses.replace(base, deltas_mode=mode)
        runs = [run(dataclasses.replace(config, seed=s)) for s in seeds]
        results[mode] = runs
        print(summarise(mode, runs, 5), flush=True)

    fix_results = {}
    for label, changes in FIXES.items():
        config = dataclasses.replace(base, deltas_mode="centered_rewards", **changes)
        config = sized(config, quick)
        runs = [run(dataclasses.replace(config, seed=s)) for s in seeds]
        fix_results[label] = {"changes": changes, "runs": runs}
        print(label, [r["final_mean_reward"] for r in runs], flush=True)
    built = tables(
        {
            "config": dataclasses.asdict(base),
            "seeds": list(seeds),
            "modes": results,
            "fixes": fix_results,
        }
    )
    reproduction, fixes = built["table"], built["fixes_table"]
    rate_rows, rates = [], {}
    for dim in (10, 3):
        config = dataclasses.replace(
            LECTURE,
            deltas_mode="centered_rewards",
            embedding_dim=dim,
            reward_fn="sort_distance_reward",
            num_responses=50,
            num_epochs=300,
            eval_every=300,
        )
        config = sized(config, quick)
        counts = [run(dataclasses.replace(config, seed=s))["train_sorted"] for s in rate_seeds]
        rates[dim] = counts
        rate_rows.append(
            [
                f"embedding_dim {dim}, sort_distance, G 50, 300 epochs",
                " ".join(str(c) for c in counts),
                f"{sum(c == 3 for c in counts)}/{len(counts)}",
            ]
        )
    success = markdown_table(
        [
            "setting",
            f"prompts sorted, seeds {rate_seeds[0]}-{rate_seeds[-1]}",
            "seeds sorting all 3",
        ],
        rate_rows,
    )
    print(success)
    saturation_rows = [
        [dim]
        + [
            f"{saturated_fraction(dataclasses.replace(LECTURE, embedding_dim=dim, seed=s)):.2f}"
            for s in seeds
        ]
        for dim in (10, 3)
    ]
    saturation = markdown_table(
        ["embedding_dim", *(f"seed {s}: saturated at init" for s in seeds)], saturation_rows
    )
    print(saturation)
    print(reproduction, "", fixes, sep="\n")

    fig, ax = plt.subplots(figsize=(7, 4))
    for mode in MODES:
        curves = [r["mean_reward_per_epoch"] for r in results[mode]]
        mean_curve = [sum(v) / len(v) for v in zip(*curves)]
        ax.plot(range(len(mean_curve)), mean_curve, label=mode)
    ax.axhline(5, color="gray", linestyle=":", label="maximum (5)")
    ax.set_xlabel("epoch")
    ax.set_ylabel("mean sampled reward (inclusion + ordering)")
    ax.set_title(f"Lecture reproduction: 3 training prompts, mean over {len(seeds)} seeds")
    ax.legend(loc="lower right", title="centered and normalized overlap")
    fig.tight_layout()
    fig.savefig(out_dir / "lecture_reproduction.png", dpi=100)
    plt.close(fig)
    return save(
        NAME,
        {
            "config": {k: v for k, v in dataclasses.asdict(base).items()},
            "seeds": list(seeds),
            "rate_seeds": list(rate_seeds),
            "modes": results,
            "fixes": fix_results,
            "table": reproduction,
            "fixes_table": fixes,
            "saturation_table": saturation,
            "success_table": success,
            "success_counts": rates,
        },
        out_dir,
    )


def add_options(parser) -> None:
    parser.add_argument(
        "--retable",
        action="store_true",
        help="train nothing: rebuild lecture_reproduction.json's tables from its stored runs",
    )


def section(r: dict, results_dir=RESULTS_DIR) -> str:
    """The lecture's setting in every delta mode, other settings, and why they fail."""
    c = r["config"]
    built = tables(r)
    seeds = r.get("seeds") or list(range(len(r["modes"]["rewards"])))
    rate_seeds = len(next(iter(r["success_counts"].values())))
    rewards = [x["final_mean_reward"] for runs in r["modes"].values() for x in runs]
    example = sort_inclusion_ordering_reward([1, 0, 2], [0, 1, 1])
    return "\n".join(
        [
            "## Lecture reproduction (`bench_lecture.py`)",
            "",
            f"`LectureModel` (embedding_dim {c['embedding_dim']}), the 3 lecture prompts, "
            f"vocab {c['vocab_size']}, G = {c['num_responses']}, {c['num_epochs']} epochs x "
            f"{c['num_steps_per_epoch']} steps, Adam lr {c['learning_rate']:g}, "
            f"{c['loss_mode']} loss, no KL, {c['reward_fn']} (max 5); seeds "
            f"{', '.join(map(str, seeds))}. "
            "Final mean reward = mean reward of the last epoch's sampled responses; "
            "sorted = training prompts the greedy policy sorts exactly.",
            "",
            built["table"],
            "",
            "The lecture prints no final numbers to set beside these; its verdicts are in "
            f"words: {LECTURE_VERDICTS}. Ours agree in words: every mode ends between "
            f"{min(rewards):.2f} and {max(rewards):.2f} of 5 and sorts (almost) none of the "
            f"training prompts. {len(seeds)} seeds cannot rank the modes; section "
            "<bench_lecture_ablation> compares them over more seeds, paired by seed. The "
            "inclusion+ordering reward also pays well "
            f"for wrong answers ({example:.0f} of 5 for [0, 1, 1] on prompt [1, 0, 2]).",
            "",
            "Same model class and prompts, other settings (all centered_rewards; the "
            f"sort_distance reward has maximum {c['prompt_length']}):",
            "",
            built["fixes_table"],
            "",
            "Why the lecture's model is so hard to fix: its initial logits are large "
            "(embedding entries ~N(0, 1), so the logit std grows like "
            "sqrt(3 x embedding_dim)), "
            "and many (prompt, position) pairs start with one token at > 99% probability. "
            "Sampling never tries another token there and the softmax gradient vanishes, "
            "so no reward, delta mode, loss or learning rate can move them (a saturated "
            "pair only hurts when its token is wrong). Fraction of the "
            f"{3 * c['prompt_length']} pairs saturated before training:",
            "",
            r["saturation_table"],
            "",
            f"Over {rate_seeds} seeds:",
            "",
            r["success_table"],
            "",
            "A smaller embedding (3) starts less saturated; with the per-position "
            "`sort_distance_reward` and G = 50 it sorts all 3 training prompts for the "
            "seeds marked 3/3 above. No setting we tried sorts all three for every seed. "
            "Beyond the table (sort_distance, G 50, 300 epochs, seeds 0/1/2), embedding_dim "
            "4, 5 and 6 did not sort all three for every seed either, and at dim 3 seed 2 "
            "stayed short of all three with G 100, an entropy bonus of 0.05, normalized "
            "deltas, or lr 3e-4 and 3e-3 (runs not kept in the results file): the outcome is "
            "set mostly by the initial weights (with only 3 embedding dimensions some tokens "
            "can also be hard to make the argmax). Held-out exact-sort stays near 0 in every "
            "run: trained on 3 prompts, the lecture's model fits their answers and nothing "
            "pins down its answers on the others (it can represent sorting: notebook 07 sets "
            "its weights by hand to sort all 125 prompts).",
            "",
            "![mean reward per epoch](results/lecture_reproduction.png)",
        ]
    )


if __name__ == "__main__":
    main(**parse_args(add_options))
