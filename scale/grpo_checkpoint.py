#!/usr/bin/env python3
"""GRPO on a pretrained checkpoint with TRL's ``GRPOTrainer`` (notebook 14; scale/README.md).

    python3 tasks.py checkpoint                                   # the local checkpoint
    .venv/bin/python scale/grpo_checkpoint.py --model .cache/pgrl/checkpoint

With a GPU and a hub model (not run here: no GPU, no network, no vLLM on this machine):

    python scale/grpo_checkpoint.py --model Qwen/Qwen2.5-0.5B-Instruct --lora \\
        --max-completion-length 64 --max-steps 500 --use-vllm colocate

Everything goes through public APIs: ``AutoModelForCausalLM``/``AutoTokenizer.from_pretrained``
(TRL loads the model from the id or path), a conversational dataset (``prompt`` holds chat
messages; TRL applies the tokenizer's chat template), reward functions with TRL's signature
``f(completions, **kwargs) -> list[float]``, ``peft.LoraConfig`` passed as ``peft_config``, and a
``TrainerCallback`` that scores a validation set (held out by content) to pick the stopping
point. The output format is asked for by a format reward, not forced by the model.

The objective is Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical
Perspective", arXiv 2503.20783, section 3.1 and Figure 1): ``loss_type="dr_grpo"`` (a constant
normaliser instead of each response's length) with ``scale_rewards="none"`` (advantages
R - mean R, not divided by the group's std, which the paper shows biases updates by question
difficulty).
``--scale-rewards group`` restores GRPO's std scaling. With ``--beta > 0`` the KL term is
TRL's plain k3 (``use_bias_correction_kl=False``), as in ``pgrl_helpers.hf.trl_config``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pgrl_helpers.hf import checkpoint as ck  # noqa: E402

#: Weight of the format reward relative to the correctness reward (GRPOConfig.reward_weights).
FORMAT_WEIGHT = 0.2


def _ended_turn(kwargs: dict, i: int, eos_token_id: int | None) -> bool:
    ids = kwargs.get("completion_ids")
    if ids is None or eos_token_id is None:
        return True  # without ids (a caller outside TRL) the text alone decides
    return eos_token_id in list(ids[i])


def make_reward_funcs(eos_token_id: int | None = None):
    """The two TRL reward functions ``(completions, numbers, **kwargs) -> list[float]``.

    correctness_reward: 1.0 when the reply names exactly the sorted list and ends its turn
    (EOS among TRL's ``completion_ids``), else 0.0. format_reward: 1.0 when the reply is only
    single digits, as many as the prompt has, and ends its turn (the R1 recipe's format reward,
    DeepSeek-R1 arXiv 2501.12948 section 2.2.2, for our answer format). Neither raises on text.
    """

    def correctness_reward(completions, numbers, **kwargs) -> list[float]:
        return [
            float(
                _ended_turn(kwargs, i, eos_token_id) and ck.is_correct(nums, ck.completion_text(c))
            )
            for i, (c, nums) in enumerate(zip(completions, numbers, strict=True))
        ]

    def format_reward(completions, numbers, **kwargs) -> list[float]:
        out = []
        for i, (c, nums) in enumerate(zip(completions, numbers, strict=True)):
            parsed = ck.parse_answer(ck.completion_text(c))
            ok = parsed is not None and len(parsed) == len(nums)
            out.append(float(ok and _ended_turn(kwargs, i, eos_token_id)))
        return out

    return [correctness_reward, format_reward]


def make_dataset(multisets, num_prompts: int, seed: int):
    """A conversational ``datasets.Dataset``: 'prompt' (chat messages) and 'numbers' (the list).

    ``num_prompts`` rows cycle through random orderings of ``multisets`` (the only content keys
    this run may train on)."""
    import random

    from datasets import Dataset

    if not multisets:
        raise ValueError("multisets must hold at least one multiset to train on")
    rng = random.Random(seed)
    rows = [ck.order(rng.choice(multisets), rng) for _ in range(num_prompts)]
    return Dataset.from_dict({"prompt": [ck.prompt_messages(r) for r in rows], "numbers": rows})


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", required=True, help="a local path or a hub id")
    p.add_argument("--output-dir", default=None)
    p.add_argument("--max-steps", type=int, default=200)
    p.add_argument("--prompts-per-step", type=int, default=8)
    p.add_argument("--num-generations", type=int, default=8, help="G, completions per prompt")
    p.add_argument("--max-completion-length", type=int, default=8)
    p.add_argument("--learning-rate", type=float, default=1e-4)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--beta", type=float, default=0.0, help="KL(pi || pi_ref) coefficient")
    p.add_argument(
        "--scale-rewards",
        choices=("none", "group", "batch"),
        default="none",
        help="divide advantages by the group's / batch's reward std; none: Dr. GRPO",
    )
    p.add_argument(
        "--train-regions",
        default="in",
        help="comma list of the regions RL trains on: in (SFT's), longer (lists of 5-6)",
    )
    p.add_argument("--eval-every", type=int, default=20, help="validation every N steps; 0: off")
    p.add_argument("--eval-samples", type=int, default=16, help="samples per validation prompt")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lora", action="store_true", help="train LoRA adapters (PEFT) only")
    p.add_argument("--lora-r", type=int, default=16)
    p.add_argument(
        "--bf16", choices=("auto", "on", "off"), default="auto", help="auto: on with a GPU"
    )
    p.add_argument(
        "--gradient-checkpointing",
        choices=("auto", "on", "off"),
        default="auto",
        help="auto: on with a GPU",
    )
    p.add_argument(
        "--use-vllm",
        choices=("auto", "no", "colocate", "server"),
        default="auto",
        help="auto: colocate when vllm is installed and a GPU is present",
    )
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    for name in ("max_steps", "prompts_per_step", "max_completion_length", "eval_samples"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.num_generations < 2:
        raise ValueError(
            f"--num-generations must be >= 2 (GRPO's group), got {args.num_generations}"
        )
    if args.eval_every < 0:
        raise ValueError(f"--eval-every must be >= 0, got {args.eval_every}")
    regions = [r for r in args.train_regions.split(",") if r]
    if not regions or any(r not in ("in", "longer") for r in regions):
        raise ValueError(f"--train-regions must name in and/or longer, got {args.train_regions!r}")
    return args


def _flag(value: str, gpu: bool) -> bool:
    return gpu if value == "auto" else value == "on"


def grpo_config_kwargs(args: argparse.Namespace, output_dir, gpu: bool, use_vllm: str) -> dict:
    """The ``GRPOConfig`` keyword arguments of a run (module docstring: Dr. GRPO).

    ``per_device_train_batch_size`` is prompts x G, so one optimizer step sees every
    completion of ``--prompts-per-step`` prompts; ``use_vllm`` is 'no', 'colocate' or 'server'.
    """
    kwargs = dict(
        output_dir=str(output_dir),
        max_steps=args.max_steps,
        per_device_train_batch_size=args.prompts_per_step * args.num_generations,
        num_generations=args.num_generations,
        max_completion_length=args.max_completion_length,
        learning_rate=args.learning_rate,
        lr_scheduler_type="constant",
        temperature=args.temperature,
        top_p=1.0,
        top_k=0,
        beta=args.beta,
        use_bias_correction_kl=False,  # plain k3, as pgrl_helpers.hf.trl_config
        loss_type="dr_grpo",
        scale_rewards=args.scale_rewards,  # Dr. GRPO: "none"
        reward_weights=[1.0, FORMAT_WEIGHT],
        seed=args.seed,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        use_cpu=not gpu,
        bf16=_flag(args.bf16, gpu),
        gradient_checkpointing=_flag(args.gradient_checkpointing, gpu),
        use_vllm=use_vllm != "no",
    )
    if use_vllm != "no":
        kwargs["vllm_mode"] = use_vllm
    return kwargs


def trainable_state(model) -> dict:
    """CPU copies of the parameters the optimizer updates, by ``state_dict`` name.

    Full fine-tuning: every parameter; ``--lora``: the adapters only (the frozen base weights
    never change, so a snapshot of them would only cost memory)."""
    return {
        name: p.detach().to("cpu", copy=True)
        for name, p in model.named_parameters()
        if p.requires_grad
    }


def restore_state(model, state: dict) -> None:
    """Load a ``trainable_state`` snapshot back into ``model`` (the other weights stay)."""
    result = model.load_state_dict(state, strict=False)
    if result.unexpected_keys:
        raise RuntimeError(f"the snapshot has keys the model lacks: {result.unexpected_keys[:3]}")


def choose_step(steps: list[int], scores: list[float], last_step: int) -> tuple[int, str | None]:
    """The step whose weights are saved, and a warning when validation cannot vouch for it.

    ``steps`` / ``scores``: the validation steps and their pass@1. The best score is chosen
    (the earliest on a tie). If every evaluation scored 0, validation cannot tell the steps
    apart (for instance a reply format the parser never reads): the last step (``last_step``)
    is kept, with a warning. If the best is step 0, the saved model is the one training
    started from: kept, because validation prefers it, with a warning that says so.
    """
    if not scores:
        return last_step, None
    if max(scores) <= 0:
        return last_step, (
            f"validation pass@1 was 0 at all {len(scores)} evaluations: it cannot choose a "
            f"step, so the last step's weights (step {last_step}) are saved; check that "
            "pgrl_helpers.hf.checkpoint.parse_answer reads this model's replies"
        )
    best = scores.index(max(scores))
    if steps[best] == 0:
        return 0, (
            f"validation pass@1 never improved on the initial model ({scores[0]:.3f} at step "
            "0): the saved model is the UNTRAINED one"
        )
    return steps[best], None


def train(argv=None) -> dict:
    """Run GRPO; return a summary dict (log history, validation curve, chosen step, paths)."""
    args = parse_args(argv)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)
    import importlib.util

    import torch
    import transformers
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    transformers.logging.set_verbosity_error()
    gpu = torch.cuda.is_available()
    splits = ck.make_splits()
    regions = args.train_regions.split(",")
    train_keys = [m for r in regions for m in splits[f"train_{r}"]]
    validation = [m for r in regions for m in splits[f"validation_{r}"]]
    heldout = {m for name, keys in splits.items() if not name.startswith("train_") for m in keys}
    dataset = make_dataset(train_keys, args.max_steps * args.prompts_per_step, args.seed)
    seen_heldout = sum(ck.key(r) in heldout for r in dataset["numbers"])
    if seen_heldout:
        raise RuntimeError(f"{seen_heldout} training prompts have a held-out multiset")

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    workdir = Path(args.output_dir or tempfile.mkdtemp(prefix="grpo-checkpoint-"))
    use_vllm = args.use_vllm
    if use_vllm == "auto":
        use_vllm = "colocate" if gpu and importlib.util.find_spec("vllm") else "no"
    kwargs = grpo_config_kwargs(args, workdir, gpu, use_vllm)
    peft_config = None
    if args.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=args.lora_r,
            lora_alpha=2 * args.lora_r,
            target_modules="all-linear",
            task_type="CAUSAL_LM",
        )

    history = {"validation_step": [], "validation_pass1": []}
    snapshots = {}  # step -> trainable_state at the best validation score so far

    class ValidationCallback(TrainerCallback):
        """Sampled pass@1 on the validation multisets every ``eval_every`` steps; keeps the best
        weights and the last step's (the stopping rule reads validation only, never the test
        split; ``choose_step`` picks)."""

        def evaluate(self, model, step: int) -> None:
            was_training = model.training
            result = ck.count_correct(
                model,
                tokenizer,
                validation,
                args.eval_samples,
                seed=10_000 + step,
                temperature=args.temperature,
                max_new_tokens=args.max_completion_length,
            )
            model.train(was_training)
            score = sum(result["c"]) / (len(result["c"]) * result["n"])
            scores = history["validation_pass1"]
            if not scores or score > max(scores):
                snapshots.clear()
                snapshots[step] = trainable_state(model)
            history["validation_step"].append(step)
            scores.append(score)

        def on_train_begin(self, targs, state, control, model=None, **kw):
            if args.eval_every:
                self.evaluate(model, 0)

        def on_step_end(self, targs, state, control, model=None, **kw):
            if args.eval_every and state.global_step % args.eval_every == 0:
                self.evaluate(model, state.global_step)

    trainer = GRPOTrainer(
        model=args.model,
        reward_funcs=make_reward_funcs(tokenizer.eos_token_id),
        args=GRPOConfig(**kwargs),
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[ValidationCallback()],
    )
    if args.quiet:
        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)
    trainer.train()
    model = trainer.model
    last = trainer.state.global_step
    chosen, warning = last, None
    if args.eval_every:
        chosen, warning = choose_step(history["validation_step"], history["validation_pass1"], last)
        if chosen != last:
            restore_state(model, snapshots[chosen])
    if warning:  # printed even with --quiet, and kept in the summary
        print(f"WARNING: {warning}", file=sys.stderr)
    if args.lora:
        model = model.merge_and_unload()
    final = workdir / "final"
    model.save_pretrained(final)
    tokenizer.save_pretrained(final)
    logs = trainer.state.log_history
    summary = {
        "model": args.model,
        "final_dir": str(final),
        "steps": trainer.state.global_step,
        "chosen_step": chosen,
        "validation_warning": warning,
        "validation": history,
        "train_multisets": len(train_keys),
        "heldout_keys_in_training": seen_heldout,
        "reward": [h["reward"] for h in logs if "reward" in h],
        "mean_length": [
            h["completions/mean_length"] for h in logs if "completions/mean_length" in h
        ],
        "entropy": [h["entropy"] for h in logs if "entropy" in h],
        "settings": {k: v for k, v in vars(args).items()},
        "use_vllm": use_vllm,
        "bf16": kwargs["bf16"],
        "gradient_checkpointing": kwargs["gradient_checkpointing"],
    }
    (workdir / "summary.json").write_text(json.dumps(summary, indent=1))
    if not args.quiet:
        r = summary["reward"]
        print(
            f"{summary['steps']} GRPO steps on {args.model}: mean reward {r[0]:.2f} -> {r[-1]:.2f}; "
            + f"kept step {chosen} "
            + (
                "(no validation: the last); "
                if not args.eval_every
                else "(see the warning); "
                if warning
                else "(validation's choice); "
            )
            + f"model in {final}"
        )
    return summary


if __name__ == "__main__":
    train()
