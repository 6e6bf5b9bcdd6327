"""Cheap measurements on SmolLM2-135M-Instruct before any training (issue 37; scale/REAL_LM.md).

Parts (``--parts``, each adds its entry to the results file and keeps the others):

* ``load``: the conversion's own timings (from the checkpoint's stamp, measured by
  ``python3 tasks.py real-model``) and the time to load the converted folder.
* ``base``: the base model's replies on the VALIDATION split (never test), greedy and sampled
  (temperature 1), for each prompt wording of ``real_lm_task.PROMPT_TEMPLATES``: exact sort,
  partial credit, format, replies that ended, tokens per reply, and a few replies.
* ``fwdbwd``: seconds of one forward + backward pass (and of the optimizer step) on a batch of
  sequences of prompt + reply, full fine-tuning against LoRA (peft, all linear layers).
* ``threads``: one forward pass over 8 chat prompts with 1 and with 2 torch threads.
* ``loop_vs_trl``: a few optimizer steps of our loop (``run_policy_gradient`` with
  ``real_lm.ChatLMPolicy``) and of TRL's ``GRPOTrainer`` on the same model, batch (prompts x
  G), reply length and LoRA; CPU and wall seconds per step and tokens generated.

Everything runs with ``--threads`` torch threads (1 by default: on this shared 2-core
machine two threads made the model 3-5x slower per CPU second, see the results' notes).

    .venv/bin/python scale/real_lm_probe.py --parts load,base --n 48
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import machine, split_record  # noqa: E402

from pgrl_helpers.hf import real_lm as R  # noqa: E402
from pgrl_helpers.hf import real_lm_task as T  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "real_lm_probe.json"


def commit() -> str:
    """HEAD's hash, with '+dirty' when the working tree differs from it."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    return head.stdout.strip() + ("+dirty" if dirty else "")


def clocks() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def since(start: tuple[float, float]) -> dict:
    wall, cpu = clocks()
    return {"seconds": round(wall - start[0], 2), "cpu_seconds": round(cpu - start[1], 2)}


def part_load(args) -> dict:
    stamp = json.loads((Path(args.model) / R.STAMP).read_text())
    start = clocks()
    model, tokenizer = R.load(args.model)
    loaded = since(start)
    return {
        "conversion (measured by `python3 tasks.py real-model`, stamp in the model folder)": {
            k: stamp[k]
            for k in (
                "load_gguf_seconds",
                "conversion_seconds",
                "conversion_cpu_seconds",
                "max_logit_difference_vs_gguf",
                "num_parameters",
                "transformers",
                "gguf",
            )
        },
        "load_converted_folder": loaded,
        "num_parameters": sum(p.numel() for p in model.parameters()),
    }


def part_base(args) -> dict:
    model, tokenizer = R.load(args.model)
    validation = T.RealLMSortTask().splits(num_validation=args.n)["validation"]
    old = args.previous.get("parts", {}).get("base", {})
    out = dict(old.get("runs", {})) if old.get("validation_prompts") == args.n else {}
    names = args.templates.split(",") if args.templates else list(T.PROMPT_TEMPLATES)
    for name in names:
        template = T.PROMPT_TEMPLATES[name]
        for how in ("greedy", "sampled"):
            r = R.evaluate(
                model, tokenizer, validation, template, greedy=how == "greedy",
                num_samples=1, temperature=1.0, max_new_tokens=args.max_new_tokens, seed=0,
                batch_size=args.batch,
            )  # fmt: skip
            by_length = {
                str(n): sum(x["exact"] for x in r["replies"] if len(x["numbers"]) == n)
                / sum(1 for x in r["replies"] if len(x["numbers"]) == n)
                for n in T.LENGTHS
            }
            replies = r.pop("replies")
            out[f"{name}/{how}"] = {
                "template": template,
                "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                "load_average_after": [round(x, 2) for x in os.getloadavg()],
                **{k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()},
                "exact_by_length": by_length,
                "exact_count": int(sum(x["exact"] for x in replies)),
                "prompts": len(replies),
                "tokens_per_second": round(r["new_tokens"] / r["seconds"], 2),
                "examples": [
                    {"numbers": x["numbers"], "reply": x["text"]} for x in replies[: args.examples]
                ],
                "exact_replies": [
                    {"numbers": x["numbers"], "reply": x["text"]} for x in replies if x["exact"]
                ],
            }
            print(name, how, {k: out[f"{name}/{how}"][k] for k in ("exact", "format")}, flush=True)
    return {
        "max_new_tokens": args.max_new_tokens,
        "temperature_sampled": 1.0,
        "validation_prompts": args.n,
        "runs": out,
    }


