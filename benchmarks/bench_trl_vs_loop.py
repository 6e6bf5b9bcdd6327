"""Our training loop against TRL's GRPOTrainer on the same work (notebook 09).

Both train the same model class from the same initial weights (``bench_trl.build_policy``:
the tiny GPT-2, output constrained to digits, word-level tokenizer), with the same task
(sort 3 numbers from 0..9, ``sort_distance_reward``), the same G, batch, learning rate,
steps per batch and loss (``bench_trl.CONFIG``, without bench_trl's AdamW weight decay, which our
loop's Adam does not have; TRL's arguments from
``trl_config.grpo_config_kwargs``), on the same prompts in the same order (the loop's
stream of training prompts, given to TRL unshuffled) and the same held-out sets (the loop's
validation and test sets, disjoint by content). Our loop trains the GPT-2 through
``hf_policy.HFSortPolicy``. Only the sampling randomness differs (TRL draws from torch's
global generator inside ``generate``, our loop from its own).

Per seed, one run of each, back to back in one process (same machine, same load), each
until greedy exact-sort on the validation set reaches ``TARGET`` (checked every
``EVAL_EVERY`` epochs) or ``MAX_EPOCHS``. Measured for each: seconds per optimizer step,
responses per second, time to the target, and where the time goes. The timers (wall and
CPU seconds of this process) wrap the same kinds of work on both sides:

* generation: our ``HFSortPolicy.sample`` / TRL's ``_generate`` (tokenising and decoding
  the text included);
* reward: ``SortTask.reward`` / TRL's ``_calculate_rewards`` (parsing the text included);
* forward: per-token log-probs and entropies with gradients on, and the frozen old
  log-probs where they get a pass of their own (our ``log_probs`` + ``token_entropy`` / TRL's
  ``_get_per_token_logps_and_entropies``; at one optimizer step per batch neither framework
  runs that extra pass: the old log-probs are the step's own, detached);
* backward: ``torch.Tensor.backward``; optimizer: ``Adam.step`` / ``AdamW.step``;
* evaluation: the greedy validation and test checks (excluded from the per-step figures);
* overhead: everything else (the framework: loss assembly, advantages, logging, data
  loading, callbacks).

    nice .venv/bin/python benchmarks/bench_trl_vs_loop.py --jobs 3   # as committed: results/trl_vs_loop.json
    .venv/bin/python benchmarks/bench_trl_vs_loop.py --quick   # seed 0, 2 rounds each
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
import time
import types
import warnings
from dataclasses import replace

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch  # noqa: E402
from _common import (  # noqa: E402
    RESULTS_DIR,
    markdown_table,
    output_dir,
    parse_args,
    save,
    setup,
    trl_run_kwargs,
)
from bench_trl import CONFIG, build_policy  # noqa: E402

from pgrl_helpers import training  # noqa: E402
from pgrl_helpers.hf import hf_policy, trl_bridge  # noqa: E402
from pgrl_helpers.sort_task import SortTask  # noqa: E402
from pgrl_helpers.training import heldout_split, run_policy_gradient  # noqa: E402

NAME = "trl_vs_loop"
SEEDS = (0, 1, 2)
QUICK_EPOCHS = 2  # a quick run: 2 rounds of each framework, seed 0
TARGET = 0.9  # greedy exact-sort on the validation set that both runs train to
EVAL_EVERY = 10  # epochs (x num_steps_per_epoch optimizer steps) between validation checks
MAX_EPOCHS = 600  # rounds; bench_trl.CONFIG takes one optimizer step per round
PHASES = ("generation", "reward", "forward", "backward", "optimizer", "evaluation")


class Timers:
    """Wall and CPU seconds per phase; ``wrap`` times a function, outermost call only."""

    def __init__(self):
        self.wall = dict.fromkeys(PHASES, 0.0)
        self.cpu = dict.fromkeys(PHASES, 0.0)
        self._active = None

    @contextlib.contextmanager
    def phase(self, name: str):
        if self._active is not None:  # nested: counted by the outer phase
            yield
            return
        self._active = name
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.wall[name] += time.perf_counter() - wall
            self.cpu[name] += time.process_time() - cpu
            self._active = None

    def wrap(self, name: str, fn):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            with self.phase(name):
                return fn(*args, **kwargs)

        return timed


@contextlib.contextmanager
def patched(owner, attribute: str, timers: Timers, phase: str):
    """Time ``owner.attribute`` (a class or an instance) under ``phase`` while inside."""
    original = getattr(owner, attribute)
    setattr(owner, attribute, timers.wrap(phase, original))
    try:
        yield
    finally:
        if isinstance(owner, (type, types.ModuleType)):
            setattr(owner, attribute, original)
        else:
            delattr(owner, attribute)


def common_patches(stack: contextlib.ExitStack, timers: Timers) -> None:
    """Backward and optimizer steps, timed the same way for both frameworks."""
    stack.enter_context(patched(torch.Tensor, "backward", timers, "backward"))
    stack.enter_context(patched(torch.optim.Adam, "step", timers, "optimizer"))
    stack.enter_context(patched(torch.optim.AdamW, "step", timers, "optimizer"))


def summary(name, timers, start, steps, responses, curve, test) -> dict:
    """Totals, per-step figures and the phase profile of one run."""
    wall = time.perf_counter() - start[0]
    cpu = time.process_time() - start[1]
    train_wall, train_cpu = wall - timers.wall["evaluation"], cpu - timers.cpu["evaluation"]
    reached = next((c for c in curve if c["exact_sort"] >= TARGET), None)
    profile = {p: timers.cpu[p] for p in PHASES} | {
        "overhead": train_cpu - sum(timers.cpu[p] for p in PHASES if p != "evaluation")
    }
    return {
        "framework": name,
        "steps": steps,
        "responses_sampled": responses,
        "wall_seconds": wall,
        "cpu_seconds": cpu,
        "train_cpu_seconds": train_cpu,
        "train_wall_seconds": train_wall,
        "cpu_seconds_per_step": train_cpu / steps,
        "wall_seconds_per_step": train_wall / steps,
        "responses_per_cpu_second": responses / train_cpu,
        "reached_target": reached is not None,
        "steps_to_target": None if reached is None else reached["step"],
        "cpu_seconds_to_target": None if reached is None else reached["train_cpu_seconds"],
        "profile_cpu_seconds": profile,
        "profile_wall_seconds": {p: timers.wall[p] for p in PHASES},
        "validation_curve": curve,
        "test": test,
    }


def run_loop(config, seed: int) -> dict:
    """Our ``run_policy_gradient`` on the GPT-2 through ``HFSortPolicy``."""
    tokenizer, model = build_policy(config, seed)
    policy = hf_policy.HFSortPolicy(model, tokenizer, config.prompt_length)
    timers, curve, first = Timers(), [], []
    start = (time.perf_counter(), time.process_time())

    def after_epoch(epoch, history):
        if epoch == 0:
            first.extend(history.run.train_prompts.tolist())
        last = history.evals()[-1]
        if last["epoch"] == epoch + 1:  # an evaluation ran after this epoch
            cpu = time.process_time() - start[1] - timers.cpu["evaluation"]
            curve.append(
                {
                    "step": last["step"],
                    "exact_sort": last["validation_exact_sort"],
                    "train_cpu_seconds": cpu,
                }
            )

    with contextlib.ExitStack() as stack:
        common_patches(stack, timers)
        stack.enter_context(patched(SortTask, "reward", timers, "reward"))
        for method, phase in (
            ("sample", "generation"),
            ("log_probs", "forward"),
            ("token_entropy", "forward"),
        ):
            stack.enter_context(patched(policy, method, timers, phase))
        # the held-out checks (greedy decoding and their rewards) as one phase
        stack.enter_context(patched(training, "_evaluate", timers, "evaluation"))
        history = run_policy_gradient(config, after_epoch, policy=policy)
    last = history.evals()[-1]
    if not curve or curve[-1]["step"] != last["step"]:  # the loop skips the callback on a stop
        cpu = time.process_time() - start[1] - timers.cpu["evaluation"]
        curve.append(
            {
                "step": last["step"],
                "exact_sort": last["validation_exact_sort"],
                "train_cpu_seconds": cpu,
            }
        )
    steps = len(history.steps())
    responses = history.evals()[-1]["responses_sampled"]
    test = history.evals()[-1]["test_exact_sort"]
    result = summary("ours", timers, start, steps, responses, curve, test)
    result["first_prompts"] = first
    return result


def run_trl(config, seed: int, prompts: torch.Tensor, val, test) -> dict:
    """TRL's GRPOTrainer on the same prompts (in order), the same held-out sets."""
    import transformers
    from trl import GRPOConfig, GRPOTrainer

    tokenizer, model = build_policy(config, seed)
    timers, curve, seen = Timers(), [], []
    reward = trl_bridge.sort_reward_func(config.reward_fn, config.vocab_size)
    start = (time.perf_counter(), time.process_time())
    every = EVAL_EVERY * config.num_steps_per_epoch

    def recording_reward(prompts, completions, **kwargs):
        if not seen:
            seen.extend(trl_bridge.parse_prompt(p) for p in prompts[:: config.num_responses])
        return reward(prompts, completions, **kwargs)

    recording_reward.__name__ = reward.__name__

    class Validate(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step % every and state.global_step < args.max_steps:
                return control
            with timers.phase("evaluation"):
                score = trl_bridge.evaluate_greedy_lm(model, tokenizer, val)["exact_sort"]
            cpu = time.process_time() - start[1] - timers.cpu["evaluation"]
            curve.append({"step": state.global_step, "exact_sort": score, "train_cpu_seconds": cpu})
            if score >= TARGET:  # else leave the trainer's own decision (max_steps)
                control.should_training_stop = True
            return control

    with tempfile.TemporaryDirectory(prefix="bench-trl-vs-loop-") as tmp:
        kwargs = trl_run_kwargs(config, tmp, shuffle_dataset=False)  # the loop's prompt order
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=recording_reward,
            args=GRPOConfig(**kwargs),
            train_dataset=trl_bridge.make_sort_dataset(prompts),
            processing_class=tokenizer,
            callbacks=[Validate()],
        )
        trainer.remove_callback(transformers.PrinterCallback)
        with contextlib.ExitStack() as stack:
            common_patches(stack, timers)
            for method, phase in (
                ("_generate", "generation"),
                ("_calculate_rewards", "reward"),
                ("_get_per_token_logps_and_entropies", "forward"),
            ):
                stack.enter_context(patched(trainer, method, timers, phase))
            trainer.train()
    steps = trainer.state.global_step
    responses = steps // config.num_steps_per_epoch * config.batch_prompts * config.num_responses
    with timers.phase("evaluation"):
        score = trl_bridge.evaluate_greedy_lm(model, tokenizer, test)["exact_sort"]
    result = summary("trl", timers, start, steps, responses, curve, score)
    result["first_prompts"] = seen
    return result


