"""Assemble benchmarks/RESULTS.md from the JSON files the other benchmarks wrote.

Runs last (``tasks.py bench`` runs bench_*.py in name order). Sections whose results
file is missing say so instead of quoting stale numbers.
"""

from __future__ import annotations

import json
import statistics

from _common import RESULTS_DIR

OUT = RESULTS_DIR.parent / "RESULTS.md"


def load(name: str) -> dict | None:
    path = RESULTS_DIR / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def machine_section(results: list[dict]) -> str:
    # pass_at_k.json records its own per-job machine fields (cores, jobs, threads) instead
    results = [r for r in results if "load_average_1_5_15_min" in r.get("machine", {})]
    m = results[0]["machine"]
    loads = {tuple(r["machine"]["load_average_1_5_15_min"]) for r in results}
    top = max(max(x) for x in loads)
    return "\n".join(
        [
            "## Machine",
            "",
            f"- CPU: {m['cpu']}, {m['logical_cores']} logical cores; torch {m['torch']} "
            f"(CPU build), Python {m['python']}, {m['platform']}",
            f"- torch ran on {m['torch_threads']} thread (fastest for these tiny models; "
            "`TrainConfig.num_threads` defaults to 1)",
            f"- measured {m['date_utc']} UTC; the 1-minute load average reached {top:.1f} "
            "while the benchmarks ran: other processes were sharing the 2 cores, so wall "
            "times are pessimistic and vary by run",
        ]
    )


def throughput_section(r: dict) -> str:
    head = next(
        x for x in r["results"] if x["batch"] == 64 and x["reward"] == "sort_distance_reward"
    )
    return "\n".join(
        [
            "## 1. Reward throughput (`bench_1_reward_throughput.py`)",
            "",
            "Scoring the same responses three ways (best of 7 repeats). *Lecture loop*: the "
            "lecture's double loop indexing tensors element by element; *list loop*: "
            "`compute_reward` with a per-example function (converts to lists once, then "
            "loops); *vectorised*: `compute_reward(..., name)`.",
            "",
            r["table"],
            "",
            f"At batch 64, G 8, length 5 the vectorised `sort_distance_reward` is "
            f"{head['speedup_vs_lecture_loop']:.0f}x faster than the lecture's loop "
            f"(target >= 100x) and {head['speedup_vs_list_loop']:.0f}x faster than the "
            "list loop. At that size the vectorised call is dominated by fixed per-call "
            "overhead (input checks); the gap widens with the batch.",
        ]
    )


def lecture_section(r: dict) -> str:
    c = r["config"]
    return "\n".join(
        [
            "## 2. Lecture reproduction (`bench_2_lecture.py`)",
            "",
            f"`LectureModel` (embedding_dim {c['embedding_dim']}), the 3 lecture prompts, "
            f"vocab {c['vocab_size']}, G = {c['num_responses']}, {c['num_epochs']} epochs x "
            f"{c['num_steps_per_epoch']} steps, Adam lr {c['learning_rate']:g}, "
            f"{c['loss_mode']} loss, no KL, {c['reward_fn']} (max 5); seeds 0, 1, 2. "
            "Final mean reward = mean reward of the last epoch's sampled responses; "
            "sorted = training prompts the greedy policy sorts exactly.",
            "",
            r["table"],
            "",
            "Like the lecture: about 3 to 3.7 of 5 and (almost) nothing sorted in every "
            "mode (our seeds and initial weights differ from the lecture's run, so the "
            "rewards differ by a few tenths). The inclusion+ordering reward also pays well "
            "for wrong answers (4 of 5 for [0, 1, 1] on prompt [1, 0, 2]).",
            "",
            "Same model class and prompts, other settings (all centered_rewards; the "
            "sort_distance reward has maximum 3):",
            "",
            r["fixes_table"],
            "",
            "Why the lecture's model is so hard to fix: its initial logits are large "
            "(embedding entries ~N(0, 1), so the logit std grows like "
            "sqrt(3 x embedding_dim): measured ~5.9 at dim 10, ~2.3 at dim 3), "
            "and many (prompt, position) pairs start with one token at > 99% probability. "
            "Sampling never tries another token there and the softmax gradient vanishes, "
            "so no reward, delta mode, loss or learning rate can move them (a saturated "
            "pair only hurts when its token is wrong). Fraction of the 9 pairs saturated "
            "before training:",
            "",
            r["saturation_table"],
            "",
            "Over 10 seeds:",
            "",
            r.get("success_table", "(rerun bench_2_lecture.py for the 10-seed table)"),
            "",
            "A smaller embedding (3) starts less saturated; with the per-position "
            "`sort_distance_reward` and G = 50 it sorts all 3 training prompts for the "
            "seeds marked 3/3 above. No setting we tried sorts all three for every seed. "
            "Beyond the table (sort_distance, G 50, 300 epochs, seeds 0/1/2): "
            "embedding_dim 4 sorted 1/2/1 prompts, 5 sorted 3/0/3, 6 sorted 0/0/2; at "
            "dim 3, seed 2 stays at 2/3 with G 100, an entropy bonus of 0.05, "
            "normalized deltas, or lr 3e-4 and 3e-3: the outcome is set mostly by the "
            "initial weights (with only 3 embedding dimensions some tokens can also be "
            "hard to make the argmax). Held-out exact-sort stays near 0 in every run: the "
            "lecture's model memorises 3 prompts and cannot sort in general.",
            "",
            "![mean reward per epoch](results/lecture_reproduction.png)",
        ]
    )


