"""Leaderboard of the 2025 objective family on the autoregressive sort-dedup task.

GRPO, Dr. GRPO, DAPO, GSPO, CISPO, RLOO and REINFORCE++ (each a ``TrainConfig`` of the same
loop), 5 seeds each, on prompts of length 4 with values 0-5. The loop holds out 10 + 10 sets
of values (a prompt's key is its set of distinct values, 56 possible; see
``SortDedupTask.prompt_key``): the 10 validation prompts decide the stop (greedy exact >= 95%,
checked every 5 epochs), the 10 test prompts are what we report. Reported per objective:
responses sampled (resampled ones included) and wall time to the validation target, final
test exact (median and worst seed, and the exact permutation p-value against GRPO from
``seed_stats.compare_seeds``), final token entropy, and the number of collapsed seeds by the
course's one rule, ``pgrl_helpers.collapse.is_collapsed`` (mean entropy of the last 5 epochs
below 0.1 nats and final *validation* exact below the target; it never reads the test set).

Splits: every run shares one validation and one test split (``eval_seed``); the JSON records
both (seed, size, key, the keys) and lists every objective under ``test_scored_by``: the test
split scores each of the seven recipes once, at the end, and chooses nothing (the tuning and
the stop read validation only).

Tuning budget (``--tune``): one learning rate per objective chosen from ``TUNING_LRS`` on one
tuning seed (``TUNING_SEED``, not a leaderboard seed) trained ``TUNING_EPOCHS`` epochs, by final
*validation* exact (ties: fewer responses to target, then higher validation reward); everything
else is the paper's / TRL's recommended setting on top of the shared ``BASE``. The grid's
lower edge (3e-3) was chosen for every objective: lower rates were not tried (``--tune PART
--lr LR`` adds one). Wall times are measured on a shared 2-core CPU (load averages
saved with the results) and are only comparable within one run; CPU seconds are saved too. The
leaderboard runs stop at the target or at ``MAX_EPOCHS`` = 150 (the tuning runs had 60).

    python benchmarks/bench_objectives.py                     (every objective, one process)
    python benchmarks/bench_objectives.py --part a --objectives GRPO DAPO   (objectives_a.json)
    python benchmarks/bench_objectives.py --part a --seeds 3 --objectives GRPO   (one seed)
    python benchmarks/bench_objectives.py --merge a b         (the parts into objectives.json)
    python benchmarks/bench_objectives.py --tune a --objectives GRPO DAPO   (tuning runs first)
    python benchmarks/bench_objectives.py --tune c --lr 0.001 (one more lr for every objective)
    python benchmarks/bench_objectives.py --relabel           (labels, splits, p-values again)
    python benchmarks/bench_objectives.py --quick   (tiny tuning and leaderboard, temporary folder)
"""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import replace
from pathlib import Path

from _common import (
    RESULTS_DIR,
    loop_splits,
    markdown_table,
    output_dir,
    parse_args,
    record_file_splits,
    record_splits,
    save,
    setup,
    split_keys,
)

from pgrl_helpers.collapse import ENTROPY_THRESHOLD, REWARD_MARGIN, TAIL_EPOCHS, is_collapsed
from pgrl_helpers.config import TrainConfig
from pgrl_helpers.history import per_epoch
from pgrl_helpers.recipes import RECIPES
from pgrl_helpers.seed_stats import compare_seeds, pair_by_seed, paired_permutation_p_value
from pgrl_helpers.training import heldout_split, run_policy_gradient

NAME = "objectives"
SEEDS = (0, 1, 2, 3, 4)
TARGET = 0.95
MAX_EPOCHS = 150
TUNING_EPOCHS = 60
TUNING_LRS = (3e-3, 1e-2)
TUNING_SEED = 100
QUICK_EPOCHS = 1  # a quick run: tuning and leaderboard runs of 1 epoch, leaderboard seed 0

BASE = TrainConfig.preset(
    "notebook_08",  # its task, policy and GRPO-style objective; smaller batches, own stop rule
    prompts_per_epoch=16,
    num_epochs=MAX_EPOCHS,
    eval_every=5,
    num_eval_prompts=10,  # 10 + 10 held-out sets of values (of 56)
    target_validation_exact_sort=None,  # the runs stop at TARGET themselves
    overlong_buffer=1,
)

