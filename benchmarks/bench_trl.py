"""TRL's GRPOTrainer learns the sort task (notebook 09).

Goal: >= 95% greedy exact sorts on prompts whose *content* (multiset of values) was never
trained on, lists of 3 numbers, CPU only, every seed, within about 10 minutes per seed. The
policy is notebook 09's tiny GPT-2 with the word-level tokenizer, its LM head constrained to
write digits only (``hf_policy.constrain_to_digits``; ``--unconstrained`` turns that off);
training is ``trl.GRPOTrainer`` with the arguments ``trl_config.grpo_config_kwargs`` maps from
a ``TrainConfig``; the reward is ``sort_distance_reward`` (-1 for a malformed completion).

Split by content: the 220 multisets of 3 values from 0..9 are shuffled once (split seed 0);
22 multisets (all their orderings) are the validation set. The test set is version 2
(``trl_bridge.fresh_test_split``, fresh seed 1): 22 multisets never scored before. The first
test set (22 multisets, version 1) was scored by every recipe tried while the recipe was being
chosen, so it guided the choice; it is retired from testing and its multisets join the 176
trained on (results/trl_*.json and trl_v1_final_recipe.json keep those scores). (With values
0..4 there are only 35 multisets: 21 to train on, which the model memorised instead of learning
to sort.) A run trains its whole learning-rate schedule
(``CONFIG.num_epochs`` rounds, or until ``BUDGET_SECONDS``); greedy exact-sort on the
validation set is checked every ``EVAL_EVERY`` optimizer steps and picks the checkpoint (the
latest one with the best validation score). The test set is scored once, on that checkpoint,
and the goal is judged on it, for the worst seed. ``--validation-target X`` stops a run the
first time validation reaches X instead: with 22 validation multisets that stops too early
(measured: results/trl_stop_at_validation.json).

    nice .venv/bin/python benchmarks/bench_trl.py --jobs 3   # 3 seeds side by side (as committed)
    .venv/bin/python benchmarks/bench_trl.py --seeds 0 --max-epochs 20   # a short look
    .venv/bin/python benchmarks/bench_trl.py --quick   # seed 0, 2 steps, a temporary folder

The recipes tried on the first test set are kept as ``--name trl_<what>`` files beside trl.json
(``section`` lists them with their scores).
"""

from __future__ import annotations

import functools
import math
import os
import statistics
import tempfile
import time
import warnings
from dataclasses import replace

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch  # noqa: E402
from _common import (  # noqa: E402
    RESULTS_DIR,
    load,
    markdown_table,
    output_dir,
    parse_args,
    record_splits,
    save,
    setup,
    split_record,
    trl_run_kwargs,
)

from pgrl_helpers.config import TrainConfig  # noqa: E402
from pgrl_helpers.hf import hf_policy, trl_bridge  # noqa: E402

NAME = "trl"
SEEDS = (0, 1, 2)
QUICK_EPOCHS = 2  # a quick run: 2 rounds (optimizer steps), seed 0
GOAL = 0.95  # on the test set, every seed
#: Early stop on validation (None: train the whole schedule). 100% on the 22 validation
#: multisets was reached at step 110 (seed 0) and 460 (seed 1) with 74.7% and 87.9% on the
#: test multisets: a small validation set says "done" by luck (trl_stop_at_validation.json).
VALIDATION_TARGET = None
EVAL_EVERY = 10  # optimizer steps between validation checks
#: Per seed, in CPU seconds of this (single-threaded) process: wall time on a free core,
#: and the same whatever else shares the machine.
BUDGET_SECONDS = 600.0
SPLIT_SEED, N_TEST, N_VAL = 0, 22, 22
#: The test set's version: 1 = content_split's (retired, it guided the recipe choice), 2 =
#: fresh_test_split's with this seed, scored once by the final recipe.
TEST_VERSION, FRESH_TEST_SEED = 2, 1
#: The learning-rate schedule handed to GRPOConfig (``lr_scheduler_type``). trl_config maps our
#: loop's constant rate to "constant"; "linear" decays it to 0 over ``max_steps``. Measured, 3
#: seeds, worst-seed test exact-sort: constant 73.7% (validation swung between 55% and 94% late
#: in the run), linear over 600 steps 91.9%, linear over 900 steps 69.7% (4 optimizer steps
#: per round in all three; results/trl_4_steps.json, trl_constant_lr.json, trl_900_steps.json).
LR_SCHEDULE = "linear"
#: AdamW weight decay handed to GRPOConfig (TRL's optimizer; the mapping's default is 0, like
#: our loop's Adam). Over the last quarter of the schedule, mean validation exact-sort 0.993
#: (worst seed 0.982) with 0.1 against 0.987 (0.974) without: a difference within noise, and
#: the first test set's scores of both were in view when it was kept (that test set guided the
#: choice; results/trl_v1_final_recipe.json, trl_no_weight_decay.json). Decay pulls the
#: weights toward small norms, which favours a rule shared by all multisets over separate
#: memorised answers (the grokking results of Power et al. 2022, arXiv 2201.02177).
WEIGHT_DECAY = 0.1

