"""Stale and mismatched rollouts: GRPO with a sampler k epochs behind, with and without corrections.

Measured on the loop's held-out-by-content split. A SortTransformer learns
to sort (length 4, values 0-5) from its own samples, which a copy of the policy lagging
k epochs behind generates (``rollout_source="stale"``). Four ways to use such a batch
(``off_policy_correction``):

* ``recompute``: the trainer recomputes the old log-probs and ignores the sampler
  (uncorrected: the bias Yao et al. 2025 point out);
* ``none``: old log-probs = the sampler's, so the clipped ratio pi / pi_sampler is the
  importance weight (PPO against the behaviour policy);
* ``tis`` / ``mis``: old = the trainer's; each token's loss times min(w, C) or w 1[w <= C],
  w = pi_trainer / pi_sampler, C = 2 (token level).

Plus a sampler/trainer mismatch without staleness: the sampler runs at temperature 1.5,
which the loss does not know about; and (``--two-sided``, added to the saved file) two-sided
TIS / MIS with ``correction_cap_low`` = 0.5 at every k > 0.

**Splits.** The loop holds out ``NUM_EVAL_PROMPTS`` validation and as many test prompts, one
per multiset (the SortTransformer ignores prompt order, so a prompt is new only if its
multiset is: ``SortTask.prompt_key``), disjoint from each other and from every training batch
(each run asserts ``train_prompts_with_heldout_key == 0``). Length 4 over values 0-5 has 126
multisets; each held-out set takes 30.

**Protocol.** (1) Tuning (``--tune`` part of the default run): the on-policy baseline's
learning rate and entropy bonus are chosen from ``TUNING_GRID`` on tuning seed
``TUNING_SEEDS`` (not reported seeds) by final *validation* exact-sort averaged over them
(ties: the mean of the last three validation evaluations), so that the baseline is not an under-exploring run that
plateaus (the reason for the re-run, besides the split). The grid keeps the setting's
learning rate and tries entropy bonuses up to 1.0: a first, interrupted tuning pass (2026-12-03,
lr 1e-3 and 3e-3 x bonus 0 to 0.3, same tuning seeds) preferred lr 3e-3 and the bonus at its
upper edge. (2) Every (k, correction) cell and
the mismatch cells run with the chosen setting for ``EPOCHS`` epochs, no early stopping, on
seeds ``SEEDS``; each is scored once on the test split at the end. Every cell is a setting
of the comparison, none is chosen by its test score: the JSON lists all of them under
``test_scored_by``. Every cell runs the same seeds (seed k: the same initial weights and
prompts in every cell), so two cells are compared seed by seed: the exact paired sign-flip
test (``seed_stats.compare_seeds(..., paired=True)``), whose smallest p over 5 seeds is
2/2^5 = 0.0625; with many comparisons, read them with a multiplicity caveat too.
``--recompare`` recomputes the stored comparisons from the stored per-seed scores (no run).

Writes results/staleness.json and results/staleness.png.
Run: ``python benchmarks/bench_staleness.py [--quick] [--workers 3]`` (``--quick``: 2 epochs,
1 seed, into a temporary folder). Sized to fit about 15 minutes of a shared 2-core CPU:
5 seeds, k in (0, 2, 8).
"""

from __future__ import annotations

import json
import math
import multiprocessing
import statistics
import time
from dataclasses import replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from _common import (  # noqa: E402
    RESULTS_DIR,
    loop_splits,
    output_dir,
    parse_args,
    record_splits,
    save,
    setup,
    split_keys,
)

from pgrl_helpers.config import TrainConfig  # noqa: E402
from pgrl_helpers.seed_stats import compare_seeds  # noqa: E402
from pgrl_helpers.training import run_policy_gradient  # noqa: E402

NAME = "staleness"
SEEDS = (0, 1, 2, 3, 4)
STALENESS = (0, 2, 8)
CORRECTIONS = ("recompute", "none", "tis", "mis")
MISMATCH_TEMPERATURE = 1.5
EPOCHS = 80
NUM_EVAL_PROMPTS = 30  # per held-out set: 30 validation + 30 test multisets of 126
TUNING_SEEDS = (100, 101)
#: (learning rate, entropy bonus) candidates for the on-policy baseline
TUNING_GRID = tuple((3e-3, ent) for ent in (0.0, 0.1, 0.3, 1.0))