def generalization_section(r: dict) -> str:
    c = r["config"]
    return "\n".join(
        [
            "## 3. Generalization: a policy that sorts (`bench_3_generalization.py`)",
            "",
            f"`SortTransformer` (d_model {c['embedding_dim']}, {c['num_layers']} layers, "
            f"{c['num_heads']} heads, {r['parameters']:,} parameters), GRPO on reward only: "
            f"{c['reward_fn']}, G = {c['num_responses']}, {c['prompts_per_epoch']} fresh "
            f"random prompts per epoch, {c['num_steps_per_epoch']} steps per epoch, "
            f"{c['loss_mode']} loss (eps {c['epsilon']}), {c['deltas_mode']}, Adam lr "
            f"{c['learning_rate']:g}, no KL. Prompts of length {c['prompt_length']}, values "
            f"0-{c['vocab_size'] - 1}. Held out by *multiset* (the policy ignores prompt "
            f"order, so only a new multiset is a new prompt to it): {c['num_eval_prompts']} "
            f"validation and {c['num_eval_prompts']} test multisets of the 2002, one prompt "
            "each, never in a training batch (each run's history counts 0 such training "
            "prompts). Training stops when greedy exact-sort on the validation multisets "
            f"reaches {r['validation_target']:.1%} (the goal is judged on the test multisets "
            "at that moment); then each run keeps training "
            f"{r['runs'][0]['epochs_after_target']} more epochs (`epochs_after_target`), and "
            "the table reports the test exact-sort at the end and the largest drop of "
            "validation exact-sort below its value at the target (section 3b). Wall times: "
            f"load average {r['machine']['load_average_1_5_15_min']} on the 2 shared cores.",
            "",
            r["table"],
            "",
            f"**{r['verdict']}**",
            "",
            "Before held-out-by-multiset (the first version of this benchmark held out exact "
            "orderings only): 99.3% 'unseen prompts', but about 99% of them shared a multiset "
            "with a training prompt, and an independent check found 83.7% on shuffled prompts "
            "of the multisets that run never trained on. The setting then took 4 optimizer steps "
            "per sampled batch; it reached the target as fast but collapsed after it (section "
            "3b), so the benchmark now takes 1. Both settings were scored on this test split, "
            "so the test split guided the choice of recipe (recorded in "
            "`split_records_legacy.json`): read the test number as optimistic by that choice.",
            "",
            "![validation exact-sort vs sampled responses](results/generalization.png)",
        ]
    )