#: The run's settings as a TrainConfig (mapped to GRPOConfig by trl_bridge). What changed from
#: notebook 09's first attempt (8 prompts x G = 8, 2 steps per round, lr 5e-3, no entropy
#: bonus), which learns the format and then collapses onto one prompt-independent answer
#: (about 1.5 of 3, no exact sorts): G = 16 and 32 prompts per round (more completions per
#: group, so more groups with a better-than-average answer), an entropy bonus of 0.05 (against
#: the collapse) and lr 1e-3 (at 2e-3 and 3e-3 held-out exact sorts climbed to 60% and then
#: fell back to near 0 and oscillated; tried on seed 0). One optimizer step per generation
#: round (``num_iterations=1``), 1200 rounds: with 4 steps per round (600 steps) the worst
#: seed reached 91.9%; notebook 07 section 4b measured the same effect in our loop (several
#: Adam steps on one batch make the policy fall back after it has learned). Values 0..9
#: instead of 0..4 and the digit-only head: see the module docstring and RESULTS.md.
CONFIG = TrainConfig(
    deltas_mode="normalized_rewards",
    loss_mode="clipped",
    epsilon=0.2,
    entropy_coef=0.05,
    num_epochs=1200,  # 1200 rounds = optimizer steps, about 4 CPU minutes
    num_steps_per_epoch=1,
    num_responses=16,
    prompt_source="random",
    prompts_per_epoch=32,
    prompt_length=3,
    vocab_size=10,
    reward_fn="sort_distance_reward",
    learning_rate=1e-3,
)


#: The recipe the committed trl.json scores: what the test set is scored by.
FINAL_RECIPE = (
    "final: lr 1e-3, G 16, 32 prompts per round, entropy bonus 0.05, 1 optimizer step per "
    "round, 1200 rounds with linear decay, AdamW weight decay 0.1, checkpoint picked on validation"
)
#: Recipes scored on test version 1 while the recipe was being chosen (git log of bench_trl.py
#: and results/trl*.json): their test scores were in view when the next one was picked.
V1_GUIDED = (
    "The version-1 test set guided the choice: every recipe tried was scored on it and the "
    "next recipe was picked with those scores in view."
)


def split_records(config: TrainConfig, version: int = TEST_VERSION) -> dict:
    """{'validation', 'test'}: ``_common.split_record`` of each (id, seed, sizes, key)."""
    split = make_split(config, version)
    base = (
        f"bench_trl: sort, length {config.prompt_length}, values 0-{config.vocab_size - 1}, "
        f"content_split seed {SPLIT_SEED}"
    )
    key = "multiset of the prompt"

    def sizes(prompts):
        return {
            "multisets": len({tuple(sorted(p)) for p in prompts.tolist()}),
            "prompts": len(prompts),
        }

    test_id = base + (
        " [test v1]" if version == 1 else f", fresh_test_split seed {FRESH_TEST_SEED} [test v2]"
    )
    return {
        "validation": split_record(
            base + " [validation]", seed=SPLIT_SEED, sizes=sizes(split["val"]), key=key
        ),
        "test": split_record(
            test_id,
            seed=SPLIT_SEED if version == 1 else FRESH_TEST_SEED,
            sizes=sizes(split["test"]),
            key=key,
        ),
    }


