"""The matched TRL arm of ``bench_real_lm.py`` and the matched speed comparison (issue 46, item 5).

``run_trl(args)`` (``bench_real_lm.py run --arm trl --seed N``) trains SmolLM2-135M-Instruct
with TRL's ``GRPOTrainer`` in the setting of our ``rl`` arm and scores it with the benchmark's
own functions, into ``real_lm_runs/trl_seedN.json`` in the ``rl`` arm's schema:

* the same model and LoRA (``bench_real_lm.lora_config``), prompts x G, reply cap
  (``bench_real_lm.reply_tokens``: the tokenizer's reply budget), reward (exact + 0.5 partial +
  0.1 format, scored by ``real_lm_task.score_reply`` on the raw token ids, as ``ScoredTask``),
  prompt template and chat template, 60 steps;
* the same objective: ``pgrl_helpers.hf.trl_config.grpo_config_kwargs`` maps the loop's own
  ``TrainConfig`` (``bench_real_lm.train_config``) to GRPOConfig: advantages R_i - group mean,
  not divided by the std (Dr. GRPO's advantage, Liu et al. 2025 sec. 3: ``scale_rewards=
  "none"``), beta 0, one optimizer step per batch (``num_iterations=1``, ratio 1: the loss is
  REINFORCE with the group baseline), the per-token losses averaged over every real token of
  the batch (our ``loss_aggregation="token_mean"``, TRL's ``loss_type="dapo"``: the aggregation
  our ``rl`` arm has always used; TRL's ``dr_grpo`` would divide by G x prompts x cap instead);
  Adam with the loop's betas, eps and no weight decay, constant rate, no warm-up, no clipping;
* the same training prompts: the loop draws each step's prompts with ``task.training_prompts``
  from a generator seeded with the run's seed, excluding the held-out multisets; this arm draws
  the same sequence with the same calls (``training_prompts``) and feeds it to TRL in order
  (``shuffle_dataset=False``), so both arms see the same prompts at every step of a seed;
* the same held-out protocol: validation (greedy exact) every ``--val-every`` steps picks the
  adapter, the test is scored once by it with ``greedy_eval`` / ``sampled_eval`` /
  ``kl_to_base``;
* float32 on both sides: TRL's ``bf16``, ``fp16`` and gradient checkpointing pinned off,
  ``use_cpu=True``; sampling at temperature 1 with top-p 1, top-k off (our ``ChatLMPolicy``
  samples from the plain softmax at temperature 1).

Each run records both arms' settings in one vocabulary (``trl_settings`` from the trainer TRL
built, ``ours_settings`` from the ``rl`` arm's record and the loop's code); ``matched_settings
(ours, trl)`` raises naming every difference, and the report calls it.

``matched_speed(args)`` (``bench_real_lm.py speed``): both sides loaded once in one process,
1 thread, float32, no checkpointing, the benchmark's setting; steps interleaved (ours, TRL,
ours, ...: two threads that hand a baton, one running at a time), 1 warm-up step each, then
``--speed-steps`` timed steps each (>= 10 on the real model); per step the thread's CPU
seconds (``time.thread_time``) and wall seconds, the load average before and after, the
reply tokens; medians, ranges and the ratio of the medians, into ``real_lm_runs/speed.json``.

Needs ``trl``, ``peft`` and ``datasets`` (``pip install -e .[trl]``).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_real_lm as B  # noqa: E402

from pgrl_helpers.hf import real_lm as R  # noqa: E402
from pgrl_helpers.hf import real_lm_task as T  # noqa: E402
from pgrl_helpers.hf import trl_config as TC  # noqa: E402

ARM = "trl"

# ----------------------------------------------------------------------------- settings


def loop_optimizer(learning_rate: float) -> dict:
    """The optimizer our loop builds (``training._train``: ``torch.optim.Adam(params, lr)``),
    read from torch's own defaults."""
    opt = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=learning_rate)
    d = opt.defaults
    return {
        "name": "Adam", "lr": float(d["lr"]), "betas": [float(b) for b in d["betas"]],
        "eps": float(d["eps"]), "weight_decay": d["weight_decay"],
        "amsgrad": bool(d["amsgrad"]), "schedule": "constant", "warmup_steps": 0,
        "grad_clip": None,
    }  # fmt: skip