CONFIG = TrainConfig(
    model="transformer",
    embedding_dim=32,
    num_layers=1,
    num_heads=2,
    prompt_source="random",
    prompt_length=4,
    vocab_size=6,
    reward_fn="sort_distance_reward",
    num_responses=8,
    prompts_per_epoch=32,
    num_epochs=EPOCHS,
    num_steps_per_epoch=4,
    learning_rate=3e-3,
    loss_mode="clipped",
    eval_every=5,
    num_eval_prompts=NUM_EVAL_PROMPTS,
    rollout_source="stale",
    correction_cap=2.0,
)


RECIPE = (
    "bench_staleness.py comparison: every (staleness k, correction) cell and the temperature "
    "mismatch cells at the tuned (lr, entropy bonus), side by side, none chosen by its test score"
)


def add_split_records(payload: dict) -> dict:
    """The ``_common.record_splits`` record plus the keys themselves (``split_keys``).

    The tuning runs' test scores (the loop computes them) are dropped: tuning read validation."""
    if "split_keys" not in payload:
        payload["split_keys"] = payload.pop("splits")
    for key in ("test_scored_by", "test_guided_choice"):
        payload.pop(key, None)
    for r in payload["tuning"]["runs"]:
        r.pop("final_test_exact", None)
    payload["tuning"]["note"] = (
        "test scores of the tuning runs are not kept: tuning read validation"
    )
    config = replace(CONFIG, num_eval_prompts=NUM_EVAL_PROMPTS)
    splits = loop_splits(config, "bench_staleness.py")
    return record_splits(
        payload, validation=splits["validation"], test=splits["test"], recipe=RECIPE,
        benchmark="bench_staleness.py",
    )  # fmt: skip


def cell_name(k: int, correction: str, temperature: float = 1.0) -> str:
    if temperature != 1.0:
        return f"T={temperature:g}/{correction}"
    return "k=0/on-policy" if k == 0 else f"k={k}/{correction}"


def run(config: TrainConfig) -> dict:
    torch.set_num_threads(1)
    t0, c0 = time.perf_counter(), time.process_time()
    history = run_policy_gradient(config)
    assert history.train_prompts_with_heldout_key == 0
    evals, steps = history.evals(), history.steps()
    return {
        "seed": config.seed,
        "staleness": config.staleness,
        "correction": config.off_policy_correction,
        "sampler_temperature": config.sampler_temperature,
        "learning_rate": config.learning_rate,
        "entropy_coef": config.entropy_coef,
        "eval_epochs": [r["epoch"] for r in evals],
        "validation_exact": [r["validation_exact_sort"] for r in evals],
        "final_validation_exact": evals[-1]["validation_exact_sort"],
        "final_test_exact": evals[-1]["test_exact_sort"],
        "mean_ess_fraction": statistics.mean(s["ess_fraction"] for s in steps),
        "mean_is_cut_fraction": statistics.mean(s["is_cut_fraction"] for s in steps),
        "final_entropy": statistics.mean(s["entropy"] for s in steps[-4 * 5 :]),
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": time.process_time() - c0,
        "splits": split_keys(config, history.run.validation_prompts, history.run.test_prompts),
    }


def job(fields: dict) -> dict:
    r = run(replace(CONFIG, **fields))
    print(
        f"seed {r['seed']} k {r['staleness']} T {r['sampler_temperature']:g} "
        f"{r['correction']:9s} lr {r['learning_rate']:g} ent {r['entropy_coef']:g}: validation "
        f"{r['final_validation_exact']:.3f} test {r['final_test_exact']:.3f} "
        f"ESS/N {r['mean_ess_fraction']:.3f} ({r['cpu_seconds']:.1f} CPU s)",
        flush=True,
    )
    return r


def setting_of(r: dict) -> tuple[float, float]:
    return r["learning_rate"], r["entropy_coef"]


def tuning_score(runs: list[dict]) -> tuple[float, float]:
    """Mean over the tuning seeds of the final validation exact, then of the mean of the last
    three evaluations (validation only)."""
    return (
        statistics.mean(r["final_validation_exact"] for r in runs),
        statistics.mean(statistics.mean(r["validation_exact"][-3:]) for r in runs),
    )


