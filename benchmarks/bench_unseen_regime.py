"""A regime where memorising is impossible: length 8, values 0-19.

There are C(27, 8) = 2,220,075 multisets of length 8 over 0-19; a capped run trains on a
small fraction of them, so the validation and test multisets (500 each, held out by
content: no training batch contains one) are answered by a sorting rule, not a memory.

Per seed (3 seeds, run in parallel processes, each capped at ``MAX_CPU_SECONDS`` of its
process's CPU time, so that the cap does not depend on the load of a shared machine):
GRPO on a SortTransformer scaled up from bench_generalization, evaluated every ``eval_every``
epochs.
Reported: sampled responses, wall and CPU seconds when validation first reaches 95% and
99% (and the test exact-sort at that moment: the test set is never used to decide), the
test exact-sort at the end, the worst seed, and the fraction of the multiset space the
run trained on (distinct training multisets / 2,220,075).

    python benchmarks/bench_unseen_regime.py [--quick] [--seeds S ...] [--out DIR]
"""

from __future__ import annotations

import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from _common import (  # noqa: E402
    RESULTS_DIR,
    markdown_table,
    median,
    output_dir,
    parse_args,
    save,
    setup,
)

from pgrl_helpers.config import TrainConfig  # noqa: E402
from pgrl_helpers.training import run_policy_gradient  # noqa: E402

SEEDS = (0, 1, 2)
GOALS = (0.95, 0.99)
#: 150 CPU s per seed: what the shared machine allowed when this was measured;
#: UNSEEN_REGIME_MAX_CPU_SECONDS=600 runs the 10 minutes per seed first planned.
MAX_CPU_SECONDS = float(os.environ.get("UNSEEN_REGIME_MAX_CPU_SECONDS", 150))
NAME = "unseen_regime"
#: Stability: after validation first reaches the last goal, train this many more epochs
#: (one optimizer step each) and report the largest validation drop below the value there.
#: The CPU cap applies only before the target, so every run that reaches it trains the
#: whole window.
EPOCHS_AFTER_TARGET = 300

CONFIG = TrainConfig(
    model="transformer",
    embedding_dim=64,
    num_layers=2,
    num_heads=4,
    prompt_source="random",
    prompt_length=8,
    vocab_size=20,
    reward_fn="sort_distance_reward",
    num_responses=8,
    prompts_per_epoch=128,
    num_epochs=100_000,  # the CPU cap ends the run
    # One optimizer step per sampled batch: bench_stability measured that 4 inner steps on
    # one batch make validation collapse after the target (worst drop 0.63 vs 0.015).
    num_steps_per_epoch=1,
    learning_rate=1e-3,
    deltas_mode="centered_rewards",
    loss_mode="clipped",
    epsilon=0.2,
    eval_every=10,
    num_eval_prompts=500,  # 500 validation + 500 test multisets, one prompt each
    target_validation_exact_sort=GOALS[-1],
    epochs_after_target=EPOCHS_AFTER_TARGET,
)
#: A quick run: the same task and policy, 4 epochs of 16 prompts, 20 + 20 held out.
QUICK = dict(
    num_epochs=4, prompts_per_epoch=16, eval_every=2, num_eval_prompts=20, epochs_after_target=2
)