#: name -> the fields that differ from BASE (the paper's / TRL's recommended settings): each
#: method's recipe (``pgrl_helpers.recipes.RECIPES``) less the fields BASE already sets so.
OBJECTIVES: dict[str, dict] = {
    title: {field: value for field, value in RECIPES[name].items() if getattr(BASE, field) != value}
    for title, name in (("GRPO", "grpo"), ("Dr. GRPO", "dr_grpo"), ("DAPO", "dapo"),
                        ("GSPO", "gspo"), ("CISPO", "cispo"), ("RLOO", "rloo"),
                        ("REINFORCE++", "reinforce_pp"))
}  # fmt: skip


def run(config: TrainConfig) -> dict:
    """One seed: train until validation exact >= TARGET (the loop's own stop) or MAX_EPOCHS.

    Validation = the loop's held-out set (stopping only); test = its disjoint test set.
    """
    start, cpu = time.perf_counter(), time.process_time()
    curve = []  # (seconds, responses sampled, validation exact, mean reward, entropy, length)

    def point(history):
        e, s = history.evals()[-1], history.steps()[-1]
        curve.append([time.perf_counter() - start, e["responses_sampled"], e["validation_exact_sort"],
                      s["mean_reward"], s["entropy"], s["response_length"]])  # fmt: skip

    def callback(epoch, history):
        if history.evals()[-1]["epoch"] == epoch + 1:  # an evaluation ran this epoch
            point(history)
        return False

    history = run_policy_gradient(replace(config, target_validation_exact_sort=TARGET), callback)
    if history.stop_reason == "target":  # the loop stopped before the callback ran
        point(history)
    final, last = history.evals()[-1], history.steps()[-1]
    reached = history.stop_reason == "target"
    assert history.train_prompts_with_heldout_key == 0
    validation_curve = [e["validation_exact_sort"] for e in history.evals()]
    entropy = per_epoch(history, "entropy")  # [epochs], at each epoch's first step
    return {
        "seed": config.seed,
        "learning_rate": config.learning_rate,
        "reached": reached,
        "seconds_to_target": curve[-1][0] if reached else None,
        "responses_to_target": final["responses_sampled"] if reached else None,
        "seconds": time.perf_counter() - start,
        "cpu_seconds": time.process_time() - cpu,
        "validation_exact": final["validation_exact_sort"],
        "validation_reward": final["validation_mean_reward"],
        "test_exact": final["test_exact_sort"],
        "final_entropy": last["entropy"],
        "collapsed": is_collapsed(
            validation_curve, entropy, TARGET, training_reward=per_epoch(history, "mean_reward")
        ),
        "entropy_epochs": list(range(1, len(entropy) + 1)),
        "training_reward": per_epoch(history, "mean_reward"),  # [epochs], for the collapse rule
        "curve": curve,
        "validation_curve": validation_curve,
        "entropy": entropy,
        "splits": split_keys(
            history.config, history.run.validation_prompts, history.run.test_prompts
        ),
    }


def run_tuning(
    names: list[str],
    part: str,
    lrs: tuple[float, ...] = TUNING_LRS,
    out_dir=RESULTS_DIR,
    epochs: int = TUNING_EPOCHS,
) -> dict:
    """Each objective at every lr of ``lrs`` on ``TUNING_SEED``; saved as objectives_tuning_<part>."""
    setup()
    runs = {}
    for name in names:
        runs[name] = []
        for lr in lrs:
            config = replace(BASE, seed=TUNING_SEED, learning_rate=lr, num_epochs=epochs)
            r = run(replace(config, **OBJECTIVES[name]))
            for key in ("curve", "validation_curve", "entropy", "entropy_epochs", "splits"):
                r.pop(key)
            runs[name].append(r)
            print(f"tune {name} lr {lr:g}: validation {r['validation_exact']:.2f} "
                  f"({r['cpu_seconds']:.0f} CPU s)", flush=True)  # fmt: skip
    return save(f"objectives_tuning_{part}", {"lrs": list(lrs), "seed": TUNING_SEED,
                                              "epochs": epochs, "runs": runs}, out_dir)  # fmt: skip


def chosen_learning_rates(out_dir=RESULTS_DIR) -> dict[str, float]:
    """name -> the tuned lr: best final validation exact, then fewer responses, then reward."""
    runs = {}
    for path in sorted(Path(out_dir).glob("objectives_tuning_*.json")):
        for name, rs in json.loads(path.read_text())["runs"].items():
            runs.setdefault(name, []).extend(rs)  # the lrs of every tuning file

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