def make_split(config: TrainConfig, version: int = TEST_VERSION) -> dict:
    """{'train', 'val', 'test'} prompts by content; ``version`` 1 is the retired test set."""
    args = (config.prompt_length, config.vocab_size, SPLIT_SEED, N_TEST, N_VAL)
    if version == 1:
        return trl_bridge.content_split(*args)
    split = trl_bridge.fresh_test_split(*args, fresh_seed=FRESH_TEST_SEED)
    return {name: split[name] for name in ("train", "val", "test")}


def build_policy(config: TrainConfig, seed: int, digits_only: bool = True):
    """The tokenizer and the tiny GPT-2 (its output constrained to digits unless told not)."""
    tokenizer = trl_bridge.build_sort_tokenizer(config.vocab_size)
    torch.manual_seed(seed)
    policy = trl_bridge.build_tiny_gpt2(tokenizer, seed=seed)
    if digits_only:
        hf_policy.constrain_to_digits(policy, tokenizer)
    return tokenizer, policy


def train_one_seed(
    seed: int,
    config: TrainConfig = CONFIG,
    budget: float = BUDGET_SECONDS,
    quiet: bool = True,
    digits_only: bool = True,
    lr_schedule: str = LR_SCHEDULE,
    validation_target: float | None = VALIDATION_TARGET,
    weight_decay: float = WEIGHT_DECAY,
) -> dict:
    """One GRPOTrainer run over its schedule (or to the budget, or to ``validation_target``);
    its validation curve, the checkpoint validation picks, and that checkpoint's test score."""
    import transformers
    from trl import GRPOConfig, GRPOTrainer

    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    config = replace(config, seed=seed)
    split = make_split(config, TEST_VERSION)
    g = torch.Generator().manual_seed(seed)
    rows = config.num_epochs * config.batch_prompts
    train = split["train"][torch.randint(len(split["train"]), (rows,), generator=g)]
    seen = {tuple(sorted(p)) for p in train.tolist()}
    held = {tuple(sorted(p)) for p in torch.cat([split["val"], split["test"]]).tolist()}
    train_prompts_with_heldout_key = sum(tuple(sorted(p)) in held for p in train.tolist())
    assert not seen & held and train_prompts_with_heldout_key == 0
    tokenizer, policy = build_policy(config, seed, digits_only)
    curve: list[dict] = []
    best = {"exact_sort": -1.0, "state": None, "step": 0}  # model selection on validation
    start, cpu_start = time.perf_counter(), time.process_time()

    class Validate(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step % EVAL_EVERY and state.global_step < args.max_steps:
                return control
            score = trl_bridge.evaluate_greedy_lm(policy, tokenizer, split["val"])
            seconds = time.perf_counter() - start
            cpu = time.process_time() - cpu_start
            curve.append(
                {"step": state.global_step, "seconds": seconds, "cpu_seconds": cpu, **score}
            )
            if score["exact_sort"] >= best["exact_sort"]:  # ties: the later checkpoint
                best.update(exact_sort=score["exact_sort"], step=state.global_step)
                best["state"] = {k: v.detach().clone() for k, v in policy.state_dict().items()}
            if not quiet:
                print(
                    f"  step {state.global_step:4d} {seconds:6.0f} s {cpu:6.0f} cpu-s {score}",
                    flush=True,
                )
            stop = validation_target is not None and score["exact_sort"] >= validation_target
            if stop or cpu > budget:
                control.should_training_stop = True
            return control

    with tempfile.TemporaryDirectory(prefix="bench-trl-") as tmp:
        kwargs = trl_run_kwargs(
            config,
            tmp,
            lr_scheduler_type=lr_schedule,
            weight_decay=weight_decay,  # AdamW's decoupled decay (the mapping's default: 0)
        )
        trainer = GRPOTrainer(
            model=policy,
            reward_funcs=trl_bridge.sort_reward_func(config.reward_fn, config.vocab_size),
            args=GRPOConfig(**kwargs),
            train_dataset=trl_bridge.make_sort_dataset(train),
            processing_class=tokenizer,
            callbacks=[Validate()],
        )
        trainer.remove_callback(transformers.PrinterCallback)
        trainer.train()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    rewards = [
        {"step": h["step"], "reward": h["reward"]}
        for h in trainer.state.log_history
        if "reward" in h
    ]
    policy.load_state_dict(best["state"])  # the best validation checkpoint
    test = trl_bridge.evaluate_greedy_lm(policy, tokenizer, split["test"])
    return {
        "seed": seed,
        "steps": trainer.state.global_step,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "responses_sampled": trainer.state.global_step
        // config.num_steps_per_epoch
        * config.batch_prompts
        * config.num_responses,
        "train_prompts_with_heldout_key": train_prompts_with_heldout_key,
        "selected_step": best["step"],
        "selected_validation_exact_sort": best["exact_sort"],
        "reached_validation_target": bool(
            validation_target is not None and curve and curve[-1]["exact_sort"] >= validation_target
        ),
        "test": test,
        "validation_curve": curve,
        "train_reward_curve": rewards,
    }


def main(
    quick: bool = False,
    seeds=None,
    out_dir=RESULTS_DIR,
    *,
    max_epochs: int = CONFIG.num_epochs,
    budget: float = BUDGET_SECONDS,
    no_save: bool = False,
    name: str = NAME,
    jobs: int = 1,
    unconstrained: bool = False,
    lr_schedule: str = LR_SCHEDULE,
    validation_target: float | None = VALIDATION_TARGET,
    weight_decay: float = WEIGHT_DECAY,
    recipe: str = FINAL_RECIPE,
    set_fields: list[str] = (),
) -> dict:
    """Every seed (default ``SEEDS``; ``quick``: seed 0, ``QUICK_EPOCHS`` rounds) trained by
    GRPOTrainer, the checkpoint validation picks scored once on the test set; saved as
    out_dir/<name>.json unless ``no_save``. The other keywords are the command-line options."""
    out_dir = output_dir(out_dir, quick)
    setup()
    warnings.filterwarnings("ignore")
    import transformers

    transformers.logging.set_verbosity_error()
    seeds = list(seeds) if seeds else ([0] if quick else list(SEEDS))
    max_epochs = QUICK_EPOCHS if quick else max_epochs
    overrides = {k: type(getattr(CONFIG, k))(v) for k, v in (a.split("=") for a in set_fields)}
    config = replace(CONFIG, num_epochs=max_epochs, **overrides)
    split = make_split(config, TEST_VERSION)
    one_seed = functools.partial(
        train_one_seed,
        config=config,
        budget=budget,
        quiet=False,
        digits_only=not unconstrained,
        lr_schedule=lr_schedule,
        validation_target=validation_target,
        weight_decay=weight_decay,
    )
    if jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(jobs, initializer=setup) as pool:
            runs = list(pool.map(one_seed, seeds))
    else:
        runs = [one_seed(s) for s in seeds]
    for r in runs:
        print(
            f"seed {r['seed']}: {r['steps']} steps, {r['cpu_seconds']:.0f} cpu-s, test {r['test']}"
        )
    worst = min(r["test"]["exact_sort"] for r in runs)
    rows = [
        [
            r["seed"],
            r["steps"],
            f"{r['cpu_seconds']:.0f}",
            f"{r['seconds']:.0f}",
            f"{r['test']['exact_sort']:.1%}",
            f"{r['test']['mean_reward']:.2f}",
        ]
        for r in runs
    ]
    print(markdown_table(["seed", "steps", "CPU s", "wall s", "test exact", "test reward"], rows))
    print(f"worst seed: {worst:.1%} test exact-sort (goal {GOAL:.0%})")
    records = split_records(config)
    payload = record_splits(
        {},
        validation=records["validation"],
        test=records["test"],
        recipe=recipe,
        benchmark="bench_trl.py",
    )
    payload |= {
        "goal": GOAL,
        "validation_target": validation_target,
        "eval_every_steps": EVAL_EVERY,
        "budget_cpu_seconds": budget,
        "digits_only": not unconstrained,
        "lr_schedule": lr_schedule,
        "weight_decay": weight_decay,
        "jobs": jobs,
        "config": {k: v for k, v in vars(config).items() if not callable(v)},
        "split": {name: len(prompts) for name, prompts in split.items()},
        "worst_test_exact_sort": worst,
        "goal_met": worst >= GOAL,
        "runs": runs,
    }
    return payload if no_save else save(name, payload, out_dir)


def add_options(parser) -> None:
    parser.add_argument("--max-epochs", type=int, default=CONFIG.num_epochs, help="rounds")
    parser.add_argument("--budget", type=float, default=BUDGET_SECONDS, help="CPU s per seed")
    parser.add_argument("--no-save", action="store_true", help="print only, write no results file")
    parser.add_argument("--name", default=NAME, help="results file name (default: trl)")
    parser.add_argument("--jobs", type=int, default=1, help="seeds run side by side (processes)")
    parser.add_argument("--unconstrained", action="store_true", help="let the LM write any token")
    parser.add_argument(
        "--lr-schedule", default=LR_SCHEDULE, choices=("constant", "linear", "cosine")
    )
    parser.add_argument(
        "--validation-target",
        type=float,
        default=VALIDATION_TARGET,
        help="stop the first time validation exact-sort reaches this (default: never)",
    )
    parser.add_argument("--weight-decay", type=float, default=WEIGHT_DECAY)
    parser.add_argument(
        "--recipe",
        default=FINAL_RECIPE,
        help="what the results file records as scored on the test set (default: the final one)",
    )
    parser.add_argument(
        "--set",
        dest="set_fields",
        nargs="*",
        default=[],
        help="TrainConfig overrides, e.g. learning_rate=1e-3",
    )


#: The recipes scored on the first (version 1) test set, in the order they were tried.
EARLIER_RECIPES = (
    "trl_v1_final_recipe",
    "trl_no_weight_decay",
    "trl_4_steps",
    "trl_constant_lr",
    "trl_900_steps",
    "trl_stop_at_validation",
)


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
        f"The checkpoints chosen on {r['split']['val']} validation prompts in that "
        f"{r['config']['num_epochs'] * r['config']['num_steps_per_epoch']}-step "
        f"run ({picks}) show why a small validation set is a poor judge: validation exact-sort "
        "near 99% did not guarantee the test multisets."
    )


