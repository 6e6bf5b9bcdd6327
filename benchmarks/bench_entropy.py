"""Entropy collapse and its remedies on the autoregressive sort-dedup task (notebook 11 sec. 7).

The collapsing run (``COLLAPSE``): GRPO (clipped ratio, token-mean loss) on the leaderboard's
task (``bench_objectives.BASE``: prompts of length 4, values 0-5, 10 + 10 held-out sets of
values) with *no* entropy bonus and a large learning rate, so the policy's token entropy falls
towards 0 and the reward stops improving. The remedies change one dial each, same seeds:

* clip-higher (DAPO eq. 10): epsilon_high 0.28;
* entropy bonus: entropy_coef 0.05 (the leaderboard's shared setting);
* KL-Cov (Cui et al. 2025, arXiv 2505.22617): loss_mode 'kl_cov' with the paper's
  k = 0.002 and beta = 1, and with k = 0.05 (with ~900 real tokens per batch the paper's k
  selects a single token);
* Clip-Cov (same paper; verl's defaults: ratio 2e-4, covariance band (1, 5)) and at ratio 0.02:
  the PPO loss of that fraction of tokens (at least one) is detached;
* the high-entropy-token mask (Wang et al. 2025, arXiv 2506.01939; TRL ``top_entropy_quantile``):
  only the top 20% of real tokens by entropy carry the policy gradient.

Every run trains ``EPOCHS`` epochs (no early stop), logging the training reward and entropy
per step and the validation / test exact every 5 epochs. The notebook fits Cui et al.'s
R = -a exp(H) + b to the collapsing runs' (entropy, reward) points. Budget: 8 settings x 5
seeds; CPU seconds per run saved with the results (shared 2-core CPU: see the load average).

    python benchmarks/bench_entropy.py                          (every setting, one process)
    python benchmarks/bench_entropy.py --part a --remedies "clip-higher"   (saved as entropy_a)
    python benchmarks/bench_entropy.py --merge a b              (the parts into entropy.json)
    python benchmarks/bench_entropy.py --record-splits          (add the split record)
    python benchmarks/bench_entropy.py --quick                  (seed 0, 2 epochs)
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

from _common import RESULTS_DIR, output_dir, parse_args, record_file_splits, save, setup
from bench_objectives import BASE

from pgrl_helpers.training import run_policy_gradient

NAME = "entropy"
SEEDS = (0, 1, 2, 3, 4)
EPOCHS = 60
QUICK_EPOCHS = 2
COLLAPSE = replace(BASE, entropy_coef=0.0, learning_rate=1e-2, num_epochs=EPOCHS,
                   target_validation_exact_sort=None)  # fmt: skip

#: name -> the fields that differ from COLLAPSE.
REMEDIES: dict[str, dict] = {
    "none (GRPO)": {},
    "clip-higher": {"epsilon_high": 0.28},
    "entropy bonus": {"entropy_coef": 0.05},
    "KL-Cov k=0.002": {"loss_mode": "kl_cov", "kl_cov_ratio": 0.002, "kl_cov_coef": 1.0},
    "KL-Cov k=0.05": {"loss_mode": "kl_cov", "kl_cov_ratio": 0.05, "kl_cov_coef": 1.0},
    "Clip-Cov r=0.0002": {"clip_cov_ratio": 2e-4},
    "Clip-Cov r=0.02": {"clip_cov_ratio": 0.02},
    "top-20% entropy tokens": {"top_entropy_quantile": 0.2},
}


def run(config) -> dict:
    start = time.process_time()
    history = run_policy_gradient(config)
    steps, evals = history.steps(), history.evals()
    assert history.train_prompts_with_heldout_key == 0
    last = [s for s in steps if s["epoch"] == steps[-1]["epoch"]]
    return {
        "seed": config.seed,
        "cpu_seconds": time.process_time() - start,
        "step_entropy": [s["entropy"] for s in steps],
        "step_reward": [s["mean_reward"] for s in steps],
        "eval_epoch": [e["epoch"] for e in evals],
        "validation_exact": [e["validation_exact_sort"] for e in evals],
        "test_exact": [e["test_exact_sort"] for e in evals],
        "final_entropy": sum(s["entropy"] for s in last) / len(last),
        "final_reward": sum(s["mean_reward"] for s in last) / len(last),
        "final_test_exact": evals[-1]["test_exact_sort"],
    }


def main(
    quick: bool = False,
    seeds=None,
    out_dir=RESULTS_DIR,
    *,
    remedies=None,
    part: str | None = None,
    merge: list[str] | None = None,
    record_splits: bool = False,
) -> dict:
    """Every remedy (or ``remedies``) on ``seeds`` (default ``SEEDS``; ``quick``: seed 0,
    ``QUICK_EPOCHS`` epochs); ``part`` saves them as entropy_<part>.json for ``merge``;
    ``merge`` combines such parts; ``record_splits`` only adds the split record."""
    if merge:
        return merge_parts(merge, out_dir)
    if record_splits:
        return record_splits_entropy(out_dir)
    out_dir = output_dir(out_dir, quick)
    setup()
    seeds = tuple(seeds) if seeds else ((0,) if quick else SEEDS)
    collapse = replace(COLLAPSE, num_epochs=QUICK_EPOCHS) if quick else COLLAPSE
    results = {}
    for name in remedies or REMEDIES:
        results[name] = []
        for seed in seeds:
            r = run(replace(collapse, seed=seed, **REMEDIES[name]))
            results[name].append(r)
            print(f"{name} seed {seed}: final entropy {r['final_entropy']:.3f}, reward "
                  f"{r['final_reward']:.3f}, test exact {r['final_test_exact']:.2f} "
                  f"({r['cpu_seconds']:.0f} CPU s)", flush=True)  # fmt: skip
    fields = {f: getattr(collapse, f) for f in ("prompt_length", "vocab_size", "num_responses",
              "prompts_per_epoch", "num_steps_per_epoch", "learning_rate", "entropy_coef",
              "loss_aggregation", "num_eval_prompts", "num_epochs")}  # fmt: skip
    payload = {"seeds": list(seeds), "collapse_config": fields, "remedies": REMEDIES,
               "runs": results}  # fmt: skip
    saved = save(NAME if part is None else f"{NAME}_{part}", payload, out_dir)
    return record_splits_entropy(out_dir) if part is None else saved


RECIPE = (
    "bench_entropy.py comparison: the collapsing GRPO run and its remedies, side by side, none "
    "chosen by its test score"
)


def record_splits_entropy(out_dir=RESULTS_DIR) -> dict:
    """The ``_common.record_splits`` record of entropy.json."""
    return record_file_splits(Path(out_dir) / f"{NAME}.json", COLLAPSE, "bench_entropy.py", RECIPE)


def merge_parts(parts: list[str], out_dir=RESULTS_DIR) -> dict:
    """Combine entropy_<part>.json files into entropy.json (keeps each part's load average)."""
    runs, loads = {}, []
    for part in parts:
        data = json.loads((Path(out_dir) / f"{NAME}_{part}.json").read_text())
        runs.update(data["runs"])
        loads.append(data["machine"]["load_average_1_5_15_min"])
    fields = data["collapse_config"]
    save(NAME, {"seeds": list(SEEDS), "collapse_config": fields, "remedies": REMEDIES,
                "part_load_averages": loads,
                "runs": {n: runs[n] for n in REMEDIES if n in runs}}, out_dir)  # fmt: skip
    return record_splits_entropy(out_dir)


def add_options(parser) -> None:
    parser.add_argument("--remedies", nargs="+", metavar="NAME", help="default: all")
    parser.add_argument("--part", help="save as entropy_<part>.json (for --merge)")
    parser.add_argument("--merge", nargs="+", metavar="PART", help="combine parts")
    parser.add_argument("--record-splits", action="store_true", help="add the split record")


def section(payload: dict, results_dir=RESULTS_DIR) -> str:
    """Medians, worst seed and compare_seeds p-values against no remedy, and Cui et al.'s
    R = -a exp(H) + b fitted to the collapsing runs."""
    import torch

    from pgrl_helpers.seed_stats import compare_seeds, pair_by_seed

    def paired_p(runs, others, key):  # the same seeds: paired, seed by seed
        _, a, b = pair_by_seed(
            {x["seed"]: x[key] for x in runs}, {x["seed"]: x[key] for x in others}
        )
        return compare_seeds(a, b, paired=True)["p_value"]

    runs, c = payload["runs"], payload["collapse_config"]
    none = runs["none (GRPO)"]
    rows, n_tests = [], 0
    for name, rs in runs.items():
        h = [x["final_entropy"] for x in rs]
        t = [x["final_test_exact"] for x in rs]
        r = [x["final_reward"] for x in rs]
        if name == "none (GRPO)":
            p_h = p_t = "-"
        else:
            p_h = f"{paired_p(rs, none, 'final_entropy'):.3f}"
            p_t = f"{paired_p(rs, none, 'final_test_exact'):.3f}"
            n_tests += 2
        rows.append(
            f"| {name} | {statistics.median(h):.3f} | {min(h):.3f} | {statistics.median(r):.3f} "
            f"| {statistics.median(t):.2f} | {min(t):.2f} | {p_h} | {p_t} |"
        )
    entropy = torch.tensor([v for x in none for v in x["step_entropy"]], dtype=torch.float64)
    reward = torch.tensor([v for x in none for v in x["step_reward"]], dtype=torch.float64)
    design = torch.stack([-entropy.exp(), torch.ones_like(entropy)], dim=1)
    a, b = torch.linalg.lstsq(design, reward[:, None]).solution.flatten().tolist()
    fitted = a * -entropy.exp() + b
    r2 = 1 - ((reward - fitted) ** 2).sum().item() / ((reward - reward.mean()) ** 2).sum().item()
    final = statistics.fmean(x["final_reward"] for x in none)
    seeds = ", ".join(map(str, payload["seeds"]))
    settings = "; ".join(f"{k}: {v}" for k, v in payload["remedies"].items() if v)
    return "\n".join(
        [
            "## Entropy collapse and its remedies (`bench_entropy.py`, notebook 11 section 7)",
            "",
            f"The collapsing run: GRPO (clipped, token mean) on the task of section "
            f"<bench_objectives> with lr "
            f"{c['learning_rate']:g}, no entropy bonus, {c['num_epochs']} epochs (no early stop); "
            f"the remedies change one dial each on the same seeds {seeds}: {settings}. Final "
            "entropy and reward: mean over the last epoch's optimizer steps; test exact: the "
            f"loop's test split ({c['num_eval_prompts']} sets of values), scored once per run at "
            "its end, choosing "
            "nothing. p: `seed_stats.compare_seeds(..., paired=True)` (exact sign-flip test over the "
            "shared seeds; five pairs cannot go below 0.0625) against no "
            f"remedy; {n_tests} tests, Bonferroni threshold {0.05 / max(n_tests, 1):.4f}.",
            "",
            "| setting | final entropy (median) | final entropy (lowest seed) | final training "
            "reward (median) | test exact (median) | test exact (worst seed) | p entropy vs none "
            "| p test exact vs none |",
            "|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            f"Cui et al.'s R = -a exp(H) + b fitted by least squares to every optimizer step of "
            f"the collapsing runs: a = {a:.3f}, b = {b:.3f}, R^2 = {r2:.2f}; predicted ceiling at "
            f"H = 0: {b - a:.3f}, mean training reward of their last epoch: {final:.3f}.",
        ]
    )


if __name__ == "__main__":
    main(**parse_args(add_options))
