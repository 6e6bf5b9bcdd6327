"""Leaderboard of the 2025 objective family on the autoregressive sort-dedup task (issue 15).

GRPO, Dr. GRPO, DAPO, GSPO, CISPO, RLOO and REINFORCE++ (each a ``TrainConfig`` of the same
loop), 5 seeds each, on prompts of length 4 with values 0-5. The loop holds out 10 + 10 sets
of values (a prompt's key is its set of distinct values, 56 possible; see
``SortDedupTask.prompt_key``): the 10 validation prompts decide the stop (greedy exact >= 95%,
checked every 5 epochs), the 10 test prompts are what we report. Reported per objective:
responses sampled (resampled ones included) and wall time to the validation target, final
test exact (median and worst seed), final token entropy, and the number of collapsed seeds
(final entropy below 0.1 nats with test exact below the target).

Tuning budget (``--tune``): one learning rate per objective chosen from ``TUNING_LRS`` on one
tuning seed (``TUNING_SEED``, not a leaderboard seed) trained ``TUNING_EPOCHS`` epochs, by final
*validation* exact (ties:
fewer responses to target, then higher validation reward); everything else is the paper's /
TRL's recommended setting on top of the shared ``BASE``. Wall times are measured on a shared
2-core CPU (load averages saved with the results) and are only comparable within one run;
CPU seconds are saved too. The leaderboard runs stop at the target or at ``MAX_EPOCHS`` = 150
(the tuning runs had 60). A first run at 40 epochs (2026-12-02, cut by a load of ~45) saw no
objective reach the target in any of its 35 runs.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from dataclasses import replace

from _common import RESULTS_DIR, markdown_table, save, setup

from pgrl_helpers.seed_stats import permutation_p_value
from pgrl_helpers.training import TrainConfig, run_policy_gradient

SEEDS = (0, 1, 2, 3, 4)
TARGET = 0.95
MAX_EPOCHS = 150
TUNING_EPOCHS = 60
COLLAPSE_ENTROPY = 0.1
TUNING_LRS = (3e-3, 1e-2)
TUNING_SEED = 100

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
    "DAPO": {"epsilon_high": 0.28, "batch_filter": "dapo", "dynamic_sampling_max_draws": 3},
    "GSPO": {"importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4,
             "loss_aggregation": "sequence_mean"},
    "CISPO": {"loss_mode": "cispo", "epsilon": 1.0, "epsilon_high": 4.0},
    "RLOO": {"deltas_mode": "loo_rewards"},
    "REINFORCE++": {"deltas_mode": "reinforce_pp_baseline"},
}  # fmt: skip


def run(config: TrainConfig) -> dict:
    """One seed: train until validation exact >= TARGET (the loop's own stop) or MAX_EPOCHS.

    Validation = the loop's held-out set (stopping only); test = its disjoint test set.
    """
    start, cpu = time.perf_counter(), time.process_time()
    curve = []  # (seconds, responses sampled, validation exact, mean reward, entropy, length)

    def point(history):
        e, s = history.evals()[-1], history.steps()[-1]
        curve.append([time.perf_counter() - start, e["responses_sampled"], e["heldout_exact_sort"],
                      s["mean_reward"], s["entropy"], s["response_length"]])  # fmt: skip

    def callback(epoch, history):
        if history.evals()[-1]["epoch"] == epoch + 1:  # an evaluation ran this epoch
            point(history)
        return False

    history = run_policy_gradient(replace(config, target_heldout_exact_sort=TARGET), callback)
    if history.stop_reason == "target":  # the loop stopped before the callback ran
        point(history)
    final, last = history.evals()[-1], history.steps()[-1]
    reached = history.stop_reason == "target"
    assert history.train_prompts_with_heldout_key == 0
    return {
        "seed": config.seed,
        "learning_rate": config.learning_rate,
        "reached": reached,
        "seconds_to_target": curve[-1][0] if reached else None,
        "responses_to_target": final["responses_sampled"] if reached else None,
        "seconds": time.perf_counter() - start,
        "cpu_seconds": time.process_time() - cpu,
        "validation_exact": final["heldout_exact_sort"],
        "validation_reward": final["heldout_mean_reward"],
        "test_exact": final["test_exact_sort"],
        "final_entropy": last["entropy"],
        "collapsed": last["entropy"] < COLLAPSE_ENTROPY and final["test_exact_sort"] < TARGET,
        "curve": curve,
    }


def tune(names: list[str], part: str) -> None:
    """Each objective at every ``TUNING_LRS`` on ``TUNING_SEED``; saved as objectives_tuning_<part>."""
    setup()
    runs = {}
    for name in names:
        runs[name] = []
        for lr in TUNING_LRS:
            config = replace(BASE, seed=TUNING_SEED, learning_rate=lr, num_epochs=TUNING_EPOCHS)
            r = run(replace(config, **OBJECTIVES[name]))
            r.pop("curve")
            runs[name].append(r)
            print(f"tune {name} lr {lr:g}: validation {r['validation_exact']:.2f} "
                  f"({r['cpu_seconds']:.0f} CPU s)", flush=True)  # fmt: skip
    save(f"objectives_tuning_{part}", {"lrs": list(TUNING_LRS), "seed": TUNING_SEED,
                                       "epochs": TUNING_EPOCHS, "runs": runs})  # fmt: skip


def chosen_learning_rates() -> dict[str, float]:
    """name -> the tuned lr: best final validation exact, then fewer responses, then reward."""
    runs = {}
    for path in sorted(RESULTS_DIR.glob("objectives_tuning_*.json")):
        runs.update(json.loads(path.read_text())["runs"])

    def score(r):
        return (r["validation_exact"], -(r["responses_to_target"] or 1e12), r["validation_reward"])

    return {name: max(rs, key=score)["learning_rate"] for name, rs in runs.items()}


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
        "learning_rate": runs[0]["learning_rate"],
        "cpu_seconds": sum(r["cpu_seconds"] for r in runs),
    }


def main(names: list[str], part: str | None = None, seeds=SEEDS) -> None:
    """Run ``names`` (all by default); ``part`` saves to objectives_<part>.json for ``merge``."""
    setup()
    lrs = chosen_learning_rates()
    results, summary = {}, []
    for name in names:
        runs = []
        for seed in seeds:
            config = replace(BASE, seed=seed, learning_rate=lrs[name], **OBJECTIVES[name])
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
    headers = ["objective", "lr (tuned)", f"seeds reaching {TARGET:.0%}", "responses to target (median)",
               "s to target (median)", "test exact median", "test exact worst seed",
               "final entropy", "collapsed"]  # fmt: skip

    def fmt(x, spec):
        return "-" if x is None else format(x, spec)

    rows = [[s["objective"], f"{s['learning_rate']:g}", f"{s['seeds_reached']}/{len(SEEDS)}",
             fmt(s["median_responses_to_target"], ".0f"), fmt(s["median_seconds_to_target"], ".1f"),
             f"{s['median_test_exact']:.3f}", f"{s['worst_test_exact']:.3f}",
             f"{s['median_final_entropy']:.3f}", s["collapsed"]] for s in summary]  # fmt: skip
    table = markdown_table(headers, rows)
    print(table)
    fields = {f: getattr(BASE, f) for f in ("prompt_length", "vocab_size", "max_response_length",
              "num_responses", "prompts_per_epoch", "num_steps_per_epoch", "learning_rate",
              "entropy_coef", "num_eval_prompts")}  # fmt: skip
    tuning = {"lrs": list(TUNING_LRS), "seed": TUNING_SEED, "epochs": TUNING_EPOCHS,
              "chosen": chosen_learning_rates()}  # fmt: skip
    save("objectives", {"target": TARGET, "max_epochs": MAX_EPOCHS, "seeds": list(SEEDS),
                        "tuning": tuning,
                        "base": fields, "objectives": OBJECTIVES, "summary": summary,
                        "table": table, "part_load_averages": part_loads, "runs": results})  # fmt: skip


def merge(parts: list[str]) -> None:
    """Combine objectives_<part>.json files (runs split over processes, by objective or by
    seed) into objectives.json; the summary is recomputed from all runs of each objective."""
    runs, loads = {}, []
    for part in parts:
        data = json.loads((RESULTS_DIR / f"objectives_{part}.json").read_text())
        for name, part_runs in data["runs"].items():
            runs.setdefault(name, []).extend(part_runs)
        loads.append(data["machine"]["load_average_1_5_15_min"])
    order = [name for name in OBJECTIVES if name in runs]
    for name in order:
        runs[name].sort(key=lambda r: r["seed"])
        assert [r["seed"] for r in runs[name]] == list(SEEDS), (
            name,
            [r["seed"] for r in runs[name]],
        )
    write([summarise(name, runs[name]) for name in order], {n: runs[n] for n in order}, loads)


def results_section() -> str:
    """RESULTS.md's section 11, from results/objectives.json (``--section`` prints it)."""
    r = json.loads((RESULTS_DIR / "objectives.json").read_text())
    runs, b = r["runs"], r["base"]
    chosen = ", ".join(f"{k} {v:g}" for k, v in r["tuning"]["chosen"].items())
    n_runs = sum(map(len, runs.values()))
    reached = sum(x["reached"] for rs in runs.values() for x in rs)

    def cost(x):  # responses to the target; the whole budget if it never got there
        return x["responses_to_target"] if x["reached"] else x["curve"][-1][1]

    beyond, within = [], []
    for name, rs in runs.items():
        if name == "GRPO":
            continue
        for label, f in (("test exact", lambda x: x["test_exact"]), ("responses", cost)):
            diff = statistics.mean(map(f, rs)) - statistics.mean(map(f, runs["GRPO"]))
            p = permutation_p_value([f(x) for x in rs], [f(x) for x in runs["GRPO"]])
            (beyond if p < 0.05 else within).append(f"{name} {label} {diff:+.3g} (p = {p:.3f})")
    cpu = sum(x["cpu_seconds"] for rs in runs.values() for x in rs)
    return "\n".join(
        [
            "## 11. The 2025-26 objective family on the autoregressive task (`bench_objectives.py`, "
            "notebook 11)",
            "",
            f"Sort-dedup with the autoregressive policy (prompt length {b['prompt_length']}, values "
            f"0-{b['vocab_size'] - 1}, at most {b['max_response_length']} response tokens), G = "
            f"{b['num_responses']}, {b['prompts_per_epoch']} prompts per epoch, "
            f"{b['num_steps_per_epoch']} optimizer steps per epoch, entropy bonus {b['entropy_coef']}; "
            f"seeds {', '.join(map(str, r['seeds']))}; at most {r['max_epochs']} epochs. Held out **by "
            f"content** (a prompt's key is its set of distinct values, 56 possible): "
            f"{b['num_eval_prompts']} validation prompts decide the stop (greedy exact >= "
            f"{r['target']:.0%}, checked every 5 epochs), {b['num_eval_prompts']} test prompts with "
            "other sets of values are what the table reports; no training prompt had a held-out key "
            "(asserted per run). Each objective at its paper's / TRL's recommended settings (GSPO "
            "epsilon 3e-4 / 4e-4 and sequence mean; CISPO no lower clip, weight cap 5; DAPO "
            "clip-higher 0.28 + overlong shaping + dynamic sampling refilling the batch with up to 3 "
            "extra draws + token mean). **Tuning budget:** learning rate from "
            f"{r['tuning']['lrs']} on one tuning seed ({r['tuning']['seed']}, not a leaderboard seed) "
            f"trained {r['tuning']['epochs']} epochs, chosen by final validation exact: {chosen}. "
            '"Responses to target" counts every sampled response (DAPO\'s resampled ones included); '
            '"collapsed": final token entropy < 0.1 nats with test exact below the target. '
            f"Leaderboard CPU: {cpu:.0f} s. Wall times come from a shared 2-core CPU (load averages "
            f"at the end of the worker processes: {r['part_load_averages']}): compare only within "
            "this table.",
            "",
            r["table"],
            "",
            f"{reached} of {n_runs} runs reached the validation target. Differences from GRPO (exact "
            "two-sided permutation test on the 5 + 5 seed means; a run that never reached the target "
            "counts its whole budget as its responses; notebook 11 prints the same): beyond seed "
            f"noise (p < 0.05): {'; '.join(beyond) or 'none'}. Within seed noise: "
            f"{'; '.join(within)}.",
            "",
        ]
    )


if __name__ == "__main__":
    # usage: bench_objectives.py                    (every objective, one process)
    #        bench_objectives.py --part a GRPO DAPO (a subset, saved as objectives_a.json)
    #        bench_objectives.py --merge a b        (combine the parts into objectives.json)
    #        bench_objectives.py --tune a GRPO DAPO (tuning runs first, objectives_tuning_a.json)
    #        bench_objectives.py --section          (print RESULTS.md's section from the JSON)
    args = sys.argv[1:]
    if args[:1] == ["--section"]:
        print(results_section())
    elif args[:1] == ["--tune"]:
        tune(args[2:] or list(OBJECTIVES), args[1])
    elif args[:1] == ["--merge"]:
        merge(args[1:])
    elif args[:1] == ["--part"] and args[2:3] == ["--seed"]:  # --part NAME --seed S objective
        main(args[4:], part=args[1], seeds=(int(args[3]),))
    elif args[:1] == ["--part"]:
        main(args[2:], part=args[1])
    else:
        main(args or list(OBJECTIVES))
