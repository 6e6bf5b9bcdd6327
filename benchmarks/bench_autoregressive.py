"""Autoregressive policy + GRPO on the variable-length sort-dedup task (issue 7, notebook 08).

Goal: >= 95% greedy exact answers (sorted distinct values, then EOS) on unseen prompts
(length 4, values 0-5), within about a minute of wall time on a 2-core CPU, for every
seed. The policy only ever sees ``dedup_position_reward`` of its own samples.

Validation and test prompts (10 each, one per set of values: 20 of the 56 sets of values
held out by content) are never trained on: the run first reaches the stopping bar on
validation, keeps training ``EPOCHS_AFTER_TARGET`` epochs (stability: the largest drop
below the bar's value is reported), and the goal is judged on the test set at the target.
Also reports the response length at the end against the length of correct answers.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

import matplotlib

matplotlib.use("Agg")
from _common import markdown_table, median, save_seed_runs, setup, train_to_target  # noqa: E402

from pgrl_helpers.config import TrainConfig  # noqa: E402
from pgrl_helpers.training import heldout_split  # noqa: E402

SEEDS = (0, 1, 2, 3, 4)
GOAL = 0.95  # on the test sets of values
VALIDATION_TARGET = 0.96  # stopping rule, on the validation sets of values
BUDGET_SECONDS = 60.0
#: Stability: keep training this many epochs after validation reaches the target and report
#: the largest validation drop in that window.
EPOCHS_AFTER_TARGET = 50

#: Notebook 08's last section uses G = 8 and no entropy bonus: fast for its seed, but some
#: seeds lose a token for good (entropy collapse: e.g. the largest value is never sampled
#: again and held-out exact sticks near 50%). G = 16 and entropy_coef 0.05 avoid it here.
CONFIG = TrainConfig(
    model="autoregressive",
    task="sort_dedup",
    prompt_source="random",
    prompt_length=4,
    vocab_size=6,
    max_response_length=6,
    embedding_dim=32,
    num_layers=2,
    num_heads=4,
    reward_fn="dedup_position_reward",
    deltas_mode="normalized_rewards",
    loss_mode="clipped",
    loss_aggregation="token_mean",
    num_responses=16,
    prompts_per_epoch=32,
    entropy_coef=0.05,
    num_epochs=400,
    num_steps_per_epoch=4,
    learning_rate=3e-3,
    eval_every=5,
    num_eval_prompts=10,  # 10 validation + 10 test of the 56 sets of values
)


def run(config: TrainConfig, max_seconds: float) -> dict:
    """Train until the loop's validation sets reaches VALIDATION_TARGET (or the time limit).

    Validation and test prompts are held out by their *set of values* (the answer depends on
    nothing else; ``SortDedupTask.prompt_key``); the test score is read at the stop.
    """
    result = train_to_target(
        config, VALIDATION_TARGET, max_seconds=max_seconds, epochs_after_target=EPOCHS_AFTER_TARGET
    )
    _, test_prompts = heldout_split(config)
    distinct = [len(set(p)) for p in test_prompts.tolist()]
    return result | {
        "validation_exact": result["validation_exact_sort"],
        "test_exact": result["test_exact_sort_at_target"],
        "test_exact_end": result["test_exact_sort"],
        "correct_response_length": sum(distinct) / len(distinct) + 1,  # values + EOS
    }


def run_seed(seed: int) -> dict:
    setup()
    return run(replace(CONFIG, seed=seed), max_seconds=1.5 * BUDGET_SECONDS) | {"seed": seed}


def main() -> None:
    setup()
    with ProcessPoolExecutor(len(SEEDS)) as pool:  # one process per seed
        runs = list(pool.map(run_seed, SEEDS))
    for result in runs:
        seed = result["seed"]
        print(
            f"seed {seed}: reached={result['reached']} in {result['seconds']:.1f} s, "
            f"{result['epochs']} epochs, test exact {result['test_exact']:.3f}, "
            f"length {result['final_response_length']:.2f} "
            f"(correct {result['correct_response_length']:.2f})",
            flush=True,
        )
    headers = [
        "seed",
        f"reached {VALIDATION_TARGET:.0%} (validation)",
        "wall time (s)",
        "epochs",
        f"test exact at target ({CONFIG.num_eval_prompts} unseen sets of values)",
        f"test exact {EPOCHS_AFTER_TARGET} epochs later",
        f"largest validation drop in the {EPOCHS_AFTER_TARGET} epochs after target",
        "final response length (correct)",
    ]
    rows = [
        [
            r["seed"],
            "yes" if r["reached"] else "no",
            f"{r['seconds']:.1f}",
            r["epochs"],
            f"{r['test_exact']:.3f}",
            f"{r['test_exact_end']:.3f}",
            f"{r['largest_drop_after_target'] or 0:.3f}",
            f"{r['final_response_length']:.2f} ({r['correct_response_length']:.2f})",
        ]
        for r in runs
    ]
    worst_test = min(r["test_exact"] for r in runs)
    worst_seconds = max(r["seconds"] for r in runs)
    rows.append(
        [
            "median",
            f"{sum(r['reached'] for r in runs)}/{len(runs)}",
            f"{median([r['seconds'] for r in runs]):.1f}",
            median([r["epochs"] for r in runs]),
            f"{median([r['test_exact'] for r in runs]):.3f}",
            f"{median([r['test_exact_end'] for r in runs]):.3f}",
            f"{max(r['largest_drop_after_target'] or 0 for r in runs):.3f} (max)",
            "",
        ]
    )
    table = markdown_table(headers, rows)
    verdict = (
        f"goal (every seed: test exact >= {GOAL:.0%} within {BUDGET_SECONDS:.0f} s): "
        f"{'met' if worst_test >= GOAL and worst_seconds <= BUDGET_SECONDS else 'NOT met'} "
        f"(worst seed: {worst_test:.3f} exact, {worst_seconds:.1f} s)"
    )
    print(table, verdict, sep="\n")

    save_seed_runs(
        "autoregressive",
        runs,
        CONFIG,
        goal=GOAL,
        ylabel=f"greedy exact, {CONFIG.num_eval_prompts} validation prompts",
        title="GRPO on the autoregressive policy: sort + dedup + EOS",
        table=table,
        verdict=verdict,
        validation_target=VALIDATION_TARGET,
    )
    record_splits_autoregressive()


def record_splits_autoregressive() -> None:
    """The ``_common.record_splits`` record of autoregressive.json (issue 27): one recipe (test
    read at the validation target and at the end of the window, for the same runs)."""
    import bench_objectives

    bench_objectives.record_file_splits(
        "autoregressive",
        CONFIG,
        "bench_autoregressive.py",
        "bench_autoregressive.py: CONFIG, stop at the validation target, 5 seeds",
    )


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--record-splits"]:
        record_splits_autoregressive()
    else:
        main()