def main(
    quick: bool = False,
    seeds=None,
    out_dir=RESULTS_DIR,
    *,
    objectives=None,
    part: str | None = None,
    merge: list[str] | None = None,
    tune: str | None = None,
    lr: float | None = None,
    relabel: bool = False,
) -> dict:
    """The leaderboard: ``objectives`` (all by default) at their tuned lr on ``seeds`` (default
    ``SEEDS``); ``part`` saves to objectives_<part>.json for ``merge``. ``tune``: the tuning
    runs instead, saved as objectives_tuning_<tune>.json (``lr``: that one rate). ``relabel``:
    recompute labels, splits and table of out_dir/objectives.json. ``quick``: tuning and
    leaderboard of ``QUICK_EPOCHS`` epochs each, seed 0, into a temporary folder."""
    names = list(objectives or OBJECTIVES)
    if merge:
        return merge_parts(merge, out_dir)
    if relabel:
        return relabel_stored(out_dir)
    out_dir = output_dir(out_dir, quick)
    epochs = QUICK_EPOCHS if quick else None
    if tune is not None:
        lrs = TUNING_LRS if lr is None else (lr,)
        return run_tuning(names, tune, lrs, out_dir, epochs or TUNING_EPOCHS)
    if quick:
        run_tuning(names, "quick", TUNING_LRS, out_dir, QUICK_EPOCHS)
    setup()
    seeds = tuple(seeds) if seeds else ((0,) if quick else SEEDS)
    lrs = chosen_learning_rates(out_dir)
    results, summary = {}, []
    for name in names:
        runs = []
        for seed in seeds:
            config = replace(BASE, seed=seed, learning_rate=lrs[name], **OBJECTIVES[name])
            runs.append(run(replace(config, num_epochs=epochs or config.num_epochs)))
            r = runs[-1]
            print(f"{name} seed {seed}: reached={r['reached']} test exact "
                  f"{r['test_exact']:.3f} entropy {r['final_entropy']:.3f} "
                  f"({r['seconds']:.0f} s)", flush=True)  # fmt: skip
        results[name] = runs
        summary.append(summarise(name, runs))
    if part is not None:
        return save(f"objectives_{part}", {"summary": summary, "runs": results}, out_dir)
    return write(summary, results, None, out_dir, seeds, epochs or MAX_EPOCHS)


def add_options(parser) -> None:
    parser.add_argument("--objectives", nargs="+", metavar="NAME", help="default: all")
    parser.add_argument("--part", help="save as objectives_<part>.json (for --merge)")
    parser.add_argument("--merge", nargs="+", metavar="PART", help="combine parts")
    parser.add_argument("--tune", metavar="PART", help="tuning runs, objectives_tuning_<PART>")
    parser.add_argument("--lr", type=float, help="with --tune: this learning rate only")
    parser.add_argument("--relabel", action="store_true", help="labels etc. from stored curves")


def leaderboard_table(
    summary: list[dict], results: dict, num_seeds: int = len(SEEDS)
) -> tuple[str, dict]:
    """The markdown leaderboard and each objective's test-exact p-value against GRPO."""
    headers = ["objective", "lr (tuned)", f"seeds reaching {TARGET:.0%}", "responses to target (median)",
               "s to target (median)", "test exact median", "test exact worst seed",
               "test exact vs GRPO: p", "final entropy", "collapsed"]  # fmt: skip
    # every objective ran the same seeds (seed k: the same initial weights): paired by seed
    grpo = {r["seed"]: r["test_exact"] for r in results["GRPO"]}
    p_values = {}
    for name, rs in results.items():
        _, a, b = pair_by_seed({r["seed"]: r["test_exact"] for r in rs}, grpo)
        p_values[name] = compare_seeds(a, b, name, "GRPO", paired=True)["p_value"]

    def fmt(x, spec):
        return "-" if x is None else format(x, spec)

    rows = [[s["objective"], f"{s['learning_rate']:g}", f"{s['seeds_reached']}/{num_seeds}",
             fmt(s["median_responses_to_target"], ".0f"), fmt(s["median_seconds_to_target"], ".1f"),
             f"{s['median_test_exact']:.3f}", f"{s['worst_test_exact']:.3f}",
             "-" if s["objective"] == "GRPO" else f"{p_values[s['objective']]:.3f}",
             f"{s['median_final_entropy']:.3f}", f"{s['collapsed']}/{num_seeds}"]
            for s in summary]  # fmt: skip
    return markdown_table(headers, rows), p_values