def summarise(runs: list[dict]) -> dict:
    tests = [r["final_test_exact"] for r in runs]
    return {
        "seeds": [r["seed"] for r in runs],
        "test_exact": tests,
        "median_test": statistics.median(tests),
        "worst_test": min(tests),
        "median_ess_fraction": statistics.median(r["mean_ess_fraction"] for r in runs),
        "median_validation_curve": [
            statistics.median(c) for c in zip(*(r["validation_exact"] for r in runs))
        ],
    }


def main(
    quick: bool = False,
    seeds=None,
    out_dir=RESULTS_DIR,
    *,
    workers: int = 2,
    record_splits: bool = False,
    two_sided: bool = False,
    recompare: bool = False,
) -> dict:
    """Tune the on-policy baseline, then every (k, correction) cell and the mismatch cells on
    ``seeds`` (default ``SEEDS``; ``quick``: 2 epochs, seed 0, half the tuning grid), in
    ``workers`` processes. ``two_sided``: only add the two-sided cells to out_dir/staleness.json;
    ``record_splits``: only add the split record to a file saved before it existed;
    ``recompare``: only recompute the stored comparisons (``recompare_stored``)."""
    if recompare:
        return recompare_stored(out_dir)
    if two_sided:
        return add_two_sided(workers, out_dir)
    if record_splits:
        path = Path(out_dir) / f"{NAME}.json"
        payload = add_split_records(json.loads(path.read_text()))
        path.write_text(json.dumps(payload, indent=2) + "\n")
        return payload
    out_dir = output_dir(out_dir, quick)
    setup()
    epochs = 2 if quick else EPOCHS
    seeds = tuple(seeds) if seeds else (SEEDS[:1] if quick else SEEDS)
    grid = TUNING_GRID[:2] if quick else TUNING_GRID
    pool = multiprocessing.get_context("spawn").Pool(workers)
    c0 = time.time()
    tuning = pool.map(
        job,
        [
            dict(seed=seed, learning_rate=lr, entropy_coef=ent, num_epochs=epochs)
            for lr, ent in grid
            for seed in TUNING_SEEDS
        ],
    )
    lr, ent = max(grid, key=lambda g: tuning_score([r for r in tuning if setting_of(r) == g]))
    print(f"chosen on validation (seeds {TUNING_SEEDS}): lr {lr:g}, entropy bonus {ent:g}")
    base = dict(learning_rate=lr, entropy_coef=ent, num_epochs=epochs)
    jobs = []
    for seed in seeds:
        for k in STALENESS:
            # k = 0: sampler == trainer bit for bit, every weight is 1: one run serves all four
            for correction in CORRECTIONS if k else ("none",):
                jobs.append(base | dict(seed=seed, staleness=k, off_policy_correction=correction))
        for correction in CORRECTIONS:
            jobs.append(
                base
                | dict(
                    seed=seed,
                    sampler_temperature=MISMATCH_TEMPERATURE,
                    off_policy_correction=correction,
                )
            )
    runs = pool.map(job, jobs)
    pool.close()
    for r in runs:
        r["cell"] = cell_name(r["staleness"], r["correction"], r["sampler_temperature"])
    splits = runs[0]["splits"]
    assert all(r["splits"] == splits for r in runs + tuning), "every run shares one split"
    for r in runs + tuning:
        del r["splits"]
    cells = list(dict.fromkeys(r["cell"] for r in runs))
    summary = {c: summarise([r for r in runs if r["cell"] == c]) for c in cells}

    comparisons = [compare(summary, a, b) for a, b in COMPARED]

    fig, axes = plt.subplots(1, len(CORRECTIONS), figsize=(14, 3.5), sharey=True)
    epochs_axis = runs[0]["eval_epochs"]
    for ax, correction in zip(axes, CORRECTIONS):
        for k in STALENESS:
            name = cell_name(k, correction)
            ax.plot(epochs_axis, summary[name]["median_validation_curve"], label=f"k={k}")
        ax.set_title(f"correction: {correction}")
        ax.set_xlabel("epoch")
    axes[0].set_ylabel(f"validation exact-sort\n(median of {len(seeds)} seeds)")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(out_dir / "staleness.png", dpi=100)
    plt.close(fig)
    return save(
        NAME,
        add_split_records(
            {
                "config": {k: v for k, v in vars(CONFIG).items() if not callable(v)},
                "seeds": list(seeds),
                "staleness_values": list(STALENESS),
                "corrections": list(CORRECTIONS),
                "mismatch_temperature": MISMATCH_TEMPERATURE,
                "epochs": epochs,
                "tuning": {
                    "seeds": list(TUNING_SEEDS),
                    "grid": [list(g) for g in grid],
                    "selected_by": "final validation exact-sort, mean over the tuning seeds (ties: mean of the last 3 evaluations)",
                    "runs": tuning,
                    "chosen": {"learning_rate": lr, "entropy_coef": ent},
                },
                "splits": splits,
                "summary": summary,
                "comparisons": comparisons,
                "wall_seconds": round(time.time() - c0, 1),
                "total_cpu_seconds": round(sum(r["cpu_seconds"] for r in runs + tuning), 1),
                "runs": runs,
            }
        ),
        out_dir,
    )