def training_batch(tokenizer, template: str, batch: int, reply_tokens: int):
    """input_ids / attention_mask / labels of ``batch`` chat prompts + a ``reply_tokens`` reply."""
    task = T.RealLMSortTask()
    prompts = task.random_prompts(batch, torch.Generator().manual_seed(0))
    rows = [T.prompt_token_ids(tokenizer, x, template) for x in T.decode_numbers(prompts)]
    reply = tokenizer(", ".join("0123456789"), add_special_tokens=False)["input_ids"]
    reply = (reply * reply_tokens)[:reply_tokens]
    ids, mask = R.left_pad([r + reply for r in rows], R.pad_token_id(tokenizer), "cpu")
    labels = ids.clone()
    labels[:, :-reply_tokens] = -100
    return ids, mask, labels


def part_fwdbwd(args) -> dict:
    from peft import get_peft_model

    out = {"batch": args.fb_batch, "reply_tokens": args.reply_tokens, "repeats": args.repeats}
    for mode in ("lora", "full"):
        model, tokenizer = R.load(args.model)
        model.train()
        if mode == "lora":
            model = get_peft_model(model, lora_config(args))
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.Adam(trainable, lr=1e-5)
        ids, mask, labels = training_batch(
            tokenizer, T.PROMPT_TEMPLATES["issue"], args.fb_batch, args.reply_tokens
        )
        rows = []
        for _ in range(args.repeats + 1):  # the first is a warm-up
            start = clocks()
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            fb = since(start)
            start = clocks()
            optimizer.step()
            optimizer.zero_grad()
            rows.append({"forward_backward": fb, "optimizer_step": since(start)})
        out[mode] = {
            "trainable_parameters": sum(p.numel() for p in trainable),
            "sequence_tokens": ids.shape[1],
            "warm_up": rows[0],
            "timed": rows[1:],
        }
        print(mode, rows[1:], flush=True)
        del model, optimizer
    return out


def lora_config(args):
    from peft import LoraConfig

    return LoraConfig(
        r=args.lora_r, lora_alpha=2 * args.lora_r, target_modules="all-linear",
        lora_dropout=0.0, task_type="CAUSAL_LM",
    )  # fmt: skip


WEIGHTS = {"exact": 1.0, "partial": 0.5, "format": 0.1}


def part_loop(args) -> dict:
    """Our loop: ``run_policy_gradient`` with the chat policy (LoRA), ``--steps`` epochs of one
    optimizer step each; per-epoch CPU seconds from a callback (the first and the last epoch
    carry the loop's held-out evaluations and are not counted)."""
    from peft import get_peft_model

    from pgrl_helpers.config import TrainConfig
    from pgrl_helpers.training import run_policy_gradient

    model, tokenizer = R.load(args.model)
    model = get_peft_model(model, lora_config(args))
    model.train()
    template = T.PROMPT_TEMPLATES["issue"]
    policy = R.ChatLMPolicy(model, tokenizer, template, max_new_tokens=args.reply_tokens)
    task = T.RealLMSortTask(tokenizer, weights=WEIGHTS)
    config = TrainConfig(  # the task and the policy are given: no toy-model field
        prompt_source="random", prompts_per_epoch=args.prompts, num_responses=args.group,
        num_epochs=args.steps, num_steps_per_epoch=1, learning_rate=args.learning_rate,
        eval_every=10_000, num_eval_prompts=1, eval_seed=T.SPLIT_SEED + 777,
        num_threads=args.threads, profile_time=True,
    )  # fmt: skip
    marks = []

    def callback(epoch, history):
        marks.append((clocks(), history.steps()[-1]))

    start = clocks()
    run_policy_gradient(config, callback=callback, policy=policy, task=task, score_test=False)
    total = since(start)
    steps = [  # between two callbacks: one epoch, unless the later one ran the final evaluation
        {"seconds": round(b[0] - a[0], 2), "cpu_seconds": round(b[1] - a[1], 2)}
        for (a, _), (b, _) in list(zip(marks, marks[1:]))[:-1]
    ]
    phases = [  # wall seconds of each phase of every epoch (the loop's profile_time)
        {k[5:]: round(v, 2) for k, v in record.items() if k.startswith("time_")}
        | {"mean_reward": round(record["mean_reward"], 4)}
        for _, record in marks
    ]
    return {
        "what": "our loop: run_policy_gradient + real_lm.ChatLMPolicy (peft LoRA)",
        "steps_timed": steps,
        "phases_per_epoch": phases,
        "epochs": args.steps,
        "total": total,
        "note": "steps_timed: CPU and wall seconds between the callbacks of consecutive epochs "
        "(the first epoch, after the initial evaluation, and the last, with the final one, are "
        "left out); phases_per_epoch: the loop's own wall-clock profile of every epoch. The "
        "loop's held-out sets (1 prompt each) use an eval_seed other than the benchmark's",
    }