def scaling_section(r: dict) -> str:
    rerun = "epochs_after_target" in r  # written after the loop held prompts out by multiset
    split = (
        "held out by multiset, never trained on"
        if rerun
        else "measured before held-out-by-multiset, to be re-run"
    )
    lines = [
        "## 4. Scaling with prompt length, and SFT as a reference (`bench_4_scaling.py`)",
        "",
        "The setting of section 3, only the prompt length changes (values 0-9; at length 3 "
        f"there are 220 multisets, so 22 + 22 are held out; {split}). "
        "GRPO counts sampled responses; "
        "SFT trains the same SortTransformer with cross-entropy on the sorted answers of "
        f"fresh random prompts (batch {r['sft_batch']}, same Adam lr) and counts labelled "
        "examples. Both stop the first time validation exact-sort reaches 99% (so the "
        "test column can sit slightly below 99%); medians of seeds 0, 1, 2; "
        f"a run is cut at {r['max_seconds_per_run']:.0f} s"
        + (
            " (GRPO: CPU seconds). GRPO then keeps training "
            f"{r['epochs_after_target']} epochs and the table reports the largest validation "
            "drop below its value at the target (max over seeds). Wall times: load average "
            f"{r['machine']['load_average_1_5_15_min']} on 2 shared cores."
            if rerun
            else "."
        ),
        "",
        r["table"],
        "",
    ]
    s = r["summary"]
    ratios = [x["ratio"] for x in s]
    prompts = {
        length: statistics.median(run["prompts_seen"] for run in runs)
        for length, runs in r["grpo_runs"].items()
    }
    five = next(x for x in s if x["length"] == 5)
    lines.append(
        f"Learning from a reward costs {min(ratios):.0f}-{max(ratios):.0f} sampled responses "
        "per labelled example SFT needs"
        + (", and the gap widens with length" if ratios == sorted(ratios) else "")
        + ": a sampled response returns one number (its reward), a labelled example the "
        "whole answer. "
        f"GRPO's cost grows from {s[0]['grpo_responses']:.0f} responses at length "
        f"{s[0]['length']} to {s[-1]['grpo_responses']:.0f} at length {s[-1]['length']}, "
        f"SFT's from {s[0]['sft_examples']:.0f} to {s[-1]['sft_examples']:.0f} examples. "
        f"Counted in training prompts, GRPO at length 5 drew {prompts['5']:.0f} prompts "
        f"(G responses each) against SFT's {five['sft_examples']:.0f} labelled ones."
    )
    lines.append(
        "The 4-steps-per-batch setting was scored on these test splits before the 1-step "
        "setting was kept, so the test split guided the choice of recipe (recorded in "
        "`split_records_legacy.json`)."
    )
    lines += ["", "![samples and time to 99% vs length](results/scaling.png)"]
    return "\n".join(lines)


def selection_note(r: dict | None) -> str:
    """What the best-validation checkpoints of a TRL run scored on the test set."""
    if r is None:
        return ""
    picks = ", ".join(
        f"seed {x['seed']}: step {x['selected_step']}, validation "
        f"{x['selected_validation_exact_sort']:.0%}, test {x['test']['exact_sort']:.1%}"
        for x in r["runs"]
    )
    return (
        f"The checkpoints chosen on {r['split']['val']} validation prompts in that 900-step "
        f"run ({picks}) show why a small validation set is a poor judge: validation exact-sort "
        "near 99% did not guarantee the test multisets."
    )


def margin_note(r: dict) -> str:
    """The worst seed's margin over the goal, in test prompts."""
    import math

    n = r["split"]["test"]
    need, got = math.ceil(r["goal"] * n), round(r["worst_test_exact_sort"] * n)
    return f"{got} of {n} test prompts sorted, {need} needed, a margin of {got - need:+d} prompts"


def trl_other_runs() -> list[str]:
    """One line per earlier TRL recipe kept in results/, each with its test scores."""
    lines = []
    names = ("trl_v1_final_recipe", "trl_no_weight_decay", "trl_4_steps", "trl_constant_lr")
    for name in (*names, "trl_900_steps", "trl_stop_at_validation"):
        other = load(name)
        if other is None:
            continue
        o = other["config"]
        stop = other.get("validation_target")
        label = (
            f"{o['num_steps_per_epoch']} optimizer step(s) per round, "
            f"{other.get('lr_schedule', 'constant')} schedule over "
            f"{o['num_epochs'] * o['num_steps_per_epoch']} steps"
            + f", weight decay {other.get('weight_decay', 0.0):g}"
            + (f", stopped when validation first reached {stop:.0%}" if stop else "")
        )
        scores = " / ".join(
            f"{x['test']['exact_sort']:.1%} (seed {x['seed']}, {x['steps']} steps trained)"
            for x in other["runs"]
        )
        lines.append(f"- {label}: {scores} (`results/{name}.json`)")
    return lines