#: The comparisons (a, b) stored in the results, in order: does a lag cost, does a correction
#: beat 'none', does the mismatch cost, does a correction help with it.
COMPARED = [
    *(
        pair
        for k in STALENESS[1:]
        for pair in [
            (f"k={k}/none", "k=0/on-policy"),
            *((f"k={k}/{c}", f"k={k}/none") for c in ("recompute", "tis", "mis")),
        ]
    ),
    (f"T={MISMATCH_TEMPERATURE:g}/recompute", "k=0/on-policy"),
    *(
        (f"T={MISMATCH_TEMPERATURE:g}/{c}", f"T={MISMATCH_TEMPERATURE:g}/recompute")
        for c in ("none", "tis", "mis")
    ),
]
#: Added by ``--two-sided``: two-sided vs one-sided TIS / MIS at every k > 0.
COMPARED_TWO_SIDED = [
    (f"k={k}/{c} two-sided", f"k={k}/{c}") for k in STALENESS[1:] for c in ("tis", "mis")
]


def compare(summary: dict, a: str, b: str) -> dict:
    """Cell a vs cell b on test exact, paired by seed (every cell runs the same seeds)."""
    seeds_a, seeds_b = summary[a].get("seeds"), summary[b].get("seeds")
    if seeds_a != seeds_b:
        raise ValueError(f"{a} and {b} ran different seeds: {seeds_a} vs {seeds_b}")
    return compare_seeds(summary[a]["test_exact"], summary[b]["test_exact"], a, b, paired=True)


def recompare_stored(out_dir=RESULTS_DIR) -> dict:
    """Recompute the stored comparisons of out_dir/staleness.json from its per-seed test
    scores (paired by seed), without running anything."""
    path = Path(out_dir) / f"{NAME}.json"
    payload = json.loads(path.read_text())
    for cell, summary in payload["summary"].items():
        seeds = [r["seed"] for r in payload["runs"] if r["cell"] == cell]
        if summary.setdefault("seeds", seeds) != seeds:
            raise ValueError(f"{cell}: its summary's seeds differ from its runs'")
    pairs = COMPARED + (COMPARED_TWO_SIDED if "two_sided" in payload else [])
    payload["comparisons"] = [compare(payload["summary"], a, b) for a, b in pairs]
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"recomputed {len(pairs)} paired comparisons in {path}")
    return payload


def add_options(parser) -> None:
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument(
        "--recompare",
        action="store_true",
        help="only recompute the stored comparisons (paired by seed) from the stored scores",
    )
    parser.add_argument("--record-splits", action="store_true", help="add the split record")
    parser.add_argument(
        "--two-sided",
        action="store_true",
        help="add two-sided TIS / MIS cells (correction_cap_low)",
    )


CAP_LOW = 0.5  # two-sided masks: weights below 1/C = 0.5 are raised (TIS) or dropped (MIS)