def margin_note(r: dict) -> str:
    """The worst seed's margin over the goal, in test prompts."""
    n = r["split"]["test"]
    need, got = math.ceil(r["goal"] * n), round(r["worst_test_exact_sort"] * n)
    return f"{got} of {n} test prompts sorted, {need} needed, a margin of {got - need:+d} prompts"


def late_validation(r: dict) -> str:
    """Mean validation exact-sort over the last quarter of the schedule, over the seeds."""
    steps = r["config"]["num_epochs"] * r["config"]["num_steps_per_epoch"]
    means = [
        statistics.mean(
            x["exact_sort"] for x in run["validation_curve"] if x["step"] > 0.75 * steps
        )
        for run in r["runs"]
    ]
    return f"{statistics.mean(means):.3f}"


def other_runs(results_dir) -> list[str]:
    """One line per earlier TRL recipe kept beside trl.json, each with its test scores."""
    lines = []
    for name in EARLIER_RECIPES:
        other = load(name, results_dir)
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


def section(r: dict, results_dir=RESULTS_DIR) -> str:
    """The final recipe per seed, the goal, why the task changed, and the recipes tried before."""
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
    splits = r["splits"]
    multisets = math.comb(c["vocab_size"] + c["prompt_length"] - 1, c["prompt_length"])
    trained = (
        multisets
        - splits["validation"]["sizes"]["multisets"]
        - splits["test"]["sizes"]["multisets"]
    )
    old_values = 5  # the previous run's values 0-4 (git show 8f593ba:benchmarks/results/trl.json)
    old_multisets = math.comb(old_values + c["prompt_length"] - 1, c["prompt_length"])
    first = load(EARLIER_RECIPES[0], results_dir)
    no_decay = load("trl_no_weight_decay", results_dir)
    four_steps = load("trl_4_steps", results_dir)
    seeds = len(r["runs"])
    return "\n".join(
        [
            "## TRL's GRPOTrainer on the sort task, held out by content (`bench_trl.py`)",
            "",
            f"Notebook 09's tiny GPT-2 (word-level tokenizer, {head}) trained by "
            f"`trl.GRPOTrainer` with the arguments `trl_config.grpo_config_kwargs` maps: lists "
            f"of {c['prompt_length']} values 0-{c['vocab_size'] - 1}, {c['reward_fn']} (-1 if "
            f"malformed), G = {c['num_responses']}, {c['prompts_per_epoch']} prompts per round, "
            f"{c['num_steps_per_epoch']} optimizer step(s) per round, {c['loss_mode']} loss, "
            f"{c['deltas_mode']}, entropy_coef {c['entropy_coef']}, lr {c['learning_rate']} "
            f"({schedule} schedule), AdamW weight decay {r.get('weight_decay', 0.0):g}. "
            f"Held out by content (multiset): {r['split']['test']} test and "
            f"{r['split']['val']} validation prompts whose values never appear together in "
            f"training ({r['split']['train']} training prompts). The test set is a fresh one "
            f"(`trl_bridge.fresh_test_split`, seed {splits['test']['seed']}): "
            f"{splits['test']['sizes']['multisets']} multisets "
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
            f"What changed, and why: with values 0-{old_values - 1} ({old_multisets} multisets, "
            "a few held out, the rest trained on) and an unconstrained head, the previous run "
            "of this benchmark (`git show 8f593ba:benchmarks/results/trl.json`) fitted its "
            "training lists but scored far below the goal on the test multisets: it memorised "
            f"the answers it trained on. Values 0-{c['vocab_size'] - 1} give {multisets} "
            f"multisets ({trained} trained on), so memorising stops paying. The digit "
            "constraint (`hf_policy.constrain_to_digits`: a frozen LM-head bias of -1e4 on the "
            "special tokens) removes "
            "the format phase and puts the distribution on the task's values, which also lets "
            "our loop train the same model (`bench_trl_vs_loop.py`).",
            "",
            "Recipes scored on the first test set"
            + (
                f" ({first['splits']['test']['sizes']['multisets']} other multisets)"
                if first
                else ""
            )
            + ", kept as measured (test exact-sort per seed, same seeds). Each was scored on "
            "that set and the next one was picked with those scores in view, so that test set "
            f"guided the choice: these lines are the record of the search, not a ranking ({seeds} "
            "seeds per recipe cannot give an exact permutation p below "
            f"{2 / math.comb(2 * seeds, seeds):g}), and the first line is the final recipe on it:",
            "",
            *other_runs(results_dir),
            "",
            (
                f"With {four_steps['config']['num_steps_per_epoch']} optimizer steps per round "
                f"(num_iterations={four_steps['config']['num_steps_per_epoch']}) validation "
                "swung late in the run and a linear decay only partly damped it; "
                if four_steps
                else ""
            )
            + "one step per round (the fix of section <bench_stability> in our own loop) over a "
            f"{c['num_epochs'] * c['num_steps_per_epoch']}-step {schedule} decay, and AdamW "
            "weight decay (`bench_trl.WEIGHT_DECAY`"
            + (
                f"; its validation difference was small, {late_validation(first)} vs "
                f"{late_validation(no_decay)} mean exact-sort over the last quarter"
                if first and no_decay
                else ""
            )
            + ") completed the recipe. "
            + selection_note(load("trl_900_steps", results_dir)),
        ]
    )


if __name__ == "__main__":
    main(**parse_args(add_options))