def write(
    summary: list[dict],
    results: dict,
    part_loads,
    out_dir=RESULTS_DIR,
    seeds=SEEDS,
    max_epochs: int = MAX_EPOCHS,
) -> dict:
    """The leaderboard table, printed and saved with everything to out_dir/objectives.json."""
    table, p_values = leaderboard_table(summary, results, len(seeds))
    print(table)
    fields = {f: getattr(BASE, f) for f in ("prompt_length", "vocab_size", "max_response_length",
              "num_responses", "prompts_per_epoch", "num_steps_per_epoch", "learning_rate",
              "entropy_coef", "num_eval_prompts")}  # fmt: skip
    tuning = {"lrs": list(TUNING_LRS), "seed": TUNING_SEED, "epochs": TUNING_EPOCHS,
              "chosen": chosen_learning_rates(out_dir),
              "selected_by": "final validation exact"}  # fmt: skip
    shared_keys = next(iter(results.values()))[0]["splits"]
    for rs in results.values():
        for r in rs:
            assert r.pop("splits") == shared_keys, "every run shares one split"
    splits = loop_splits(BASE, "bench_objectives.py")
    chosen = tuning["chosen"]
    caveats = []
    if len(set(chosen.values())) == 1 and min(chosen.values()) == min(TUNING_LRS):
        caveats.append(f"The tuning grid's lower edge ({min(TUNING_LRS):g}) was chosen for every "
                       "objective: lower rates were not tried.")  # fmt: skip
    return save(NAME, {"target": TARGET, "max_epochs": max_epochs, "seeds": list(seeds),
                        "caveats": caveats,
                        "tuning": tuning, "split_keys": shared_keys,
                        "splits": record_splits({}, validation=splits["validation"],
                                                test=splits["test"], recipe=LEADERBOARD_RECIPE,
                                                benchmark="bench_objectives.py")["splits"],
                        "collapse_rule": {"function": "pgrl_helpers.collapse.is_collapsed",
                                          "entropy_below_nats": ENTROPY_THRESHOLD,
                                          "entropy_mean_of_last_epochs": TAIL_EPOCHS,
                                          "training_reward_below": 1 - REWARD_MARGIN,
                                          "validation_exact_below": TARGET},
                        "p_values_test_exact_vs_grpo": p_values,
                        "base": fields, "objectives": OBJECTIVES, "summary": summary,
                        "table": table, "part_load_averages": part_loads, "runs": results},
                out_dir)  # fmt: skip


def merge_parts(parts: list[str], out_dir=RESULTS_DIR) -> dict:
    """Combine objectives_<part>.json files (runs split over processes, by objective or by
    seed) into objectives.json; the summary is recomputed from all runs of each objective."""
    runs, loads = {}, []
    for part in parts:
        data = json.loads((Path(out_dir) / f"objectives_{part}.json").read_text())
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
    summary = [summarise(name, runs[name]) for name in order]
    return write(summary, {n: runs[n] for n in order}, loads, out_dir)


LEADERBOARD_RECIPE = (
    "bench_objectives.py leaderboard: the seven objectives at their tuned lr, side by side, "
    "none chosen by its test score"
)


def record_all_splits(out_dir=RESULTS_DIR) -> dict:
    """Split records for the files of bench_objectives (leaderboard and tuning); returns the
    leaderboard's."""
    out_dir = Path(out_dir)
    path = out_dir / f"{NAME}.json"
    leaderboard = record_file_splits(path, BASE, "bench_objectives.py", LEADERBOARD_RECIPE)
    for tuning in sorted(out_dir.glob("objectives_tuning_*.json")):
        record_file_splits(
            tuning,
            BASE,
            "bench_objectives.py",
            "bench_objectives.py tuning runs (seed 100, chosen by validation exact)",
            no_test_reason="tuning read validation only; the loop's test scores of these runs "
            "are not kept in this file",
        )
    return leaderboard