def add_two_sided(workers: int, out_dir=RESULTS_DIR) -> dict:
    """Add two-sided TIS / MIS cells (``correction_cap_low`` = CAP_LOW) at every k > 0 to
    staleness.json, same seeds and tuned setting, then their comparisons with the one-sided
    cells. First re-runs one stored cell and stops if it does not reproduce bit for bit (the
    new cells must come from the same loop as the stored ones)."""
    path = Path(out_dir) / f"{NAME}.json"
    payload = json.loads(path.read_text())
    chosen = payload["tuning"]["chosen"]
    base = dict(chosen, num_epochs=payload["epochs"])
    stored = next(r for r in payload["runs"] if r["cell"] == f"k={STALENESS[-1]}/tis")
    check = job(base | dict(seed=stored["seed"], staleness=STALENESS[-1],
                            off_policy_correction="tis"))  # fmt: skip
    if check["validation_exact"] != stored["validation_exact"]:
        raise SystemExit("the loop no longer reproduces staleness.json: re-run it whole")
    jobs = [base | dict(seed=seed, staleness=k, off_policy_correction=c, correction_cap_low=CAP_LOW)
            for seed in payload["seeds"] for k in STALENESS[1:] for c in ("tis", "mis")]  # fmt: skip
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        runs = pool.map(job, jobs)
    for r, j in zip(runs, jobs):
        r["cell"] = f"k={j['staleness']}/{j['off_policy_correction']} two-sided"
        r["correction_cap_low"] = CAP_LOW
        del r["splits"]
    payload["runs"] += runs
    for cell in dict.fromkeys(r["cell"] for r in runs):
        payload["summary"][cell] = summarise([r for r in runs if r["cell"] == cell])
    payload["comparisons"] += [compare(payload["summary"], a, b) for a, b in COMPARED_TWO_SIDED]
    payload["two_sided"] = {
        "correction_cap_low": CAP_LOW,
        "reproduced_cell": stored["cell"] + f" seed {stored['seed']}",
        "machine": __import__("_common").machine(),
        "cpu_seconds": round(sum(r["cpu_seconds"] for r in runs) + check["cpu_seconds"], 1),
    }
    payload["total_cpu_seconds"] = round(
        payload["total_cpu_seconds"] + payload["two_sided"]["cpu_seconds"], 1
    )
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print("added", len(runs), "two-sided runs")
    return payload


def rendered_comparisons(payload: dict) -> list[dict]:
    """The stored comparisons' pairs, each recomputed by ``compare`` (``compare_seeds``, paired by
    seed) from the stored per-seed test scores: a results file written before the verdict named
    its floor still holds "within seed noise", which the report must not print."""
    return [compare(payload["summary"], x["name_a"], x["name_b"]) for x in payload["comparisons"]]


