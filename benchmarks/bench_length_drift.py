"""Length drift by loss aggregation, over more seeds than notebook 08 can afford.

Notebook 08, section 4: every wrong answer gets reward -1, a right one 0, and the rewards are
the deltas (``deltas_mode="rewards"``). Early in training almost every response is wrong, so
the true policy gradient is ~0 in expectation and a systematic change of response length comes
from how the per-token losses are aggregated. The notebook runs 3 seeds per aggregation; with
3 + 3 seeds an exact permutation test cannot reach p < 0.05 (its smallest value is 0.1), so the
direction of the token-level runs cannot be decided there (paired, over three seeds, it cannot
go below 0.25). This runs ``SEEDS`` (10) seeds of
the same setting (``CONFIG``, the setting of notebook 08's ``drift_config``, which runs 8 epochs;
here 12) per aggregation, and
one ablation that changes only the loss: ``token_mean`` without PPO's clip (``loss_mode=
"naive"``, same 2 optimizer steps per batch), to test whether the clip drives the token-level
drift.

Per run: mean sampled response length per epoch (tokens, EOS included). Comparisons
(``seed_stats.compare_seeds(..., paired=True)``: every setting runs the same seeds, seed k from
the same weights and prompts, so the exact sign-flip test over the seeds): final length against
the epoch-0 length of the same runs (direction), ``sequence_mean`` against each token-level
aggregation (the gap), and clipped against naive ``token_mean`` (the ablation). No held-out
score is involved: length is a training-batch statistic, nothing is tuned.

Writes results/length_drift.json. Run: ``python benchmarks/bench_length_drift.py [--workers 2]``
(``--quick``: seed 0, 2 epochs, into a temporary folder; ``--recompute``: only the comparisons,
from the stored per-seed lengths).
"""

from __future__ import annotations

import json
import multiprocessing
import statistics
import time
from pathlib import Path

import torch
from _common import RESULTS_DIR, output_dir, parse_args, record_splits, save, setup

from pgrl_helpers.config import TrainConfig
from pgrl_helpers.dedup_task import dedup_exact_reward
from pgrl_helpers.history import per_epoch
from pgrl_helpers.seed_stats import compare_seeds, pair_by_seed
from pgrl_helpers.training import run_policy_gradient

NAME = "length_drift"
SEEDS = tuple(range(10))
EPOCHS = 12  # notebook 08's drift_config runs 8 (DRIFT_EPOCHS); the benchmark runs 12
QUICK_EPOCHS = 2
#: name -> (loss_aggregation, loss_mode)
SETTINGS = {
    "sequence_mean": ("sequence_mean", "clipped"),
    "token_mean": ("token_mean", "clipped"),
    "constant_normalizer": ("constant_normalizer", "clipped"),
    "token_mean, no clip (naive)": ("token_mean", "naive"),
}


def wrong_answer_penalty(prompts, responses, eos):
    """0 for the exact answer, -1 for anything else, whatever its length (notebook 08)."""
    return dedup_exact_reward(prompts, responses, eos) - 1.0


#: Notebook 08's ``drift_config`` (section 4).
CONFIG = dict(
    model="autoregressive",
    task="sort_dedup",
    prompt_source="random",
    prompt_length=4,
    vocab_size=6,
    max_response_length=10,
    embedding_dim=32,
    num_layers=2,
    num_heads=4,
    reward_fn=wrong_answer_penalty,
    deltas_mode="rewards",
    loss_mode="clipped",
    num_responses=8,
    prompts_per_epoch=16,
    num_epochs=EPOCHS,
    num_steps_per_epoch=2,
    learning_rate=3e-3,
    eval_every=EPOCHS,
    num_eval_prompts=10,
)


def run(name: str, seed: int, epochs: int = EPOCHS) -> dict:
    torch.set_num_threads(1)
    aggregation, loss_mode = SETTINGS[name]
    c0 = time.process_time()
    sizes = dict(num_epochs=epochs, eval_every=epochs)
    config = TrainConfig(
        **(CONFIG | sizes | dict(loss_aggregation=aggregation, loss_mode=loss_mode, seed=seed))
    )
    history = run_policy_gradient(config)
    lengths = per_epoch(history, "response_length")
    print(f"{name} seed {seed}: {lengths[0]:.2f} -> {lengths[-1]:.2f}", flush=True)
    return {
        "setting": name,
        "seed": seed,
        "length_per_epoch": lengths,
        "cpu_seconds": time.process_time() - c0,
    }


def no_splits(payload: dict) -> dict:
    """The ``_common.record_splits`` record: this benchmark scores no held-out split."""
    record_splits(payload, validation=None, test=None, recipe="bench_length_drift.py probe",
                  benchmark="bench_length_drift.py")  # fmt: skip
    payload["splits"]["no_test_reason"] = (
        "response length of the training batches only: no validation or test split is scored"
    )
    return payload


def comparisons(runs: list[dict]) -> list[dict]:
    """Direction (last epoch vs epoch 0), gap (sequence_mean vs each token-level aggregation)
    and the clip ablation (change in length), each paired seed by seed."""
    first = {
        n: {r["seed"]: r["length_per_epoch"][0] for r in runs if r["setting"] == n}
        for n in SETTINGS
    }
    last = {
        n: {r["seed"]: r["length_per_epoch"][-1] for r in runs if r["setting"] == n}
        for n in SETTINGS
    }
    change = {n: {s: last[n][s] - first[n][s] for s in last[n]} for n in SETTINGS}

    def paired(a, b, name_a, name_b):
        _, x, y = pair_by_seed(a, b)
        return compare_seeds(x, y, name_a, name_b, paired=True)

    out = [
        {"kind": "direction"} | paired(last[n], first[n], f"{n}: last epoch", f"{n}: epoch 0")
        for n in SETTINGS
    ]
    for n in ("token_mean", "constant_normalizer"):
        out.append({"kind": "gap"} | paired(last["sequence_mean"], last[n], "sequence_mean", n))
    out.append(
        {"kind": "ablation: PPO's clip"}
        | paired(
            change["token_mean"],
            change["token_mean, no clip (naive)"],
            "token_mean (clipped): change",
            "token_mean, no clip: change",
        )
    )
    return out


