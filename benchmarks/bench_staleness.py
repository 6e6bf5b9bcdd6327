"""Stale and mismatched rollouts: GRPO with a sampler k epochs behind, with and without corrections.

Issue 16. A SortTransformer learns to sort (length 4, values 0-5) from its own samples,
which a copy of the policy lagging k = 0, 1, 2, 4, 8 epochs behind generates
(``rollout_source="stale"``). Four ways to use such a batch (``off_policy_correction``):

* ``recompute``: the trainer recomputes the old log-probs and ignores the sampler
  (uncorrected: the bias Yao et al. 2025 point out);
* ``none``: old log-probs = the sampler's, so the clipped ratio pi / pi_sampler is the
  importance weight (PPO against the behaviour policy);
* ``tis`` / ``mis``: old = the trainer's; each token's loss times min(w, C) or w 1[w <= C],
  w = pi_trainer / pi_sampler, C = 2 (token level).

Plus a sampler/trainer mismatch without staleness: the sampler runs at temperature 1.5,
which the loss does not know about. Every run has a fixed number of epochs (no early
stopping) and is scored on 200 held-out prompts never trained on. 3 seeds; the worst seed
is reported next to the median. Writes results/staleness.json and results/staleness.png.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from _common import RESULTS_DIR, save, setup  # noqa: E402

from pgrl_helpers.training import TrainConfig, run_policy_gradient  # noqa: E402

SEEDS = (0, 1, 2)
STALENESS = (0, 1, 2, 4, 8)
CORRECTIONS = ("recompute", "none", "tis", "mis")
MISMATCH_TEMPERATURE = 1.5
TARGET = 0.5  # held-out exact-sort for "epochs to target"

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
    num_epochs=80,
    num_steps_per_epoch=4,
    learning_rate=3e-3,
    loss_mode="clipped",
    eval_every=5,
    num_eval_prompts=200,
    rollout_source="stale",
    correction_cap=2.0,
)


def run(config: TrainConfig) -> dict:
    t0 = time.perf_counter()
    history = run_policy_gradient(config)
    seconds = time.perf_counter() - t0
    evals = history.evals()
    steps = history.steps()
    curve = [r["heldout_exact_sort"] for r in evals]
    reached = [r["epoch"] for r in evals if r["heldout_exact_sort"] >= TARGET]
    return {
        "seed": config.seed,
        "staleness": config.staleness,
        "correction": config.off_policy_correction,
        "sampler_temperature": config.sampler_temperature,
        "eval_epochs": [r["epoch"] for r in evals],
        "heldout_exact_sort": curve,
        "final_heldout_exact_sort": curve[-1],
        "best_heldout_exact_sort": max(curve),
        "epochs_to_target": reached[0] if reached else None,
        "mean_ess_fraction": statistics.mean(s["ess_fraction"] for s in steps),
        "mean_is_cut_fraction": statistics.mean(s["is_cut_fraction"] for s in steps),
        "seconds": seconds,
    }


def summarise(runs: list[dict]) -> dict:
    finals = [r["final_heldout_exact_sort"] for r in runs]
    return {
        "median_final": statistics.median(finals),
        "worst_final": min(finals),
        "median_ess_fraction": statistics.median(r["mean_ess_fraction"] for r in runs),
        "median_curve": [
            statistics.median(c) for c in zip(*(r["heldout_exact_sort"] for r in runs))
        ],
    }


def main() -> None:
    setup()
    runs = []
    for seed in SEEDS:
        for k in STALENESS:
            # k = 0: sampler == trainer bit for bit, every weight is 1: one run serves all four
            for correction in CORRECTIONS if k else ("none",):
                r = run(replace(CONFIG, seed=seed, staleness=k, off_policy_correction=correction))
                runs.append(r)
                print(
                    f"seed {seed} k {k} {correction:9s}: final {r['final_heldout_exact_sort']:.3f}"
                    f" ESS/N {r['mean_ess_fraction']:.3f} ({r['seconds']:.1f} s)",
                    flush=True,
                )
        for correction in CORRECTIONS:
            config = replace(
                CONFIG,
                seed=seed,
                sampler_temperature=MISMATCH_TEMPERATURE,
                off_policy_correction=correction,
            )
            r = run(config)
            runs.append(r)
            print(f"seed {seed} T {MISMATCH_TEMPERATURE} {correction}: "
                  f"final {r['final_heldout_exact_sort']:.3f}", flush=True)  # fmt: skip

    def select(k, correction, temperature=1.0):
        if k == 0 and temperature == 1.0:
            correction = "none"
        return [
            r
            for r in runs
            if r["staleness"] == k
            and r["correction"] == correction
            and r["sampler_temperature"] == temperature
        ]

    summary = {
        "staleness": {
            f"k={k}/{c}": summarise(select(k, c)) for k in STALENESS for c in CORRECTIONS
        },
        "mismatch": {c: summarise(select(0, c, MISMATCH_TEMPERATURE)) for c in CORRECTIONS},
    }
    fig, axes = plt.subplots(1, len(CORRECTIONS), figsize=(14, 3.5), sharey=True)
    for ax, correction in zip(axes, CORRECTIONS):
        for k in STALENESS:
            s = summary["staleness"][f"k={k}/{correction}"]
            ax.plot(select(k, correction)[0]["eval_epochs"], s["median_curve"], label=f"k={k}")
        ax.set_title(correction)
        ax.set_xlabel("epoch")
    axes[0].set_ylabel("held-out exact-sort (median of 3 seeds)")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(RESULTS_DIR / "staleness.png", dpi=100)
    save(
        "staleness",
        {
            "config": {k: v for k, v in vars(CONFIG).items() if not callable(v)},
            "seeds": list(SEEDS),
            "staleness_values": list(STALENESS),
            "corrections": list(CORRECTIONS),
            "mismatch_temperature": MISMATCH_TEMPERATURE,
            "target": TARGET,
            "summary": summary,
            "runs": runs,
        },
    )


if __name__ == "__main__":
    main()