def section(payload: dict, results_dir=RESULTS_DIR) -> str:
    """Final test exact per staleness and correction, the mismatch cells, the comparisons
    (recomputed from the per-seed scores: ``rendered_comparisons``)."""
    c, s = payload["config"], payload["summary"]
    multisets = math.comb(c["vocab_size"] + c["prompt_length"] - 1, c["prompt_length"])
    v, t = payload["split_keys"]["validation"], payload["split_keys"]["test"]
    tune = payload["tuning"]
    loads = payload["machine"]["load_average_1_5_15_min"]

    def cell(k: int, correction: str) -> str:
        return "k=0/on-policy" if k == 0 else f"k={k}/{correction}"

    def fmt(name: str) -> str:
        x = s[name]
        return f"{x['median_test']:.3f} [{x['worst_test']:.3f}] ({x['median_ess_fraction']:.2f})"

    corrections = payload["corrections"]
    rows = [
        f"| {k} | " + " | ".join(fmt(cell(k, corr)) for corr in corrections) + " |"
        for k in payload["staleness_values"]
    ]
    temp = f"T={payload['mismatch_temperature']:g}"
    fresh = rendered_comparisons(payload)
    comparisons = [
        f"| {x['name_a']} | {x['name_b']} | {x['median_a']:.3f} [{x['worst_a']:.3f}] | "
        f"{x['median_b']:.3f} [{x['worst_b']:.3f}] | {x['p_value']:.3f} | {x['verdict']} |"
        for x in fresh
    ]
    below = [x for x in fresh if x["p_value"] < 0.05]
    undecided = sum(x["verdict"].startswith("undecided") for x in fresh)
    n = len(fresh)
    return "\n".join(
        [
            "## Stale rollouts and off-policy corrections (`bench_staleness.py`)",
            "",
            "Measured on the loop's held-out-by-content split. SortTransformer "
            f"(d_model {c['embedding_dim']}, {c['num_layers']} layer, {c['num_heads']} heads), "
            f"prompts of length {c['prompt_length']}, values 0-{c['vocab_size'] - 1}, "
            f"{c['prompts_per_epoch']} fresh random prompts per epoch, G = {c['num_responses']}, "
            f"{c['num_steps_per_epoch']} steps per epoch, clipped loss, {payload['epochs']} epochs "
            f"(no early stopping). Held out by multiset (`SortTask.prompt_key`): {v['size']} "
            f"validation prompts ({v['distinct_keys']} multisets) and {t['size']} test prompts "
            f"({t['distinct_keys']} other multisets) of {multisets}, none in any training batch "
            "(asserted "
            f"per run). The on-policy baseline's (lr, entropy bonus) was chosen from "
            f"{tune['grid']} on tuning seeds {tune['seeds']} by final validation exact: "
            f"lr {tune['chosen']['learning_rate']:g}, entropy bonus "
            f"{tune['chosen']['entropy_coef']:g}, used by every cell. The batch of epoch e is "
            'sampled by the weights of epoch max(0, e - k) (`rollout_source="stale"`). '
            "Corrections: `recompute` (old = trainer, sampler ignored), `none` (old = sampler: "
            "PPO's ratio is the IS weight), `tis` / `mis` (old = trainer; token weights min(w, C) "
            f"/ w 1[w <= C], C = {c['correction_cap']}). Seeds {payload['seeds']}; every cell is "
            "scored once on the test split at the end and chooses nothing. "
            f"{payload['total_cpu_seconds'] / 60:.1f} CPU-minutes; load average {loads} on "
            f"{payload['machine']['logical_cores']} shared cores "
            f"({payload['machine']['date_utc']} UTC).",
            "",
            "Final test exact-sort, median [worst seed]; median over seeds of the mean ESS / n of "
            "the token weights pi_trainer / pi_sampler in parentheses:",
            "",
            "| k (epochs) | " + " | ".join(corrections) + " |",
            "|---|" + "---|" * len(corrections),
            *rows,
            "",
            f"Sampler/trainer mismatch, k = 0, sampler temperature "
            f"{payload['mismatch_temperature']} that the loss ignores:",
            "",
            "| " + " | ".join(corrections) + " |",
            "|" + "---|" * len(corrections),
            "| " + " | ".join(fmt(f"{temp}/{corr}") for corr in corrections) + " |",
            "",
            *(
                [
                    f"Two-sided TIS / MIS (`correction_cap_low` = "
                    f"{payload['two_sided']['correction_cap_low']}: weights below it raised / "
                    f"dropped; run afterwards with the same loop, which reproduced the validation curve of "
                    f"the stored cell {payload['two_sided']['reproduced_cell']} exactly):",
                    "",
                    "| k (epochs) | tis two-sided | mis two-sided |",
                    "|---|---|---|",
                    *(
                        f"| {k} | {fmt(f'k={k}/tis two-sided')} | {fmt(f'k={k}/mis two-sided')} |"
                        for k in payload["staleness_values"][1:]
                    ),
                    "",
                ]
                if "two_sided" in payload
                else []
            ),
            "Comparisons (`seed_stats.compare_seeds(..., paired=True)`: test exact, median "
            "[worst seed], exact two-sided sign-flip p over the seeds, paired by seed; "
            f"{len(payload['seeds'])} paired seeds cannot give p below "
            f"{2 / 2 ** len(payload['seeds']):.4f}):",
            "",
            "| a | b | a | b | p | verdict |",
            "|---|---|---|---|---|---|",
            *comparisons,
            "",
            f"{len(below)} of {n} comparisons have p < 0.05, {undecided} are undecided (the "
            "smallest p their test could give on these values is not below 0.05)"
            + (
                f" ({'; '.join(x['name_a'] + ' vs ' + x['name_b'] for x in below)})"
                if below
                else ""
            )
            + f"; a Bonferroni correction over the {n} tests puts the threshold at "
            f"{0.05 / n:.4f}.",
            "",
            "![validation exact-sort vs epoch per staleness and correction](results/staleness.png)",
        ]
    )


if __name__ == "__main__":
    main(**parse_args(add_options))