def part_trl(args) -> dict:
    """TRL's GRPOTrainer on the same model, batch, reply length and LoRA; CPU seconds per
    optimizer step from a TrainerCallback (step begin -> step end: generation included)."""
    import transformers
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    transformers.logging.set_verbosity_error()
    model, tokenizer = R.load(args.model)
    template = T.PROMPT_TEMPLATES["issue"]
    task = T.RealLMSortTask()
    prompts = task.random_prompts(args.prompts * args.steps, torch.Generator().manual_seed(0))
    lists = T.decode_numbers(prompts)
    dataset = Dataset.from_dict(
        {"prompt": [T.chat_messages(x, template) for x in lists], "numbers": lists}
    )
    eos = tokenizer.eos_token_id

    def reward(completions, numbers, completion_ids=None, **kwargs):
        out = []
        for i, (c, nums) in enumerate(zip(completions, numbers)):
            text = c[-1]["content"] if isinstance(c, list) else c
            done = completion_ids is None or eos in list(completion_ids[i])
            out.append(T.combined_reward(T.score_reply(nums, text, done), WEIGHTS))
        return out

    marks = {}

    class Clock(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            marks["begin"] = clocks()

        def on_step_end(self, a, state, control, **kw):
            marks.setdefault("steps", []).append(since(marks["begin"]))

    config = GRPOConfig(
        output_dir=str(Path(args.tmp) / "trl"), max_steps=args.steps,
        per_device_train_batch_size=args.prompts * args.group, num_generations=args.group,
        max_completion_length=args.reply_tokens, learning_rate=args.learning_rate,
        lr_scheduler_type="constant", temperature=1.0, top_p=1.0, top_k=0, beta=0.0,
        loss_type="dr_grpo", scale_rewards="none", seed=0, logging_steps=1,
        save_strategy="no", report_to="none", disable_tqdm=True, use_cpu=True,
        dataloader_num_workers=0,
    )  # fmt: skip
    start = clocks()
    trainer = GRPOTrainer(
        model=model, reward_funcs=reward, args=config, train_dataset=dataset,
        processing_class=tokenizer, peft_config=lora_config(args), callbacks=[Clock()],
    )  # fmt: skip
    setup = since(start)
    torch.set_num_threads(args.threads)
    trainer.train()
    logs = [x for x in trainer.state.log_history if "reward" in x]
    return {
        "what": "TRL GRPOTrainer (peft LoRA), model.generate for sampling, loss dr_grpo, beta 0",
        "trainer_setup": setup,
        "steps_timed": marks.get("steps", []),
        "mean_completion_length": [x.get("completions/mean_length") for x in logs],
        "reward": [x.get("reward") for x in logs],
        "note": "the first step includes TRL's one-time work; compare the later steps",
    }


def part_loop_vs_trl(args) -> dict:
    out = {
        "prompts_per_step": args.prompts,
        "group_size": args.group,
        "max_reply_tokens": args.reply_tokens,
        "lora_r": args.lora_r,
        "learning_rate": args.learning_rate,
        "reward_weights": WEIGHTS,
    }
    out["ours"] = part_loop(args)
    print("ours", out["ours"]["steps_timed"], flush=True)
    out["trl"] = part_trl(args)
    print("trl", out["trl"]["steps_timed"], flush=True)
    return out


def part_threads(args) -> dict:
    """One forward pass over 8 chat prompts (no reply), with 1 and with 2 torch threads."""
    model, tokenizer = R.load(args.model)
    numbers = T.decode_numbers(T.RealLMSortTask().splits(num_validation=8)["validation"])
    rows = [T.prompt_token_ids(tokenizer, x, T.PROMPT_TEMPLATES["issue"]) for x in numbers]
    ids, mask = R.left_pad(rows, R.pad_token_id(tokenizer), "cpu")
    out = {"batch": ids.shape[0], "tokens_per_row": ids.shape[1]}
    for threads in (1, 2, 1, 2):  # interleaved: the machine's load drifts
        torch.set_num_threads(threads)
        with torch.no_grad():
            start = clocks()
            model(input_ids=ids, attention_mask=mask, logits_to_keep=1)
            out.setdefault(f"{threads}_threads", []).append(since(start))
    torch.set_num_threads(args.threads)
    return out


PARTS = {
    "threads": part_threads,
    "load": part_load,
    "base": part_base,
    "fwdbwd": part_fwdbwd,
    "loop_vs_trl": part_loop_vs_trl,
}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--parts", default="load,base", help=f"comma-separated, of {list(PARTS)}")
    p.add_argument("--model", default=str(R.DEFAULT_DIR), help="PATH_OR_HUB_ID")
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--n", type=int, default=48, help="validation prompts (part base)")
    p.add_argument("--batch", type=int, default=48, help="prompts per generation batch (base)")
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--examples", type=int, default=6)
    p.add_argument("--templates", default="", help="base: these wordings only (others kept)")
    p.add_argument("--fb-batch", type=int, default=16)
    p.add_argument("--reply-tokens", type=int, default=16)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--lora-r", type=int, default=16)
    p.add_argument("--prompts", type=int, default=2)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--learning-rate", type=float, default=5e-4)
    p.add_argument("--tmp", default="/tmp/real_lm_probe")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore", category=UserWarning)
    torch.set_num_threads(args.threads)
    path = Path(args.out)
    payload = json.loads(path.read_text()) if path.exists() else {}
    payload.setdefault("parts", {})
    args.previous = json.loads(json.dumps(payload))
    for name in args.parts.split(","):
        if name not in PARTS:
            raise SystemExit(f"unknown part {name!r}; valid: {', '.join(PARTS)}")
        before = machine()
        start = clocks()
        result = PARTS[name](args)
        payload["parts"][name] = {
            "commit": commit(),
            "date_utc": before["date_utc"],
            "load_average_before": before["load_average_1_5_15_min"],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "torch_threads": args.threads,
            "wall_and_cpu": since(start),
            **result,
        }
        payload["machine"] = machine()
        payload["splits"] = splits_record(args.n)
        path.write_text(json.dumps(payload, indent=1) + "\n")
        print(f"wrote part {name} into {path}", flush=True)
    return payload


def splits_record(n: int) -> dict:
    """The split record of tests/repo/test_test_splits.py: validation only, no test score."""
    task = T.RealLMSortTask()
    validation = task.splits(num_validation=n)["validation"]
    keys = len(set(task.prompt_key(validation).tolist()))
    return {
        "benchmark": "scale/real_lm_probe.py",
        "validation": split_record(
            f"real_lm: RealLMSortTask.splits validation, seed {T.SPLIT_SEED}, {n} prompts",
            seed=T.SPLIT_SEED,
            sizes={"prompts": int(validation.shape[0]), "keys": keys},
            key="multiset of the prompt's numbers (RealLMSortTask.prompt_key)",
        ),
        "test": None,
        "test_scored_by": [],
        "test_guided_choice": None,
        "no_test_reason": "a probe of the base model and of speed: the test split is left for "
        "issue 37's benchmark, scored once",
    }


if __name__ == "__main__":
    main()
