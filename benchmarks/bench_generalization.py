"""Generalization: SortTransformer trained by GRPO on reward only, scored on unseen prompts.

Goal: median test exact-sort >= 99% on unseen *multisets* (length 5, values 0-9) over 5
seeds, worst seed reported, wall time to the target <= 60 s on 2 cores. No labels are used:
the policy only sees ``sort_distance_reward`` of its own samples.

200 validation and 200 test multisets (one prompt each) are held out by content: no
training batch contains one. The stopping target reads validation only (99.5%: stopping
the first time validation touches 99% picks a lucky moment); the goal is judged on the
test multisets at that moment. Each run then keeps training ``EPOCHS_AFTER_TARGET``
epochs, and the table reports the largest drop of validation exact-sort below its value
at the target and the test exact-sort at the end (stability; see bench_stability).

One optimizer step per sampled batch (``num_steps_per_epoch=1``): with 4 steps on each batch
(this benchmark's first setting) validation reached the target as fast but then fell by up
to 0.63 on later evaluations; ``bench_stability.py`` measures that against this setting
with the same seeds and the same number of optimizer steps after the target.

    python benchmarks/bench_generalization.py [--quick] [--seeds S ...] [--out DIR]
"""

from __future__ import annotations

import math
from dataclasses import replace

import matplotlib

matplotlib.use("Agg")
from _common import (  # noqa: E402
    RESULTS_DIR,
    markdown_table,
    median,
    output_dir,
    parse_args,
    save_seed_runs,
    setup,
    train_to_target,
)

from pgrl_helpers.config import TrainConfig  # noqa: E402

NAME = "generalization"
SEEDS = (0, 1, 2, 3, 4)
GOAL = 0.99  # median test exact-sort on unseen multisets
VALIDATION_TARGET = 0.995  # stopping rule, on the validation multisets
BUDGET_SECONDS = 60.0
#: Stability: keep training this many epochs (= optimizer steps, one per
#: epoch) after validation first reaches the target, and report the largest drop of
#: validation exact-sort below it. 600 = the updates of 150 epochs at the old 4 steps each.
EPOCHS_AFTER_TARGET = 600

#: The tuned GRPO setting (see RESULTS.md for what else was tried): the recipe
#: ``generalizing_transformer`` (one Adam step per sampled batch: see bench_stability; 200
#: validation + 200 test multisets of 2002, a fifth held out), with this benchmark's budget.
CONFIG = TrainConfig.preset(
    "generalizing_transformer",
    num_epochs=2000,  # the stopping rule (VALIDATION_TARGET) ends the run well before
    eval_every=5,
    seed=0,  # the recipe's seed is 1; each run here sets its own
)
#: A quick run: the same setting, 4 epochs of 16 prompts, 20 + 20 held out, 2 epochs after
#: the target (which it may not reach).
QUICK = dict(num_epochs=4, prompts_per_epoch=16, eval_every=2, num_eval_prompts=20)
QUICK_EPOCHS_AFTER_TARGET = 2


def number(x, spec: str) -> str:
    """``x`` formatted, or '-' for None (a run that never reached the target has no drop)."""
    return "-" if x is None else format(x, spec)


def run_seeds(config: TrainConfig, after: int = EPOCHS_AFTER_TARGET, seeds=SEEDS) -> list[dict]:
    """Train each seed to the validation target, then ``after`` more epochs."""
    runs = []
    for seed in seeds:
        result = train_to_target(
            replace(config, seed=seed),
            VALIDATION_TARGET,
            max_seconds=3 * BUDGET_SECONDS,
            epochs_after_target=after,
        )
        result["seed"] = seed
        runs.append(result)
        print(
            f"seed {seed}: reached={result['reached']} in {result['seconds']:.1f} s, "
            f"{result['epochs']} epochs, {result['responses_sampled']} responses, test exact-sort "
            f"{result['test_exact_sort_at_target']:.3f} at target, "
            f"{result['test_exact_sort']:.3f} {after} epochs later; largest validation drop "
            f"after target {result['largest_drop_after_target']}",
            flush=True,
        )
    return runs


def seed_table(runs: list[dict]) -> tuple[str, float, float]:
    """Markdown table of the seeds + median and worst rows; (table, median test, median s)."""
    after = runs[0]["epochs_after_target"]
    headers = [
        "seed",
        f"reached {VALIDATION_TARGET:.1%} (validation)",
        "wall time to target (s)",
        "epochs",
        "sampled responses",
        f"test exact-sort at target ({runs[0]['num_test']} unseen multisets)",
        f"test exact-sort {after} epochs later",
        f"largest validation drop in the {after} epochs after target",
    ]

    def row(name, r):
        return [
            name,
            "yes" if r["reached"] else "no",
            f"{r['seconds']:.1f}",
            r["epochs"],
            r["responses_sampled"],
            f"{r['test_exact_sort_at_target']:.3f}",
            f"{r['test_exact_sort']:.3f}",
            number(r["largest_drop_after_target"], ".3f"),
        ]

    rows = [row(r["seed"], r) for r in runs]
    floats = (
        "seconds",
        "test_exact_sort_at_target",
        "test_exact_sort",
        "largest_drop_after_target",
    )
    present = {k: [r[k] for r in runs if r[k] is not None] for k in floats}
    med = {k: median(v) if v else None for k, v in present.items()}
    med |= {k: median([r[k] for r in runs]) for k in ("epochs", "responses_sampled")}
    rows.append(row("median", med | {"reached": all(r["reached"] for r in runs)}))
    rows[-1][1] = f"{sum(r['reached'] for r in runs)}/{len(runs)}"
    worst = min(runs, key=lambda r: r["test_exact_sort_at_target"])
    rows.append(row(f"worst at target (seed {worst['seed']})", worst))
    worst_drop = max(runs, key=lambda r: r["largest_drop_after_target"] or 0.0)
    rows.append(row(f"largest drop (seed {worst_drop['seed']})", worst_drop))
    return markdown_table(headers, rows), med["test_exact_sort_at_target"], med["seconds"]