def torch_optimizer(opt) -> dict:
    """The same fields of the optimizer a trainer built, read from its parameter groups (the
    Trainer puts lr and weight decay there, not in ``defaults``); AdamW with no weight decay is
    Adam. Groups that differ are listed as such."""
    keys = ("lr", "betas", "eps", "weight_decay", "amsgrad")
    groups = [g for g in opt.param_groups if g["params"]]
    values = {}
    for k in keys:
        seen = {repr(g.get(k, opt.defaults.get(k))) for g in groups}
        values[k] = groups[0].get(k, opt.defaults.get(k)) if len(seen) == 1 else sorted(seen)
    name = type(opt).__name__
    if name == "AdamW" and values["weight_decay"] == 0.0:
        name = "Adam"  # decoupled decay of 0: the same update
    return {
        "name": name, "lr": float(values["lr"]), "betas": [float(b) for b in values["betas"]],
        "eps": float(values["eps"]), "weight_decay": values["weight_decay"],
        "amsgrad": bool(values["amsgrad"]),
    }  # fmt: skip


def lora_settings(config, requested=None) -> dict:
    """r, alpha, dropout of a LoraConfig, and its target modules as requested (peft resolves
    "all-linear" into the model's module names in the config it keeps: ``requested`` is the
    config given, with the same r / alpha / dropout)."""
    targets = (requested or config).target_modules
    targets = targets if isinstance(targets, str) else sorted(targets)
    return {"r": config.r, "alpha": config.lora_alpha, "targets": targets,
            "dropout": config.lora_dropout}  # fmt: skip


def shared_settings(args) -> dict:
    """Settings both arms take from the same code and options (the model, the task, the
    held-out protocol)."""
    return {
        "model": B.recorded_settings(args)["model"],
        "device": args.device, "dtype": args.dtype, "threads": args.threads,
        "prompt_template": T.PROMPT_TEMPLATES[B.TEMPLATE_NAME],
        "reward_weights": dict(B.WEIGHTS),
        "prompts_per_step": args.prompts, "group": args.group,
        "reply_tokens": args.reply_tokens, "rl_steps": args.rl_steps,
        "learning_rate": args.learning_rate,
        "val_every": args.val_every, "heldout_prompts": B.HELDOUT,
        "split_seed": T.SPLIT_SEED, "n_samples": args.n_samples,
        "sample_seed": args.sample_seed, "lora": lora_settings(B.lora_config(args)),
        "training_prompts": "task.training_prompts(prompts, Generator().manual_seed(seed), "
        "held-out multisets excluded), one call per step",
    }  # fmt: skip


def ours_settings(record: dict) -> dict:
    """Our ``rl`` arm's settings in the matched vocabulary: its run record's options, and what
    the loop does for them (``bench_real_lm.train_config`` and ``training._train``)."""
    import argparse

    parser = argparse.ArgumentParser()
    B.add_options(parser)
    args = parser.parse_args([])  # options a record from before an option existed lacks
    vars(args).update({**B.DEFAULTS, **record["settings"]})
    args.rl_steps = args.rl_steps or record["rl"]["steps"]
    saved, B.HELDOUT = B.HELDOUT, len(record["test_greedy"]["exact_per_problem"])
    try:
        out = shared_settings(args)
        config = B.train_config(args, record["seed"])
    finally:
        B.HELDOUT = saved
    out.update({
        "advantage": config.deltas_mode,
        "loss": f"{config.loss_mode}, {config.loss_aggregation}",
        "optimizer_steps_per_batch": config.num_steps_per_epoch,
        "kl_coef": config.kl_coef, "entropy_coef": config.entropy_coef,
        "optimizer": loop_optimizer(config.learning_rate),
        "sampling": {"temperature": 1.0, "top_p": 1.0, "top_k": None, "min_p": None,
                     "repetition_penalty": 1.0},
        "compute_dtype": "float32", "gradient_checkpointing": False,
        "dropout": 0.0,
    })  # fmt: skip
    return out