def loop_prompt_stream(
    config, max_epochs: int = MAX_EPOCHS
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The loop's training prompts, epoch after epoch, and its validation and test sets."""
    task = config.build_task()
    val, test = heldout_split(config)
    keys = task.prompt_key(torch.cat([val, test]))
    g = torch.Generator().manual_seed(config.seed)  # the loop's prompt generator
    epochs = [task.training_prompts(config.batch_prompts, g, keys) for _ in range(max_epochs)]
    return torch.cat(epochs), val, test


def main(
    quick: bool = False,
    seeds=None,
    out_dir=RESULTS_DIR,
    *,
    max_epochs: int = MAX_EPOCHS,
    no_save: bool = False,
    jobs: int = 1,
) -> dict:
    """Our loop, then TRL, on every seed (default ``SEEDS``; ``quick``: seed 0,
    ``QUICK_EPOCHS`` rounds each), ``jobs`` seeds side by side; out_dir/trl_vs_loop.json is
    rewritten after every seed unless ``no_save``."""
    out_dir = output_dir(out_dir, quick)
    setup()
    seeds = list(seeds) if seeds else ([0] if quick else list(SEEDS))
    max_epochs = QUICK_EPOCHS if quick else max_epochs
    if jobs > 1:  # seeds side by side, one process each (CPU seconds stay per process)
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(jobs, initializer=setup) as pool:
            pairs = list(pool.map(run_pair, seeds, [max_epochs] * len(seeds)))
        return report(pairs, no_save, out_dir)
    pairs = []
    for seed in seeds:
        pairs.append(run_pair(seed, max_epochs))
        result = report(pairs, no_save, out_dir)  # after every seed: a partial result survives
    return result


def add_options(parser) -> None:
    parser.add_argument("--max-epochs", type=int, default=MAX_EPOCHS, help="rounds at most")
    parser.add_argument("--no-save", action="store_true", help="print only, write no file")
    parser.add_argument("--jobs", type=int, default=1, help="seeds run side by side (processes)")


def run_pair(seed: int, max_epochs: int) -> dict:
    """Our loop, then TRL, on one seed's work; prints both lines."""
    warnings.filterwarnings("ignore")
    import transformers

    transformers.logging.set_verbosity_error()
    config = replace(
        CONFIG,
        seed=seed,
        num_epochs=max_epochs,
        eval_every=EVAL_EVERY,
        target_validation_exact_sort=TARGET,
    )
    prompts, val, test = loop_prompt_stream(config, max_epochs)
    ours = run_loop(config, seed)
    trl = run_trl(config, seed, prompts, val, test)
    same = ours.pop("first_prompts") == trl.pop("first_prompts")
    for r in (ours, trl):
        print(
            f"seed {seed} {r['framework']:4}: {r['steps']} steps, "
            f"{r['cpu_seconds_per_step']:.3f} cpu-s/step, "
            f"{r['responses_per_cpu_second']:.0f} responses/cpu-s, to target "
            f"{_seconds(r['cpu_seconds_to_target'])} cpu-s, test {r['test']:.1%}",
            flush=True,
        )
    return {"seed": seed, "same_first_prompts": same, "ours": ours, "trl": trl}


def _seconds(value) -> str:
    return "-" if value is None else f"{value:.0f}"


def report(pairs: list[dict], no_save: bool, out_dir=RESULTS_DIR) -> dict:
    """Print the table and the TRL / ours ratios; write out_dir/trl_vs_loop.json (unless
    ``no_save``) and return its content."""
    keys = ("cpu_seconds_per_step", "responses_per_cpu_second", "cpu_seconds_to_target")
    ratios = {
        k: [p["trl"][k] / p["ours"][k] for p in pairs if p["trl"][k] and p["ours"][k]] for k in keys
    }
    rows = [
        [p["seed"], r["framework"], r["steps"], f"{r['cpu_seconds_per_step']:.3f}"]
        + [f"{r['responses_per_cpu_second']:.0f}", _seconds(r["cpu_seconds_to_target"])]
        + [f"{r['test']:.0%}"]
        for p in pairs
        for r in (p["ours"], p["trl"])
    ]
    head = ["seed", "framework", "steps", "CPU s/step", "responses/CPU s", "CPU s to target"]
    print(markdown_table(head + ["test exact"], rows))
    print("TRL / ours:", {k: [round(x, 2) for x in v] for k, v in ratios.items()})
    payload = {
        "target_validation_exact_sort": TARGET,
        "eval_every_epochs": EVAL_EVERY,
        "seeds": [p["seed"] for p in pairs],
        "config": {k: v for k, v in vars(CONFIG).items() if not callable(v)},
        "ratios_trl_over_ours": ratios,
        "pairs": pairs,
    }
    return payload if no_save else save(NAME, payload, out_dir)


def section(r: dict, results_dir=RESULTS_DIR) -> str:
    """Per seed and framework: steps, CPU seconds per step, time to the target, test exact;
    the TRL / ours ratios and where the CPU time goes."""
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


if __name__ == "__main__":
    main(**parse_args(add_options))
