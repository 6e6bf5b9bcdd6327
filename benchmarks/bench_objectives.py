"""Leaderboard of the 2025 objective family on the autoregressive sort-dedup task (issue 15).

GRPO, Dr. GRPO, DAPO, GSPO, CISPO, RLOO and REINFORCE++ (each a ``TrainConfig`` of the same
loop), 5 seeds each, on prompts of length 3 with values 0-3. 32 held-out prompts are kept
out of training: the first 16 (validation) decide the stop (greedy exact >= 95%, checked
every 5 epochs), the other 16 (test) are scored once at the end. Reported per objective:
responses sampled and wall time to the validation target, final test exact (median and
worst seed), final token entropy, and the number of collapsed seeds (final entropy below
0.1 nats with test exact below the target).

Tuning budget: none. Every objective uses its paper's / TRL's recommended clip settings
and otherwise the same shared settings (``BASE``); results are therefore a comparison of
defaults, not of tuned methods. Wall times are measured on a shared 2-core CPU (see the
load average saved with the results) and are only comparable within one run.
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import replace

from _common import markdown_table, save, setup

from pgrl_helpers.training import TrainConfig, evaluate_greedy, run_policy_gradient

SEEDS = (0, 1, 2, 3, 4)
TARGET = 0.95
MAX_EPOCHS = 40
COLLAPSE_ENTROPY = 0.1

BASE = TrainConfig(
    model="autoregressive", task="sort_dedup", prompt_source="random", prompt_length=4,
    vocab_size=6, max_response_length=6, embedding_dim=32, num_layers=2, num_heads=4,
    reward_fn="dedup_position_reward", deltas_mode="normalized_rewards", loss_mode="clipped",
    loss_aggregation="token_mean", num_responses=16, prompts_per_epoch=16, entropy_coef=0.05,
    num_epochs=MAX_EPOCHS, num_steps_per_epoch=4, learning_rate=3e-3, eval_every=5,
    num_eval_prompts=10, overlong_buffer=1,  # 10 + 10 held-out sets of values (of 56)
)  # fmt: skip

#: name -> the fields that differ from BASE (the paper's / TRL's recommended settings).
OBJECTIVES: dict[str, dict] = {
    "GRPO": {"loss_aggregation": "sequence_mean"},
    "Dr. GRPO": {"deltas_mode": "centered_rewards", "loss_aggregation": "constant_normalizer"},
    "DAPO": {"epsilon_high": 0.28, "batch_filter": "dapo"},
    "GSPO": {"importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4,
             "loss_aggregation": "sequence_mean"},
    "CISPO": {"loss_mode": "cispo", "epsilon": 1.0, "epsilon_high": 4.0},
    "RLOO": {"deltas_mode": "loo_rewards"},
    "REINFORCE++": {"deltas_mode": "reinforce_pp_baseline"},
}  # fmt: skip


def run(config: TrainConfig) -> dict:
    """One seed: train until validation exact >= TARGET or MAX_EPOCHS; score the test half."""
    task = config.build_task()
    start = time.perf_counter()
    curve = []  # (seconds, responses sampled, validation exact, mean reward, entropy, length)
    state = {"reached_at": None}

    def callback(epoch, history):
        if (epoch + 1) % config.eval_every:
            return False
        half = len(history.heldout_prompts) // 2
        exact = evaluate_greedy(history.model, history.heldout_prompts[:half], task)
        step = history.steps()[-1]
        responses = (epoch + 1) * config.batch_prompts * config.num_responses
        curve.append([time.perf_counter() - start, responses, exact["exact_sort"],
                      step["mean_reward"], step["entropy"], step["response_length"]])  # fmt: skip
        if exact["exact_sort"] >= TARGET:
            state["reached_at"] = curve[-1]
            return "stop"
        return False

    history = run_policy_gradient(config, callback=callback)
    half = len(history.heldout_prompts) // 2
    test = evaluate_greedy(history.model, history.heldout_prompts[half:], task)
    last = history.steps()[-1]
    reached = state["reached_at"]
    return {
        "seed": config.seed,
        "reached": reached is not None,
        "seconds_to_target": None if reached is None else reached[0],
        "responses_to_target": None if reached is None else reached[1],
        "seconds": time.perf_counter() - start,
        "test_exact": test["exact_sort"],
        "final_entropy": last["entropy"],
        "collapsed": last["entropy"] < COLLAPSE_ENTROPY and test["exact_sort"] < TARGET,
        "curve": curve,
    }


def summarise(name: str, runs: list[dict]) -> dict:
    reached = [r for r in runs if r["reached"]]
    return {
        "objective": name,
        "seeds_reached": len(reached),
        "median_responses_to_target": (
            statistics.median(r["responses_to_target"] for r in reached) if reached else None
        ),
        "median_seconds_to_target": (
            statistics.median(r["seconds_to_target"] for r in reached) if reached else None
        ),
        "median_test_exact": statistics.median(r["test_exact"] for r in runs),
        "worst_test_exact": min(r["test_exact"] for r in runs),
        "median_final_entropy": statistics.median(r["final_entropy"] for r in runs),
        "collapsed": sum(r["collapsed"] for r in runs),
    }


def main(names: list[str], part: str | None = None) -> None:
    """Run ``names`` (all by default); ``part`` saves to objectives_<part>.json for ``merge``."""
    setup()
    results, summary = {}, []
    for name in names:
        runs = []
        for seed in SEEDS:
            config = replace(BASE, seed=seed, **OBJECTIVES[name])
            runs.append(run(config))
            r = runs[-1]
            print(f"{name} seed {seed}: reached={r['reached']} test exact "
                  f"{r['test_exact']:.3f} entropy {r['final_entropy']:.3f} "
                  f"({r['seconds']:.0f} s)", flush=True)  # fmt: skip
        results[name] = runs
        summary.append(summarise(name, runs))
    if part is not None:
        save(f"objectives_{part}", {"summary": summary, "runs": results})
        return
    write(summary, results, None)


def write(summary: list[dict], results: dict, part_loads) -> None:
    """The leaderboard table, printed and saved with everything to results/objectives.json."""
    headers = ["objective", f"seeds reaching {TARGET:.0%}", "responses to target (median)",
               "s to target (median)", "test exact median", "test exact worst seed",
               "final entropy", "collapsed"]  # fmt: skip

    def fmt(x, spec):
        return "-" if x is None else format(x, spec)

    rows = [[s["objective"], f"{s['seeds_reached']}/{len(SEEDS)}",
             fmt(s["median_responses_to_target"], ".0f"), fmt(s["median_seconds_to_target"], ".1f"),
             f"{s['median_test_exact']:.3f}", f"{s['worst_test_exact']:.3f}",
             f"{s['median_final_entropy']:.3f}", s["collapsed"]] for s in summary]  # fmt: skip
    table = markdown_table(headers, rows)
    print(table)
    fields = {f: getattr(BASE, f) for f in ("prompt_length", "vocab_size", "max_response_length",
              "num_responses", "prompts_per_epoch", "num_steps_per_epoch", "learning_rate",
              "entropy_coef", "num_eval_prompts")}  # fmt: skip
    save("objectives", {"target": TARGET, "max_epochs": MAX_EPOCHS, "seeds": list(SEEDS),
                        "base": fields, "objectives": OBJECTIVES, "summary": summary,
                        "table": table, "part_load_averages": part_loads, "runs": results})  # fmt: skip


def merge(parts: list[str]) -> None:
    """Combine objectives_<part>.json files (runs split over processes) into objectives.json."""
    import json

    from _common import RESULTS_DIR

    summary, runs, loads = [], {}, []
    for part in parts:
        data = json.loads((RESULTS_DIR / f"objectives_{part}.json").read_text())
        summary += data["summary"]
        runs.update(data["runs"])
        loads.append(data["machine"]["load_average_1_5_15_min"])
    order = list(OBJECTIVES)
    summary.sort(key=lambda s: order.index(s["objective"]))
    write(summary, {name: runs[name] for name in order if name in runs}, loads)


if __name__ == "__main__":
    # usage: bench_objectives.py                    (every objective, one process)
    #        bench_objectives.py --part a GRPO DAPO (a subset, saved as objectives_a.json)
    #        bench_objectives.py --merge a b        (combine the parts into objectives.json)
    args = sys.argv[1:]
    if args[:1] == ["--merge"]:
        merge(args[1:])
    elif args[:1] == ["--part"]:
        main(args[2:], part=args[1])
    else:
        main(args or list(OBJECTIVES))