def trl_settings(args, trainer) -> dict:
    """The TRL arm's settings in the matched vocabulary, read from the trainer TRL built."""
    a = trainer.args
    if a.num_iterations != 1:
        raise ValueError(f"num_iterations {a.num_iterations}: the loop takes one step per batch")
    loss_types = {v: k for k, types in TC.EQUIVALENT_LOSS_TYPES.items() for v in types}
    # with one step per batch the ratio is 1 and the unclipped loss is the naive one
    # (trl_config.loss_kwargs_for); a finite clip range would still clip nothing at ratio 1
    loss_mode = "naive" if a.epsilon_high == float("inf") and a.epsilon == 1.0 else "clipped"
    peft = trainer.model.peft_config["default"]
    gen = trainer.generation_config
    out = shared_settings(args)
    out.update({
        "model": B.recorded_settings(args)["model"],
        "prompts_per_step": a.per_device_train_batch_size
        * a.gradient_accumulation_steps // a.num_generations,
        "group": a.num_generations, "reply_tokens": a.max_completion_length,
        "rl_steps": a.max_steps, "learning_rate": a.learning_rate,
        "lora": lora_settings(peft, B.lora_config(args)),
        "advantage": TC.TRL_SCALE_REWARDS[str(a.scale_rewards)],
        "loss": f"{loss_mode}, {loss_types[a.loss_type]}",
        "optimizer_steps_per_batch": a.num_iterations * a.steps_per_generation
        // a.gradient_accumulation_steps,
        "kl_coef": float(a.beta), "entropy_coef": float(getattr(a, "entropy_coef", 0.0)),
        "optimizer": {
            **torch_optimizer(trainer.optimizer), "schedule": str(a.lr_scheduler_type.value
            if hasattr(a.lr_scheduler_type, "value") else a.lr_scheduler_type),
            "warmup_steps": int(a.warmup_steps), "grad_clip": a.max_grad_norm or None,
        },
        "sampling": {"temperature": float(gen.temperature), "top_p": float(gen.top_p),
                     "top_k": gen.top_k or None, "min_p": gen.min_p,
                     "repetition_penalty": float(gen.repetition_penalty)},
        "compute_dtype": "bfloat16" if a.bf16 else "float16" if a.fp16 else "float32",
        "gradient_checkpointing": bool(a.gradient_checkpointing
                                       or getattr(a, "activation_checkpointing", False)),
        "dropout": 0.0 if a.disable_dropout else "model's",
    })  # fmt: skip
    return out


def matched_settings(ours: dict, trl: dict) -> list[tuple[str, object, object]]:
    """Rows (setting, ours, TRL) of the two arms' recorded settings; raises ValueError naming
    every setting that differs or that one arm lacks."""
    bad = []
    for key in sorted(set(ours) | set(trl)):
        if key not in ours or key not in trl:
            bad.append(f"{key}: recorded by {'TRL' if key in trl else 'ours'} only")
        elif ours[key] != trl[key]:
            bad.append(f"{key}: ours {ours[key]!r}, TRL {trl[key]!r}")
    if bad:
        raise ValueError("the TRL arm is not matched to ours: " + "; ".join(bad))
    return [(key, ours[key], trl[key]) for key in sorted(ours)]


# ----------------------------------------------------------------------------- the TRL trainer


def training_prompts(args, seed: int, task, heldout_keys) -> list[torch.Tensor]:
    """The prompts our loop trains on at each step for ``seed`` (``training._train``'s
    ``prompt_generator`` and ``Resampler.draw``'s call), one int64[prompts, 5] per step."""
    generator = torch.Generator().manual_seed(seed)
    return [
        task.training_prompts(args.prompts, generator, heldout_keys) for _ in range(args.rl_steps)
    ]