def recompute_stored(out_dir=RESULTS_DIR) -> dict:
    """Only the comparisons of out_dir/length_drift.json, from its stored per-seed lengths."""
    path = Path(out_dir) / f"{NAME}.json"
    payload = json.loads(path.read_text())
    payload["comparisons"] = comparisons(payload["runs"])
    payload["comparisons_recomputed_utc"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return payload


def main(
    quick: bool = False,
    seeds=None,
    out_dir=RESULTS_DIR,
    *,
    workers: int = 2,
    recompute: bool = False,
) -> dict:
    """Every setting on every seed (default ``SEEDS``; ``quick``: seed 0, ``QUICK_EPOCHS``
    epochs), ``workers`` processes; ``recompute``: only the comparisons of the stored file."""
    if recompute:
        return recompute_stored(out_dir)
    out_dir = output_dir(out_dir, quick)
    setup()
    seeds = tuple(seeds) if seeds else ((0,) if quick else SEEDS)
    epochs = QUICK_EPOCHS if quick else EPOCHS
    jobs = [(name, seed, epochs) for name in SETTINGS for seed in seeds]
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        runs = pool.starmap(run, jobs)
    first = {n: [r["length_per_epoch"][0] for r in runs if r["setting"] == n] for n in SETTINGS}
    last = {n: [r["length_per_epoch"][-1] for r in runs if r["setting"] == n] for n in SETTINGS}
    change = {n: [b - a for a, b in zip(first[n], last[n])] for n in SETTINGS}
    summary = {
        n: {
            "grew": sum(b > a for a, b in zip(first[n], last[n])),
            "seeds": len(seeds),
            "median_first": statistics.median(first[n]),
            "median_last": statistics.median(last[n]),
            "median_change": statistics.median(change[n]),
            "min_change": min(change[n]),
        }
        for n in SETTINGS
    }
    for c in comparisons(runs):
        print(c)
    return save(
        NAME,
        no_splits(
            {
                "config": {k: (v if not callable(v) else v.__name__) for k, v in CONFIG.items()},
                "settings": {
                    n: {"loss_aggregation": a, "loss_mode": m} for n, (a, m) in SETTINGS.items()
                },
                "seeds": list(seeds),
                "epochs": epochs,
                "held_out_scores": "none (length is a training-batch statistic; nothing is tuned)",
                "summary": summary,
                "comparisons": comparisons(runs),
                "total_cpu_seconds": round(sum(r["cpu_seconds"] for r in runs), 1),
                "runs": runs,
            }
        ),
        out_dir,
    )


def add_options(parser) -> None:
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument(
        "--recompute", action="store_true", help="only the comparisons, from the stored file"
    )


def section(payload: dict, results_dir=RESULTS_DIR) -> str:
    """Response length at epoch 0 and at the end per aggregation, and the comparisons."""
    c, s = payload["config"], payload["summary"]
    rows = [
        f"| {n} | {x['grew']}/{x['seeds']} | {x['median_first']:.2f} | {x['median_last']:.2f} | "
        f"{x['median_change']:+.2f} | {x['min_change']:+.2f} |"
        for n, x in s.items()
    ]

    def verdict(x: dict) -> str:  # compare_seeds says "better"; for a length, say "longer"
        return x["verdict"].replace("better", "longer")

    table = [
        f"| {x['kind']} | {x['name_a']} | {x['name_b']} | {x['median_a']:.2f} | "
        f"{x['median_b']:.2f} | {x['p_value']:.4f} | {verdict(x)} |"
        for x in comparisons(payload["runs"])  # paired, recomputed from the per-seed lengths
    ]
    return "\n".join(
        [
            "## Length drift by loss aggregation (`bench_length_drift.py`, notebook 08 section 4)",
            "",
            f"Notebook 08's drift probe: every wrong answer gets reward -1, a right one 0, rewards "
            f"used as deltas; autoregressive policy, sort-dedup, length {c['prompt_length']}, "
            f"values 0-{c['vocab_size'] - 1}, at most {c['max_response_length']} response tokens, "
            f"G = {c['num_responses']}, {c['prompts_per_epoch']} prompts and "
            f"{c['num_steps_per_epoch']} optimizer steps per epoch, lr {c['learning_rate']:g}, "
            f"{payload['epochs']} epochs, seeds {payload['seeds'][0]}-{payload['seeds'][-1]}; the "
            "last row is the ablation that removes only PPO's clip. Mean sampled response length "
            "(tokens, EOS included) at epoch 0 and at the last epoch. No held-out score is used "
            f"and nothing is tuned. {payload['total_cpu_seconds'] / 60:.1f} CPU-minutes.",
            "",
            "| setting | seeds that grew | length at epoch 0 (median) | at the last epoch "
            "(median) | change (median) | change (smallest) |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
            "Comparisons (`seed_stats.compare_seeds(..., paired=True)`: every setting ran the same "
            "seeds, so the exact two-sided sign-flip test over the seeds' own differences; ten "
            "pairs cannot go below p = 0.002):",
            "",
            "| kind | a | b | median a | median b | p | verdict |",
            "|---|---|---|---|---|---|---|",
            *table,
        ]
    )


if __name__ == "__main__":
    main(**parse_args(add_options))