def train(config: TrainConfig) -> dict:
    """One capped run; per evaluation: responses, wall and CPU seconds, validation, test."""
    setup()
    task = config.build_task()
    seen: set[int] = set()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    stamps: dict[int, tuple[float, float]] = {0: (0.0, 0.0)}  # epochs done -> (wall, CPU)

    def watch(epoch: int, history) -> bool:
        seen.update(task.prompt_key(history.run.train_prompts).tolist())
        stamps[epoch + 1] = (time.perf_counter() - wall0, time.process_time() - cpu0)
        return history.target_epoch is None and stamps[epoch + 1][1] > MAX_CPU_SECONDS

    history = run_policy_gradient(config, callback=watch)
    end = (time.perf_counter() - wall0, time.process_time() - cpu0)
    assert history.train_prompts_with_heldout_key == 0
    curve = [
        {
            "epoch": e["epoch"],
            "responses": e["responses_sampled"],
            "wall_s": stamps.get(e["epoch"], end)[0],
            "cpu_s": stamps.get(e["epoch"], end)[1],
            "validation": e["validation_exact_sort"],
            "test": e["test_exact_sort"],
            "validation_reward": e["validation_mean_reward"],
        }
        for e in history.evals()
    ]
    result = {
        "seed": config.seed,
        "epochs": curve[-1]["epoch"],
        "responses_sampled": curve[-1]["responses"],
        "wall_seconds": curve[-1]["wall_s"],
        "cpu_seconds": curve[-1]["cpu_s"],
        "test_exact_sort_end": curve[-1]["test"],
        "validation_exact_sort_end": curve[-1]["validation"],
        "distinct_training_multisets": len(seen),
        "fraction_of_multisets_trained_on": len(seen) / task.num_keys(),
        "stop_reason": history.stop_reason,
        "target_epoch": history.target_epoch,
        "largest_drop_after_target": (
            history.largest_drop_after_target() if history.target_epoch is not None else None
        ),
        "curve": curve,
    }
    for goal in GOALS:
        first = next((c for c in curve if c["validation"] >= goal), None)
        result[f"at_{goal:.2f}"] = first  # None: not reached within the cap
    return result


def cell(result: dict, goal: float) -> str:
    first = result[f"at_{goal:.2f}"]
    if first is None:
        return "not reached"
    return (
        f"{first['responses']:,} resp, {first['wall_s']:.0f} s wall / {first['cpu_s']:.0f} s CPU, "
        f"test {first['test']:.3f}"
    )


def drop_text(result: dict) -> str:
    """The largest validation drop after the target, or '-' for a run that never reached it."""
    drop = result["largest_drop_after_target"]
    return "-" if drop is None else f"{drop:.3f}"


def main(quick: bool = False, seeds=None, out_dir=RESULTS_DIR) -> dict:
    """Every seed (default ``SEEDS``; ``quick``: one, ``QUICK`` sizes) in its own process."""
    out_dir = output_dir(out_dir, quick)
    setup()
    seeds = tuple(seeds) if seeds else (SEEDS[:1] if quick else SEEDS)
    config = replace(CONFIG, **QUICK) if quick else CONFIG
    task = config.build_task()
    # one process per seed: each seed's CPU cap is its own process's CPU time
    with ProcessPoolExecutor(len(seeds)) as pool:
        runs = list(pool.map(train, [replace(config, seed=seed) for seed in seeds]))
    for result in runs:
        seed = result["seed"]
        print(
            f"seed {seed}: {result['epochs']} epochs, {result['cpu_seconds']:.0f} s CPU, "
            f"validation {result['validation_exact_sort_end']:.3f}, test "
            f"{result['test_exact_sort_end']:.3f}, 95%: {cell(result, 0.95)}, "
            f"99%: {cell(result, 0.99)}",
            flush=True,
        )
    headers = [
        "seed",
        "validation first >= 95%: samples, time, test exact then",
        "validation first >= 99%: same",
        "epochs (end)",
        "sampled responses (end)",
        "CPU s (end)",
        f"test exact-sort at the end ({config.num_eval_prompts} unseen multisets)",
        f"largest validation drop in the {config.epochs_after_target} epochs after 99%",
        f"multisets trained on (fraction of {task.num_keys():,})",
    ]
    rows = [
        [
            r["seed"],
            cell(r, 0.95),
            cell(r, 0.99),
            r["epochs"],
            f"{r['responses_sampled']:,}",
            f"{r['cpu_seconds']:.0f}",
            f"{r['test_exact_sort_end']:.3f}",
            drop_text(r),
            f"{r['distinct_training_multisets']:,} ({r['fraction_of_multisets_trained_on']:.2%})",
        ]
        for r in runs
    ]
    worst = min(runs, key=lambda r: r["test_exact_sort_end"])
    rows.append(
        [
            "median",
            "",
            "",
            "",
            "",
            "",
            f"{median([r['test_exact_sort_end'] for r in runs]):.3f}",
            "",
            "",
        ]
    )
    rows.append(
        [
            f"worst (seed {worst['seed']})",
            "",
            "",
            "",
            "",
            "",
            f"{worst['test_exact_sort_end']:.3f}",
            "",
            "",
        ]
    )
    table = markdown_table(headers, rows)
    reached = {g: sum(r[f"at_{g:.2f}"] is not None for r in runs) for g in GOALS}
    verdict = (
        f"length {config.prompt_length}, values 0-{config.vocab_size - 1} "
        f"({task.num_keys():,} multisets), cap {MAX_CPU_SECONDS:.0f} CPU s "
        f"per seed: validation reached 95% in {reached[0.95]}/{len(runs)} seeds and 99% in "
        f"{reached[0.99]}/{len(runs)}; worst seed's test exact-sort at the end "
        f"{worst['test_exact_sort_end']:.3f} (seed {worst['seed']}); at most "
        f"{max(r['fraction_of_multisets_trained_on'] for r in runs):.2%} of the multisets "
        "trained on; largest validation drop in the "
        f"{config.epochs_after_target} epochs after 99%: " + ", ".join(drop_text(r) for r in runs)
    )
    print(table, verdict, sep="\n")

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in runs:
        ax.plot([c["responses"] for c in r["curve"]], [c["test"] for c in r["curve"]],
                label=f"seed {r['seed']}")  # fmt: skip
    for goal in GOALS:
        ax.axhline(goal, color="gray", linestyle=":")
    ax.set_xlabel("responses sampled")
    ax.set_ylabel(f"greedy exact-sort, {config.num_eval_prompts} test multisets")
    ax.set_title("GRPO, length 8, values 0-19: unseen multisets")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_dir / f"{NAME}.png", dpi=100)
    plt.close(fig)
    assert task.num_keys() == math.comb(27, 8)
    return save(
        NAME,
        {
            "config": {k: v for k, v in vars(config).items() if not callable(v)},
            "parameters": sum(p.numel() for p in config.build_policy().parameters()),
            "num_multisets": task.num_keys(),
            "num_multisets_formula": "C(20 + 8 - 1, 8)",
            "max_cpu_seconds_per_seed": MAX_CPU_SECONDS,
            "epochs_after_target": config.epochs_after_target,
            "goals": list(GOALS),
            "runs": runs,
            "table": table,
            "verdict": verdict,
        },
        out_dir,
    )