def reward_function(tokenizer):
    """TRL's reward function: ``combined_reward`` of ``score_reply`` on the raw completion ids
    (``decode_replies``: the text before EOS, EOS written or not), as our ``ScoredTask``. Keeps
    the per-batch means of each score (``log``) and the reply lengths."""
    pad = R.pad_token_id(tokenizer)
    log, lengths = [], []

    def sort_reward(prompts, completions, completion_ids, numbers, **kwargs):
        width = max(len(c) for c in completion_ids)
        ids = torch.tensor([list(c) + [pad] * (width - len(c)) for c in completion_ids])
        texts, finished = T.decode_replies(tokenizer, ids)
        rows = [T.score_reply(n, t, f) for n, t, f in zip(numbers, texts, finished)]
        row = {k: round(statistics.fmean(r[k] for r in rows), 4) for k in ("exact", "partial",
                                                                           "format")}  # fmt: skip
        row["at_cap"] = round(1 - statistics.fmean(finished), 4)
        log.append(row)
        lengths.append([len(c) for c in completion_ids])
        return [T.combined_reward(r, B.WEIGHTS) for r in rows]

    sort_reward.log, sort_reward.lengths = log, lengths
    return sort_reward


def grpo_config(args, seed: int, output_dir: str):
    """GRPOConfig: the loop's config mapped by ``trl_config.grpo_config_kwargs``, with the
    reply cap, float32 and no checkpointing pinned, prompts in order, no saving or logging."""
    from trl import GRPOConfig

    kwargs = TC.grpo_config_kwargs(
        B.train_config(args, seed),
        max_completion_length=args.reply_tokens,  # the policy's cap (not the toy config's)
        per_device_train_batch_size=args.prompts * args.group,
        gradient_accumulation_steps=1, steps_per_generation=1, num_iterations=1,
        max_steps=args.rl_steps, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
        bf16=False, fp16=False, gradient_checkpointing=False, activation_checkpointing=False,
        use_cpu=True, shuffle_dataset=False, min_p=None, repetition_penalty=1.0,
        output_dir=output_dir, save_strategy="no", report_to="none", logging_steps=1,
        disable_tqdm=True, dataloader_num_workers=0, seed=seed, data_seed=seed,
    )  # fmt: skip
    opt = loop_optimizer(args.learning_rate)  # Adam's betas / eps as the loop's, read not typed
    kwargs.update(adam_beta1=opt["betas"][0], adam_beta2=opt["betas"][1], adam_epsilon=opt["eps"])
    return GRPOConfig(**kwargs)


def build_trainer(args, seed: int, prompts: list[torch.Tensor], output_dir: str, callbacks=()):
    """(trainer, reward function, tokenizer) for ``prompts`` (one tensor per step, in order)."""
    import transformers
    from datasets import Dataset
    from trl import GRPOTrainer

    transformers.logging.set_verbosity_error()
    torch.manual_seed(seed)
    model, tokenizer = B.load_model(args)
    template = T.PROMPT_TEMPLATES[B.TEMPLATE_NAME]
    lists = [x for step in prompts for x in T.decode_numbers(step)]
    dataset = Dataset.from_dict(
        {"prompt": [T.chat_messages(x, template) for x in lists], "numbers": lists}
    )
    reward = reward_function(tokenizer)
    trainer = GRPOTrainer(
        model=model, reward_funcs=reward, args=grpo_config(args, seed, output_dir),
        train_dataset=dataset, processing_class=tokenizer, peft_config=B.lora_config(args),
        callbacks=list(callbacks),
    )  # fmt: skip
    trainer.create_optimizer_and_scheduler(num_training_steps=args.rl_steps)
    return trainer, reward, tokenizer


def check_prompt_ids(trainer, tokenizer, prompts: torch.Tensor) -> None:
    """TRL's prompt token ids must equal ours (``real_lm_task.prompt_token_ids``)."""
    template = T.PROMPT_TEMPLATES[B.TEMPLATE_NAME]
    lists = T.decode_numbers(prompts)
    theirs, _, _ = trainer._tokenize_prompts([T.chat_messages(x, template) for x in lists])
    ours = [T.prompt_token_ids(tokenizer, x, template) for x in lists]
    if [list(x) for x in theirs] != ours:
        raise AssertionError("TRL tokenizes the chat prompt differently from our policy")


# ----------------------------------------------------------------------------- run --arm trl


