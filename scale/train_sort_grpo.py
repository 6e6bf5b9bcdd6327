#!/usr/bin/env python3
"""GRPO on the sort task with Hugging Face TRL: the script that notebook 09 mirrors.

One machine, CPU (what notebook 09 runs; needs requirements-scale.txt):

    .venv/bin/python scale/train_sort_grpo.py --epochs 50

Several GPUs on one node, DeepSpeed ZeRO-2 (see scale/README.md; needs a CUDA torch and
`pip install deepspeed`):

    accelerate launch --config_file scale/accelerate_deepspeed_zero2.yaml \\
        scale/train_sort_grpo.py --epochs 500 --prompts-per-epoch 256

Same, with a vLLM generation server on the last GPU (start it first, see scale/README.md):

    CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6 accelerate launch --num_processes 7 \\
        --config_file scale/accelerate_deepspeed_zero2.yaml \\
        scale/train_sort_grpo.py --model-dir runs/sort-init --use-vllm server

The training settings are a ``pgrl_helpers.config.TrainConfig`` turned into
``trl.GRPOConfig`` arguments by ``pgrl_helpers.hf.trl_config.grpo_config_kwargs``; only the
per-device batch and the generation back end change with the number of processes.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault(
    "HF_HUB_OFFLINE", "1"
)  # nothing is downloaded: model and tokenizer are built here
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--epochs", type=int, default=50, help="epochs = generation rounds")
    p.add_argument("--steps-per-epoch", type=int, default=2, help="optimizer steps per batch")
    p.add_argument("--prompts-per-epoch", type=int, default=8, help="global, over all processes")
    p.add_argument("--group-size", type=int, default=8, help="G, completions per prompt")
    p.add_argument("--prompt-length", type=int, default=3)
    p.add_argument("--vocab-size", type=int, default=5)
    p.add_argument("--reward-fn", default="sort_distance_reward")
    p.add_argument("--deltas-mode", default="normalized_rewards")
    p.add_argument("--loss-mode", default="clipped")
    p.add_argument("--loss-aggregation", default="token_mean", help="-> TRL's loss_type")
    p.add_argument("--loss-type", default=None, help="an equivalent TRL loss_type, e.g. bnpo")
    p.add_argument("--kl-coef", type=float, default=0.0)
    p.add_argument("--learning-rate", type=float, default=5e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model-dir", default=None, help="where the initial model is saved / loaded")
    p.add_argument(
        "--init-only", action="store_true", help="only write the initial model to --model-dir"
    )
    p.add_argument("--output-dir", default=None, help="checkpoints and logs (default: a temp dir)")
    p.add_argument(
        "--use-vllm",
        choices=["no", "server", "colocate"],
        default="no",
        help="generate with vLLM: a separate server, or inside each training process",
    )
    p.add_argument("--vllm-server-url", default="http://localhost:8000")
    p.add_argument(
        "--record",
        default=None,
        help="folder: each process saves what its loss saw (record-rank<r>.pt), for tests",
    )
    return p.parse_args(argv)


def recording(trainer_class):
    """A subclass of ``trainer_class`` (a GRPOTrainer) that keeps (``self.records``), per
    optimizer step, the batch its ``compute_loss`` saw, the loss, and the loss TRL's
    ``loss_type="bnpo"`` gives on the same batch; per generation round, the gathered prompts,
    completions, rewards and advantages TRL logs. Used by tests/integration/test_scale_two_processes.py."""

    import torch

    class Recording(trainer_class):
        records: list

        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            logs = self._logs
            self.records.append(
                {
                    "kind": "generation",
                    "step": self.state.global_step,
                    "local_advantages": out["advantages"].detach().clone(),
                    "gathered": {
                        "prompt": list(logs["prompt"]),
                        "completion": list(logs["completion"]),
                        "rewards": {k: list(v) for k, v in logs["rewards"].items()},
                        "advantages": list(logs["advantages"]),
                    },
                }
            )
            return out

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            # what loss_type 'bnpo' gives on the same local batch (no gradient, same weights)
            saved, self.loss_type = self.loss_type, "bnpo"
            with torch.no_grad():
                bnpo = super().compute_loss(model, inputs).item()
            self.loss_type = saved
            keep = (
                "prompt_ids",
                "prompt_mask",
                "completion_ids",
                "completion_mask",
                "advantages",
                "old_per_token_logps",
                "num_items_in_batch",
            )
            self.records.append(
                {
                    "kind": "loss",
                    "step": self.state.global_step,
                    "inputs": {k: inputs[k].detach().clone() for k in keep if k in inputs},
                    "loss": loss.item(),
                    "loss_as_bnpo": bnpo,
                }
            )
            return loss

    Recording.records = []
    return Recording


def main(argv=None) -> dict:
    args = parse_args(argv)
    warnings.filterwarnings("ignore", category=FutureWarning)
    import torch
    import transformers
    from accelerate import PartialState
    from trl import GRPOConfig, GRPOTrainer

    from pgrl_helpers.config import TrainConfig
    from pgrl_helpers.hf import trl_bridge, trl_config
    from pgrl_helpers.sort_task import make_prompts

    transformers.logging.set_verbosity_error()
    state = PartialState(cpu=not torch.cuda.is_available())
    config = TrainConfig(
        deltas_mode=args.deltas_mode,
        loss_mode=args.loss_mode,
        loss_aggregation=args.loss_aggregation,
        reward_fn=args.reward_fn,
        kl_coef=args.kl_coef,
        num_epochs=args.epochs,
        num_steps_per_epoch=args.steps_per_epoch,
        num_responses=args.group_size,
        prompt_source="random",
        prompts_per_epoch=args.prompts_per_epoch,
        prompt_length=args.prompt_length,
        vocab_size=args.vocab_size,
        learning_rate=args.learning_rate,
        seed=args.seed,
    )
    tokenizer = trl_bridge.build_sort_tokenizer(config.vocab_size)
    workdir = Path(args.output_dir or tempfile.mkdtemp(prefix="sort-grpo-"))
    model_dir = Path(args.model_dir or workdir / "init-model")
    # Every process (and a vLLM server) loads the same initial weights from disk; the main
    # process writes them once. TRL also builds its reference model from this path.
    with state.main_process_first():
        if not (model_dir / "config.json").exists():
            model = trl_bridge.build_tiny_gpt2(tokenizer, seed=config.seed)
            model.save_pretrained(model_dir)
            tokenizer.save_pretrained(model_dir)

    if args.init_only:
        if state.is_main_process:
            print(f"initial model in {model_dir}")
        return {"model_dir": str(model_dir)}

    kwargs = trl_config.grpo_config_kwargs(
        config,
        args.loss_type,
        output_dir=str(workdir),
        report_to="none",
        save_strategy="no",
        logging_steps=config.num_steps_per_epoch,
        disable_tqdm=True,
        use_cpu=not torch.cuda.is_available(),
    )
    # What changes with N processes: the mapping's batch is global (prompts x G); each
    # process takes 1/N of it. TRL gathers the rewards of a group across processes.
    n = state.num_processes
    if kwargs["per_device_train_batch_size"] % n:
        raise ValueError(
            f"prompts_per_epoch x G = {kwargs['per_device_train_batch_size']} must be divisible "
            f"by the number of processes ({n})"
        )
    kwargs["per_device_train_batch_size"] //= n
    if args.use_vllm != "no":
        kwargs.update(use_vllm=True, vllm_mode=args.use_vllm)
        if args.use_vllm == "server":
            kwargs["vllm_server_base_url"] = args.vllm_server_url
    if torch.cuda.is_available():
        kwargs["bf16"] = torch.cuda.is_bf16_supported()

    prompts = make_prompts(
        config.num_epochs * config.batch_prompts,
        config.prompt_length,
        config.vocab_size,
        config.seed,
    )
    trainer_class = GRPOTrainer if args.record is None else recording(GRPOTrainer)
    trainer = trainer_class(
        model=str(model_dir),
        reward_funcs=trl_bridge.sort_reward_func(config.reward_fn, config.vocab_size),
        args=GRPOConfig(**kwargs),
        train_dataset=trl_bridge.make_sort_dataset(prompts),
        processing_class=tokenizer,
    )
    start = time.perf_counter()
    trainer.train()
    if args.record is not None:
        Path(args.record).mkdir(parents=True, exist_ok=True)
        torch.save(
            {"num_processes": n, "records": trainer.records},
            Path(args.record) / f"record-rank{state.process_index}.pt",
        )
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    summary = {
        "steps": trainer.state.global_step,
        "first_reward": rewards[0],
        "last_reward": rewards[-1],
        "seconds": time.perf_counter() - start,
    }
    if state.is_main_process:
        print(
            f"{summary['steps']} steps in {summary['seconds']:.0f} s: mean reward "
            f"{summary['first_reward']:.2f} -> {summary['last_reward']:.2f} "
            f"(max {config.prompt_length})"
        )
    return summary


if __name__ == "__main__":
    main()
