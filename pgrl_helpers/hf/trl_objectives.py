"""Our objective family next to TRL's ``GRPOTrainer`` loss types, checked on one batch.

``TRL_LOSS_TYPES`` maps each TRL ``loss_type`` (plus GSPO's
``importance_sampling_level="sequence"``) to our (loss_mode, importance_sampling_level,
loss_aggregation) and the clip settings that make the two agree. ``trl_vs_ours`` runs
TRL's ``compute_loss`` and ours on the same masked batch and returns the largest
differences of the loss and of every parameter's gradient.

Conventions that differ: TRL's CISPO clamps the ratio at ``epsilon_high`` itself (the
ScaleRL eps_max, e.g. 5.0) with no lower clip; ours clips at 1 + epsilon_high and
1 - epsilon, so TRL's eps_max = 1 + our epsilon_high and our epsilon = 1 (the lower edge
0 never binds). Dr. GRPO divides by max_completion_length: our ``constant_normalizer``
with L = pos.

Taught in notebook 11.
"""

from __future__ import annotations

import torch

from ..losses import compute_per_token_loss
from ..masking import aggregate_loss

#: name -> (TRL loss_type, TRL importance_sampling_level, our loss_mode, our level, our
#: loss_aggregation). ``gspo`` is TRL's recommended GSPO setup (loss_type 'grpo').
TRL_LOSS_TYPES: dict[str, tuple[str, str, str, str, str]] = {
    "grpo": ("grpo", "token", "clipped", "token", "sequence_mean"),
    "bnpo": ("bnpo", "token", "clipped", "token", "token_mean"),
    "dapo": ("dapo", "token", "clipped", "token", "token_mean"),
    "dr_grpo": ("dr_grpo", "token", "clipped", "token", "constant_normalizer"),
    "cispo": ("cispo", "token", "cispo", "token", "token_mean"),
    "sapo": ("sapo", "token", "sapo", "token", "sequence_mean"),
    "gspo": ("grpo", "sequence", "clipped", "sequence", "sequence_mean"),
}


def trl_masked_inputs(prompt_ids, completion_ids, mask, advantages, old_log_probs) -> dict:
    """The inputs dict ``GRPOTrainer._compute_loss`` reads, with a ragged completion mask.

    prompt_ids int[batch, trial, prompt_pos], completion_ids int[batch, trial, pos],
    mask float[batch, trial, pos], advantages float[batch, trial], old_log_probs
    float[batch, trial, pos]; TRL's rows are (batch trial) flattened.
    """
    rows = completion_ids.shape[0] * completion_ids.shape[1]
    flat_mask = mask.reshape(rows, -1).long()
    return {
        "prompt_ids": prompt_ids.reshape(rows, -1),
        "prompt_mask": torch.ones_like(prompt_ids.reshape(rows, -1)),
        "completion_ids": completion_ids.reshape(rows, -1),
        "completion_mask": flat_mask,
        "advantages": advantages.reshape(rows).float(),
        "old_per_token_logps": old_log_probs.reshape(rows, -1).detach(),
        "num_items_in_batch": flat_mask.sum().float(),
    }