def run_trl(args) -> dict:
    """``bench_real_lm.py run --arm trl``: train with GRPOTrainer, validation picks the
    adapter, the test scored once with the benchmark's functions (see the module docstring)."""
    from transformers import TrainerCallback

    if args.resume or args.stop_after:
        raise SystemExit("--resume / --stop-after: the trl arm has no pause (TRL checkpoints "
                         "differently); run it whole")  # fmt: skip
    seed = args.seed
    probe_model, tokenizer = B.load_model(args)
    budget = B.reply_tokens(args, tokenizer)
    del probe_model
    template = T.PROMPT_TEMPLATES[B.TEMPLATE_NAME]
    task = T.RealLMSortTask(tokenizer, B.WEIGHTS)
    validation, test = B.splits(args)
    heldout_keys = task.prompt_key(torch.cat([validation, test]))
    prompts = training_prompts(args, seed, task, heldout_keys)
    keys = task.prompt_key(torch.cat(prompts))
    leaked = int(torch.isin(keys, heldout_keys).sum())
    if leaked:
        raise AssertionError(f"{leaked} TRL training prompts have a held-out multiset")
    curve, best, marks = [], {"exact": -1.0}, {}

    def validate(model, step):
        was_training = model.training
        model.eval()
        v = B.greedy_eval(model, tokenizer, validation, args, template)
        model.train(was_training)
        cpu = time.process_time() - marks["start"][1] if "start" in marks else 0.0
        curve.append({"step": step, **{k: v[k] for k in ("exact", "partial", "format")},
                      "training_cpu_seconds": round(cpu, 1)})  # fmt: skip
        print(f"[trl seed {seed}] step {step}: validation exact {v['exact']:.3f}", flush=True)
        if (v["exact"], v["partial"]) > (best["exact"], best.get("partial", -1.0)):
            best.update(step=step, exact=v["exact"], partial=v["partial"],
                        state=B.lora_state(model))  # fmt: skip

    class Validate(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            marks["step_start"] = B.clocks()

        def on_step_end(self, a, state, control, **kw):
            marks.setdefault("steps", []).append(B.since(marks["step_start"]))
            step = state.global_step
            if step % args.val_every == 0 or step == args.rl_steps:
                validate(kw["model"], step)

    out_dir = tempfile.mkdtemp(prefix=f"trl_seed{seed}_")  # TRL wants one; nothing is saved
    trainer, reward, tokenizer = build_trainer(args, seed, prompts, out_dir, [Validate()])
    check_prompt_ids(trainer, tokenizer, prompts[0])
    settings = trl_settings(args, trainer)
    model = trainer.model
    validate(model, 0)  # before training, as our arm (not counted in the training time)
    start = B.clocks()
    marks["start"] = start
    trainer.train()
    rl_time = B.since(start)
    logs = [x for x in trainer.state.log_history if "reward" in x]
    steps = len(reward.log)
    model.load_state_dict(best["state"], strict=False)
    out = {"arm": ARM, "seed": seed, "reply_budget": budget, "matched": settings}
    out["rl"] = {
        "steps": args.rl_steps, "prompts": args.prompts, "group": args.group,
        "learning_rate": args.learning_rate, "time": rl_time,
        "train_reward": [round(x["reward"], 4) for x in logs],
        "train_scores": reward.log[:steps],
        "train_replies_at_cap": round(statistics.fmean(r["at_cap"] for r in reward.log), 4),
        "train_mean_reply_tokens": [round(statistics.fmean(x), 2) for x in reward.lengths],
        "validation_curve": curve, "best_step": best["step"],
        "step_times": marks.get("steps", []),
        "training_prompts": int(keys.numel()),
        "training_prompts_with_heldout_multiset": leaked,
        "training_prompts_as_ours": "the same per step as arm rl with this seed",
    }  # fmt: skip
    out["test_greedy"] = B.greedy_eval(model, tokenizer, test, args, template)
    out["test_sampled"] = B.sampled_eval(model, tokenizer, test, args, template)
    out["kl_to_base"] = B.kl_to_base(
        model, tokenizer, test, out["test_sampled"]["replies"], args, template
    )
    out["versions"] = versions()
    if args.save_adapter:
        model.save_pretrained(str(args.save_adapter))
        B.describe_adapter(Path(args.save_adapter), args)
        out["adapter"] = B.rel(args.save_adapter)
    return out


def versions() -> dict:
    import peft
    import transformers
    import trl

    return {"trl": trl.__version__, "transformers": transformers.__version__,
            "torch": torch.__version__, "peft": peft.__version__}  # fmt: skip


# ----------------------------------------------------------------------------- the report


def cpu_minutes_to(record: dict, level: float = 0.5) -> float | None:
    """Training CPU minutes to the first validation with exact >= ``level`` (None: never).
    Measured (the TRL arm records each validation's training CPU time) or, for runs that only
    record the total, the total x step / steps (the steps cost alike; validations between them
    are counted in both)."""
    rl = record["rl"]
    for point in rl["validation_curve"]:
        if point["exact"] >= level:
            if "training_cpu_seconds" in point:
                return round(point["training_cpu_seconds"] / 60, 1)
            return round(rl["time"]["cpu_seconds"] * point["step"] / rl["steps"] / 60, 1)
    return None


def side_by_side(runs: dict) -> dict:
    """Arms ``rl`` and ``trl``, seed by seed: test exact, worst seed, training CPU minutes, CPU
    minutes to 50 % validation exact, peak RSS; the matched settings checked."""
    out = {}
    for arm in ("rl", ARM):
        rows = sorted(runs.get(arm, []), key=lambda r: r["seed"])
        out[arm] = {
            "seeds": [r["seed"] for r in rows],
            "test_exact": [r["test_greedy"]["exact"] for r in rows],
            "worst_seed_test_exact": min((r["test_greedy"]["exact"] for r in rows), default=None),
            "training_cpu_minutes": [round(r["rl"]["time"]["cpu_seconds"] / 60, 1) for r in rows],
            "cpu_minutes_to_half_validation_exact": [cpu_minutes_to(r) for r in rows],
            "peak_rss_mib": [r.get("peak_rss_mib") for r in rows],
        }  # fmt: skip
    if runs.get("rl") and runs.get(ARM):
        ours = ours_settings(runs["rl"][0])
        out["matched_settings"] = [
            [k, a, b] for k, a, b in matched_settings(ours, runs[ARM][0]["matched"])
        ]
        for r in runs[ARM][1:]:
            matched_settings(ours, r["matched"])
    return out


def report_lines(side: dict) -> list[str]:
    """RESULTS.md lines: the arms rl and trl seed by seed, and the matched settings."""

    def cells(xs, fmt):
        return ", ".join("-" if x is None else format(x, fmt) for x in xs)

    lines = [
        "Matched TRL arm (`bench_real_lm.py run --arm trl`, `benchmarks/real_lm_trl.py`): TRL's "
        "GRPOTrainer with the rl arm's model, LoRA, prompts x G, reply cap, reward, objective, "
        "optimizer, training prompts (the same per step and seed) and held-out protocol, float32 "
        "without checkpointing on both sides (the settings below are checked equal by "
        "`matched_settings`).",
        "",
        "| arm | seeds | test exact (per seed) | worst seed | training CPU min | CPU min to 50 % "
        "validation exact | peak RSS MiB |",
        "|---|---|---|---|---|---|---|",
    ]
    for arm in ("rl", ARM):
        a = side[arm]
        worst = a["worst_seed_test_exact"]
        lines.append(
            f"| {arm} | {a['seeds']} | {cells(a['test_exact'], '.3f')} | "
            f"{'-' if worst is None else format(worst, '.3f')} | "
            f"{cells(a['training_cpu_minutes'], '.1f')} | "
            f"{cells(a['cpu_minutes_to_half_validation_exact'], '.1f')} | "
            f"{cells(a['peak_rss_mib'], '.0f')} |"
        )
    lines += [
        "",
        "CPU minutes to 50 % validation exact: `-` where no validation reached it; the rl runs "
        "record only their total, so theirs is a linear estimate: the total x step / steps (steps cost alike).",
    ]
    if "matched_settings" in side:
        lines += ["", "| setting | ours = TRL |", "|---|---|"]
        lines += [f"| {k} | `{a}` |" for k, a, _ in side["matched_settings"]]
    return lines


def speed_lines(speed: dict) -> list[str]:
    """RESULTS.md lines: the matched, interleaved speed comparison."""
    o, t, ratio = speed["ours"], speed["trl"], speed["ratio_trl_over_ours"]
    return [
        f"Speed against TRL, matched (`bench_real_lm.py speed`): {speed['prompts_per_step']} "
        f"prompts x G = {speed['group_size']}, LoRA r {speed['lora_r']}, reply cap "
        f"{speed['reply_tokens']}, {speed['threads']} thread, float32 and no checkpointing on "
        f"both sides, {speed['timed_steps_per_side']} timed steps per side after a warm-up "
        "step each, interleaved in one process. CPU seconds per step: ours median "
        f"{o['cpu_seconds']['median']:.1f} (range {o['cpu_seconds']['min']:.1f}-"
        f"{o['cpu_seconds']['max']:.1f}), TRL {t['cpu_seconds']['median']:.1f} "
        f"({t['cpu_seconds']['min']:.1f}-{t['cpu_seconds']['max']:.1f}): TRL / ours "
        f"{ratio['cpu_seconds']:.2f}x (wall {ratio['seconds']:.2f}x).",
    ]


# ----------------------------------------------------------------------------- matched speed


class Baton:
    """Two threads take turns: ``wait(me)`` blocks until it is ``me``'s turn, ``give(to)``
    hands it over; ``release()`` lets everyone run (one side has finished)."""

    def __init__(self, first: str):
        self.turn, self.cond = first, threading.Condition()

    def wait(self, me: str) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.turn in (me, None))

    def give(self, to: str) -> None:
        with self.cond:
            if self.turn is not None:
                self.turn = to
            self.cond.notify_all()

    def release(self) -> None:
        with self.cond:
            self.turn = None
            self.cond.notify_all()