def trl_section(r: dict) -> str:
    c = r["config"]
    rows = [
        "| seed | steps | CPU s | wall s | selected at step (validation exact) "
        "| test exact-sort | test mean reward |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in r["runs"]:
        rows.append(
            f"| {run['seed']} | {run['steps']} | {run['cpu_seconds']:.0f} | {run['seconds']:.0f} "
            f"| {run['selected_step']} ({run['selected_validation_exact_sort']:.0%}) "
            f"| {run['test']['exact_sort']:.1%} | {run['test']['mean_reward']:.2f} |"
        )
    verdict = "met" if r["goal_met"] else "NOT met"
    final_train = [
        sum(x["reward"] for x in run["train_reward_curve"][-10:]) / 10 for run in r["runs"]
    ]
    head = "LM head constrained to digits" if r.get("digits_only") else "unconstrained LM head"
    schedule = r.get("lr_schedule", "constant")
    others = []
    for name, label in (("trl_constant_lr", "constant learning rate"), ("trl_900_steps", "")):
        other = load(name)
        if other is not None:
            o = other["config"]
            label = label or (
                f"{other.get('lr_schedule', 'constant')} schedule over "
                f"{o['num_epochs'] * o['num_steps_per_epoch']} steps"
            )
            scores = " / ".join(f"{x['test']['exact_sort']:.1%}" for x in other["runs"])
            others.append(f"{label}: {scores} (`results/{name}.json`)")
    return "\n".join(
        [
            "## TRL's GRPOTrainer on the sort task, held out by content (`bench_trl.py`)",
            "",
            f"Notebook 09's tiny GPT-2 (word-level tokenizer, {head}) trained by "
            f"`trl.GRPOTrainer` with the arguments `trl_bridge.grpo_config_kwargs` maps: lists "
            f"of {c['prompt_length']} values 0-{c['vocab_size'] - 1}, {c['reward_fn']} (-1 if "
            f"malformed), G = {c['num_responses']}, {c['prompts_per_epoch']} prompts per round, "
            f"{c['num_steps_per_epoch']} optimizer step(s) per round, {c['loss_mode']} loss, "
            f"{c['deltas_mode']}, entropy_coef {c['entropy_coef']}, lr {c['learning_rate']} "
            f"({schedule} schedule), AdamW weight decay {r.get('weight_decay', 0.0):g}. "
            f"Held out by content (multiset): {r['split']['test']} test and "
            f"{r['split']['val']} validation prompts whose values never appear together in "
            f"training ({r['split']['train']} training prompts). The test set is a fresh one "
            f"(`trl_bridge.fresh_test_split`, seed {r['splits']['test']['seed']}): 22 multisets "
            "drawn from the old training content after the recipe was fixed, scored once, by "
            "this recipe only; the first test set guided the choice (below). "
            + (
                f"A run stops when greedy exact-sort on validation reaches "
                f"{r['validation_target']:.0%}, after "
                if r["validation_target"] is not None
                else "A run trains its whole schedule: "
            )
            + f"{c['num_epochs'] * c['num_steps_per_epoch']} steps (or "
            f"{r['budget_cpu_seconds']:.0f} CPU s); validation, checked every "
            f"{r['eval_every_steps']} steps, picks the checkpoint (the latest with the best "
            f"score), which is scored once on the test set. {r['jobs']} seeds ran side by side "
            "(wall times include the wait for the shared CPU; CPU seconds do not).",
            "",
            *rows,
            "",
            f"**goal (worst-seed test exact-sort >= {r['goal']:.0%}): {verdict}** "
            f"(worst {r['worst_test_exact_sort']:.1%}: {margin_note(r)})",
            "",
            f"Mean training reward over the last 10 rounds (sampled, training contents): "
            f"{', '.join(f'{x:.2f}' for x in final_train)} of {c['prompt_length']}.",
            "",
            "What changed, and why: with values 0-4 (35 multisets, 7 + 7 held out, 21 trained "
            "on) and an unconstrained head, the previous run of this benchmark (commit 8f593ba) "
            "fitted its training lists (reward 2.66-2.77 of 3) but scored 19.4% / 16.1% / 48.4% "
            "test exact sorts: it memorised 21 answers. Values 0-9 give 220 multisets (176 "
            "trained on), so memorising stops paying. The digit constraint (`hf_policy."
            "constrain_to_digits`: a frozen LM-head bias of -1e4 on the special tokens) removes "
            "the format phase and puts the distribution on the task's values, which also lets "
            "our loop train the same model (`bench_trl_vs_loop.py`).",
            "",
            "Recipes scored on the first test set (22 other multisets), kept as measured (test "
            "exact-sort per seed, same seeds). Each was scored on that set and the next one was "
            "picked with those scores in view, so that test set guided the choice: these lines "
            "are the record of the search, not a ranking (3 seeds per recipe cannot give an "
            "exact permutation p below 0.1), and the first line is the final recipe on it:",
            "",
            *trl_other_runs(),
            "",
            "With 4 optimizer steps per round (num_iterations=4) validation swung late in the run "
            "and a linear decay only partly damped it; one step per round (the fix of section 3b "
            "in our own loop) over a 1200-step linear decay, and AdamW weight decay "
            "(`bench_trl.WEIGHT_DECAY`; its validation difference was small, 0.993 vs 0.987 "
            "mean exact-sort over the last quarter) completed the recipe. "
            + selection_note(load("trl_900_steps")),
        ]
    )


def trl_vs_loop_section(r: dict) -> str:
    rows = [
        "| seed | framework | steps | CPU s / step | responses / CPU s | CPU s to target "
        "| test exact-sort |",
        "|---|---|---|---|---|---|---|",
    ]
    for pair in r["pairs"]:
        for run in (pair["ours"], pair["trl"]):
            to_target = run["cpu_seconds_to_target"]
            rows.append(
                f"| {pair['seed']} | {run['framework']} | {run['steps']} "
                f"| {run['cpu_seconds_per_step']:.3f} | {run['responses_per_cpu_second']:.0f} "
                f"| {'-' if to_target is None else f'{to_target:.0f}'} | {run['test']:.1%} |"
            )
    phases = ("generation", "reward", "forward", "backward", "optimizer", "overhead")
    profile = ["| framework | " + " | ".join(phases) + " |", "|---" * (len(phases) + 1) + "|"]
    for name in ("ours", "trl"):
        steps = sum(p[name]["steps"] for p in r["pairs"])
        cells = [
            f"{1000 * sum(p[name]['profile_cpu_seconds'][ph] for p in r['pairs']) / steps:.0f}"
            for ph in phases
        ]
        profile.append(f"| {name} | " + " | ".join(cells) + " |")
    ratios = "; ".join(
        f"{k}: {', '.join(f'{v:.2f}' for v in vals)}"
        for k, vals in r["ratios_trl_over_ours"].items()
    )
    return "\n".join(
        [
            "## Our loop vs TRL's GRPOTrainer on the same work (`bench_trl_vs_loop.py`)",
            "",
            "The same tiny GPT-2 (same initial weights, head constrained to digits), task, "
            "TrainConfig (as in `bench_trl.py`, without its weight decay on either side: our "
            "loop's Adam has none), prompts in the same order and held-out sets; "
            "our loop trains it through `hf_policy.HFSortPolicy`. Per seed, both run back to "
            "back in one process until greedy exact-sort on validation reaches "
            f"{r['target_validation_exact_sort']:.0%} (checked every "
            f"{r['eval_every_epochs']} rounds). CPU seconds of the process, evaluation "
            "excluded from the per-step figures.",
            "",
            *rows,
            "",
            f"TRL / ours: {ratios}.",
            "",
            f"Seeds {', '.join(str(p['seed']) for p in r['pairs'])} ran side by side, one "
            f"process each, on {r['machine']['logical_cores']} shared cores (load average "
            f"{r['machine']['load_average_1_5_15_min']} at the end): CPU seconds, not wall "
            "time. The per-step ratio is the measurement; the time-to-target ratio also holds "
            "the steps each run needed, which differ although weights, prompts, held-out sets "
            "and loss are the same (the sampling randomness is not); more seeds would be "
            "needed to say whether that difference is systematic.",
            "",
            "CPU milliseconds per optimizer step, all seeds (generation: sampling; forward: "
            "log-probs and entropies incl. the frozen old log-probs; overhead: the rest of the "
            "framework):",
            "",
            *profile,
        ]
    )


def ablation_section(r: dict) -> str:
    return "\n".join(
        [
            "## 5. Which of the four lecture fixes matter (`bench_lecture_ablation.py`)",
            "",
            f"LectureModel on the lecture's 3 prompts, {len(r['seeds'])} seeds per setting.",
            "",
            r["ablation_table"],
            "",
            "The lecture's single run against our seeds, per delta mode:",
            "",
            r["reproduction_table"],
            "",
            r["order_line"],
        ]
    )


def kl_beta_section(r: dict) -> str:
    title = "## 6. The KL coefficient beta on a training run (`bench_kl_beta.py`, notebook 05)"
    return "\n".join([title, "", r["table"]])


def detectors_section(r: dict) -> str:
    """diagnose(): hit and false-alarm rates per finding (bench_detectors.py)."""
    report = r["rates"]["report"]
    missed = "; ".join(f"{k}: {v['missed_seeds']}" for k, v in report.items() if v["missed_seeds"])
    alarms = "; ".join(
        f"{k}: {v['false_alarm_seeds_healthy']}"
        for k, v in report.items()
        if v["false_alarm_seeds_healthy"]
    )
    return "\n".join(
        [
            "## Detectors: how often `diagnose()` is right (`bench_detectors.py`, notebook 13)",
            "",
            f"Each finding's planted cause (`symptoms.planted_run`), its fix and the healthy run, "
            f"on each of the reported seeds {r['report_seeds'][0]}-{r['report_seeds'][-1]}; "
            f"the thresholds were set on the tuning seeds {r['tuning_seeds'][0]}-"
            f"{r['tuning_seeds'][-1]} only. Hit rate: planted runs that get the finding; false "
            "alarms: healthy runs that get it; last column: fixed runs that still get it "
            "(`loss_near_zero` is an info note whose place is the healthy run). "
            f"{sum(not x.get('same_as_healthy') for x in r['runs'])} runs trained, "
            f"{r['cpu_seconds_total'] / 60:.1f} CPU-minutes.",
            "",
            r["table"],
            "",
            f"Missed on seeds: {missed or 'none'}. False alarms on healthy seeds: "
            f"{alarms or 'none'}.",
            "",
            "The same counts on the tuning seeds:",
            "",
            r["table_tuning"],
        ]
    )


def ppo_section(r: dict) -> str:
    title = "## 7. PPO + GAE vs GRPO vs RLOO (`bench_ppo_vs_grpo.py`, notebook 10)"
    if "chosen_learning_rates" not in r:  # the first, untuned version of the benchmark
        note = (
            "Untuned shared settings, 5 seeds each, run 3 at a time on 2 loaded cores; measured "
            "before held-out-by-content. With 16 test prompts it cannot rank the methods."
        )
        return "\n".join([title, "", note, "", r["table"]])
    b, lrs = r["base"], ", ".join(f"{x:g}" for x in r["learning_rates"])
    chosen = "; ".join(f"{k} {v:g}" for k, v in r["chosen_learning_rates"].items())
    n_runs = len(r["methods"]) * (
        len(r["learning_rates"]) * len(r["tuning_seeds"]) + len(r["seeds"])
    )
    note = (
        f"Sort-dedup with the autoregressive policy (prompts of length {b['prompt_length']}, "
        f"values 0-{b['vocab_size'] - 1}), G = {b['num_responses']}, "
        f"{b['prompts_per_epoch']} prompts and {b['num_steps_per_epoch']} optimizer steps per "
        f"epoch, entropy bonus {b['entropy_coef']:g}, at most {r['max_epochs']} epochs "
        f"({r['budget_responses']} responses). {r['num_validation']} validation + "
        f"{r['num_test']} test prompts held out by content (sets of values never trained on): "
        f"validation decides the stop (greedy exact >= {r['validation_target']:.0%}, every "
        f"{b['eval_every']} epochs), test is read once at the end. Per-method tuning: learning "
        f"rates {lrs} x tuning seeds {r['tuning_seeds']} (6 runs per method, chosen on "
        f"validation only): {chosen}. PPO: separate critic at the policy's rate, gamma 1, "
        f"lambda 0.95, value clip 0.2, whitened advantages (not tuned). Then seeds "
        f"{r['seeds']}. CPU for all {n_runs} runs: {r['cpu_seconds_total'] / 60:.1f} "
        f"CPU-minutes; {r['parallel_workers']} runs at a time on a shared 2-core CPU (load "
        f"average {r['load_average_at_start']} at the start, "
        f"{r['machine']['load_average_1_5_15_min']} at the end): wall times are "
        "inflated; compare only within this table."
    )

    def fmt(x):
        return f"{x:.0f}" if x > 1 else f"{x:.2f}"

    noise = [
        f"{c['a']} vs {c['b']}, {c['metric']}: means {fmt(c['mean_a'])} vs {fmt(c['mean_b'])}, "
        f"exact permutation p = {c['p_value']:.3f}"
        + (" (exceeds seed noise at 5%)" if c["p_value"] < 0.05 else " (within seed noise)")
        for c in r["comparisons"]
    ]
    exceed = sum(c["p_value"] < 0.05 for c in r["comparisons"])
    most = max(sum(x["reached"] for x in runs) for runs in r["runs"].values())
    verdict = f"{exceed} of {len(noise)} differences exceed seed noise at 5%."
    if exceed == 0:
        verdict += (f" With at most {most} of {len(r['seeds'])} seeds reaching the target per "
                    "method, this budget does not rank the three methods.")  # fmt: skip
    lines = [title, "", note, "", r["table"], "", "Differences against seed noise (exact "
             "permutation test over the 5 + 5 seeds; a missed target counts the whole budget):",
             ""] + [f"- {x}" for x in noise] + ["", verdict]  # fmt: skip
    return "\n".join(lines)


def stability_section(r: dict) -> str:
    """Section 3b (helper H2's renderer lives with its benchmark)."""
    import bench_3_stability

    return bench_3_stability.results_section(r)


def unseen_regime_section(r: dict) -> str:
    c = r["config"]
    return "\n".join(
        [
            "## 3c. A regime where memorising is impossible (`bench_5_unseen_regime.py`)",
            "",
            f"Length {c['prompt_length']}, values 0-{c['vocab_size'] - 1}: "
            f"{r['num_multisets']:,} multisets ({r['num_multisets_formula']}). SortTransformer "
            f"d_model {c['embedding_dim']}, {c['num_layers']} layers ({r['parameters']:,} "
            f"parameters), G = {c['num_responses']}, {c['prompts_per_epoch']} prompts per "
            f"epoch, {c['num_steps_per_epoch']} optimizer step(s) per sampled batch"
            f"{' (the fix of section 3b)' if c['num_steps_per_epoch'] == 1 else ''}, "
            f"{c['loss_mode']} loss, Adam "
            f"lr {c['learning_rate']:g}; {c['num_eval_prompts']} validation + "
            f"{c['num_eval_prompts']} test multisets held out. Seeds run in parallel "
            f"processes, each capped at {r['max_cpu_seconds_per_seed']:.0f} CPU seconds; wall "
            f"times at load average {r['machine']['load_average_1_5_15_min']} on 2 shared "
            "cores are several times the CPU times. 'validation first >= X%' quotes the test "
            "exact-sort at that evaluation (the test set never decides anything). No training "
            "batch contained a validation or test multiset (asserted per run). After validation "
            f"first reaches the last goal each run trains {r['epochs_after_target']} more epochs "
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


def autoregressive_section(r: dict) -> str:
    c = r["config"]
    return "\n".join(
        [
            "## 3d. Autoregressive policy, sort + dedup + EOS (`bench_autoregressive.py`)",
            "",
            f"Notebook 08's task: prompts of length {c['prompt_length']}, values "
            f"0-{c['vocab_size'] - 1}, answer = sorted distinct values then EOS. Held out by "
            f"set of values: {c['num_eval_prompts']} validation + {c['num_eval_prompts']} test "
            "prompts, one per set of values (20 of the 56 sets), never trained on. G = "
            f"{c['num_responses']}, {c['prompts_per_epoch']} prompts per epoch, entropy bonus "
            f"{c['entropy_coef']}, lr {c['learning_rate']:g}. Stops on validation, then keeps "
            f"training {r['runs'][0].get('epochs_after_target', 0)} epochs (stability). Wall "
            f"times: load average {r['machine']['load_average_1_5_15_min']} on 2 shared cores."
            + (
                ""
                if "epochs_after_target" in r["runs"][0]
                else " *Measured before the loop held prompts out by content; to be re-run.*"
            ),
            "",
            r["table"],
            "",
            f"**{r['verdict']}**",
            "",
            "CPU seconds to the target (or to the 90 CPU s cap), per seed: "
            + ", ".join(f"{run.get('cpu_seconds', float('nan')):.0f}" for run in r["runs"])
            + "; the wall times above include waiting for the shared cores.",
        ]
    )


def objectives_section(r: dict) -> str:
    """Section 11 (helper H4's renderer lives with its benchmark)."""
    import bench_objectives

    return bench_objectives.results_section()


def collapse_section(r: dict) -> str:
    import bench_collapse

    return bench_collapse.results_section(r)


def entropy_section(r: dict) -> str:
    import bench_entropy

    return bench_entropy.results_section(r)


def staleness_section(r: dict) -> str:
    import bench_staleness

    return bench_staleness.results_section(r)


def length_drift_section(r: dict) -> str:
    import bench_length_drift

    return bench_length_drift.results_section(r)


def pass_at_k_section(r: dict) -> str:
    import bench_pass_at_k

    return bench_pass_at_k.results_section(r)


def kept_sections(generated: str) -> list[str]:
    """The '## ' sections of the current RESULTS.md that this script does not generate."""
    if not OUT.exists():
        return []
    text = OUT.read_text()
    chunks = ["## " + c for c in text.split("\n## ")[1:]]
    ours = {line for line in generated.splitlines() if line.startswith("## ")}
    ours.add("## Machine")
    return [
        c.rstrip("\n") + "\n"
        for c in chunks
        if c.splitlines()[0] not in ours and "(no results yet: run bench for" not in c
    ]


def main() -> None:
    parts = {
        "reward_throughput": throughput_section,
        "lecture_reproduction": lecture_section,
        "generalization": generalization_section,
        "stability": stability_section,
        "unseen_regime": unseen_regime_section,
        "autoregressive": autoregressive_section,
        "scaling": scaling_section,
        "trl": trl_section,
        "trl_vs_loop": trl_vs_loop_section,
        "lecture_ablation": ablation_section,
        "kl_beta": kl_beta_section,
        "ppo_vs_grpo": ppo_section,
        "detectors": detectors_section,
        "objectives": objectives_section,
        "entropy": entropy_section,
        "collapse": collapse_section,
        "length_drift": length_drift_section,
        "staleness": staleness_section,
        "pass_at_k": pass_at_k_section,
    }
    loaded = {name: load(name) for name in parts}
    present = [v for v in loaded.values() if v is not None]
    sections = [
        "# Benchmark results",
        "",
        "Produced by `make bench` (= `python3 tasks.py bench`): runs `benchmarks/bench_*.py` "
        "in order; each prints its table and writes `benchmarks/results/*.json` (+ a PNG); "
        "this file is assembled from those by `bench_9_report.py`. Not part of the test "
        "suite.",
        "",
    ]
    if present:
        sections += [machine_section(present), ""]
    generated = []
    for name, render in parts.items():
        if loaded[name] is None:
            generated += [f"## {name}", "", f"(no results yet: run bench for {name})", ""]
        else:
            generated += [render(loaded[name]), ""]
    sections += generated
    # Sections written by other benchmarks (objectives, staleness, ...) are kept as they are.
    sections += kept_sections("\n".join(generated))
    OUT.write_text("\n".join(sections))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