def section(r: dict, results_dir=RESULTS_DIR) -> str:
    """Length 8, values 0-19: what GRPO reaches on multisets it cannot have memorised."""
    c = r["config"]
    m = r["machine"]
    return "\n".join(
        [
            "## A regime where memorising is impossible (`bench_unseen_regime.py`)",
            "",
            f"Length {c['prompt_length']}, values 0-{c['vocab_size'] - 1}: "
            f"{r['num_multisets']:,} multisets ({r['num_multisets_formula']}). SortTransformer "
            f"d_model {c['embedding_dim']}, {c['num_layers']} layers ({r['parameters']:,} "
            f"parameters), G = {c['num_responses']}, {c['prompts_per_epoch']} prompts per "
            f"epoch, {c['num_steps_per_epoch']} optimizer step(s) per sampled batch"
            f"{' (the fix of section <bench_stability>)' if c['num_steps_per_epoch'] == 1 else ''}, "
            f"{c['loss_mode']} loss, Adam "
            f"lr {c['learning_rate']:g}; {c['num_eval_prompts']} validation + "
            f"{c['num_eval_prompts']} test multisets held out. Seeds run in parallel "
            f"processes, each capped at {r['max_cpu_seconds_per_seed']:.0f} CPU seconds; wall "
            f"times at load average {m['load_average_1_5_15_min']} on {m['logical_cores']} "
            "shared cores are several times the CPU times. 'validation first >= X%' quotes the "
            "test exact-sort at that evaluation (the test set never decides anything). No "
            "training batch contained a validation or test multiset (asserted per run). After "
            "validation first reaches the last goal each run trains "
            f"{r['epochs_after_target']} more epochs "
            "(the CPU cap applies only before it); 'at the end' is after that window. Three "
            "recipes of this benchmark (its first run, then 1 step per batch with and without "
            "the window after the target) were scored on this one test split, so it guided the "
            "choice of recipe (recorded in `split_records_legacy.json`).",
            "",
            r["table"],
            "",
            f"**{r['verdict']}**",
            "",
            "![test exact-sort vs sampled responses](results/unseen_regime.png)",
        ]
    )


if __name__ == "__main__":
    main(**parse_args())