def tick() -> dict:
    return {"wall": time.perf_counter(), "cpu": time.thread_time(), "load": os.getloadavg()[0]}


def window(a: dict, b: dict, tokens: float | None) -> dict:
    return {"seconds": round(b["wall"] - a["wall"], 3), "cpu_seconds": round(b["cpu"] - a["cpu"], 3),
            "load_before": round(a["load"], 2), "load_after": round(b["load"], 2),
            "mean_reply_tokens": tokens}  # fmt: skip


def summary(steps: list[dict]) -> dict:
    out = {}
    for key in ("cpu_seconds", "seconds"):
        values = [s[key] for s in steps]
        out[key] = {"median": round(statistics.median(values), 3),
                    "min": round(min(values), 3), "max": round(max(values), 3)}  # fmt: skip
    return out


def matched_speed(args) -> dict:
    """``bench_real_lm.py speed``: our loop and GRPOTrainer, interleaved step by step in one
    process (see the module docstring)."""
    from peft import get_peft_model
    from transformers import TrainerCallback

    from pgrl_helpers.config import TrainConfig
    from pgrl_helpers.training import run_policy_gradient

    torch.set_num_threads(args.threads)
    timed = args.speed_steps
    args.rl_steps = 1 + timed + 1  # a warm-up step, the timed ones, one more (see below)
    seed = 0
    # ours: the rl arm's policy and task; the loop's held-out evaluations are 1 prompt each
    # (another eval_seed), before the first step and after the last: neither is timed
    torch.manual_seed(seed)
    model, tokenizer = B.load_model(args)
    budget = B.reply_tokens(args, tokenizer)
    model = get_peft_model(model, B.lora_config(args))
    template = T.PROMPT_TEMPLATES[B.TEMPLATE_NAME]
    policy = R.ChatLMPolicy(model, tokenizer, template, max_new_tokens=args.reply_tokens)
    lengths = []

    class Task(B.ScoredTask):
        def reward(self, prompts, responses):
            if responses.shape[1] > 1:  # training groups (the loop's evaluations have 1)
                ended = responses == tokenizer.eos_token_id
                end = torch.where(ended.any(-1), ended.int().argmax(-1) + 1, responses.shape[-1])
                lengths.append(round(float(end.float().mean()), 2))
            return super().reward(prompts, responses)

    task = Task(tokenizer, B.WEIGHTS)
    base = B.train_config(args, seed)
    config = TrainConfig(**{**{f: getattr(base, f) for f in base.__dataclass_fields__},
                            "num_eval_prompts": 1, "eval_seed": T.SPLIT_SEED + 777})  # fmt: skip
    # TRL: the trainer of the trl arm, on prompts drawn the same way
    validation, test = B.splits(args)
    heldout_keys = task.prompt_key(torch.cat([validation, test]))
    prompts = training_prompts(args, seed, task, heldout_keys)
    baton = Baton("ours")
    ours_steps, trl_steps, errors, order = [], [], [], []
    trl_mark = {}

    class Turn(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            if state.global_step > 0:
                baton.give("ours")
            baton.wait("trl")
            trl_mark["begin"] = tick()

        def on_step_end(self, a, state, control, **kw):
            trl_steps.append((trl_mark["begin"], tick(), state.global_step))
            order.append("trl")

        def on_train_end(self, a, state, control, **kw):
            baton.release()

    trainer, reward, _ = build_trainer(
        args, seed, prompts, "/tmp/bench_real_lm_speed", callbacks=[Turn()]
    )
    check_prompt_ids(trainer, tokenizer, prompts[0])
    settings = trl_settings(args, trainer)
    mark = {}

    def callback(epoch, history):  # after our epoch: hand over to TRL, wait, start the next
        ours_steps.append((mark["begin"], tick(), lengths[-1]))
        order.append("ours")
        baton.give("trl")
        baton.wait("ours")
        mark["begin"] = tick()

    def run_ours():
        try:
            mark["begin"] = tick()  # the first window also holds setup: the warm-up step
            run_policy_gradient(config, callback=callback, policy=policy, task=task,
                                score_test=False)  # fmt: skip
        except BaseException as err:  # noqa: BLE001 (re-raised in the main thread)
            errors.append(err)
        finally:
            baton.release()

    def run_trl_side():
        try:
            trainer.train()
        except BaseException as err:  # noqa: BLE001
            errors.append(err)
        finally:
            baton.release()

    threads = [threading.Thread(target=run_ours), threading.Thread(target=run_trl_side)]
    start = B.clocks()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    total = B.since(start)
    # ours: window k runs from the end of callback k-1 to callback k; window 0 holds setup and
    # the initial evaluation (the warm-up), the last one the final evaluation (dropped)
    ours = [window(a, b, n) for a, b, n in ours_steps][1 : 1 + timed]
    trl_tokens = [round(statistics.fmean(x), 2) for x in reward.lengths]
    trl = [window(a, b, trl_tokens[i - 1]) for a, b, i in trl_steps][1 : 1 + timed]
    s_ours, s_trl = summary(ours), summary(trl)
    return {
        "matched": True,  # tests/repo/test_nb16_claims.py: the ratio may then be quoted
        "measured_by": "bench_real_lm.py speed (benchmarks/real_lm_trl.matched_speed): both "
        "sides loaded once in one process, steps interleaved ours / TRL, 1 warm-up step each",
        "prompts_per_step": args.prompts, "group_size": args.group, "lora_r": args.lora_r,
        "reply_tokens": args.reply_tokens, "reply_budget": budget, "threads": args.threads,
        "timed_steps_per_side": timed, "order": order,
        "ours": {"steps": ours, **s_ours},
        "trl": {"steps": trl, **s_trl},
        "ratio_trl_over_ours": {
            k: round(s_trl[k]["median"] / s_ours[k]["median"], 2)
            for k in ("cpu_seconds", "seconds")
        },
        "trl_settings": settings,
        "ours_dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
        "trl_dtype": str(next(trainer.model.parameters()).dtype).replace("torch.", ""),
        "total": total,
        "versions": versions(),
        "note": "CPU seconds are the running thread's (time.thread_time; one torch thread, the "
        "other side waits); a step is generation, reward, loss forward/backward and the "
        "optimizer step (TRL: on_step_begin -> on_step_end; ours: callback to callback)",
    }  # fmt: skip