def relabel_stored(out_dir=RESULTS_DIR) -> dict:
    """Labels, splits, p-values and table of objectives.json from its stored curves, no training.

    The leaderboard of 2026-12-02 logged entropy at each evaluation (every 5 epochs, the
    epoch's last optimizer step), not every epoch: for such a file ``is_collapsed`` gets those
    values with their epochs (``entropy_epochs``) and averages the ones logged in the last 5
    epochs. A file from ``run`` keeps its per-epoch entropy and validation curve. The training
    reward is the per-epoch ``training_reward`` when stored, else the curve's batch reward at
    each evaluation (``reward_epochs``)."""
    path = Path(out_dir) / f"{NAME}.json"
    payload = json.loads(path.read_text())
    every = BASE.eval_every
    for name, runs in payload["runs"].items():
        for r in runs:
            points = r["curve"]  # (seconds, responses, validation exact, reward, entropy, length)
            if not r["reached"]:  # one point per evaluation, at epochs every, 2 every, ...
                assert len(points) * every == payload["max_epochs"], (name, r["seed"], len(points))
            epochs = [every * (i + 1) for i in range(len(points))]  # a stop is at an evaluation
            if "entropy_epochs" not in r:  # the 2026-12-02 format: entropy at evaluations only
                r["validation_curve"] = [p[2] for p in points]
                r["entropy"] = [p[4] for p in points]
                r["entropy_epochs"] = epochs
            if "training_reward" in r:  # one value per epoch, logged with the entropy
                reward, reward_epochs = r["training_reward"], r["entropy_epochs"]
            else:  # the batch's mean reward at each evaluation
                reward, reward_epochs = [p[3] for p in points], epochs
            r["collapsed"] = is_collapsed(
                r["validation_curve"],
                r["entropy"],
                payload["target"],
                training_reward=reward,
                entropy_epochs=r["entropy_epochs"],
                reward_epochs=reward_epochs,
            )
    results = payload["runs"]
    summary = [summarise(name, rs) for name, rs in results.items()]
    payload["summary"] = summary
    payload["table"], payload["p_values_test_exact_vs_grpo"] = leaderboard_table(summary, results)
    validation, test = heldout_split(BASE)
    task = BASE.build_task()
    payload["split_keys"] = {
        name: {
            "seed": BASE.eval_seed,
            "size": int(prompts.shape[0]),
            "distinct_keys": len(set(task.prompt_key(prompts).tolist())),
            "key": "set of distinct values (SortDedupTask.prompt_key, a bit mask)",
            "keys": sorted(set(task.prompt_key(prompts).tolist())),
        }
        for name, prompts in (("validation", validation), ("test", test))
    }
    payload.pop("splits", None)
    payload.pop("test_scored_by", None)
    payload.pop("test_guided_choice", None)
    payload["collapse_rule"] = {
        "function": "pgrl_helpers.collapse.is_collapsed",
        "entropy_below_nats": ENTROPY_THRESHOLD,
        "entropy_mean_of_last_epochs": TAIL_EPOCHS,
        "training_reward_below": f"{1 - REWARD_MARGIN:g} x the maximum (1), mean of the same epochs",
        "validation_exact_below": payload["target"],
        "entropy_logged": f"every {every} epochs (the epoch's last optimizer step); the rule "
        f"averages the values logged in the last {TAIL_EPOCHS} epochs (entropy and the batch's "
        "mean reward, logged together)",
    }
    payload["relabelled_utc"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    if "entropy_epochs" not in json.loads(path.read_text())["runs"]["GRPO"][0]:  # 2026-12-02 file
        payload["caveats"] = [
            "REINFORCE++ ran before commit ca3af5e changed REINFORCE++-baseline whitening to the "
            "batch's masked tokens; its row is the earlier per-response whitening.",
            "The tuning grid's lower edge (0.003) was chosen for every objective: lower rates "
            "were not tried.",
        ]
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(payload["table"])
    return record_all_splits(out_dir)


def exponent(x: float) -> str:
    """3e-4 for 0.0003: the way the papers write these clip ranges."""
    return f"{x:.0e}".replace("e-0", "e-")


def section(r: dict, results_dir=RESULTS_DIR) -> str:
    """The leaderboard, its settings and tuning budget, and every difference from GRPO."""
    runs, b = r["runs"], r["base"]
    o, rule = r["objectives"], r["collapse_rule"]
    seeds = len(r["seeds"])
    sets = sum(math.comb(b["vocab_size"], k) for k in range(1, b["prompt_length"] + 1))
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
            _, a, g = pair_by_seed(
                {x["seed"]: f(x) for x in rs}, {x["seed"]: f(x) for x in runs["GRPO"]}
            )
            p = paired_permutation_p_value(a, g)  # the same seeds: paired
            (beyond if p < 0.05 else within).append(f"{name} {label} {diff:+.3g} (p = {p:.3f})")
    cpu = sum(x["cpu_seconds"] for rs in runs.values() for x in rs)
    return "\n".join(
        [
            "## The 2025-26 objective family on the autoregressive task (`bench_objectives.py`, "
            "notebook 11)",
            "",
            f"Sort-dedup with the autoregressive policy (prompt length {b['prompt_length']}, values "
            f"0-{b['vocab_size'] - 1}, at most {b['max_response_length']} response tokens), G = "
            f"{b['num_responses']}, {b['prompts_per_epoch']} prompts per epoch, "
            f"{b['num_steps_per_epoch']} optimizer steps per epoch, entropy bonus {b['entropy_coef']}; "
            f"seeds {', '.join(map(str, r['seeds']))}; at most {r['max_epochs']} epochs. Held out **by "
            f"content** (a prompt's key is its set of distinct values, {sets} possible): "
            f"{b['num_eval_prompts']} validation prompts decide the stop (greedy exact >= "
            f"{r['target']:.0%}, checked every {BASE.eval_every} epochs), {b['num_eval_prompts']} "
            "test prompts with "
            "other sets of values are what the table reports; no training prompt had a held-out key "
            "(asserted per run). Each objective at its paper's / TRL's recommended settings (GSPO "
            f"epsilon {exponent(o['GSPO']['epsilon'])} / {exponent(o['GSPO']['epsilon_high'])} "
            "and sequence mean; CISPO no lower clip, weight cap "
            f"{1 + o['CISPO']['epsilon_high']:g}; DAPO clip-higher {o['DAPO']['epsilon_high']:g} + "
            "overlong shaping + dynamic sampling refilling the batch with up to "
            f"{o['DAPO']['dynamic_sampling_max_draws']} extra draws + token mean). **Tuning "
            "budget:** learning rate from "
            f"{r['tuning']['lrs']} on one tuning seed ({r['tuning']['seed']}, not a leaderboard seed) "
            f"trained {r['tuning']['epochs']} epochs, chosen by final validation exact: {chosen}. "
            '"Responses to target" counts every sampled response (DAPO\'s resampled ones included); '
            '"collapsed": `pgrl_helpers.collapse.is_collapsed`, the course\'s one rule (mean token '
            f"entropy of the last {rule['entropy_mean_of_last_epochs']} epochs below "
            f"{rule['entropy_below_nats']} nats, training reward of those epochs below "
            f"{1 - REWARD_MARGIN:g} of its maximum, and final *validation* exact below the "
            "target; a run that reached the target is never collapsed; the test set is never read"
            + (
                "; this run logged entropy every 5 epochs, so the rule reads the value logged in "
                "the last 5). "
                if any(r["entropy_epochs"][:2] == [5, 10] for rs in runs.values() for r in rs)
                else "). "
            )
            + "The test split scores each objective once per run and chooses nothing. "
            f"Leaderboard CPU: {cpu:.0f} s. Wall times come from a shared "
            f"{r['machine']['logical_cores']}-core CPU (load averages "
            f"at the end of the worker processes: {r['part_load_averages']}): compare only within "
            "this table.",
            "",
            r["table"],
            "",
            f"{reached} of {n_runs} runs reached the validation target. Differences from GRPO (exact "
            f"two-sided paired sign-flip test over the {seeds} shared seeds; a run that never "
            "reached the target "
            "counts its whole budget as its responses; notebook 11 prints the same): p < 0.05: "
            f"{'; '.join(beyond) or 'none'}. Within seed noise: {'; '.join(within)}. These are "
            f"{len(beyond) + len(within)} tests: with a Bonferroni correction the threshold is "
            f"{0.05 / (len(beyond) + len(within)):.4f}, below the smallest p that {seeds} "
            f"paired seeds can give (2/2^{seeds} = {2 / 2**seeds:.4f}, itself above 0.05), so no "
            "single difference here can pass even 0.05.",
            *(f"\n*Caveat:* {c}" for c in r.get("caveats", [])),
        ]
    )


if __name__ == "__main__":
    main(**parse_args(add_options))