def trl_vs_ours(trainer, name, log_probs_fn, inputs, deltas, old, mask, epsilon, epsilon_high):
    """(|loss difference|, max |gradient difference|, our loss) for ``TRL_LOSS_TYPES[name]``.

    ``trainer``: a ``GRPOTrainer`` with beta 0 whose ``loss_type``,
    ``importance_sampling_level`` and clip range are set here; ``log_probs_fn()`` returns
    our log-probs float[batch, trial, pos] of the same model (with grad).

    Taught in notebook 11.
    """
    trl_type, trl_level, mode, level, aggregation = TRL_LOSS_TYPES[name]
    trainer.loss_type, trainer.importance_sampling_level = trl_type, trl_level
    if mode == "cispo":  # TRL: clamp(r, max=eps_max); ours: clip(r, 1 - 1, 1 + eps_high)
        trainer.epsilon_low, trainer.epsilon_high = epsilon, 1 + epsilon_high
        epsilon = 1.0
    else:
        trainer.epsilon_low, trainer.epsilon_high = epsilon, epsilon_high
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    trainer.current_gradient_accumulation_steps = 1
    trainer.model.train()
    trl = trainer.compute_loss(trainer.model, inputs)
    trl_grads = torch.autograd.grad(trl, params)
    per_token = compute_per_token_loss(
        log_probs_fn(), deltas, mode, old, epsilon, epsilon_high=epsilon_high,
        importance_sampling_level=level, mask=mask,
        sapo_temperature_pos=trainer.args.sapo_temperature_pos,
        sapo_temperature_neg=trainer.args.sapo_temperature_neg,
    )  # fmt: skip
    ours = aggregate_loss(per_token, mask, aggregation)
    our_grads = torch.autograd.grad(ours, params)
    grad_diff = max((a - b).abs().max().item() for a, b in zip(trl_grads, our_grads))
    return abs(trl.item() - ours.item()), grad_diff, ours.item()


def build_cross_check(output_dir, vocab_size=5, length=3, prompts=4, group=6, seed=0) -> dict:
    """A tiny ``GRPOTrainer`` (GPT-2, beta 0) and one ragged batch for ``trl_vs_ours``.

    Returns {'trainer', 'log_probs_fn', 'inputs', 'deltas', 'old', 'mask'}: completions of
    random digits with lengths 1 .. length (the mask float[prompts, group, length]),
    random deltas, and old log-probs = current + 0.3 N(0, 1) so that the clips bind.

    Taught in notebook 11.
    """
    import transformers
    from trl import GRPOConfig, GRPOTrainer

    from ..config import TrainConfig
    from ..sort_task import make_prompts
    from . import trl_bridge as tb
    from .trl_config import grpo_config_kwargs

    transformers.logging.set_verbosity_error()
    tok = tb.build_sort_tokenizer(vocab_size)
    config = TrainConfig(
        deltas_mode="normalized_rewards", loss_mode="clipped", num_epochs=1,
        num_steps_per_epoch=1, num_responses=group, prompt_source="random",
        prompts_per_epoch=prompts, prompt_length=length, vocab_size=vocab_size,
    )  # fmt: skip
    kwargs = grpo_config_kwargs(
        config, output_dir=str(output_dir), report_to="none", save_strategy="no", use_cpu=True
    )
    trainer = GRPOTrainer(
        model=tb.build_tiny_gpt2(tok, seed=seed),
        reward_funcs=tb.sort_reward_func("sort_distance_reward", vocab_size),
        args=GRPOConfig(**kwargs),
        train_dataset=tb.make_sort_dataset(make_prompts(8, length, vocab_size, generator=seed)),
        processing_class=tok,
    )
    g = torch.Generator().manual_seed(seed + 2)
    shape = (prompts, group, length)
    completion_ids = torch.randint(0, vocab_size, shape, generator=g) + len(tb.SPECIAL_TOKENS)
    batch_prompts = make_prompts(prompts, length, vocab_size, generator=seed + 1).tolist()
    prompt_ids = torch.tensor([tok(tb.format_prompt(p))["input_ids"] for p in batch_prompts])
    prompt_ids = prompt_ids[:, None, :].expand(prompts, group, -1)
    lengths = torch.randint(1, length + 1, (prompts, group), generator=g)
    mask = (torch.arange(length) < lengths[..., None]).float()
    deltas = torch.randn((prompts, group), generator=g)
    rows = prompts * group

    def log_probs_fn():
        flat = tb.completion_log_probs(
            trainer.model, prompt_ids.reshape(rows, -1), completion_ids.reshape(rows, -1)
        )
        return flat.reshape(shape)

    with torch.no_grad():
        old = log_probs_fn() + 0.3 * torch.randn(shape, generator=g)
    inputs = trl_masked_inputs(prompt_ids, completion_ids, mask, deltas, old)
    return {"trainer": trainer, "log_probs_fn": log_probs_fn, "inputs": inputs,
            "deltas": deltas, "old": old, "mask": mask}  # fmt: skip