def main(quick: bool = False, seeds=None, out_dir=RESULTS_DIR) -> dict:
    """Every seed (default ``SEEDS``; ``quick``: one seed, ``QUICK`` sizes) to the target and
    ``EPOCHS_AFTER_TARGET`` epochs beyond; writes generalization.json and .png."""
    out_dir = output_dir(out_dir, quick)
    setup()
    seeds = tuple(seeds) if seeds else (SEEDS[:1] if quick else SEEDS)
    config = replace(CONFIG, **QUICK) if quick else CONFIG
    after = QUICK_EPOCHS_AFTER_TARGET if quick else EPOCHS_AFTER_TARGET
    runs = run_seeds(config, after, seeds)
    table, med_test, med_seconds = seed_table(runs)
    drop = max((r["largest_drop_after_target"] or 0.0 for r in runs), default=0.0)
    met = med_test >= GOAL and med_seconds <= BUDGET_SECONDS
    verdict = (
        f"goal (median test exact-sort on unseen multisets >= {GOAL:.0%} within "
        f"{BUDGET_SECONDS:.0f} s): "
        f"{'met' if met else 'NOT met'}; "
        f"stability: largest validation drop in the {after} epochs after the "
        f"target, over {len(runs)} seeds: {drop:.3f}"
    )
    print(table, verdict, sep="\n")

    return save_seed_runs(
        NAME,
        runs,
        config,
        goal=GOAL,
        ylabel=f"greedy exact-sort, {config.num_eval_prompts} validation multisets",
        title="GRPO on SortTransformer: length 5, values 0-9",
        table=table,
        verdict=verdict,
        validation_target=VALIDATION_TARGET,
        out_dir=out_dir,
    )


def section(r: dict, results_dir=RESULTS_DIR) -> str:
    """The setting, the per-seed table, the verdict, and how the first version misled."""
    c = r["config"]
    m = r["machine"]
    multisets = math.comb(c["vocab_size"] + c["prompt_length"] - 1, c["prompt_length"])
    leaked = sum(run.get("train_prompts_with_heldout_key", 0) for run in r["runs"])
    return "\n".join(
        [
            "## Generalization: a policy that sorts (`bench_generalization.py`)",
            "",
            f"`SortTransformer` (d_model {c['embedding_dim']}, {c['num_layers']} layers, "
            f"{c['num_heads']} heads, {r['parameters']:,} parameters), GRPO on reward only: "
            f"{c['reward_fn']}, G = {c['num_responses']}, {c['prompts_per_epoch']} fresh "
            f"random prompts per epoch, {c['num_steps_per_epoch']} steps per epoch, "
            f"{c['loss_mode']} loss (eps {c['epsilon']}), {c['deltas_mode']}, Adam lr "
            f"{c['learning_rate']:g}, no KL. Prompts of length {c['prompt_length']}, values "
            f"0-{c['vocab_size'] - 1}. Held out by *multiset* (the policy ignores prompt "
            f"order, so only a new multiset is a new prompt to it): {c['num_eval_prompts']} "
            f"validation and {c['num_eval_prompts']} test multisets of the {multisets}, one "
            "prompt each, never in a training batch (each run's history counts "
            f"{leaked} such training prompts). Training stops when greedy exact-sort on the "
            f"validation multisets reaches {r['validation_target']:.1%} (the goal is judged on "
            "the test multisets at that moment); then each run keeps training "
            f"{r['runs'][0]['epochs_after_target']} more epochs (`epochs_after_target`), and "
            "the table reports the test exact-sort at the end and the largest drop of "
            "validation exact-sort below its value at the target (section <bench_stability>). "
            f"Wall times: load average {m['load_average_1_5_15_min']} on the "
            f"{m['logical_cores']} shared cores.",
            "",
            r["table"],
            "",
            f"**{r['verdict']}**",
            "",
            "Before held-out-by-multiset (the first version of this benchmark held out exact "
            "orderings only), its score on 'unseen prompts' met the goal, but almost all of "
            "them shared a multiset with a training prompt, and an independent check on "
            "shuffled prompts of the multisets that run never trained on scored well below it "
            "(the numbers: `git show b823724:benchmarks/RESULTS.md`). The setting then took 4 "
            "optimizer steps per sampled batch; it reached the target as fast but collapsed "
            "after it (section <bench_stability>), so the benchmark now takes 1. Both settings "
            "were scored on this test split, so the test split guided the choice of recipe "
            "(recorded in `split_records_legacy.json`): read the test number as optimistic by "
            "that choice.",
            "",
            "![validation exact-sort vs sampled responses](results/generalization.png)",
        ]
    )


if __name__ == "__main__":
    main(**parse_args())
