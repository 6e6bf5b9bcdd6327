"""Configs whose full training histories pin the loop's behaviour (see test_loop_regression).

``python tests/integration/loop_regression_configs.py`` re-records
``tests/integration/data/loop_regression.json``.
Re-record only when a change of behaviour is intended, and say why in the commit message.
"""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).parent / "data" / "loop_regression.json"

CONFIGS: dict[str, dict] = {
    "lecture_naive": dict(num_epochs=6, num_steps_per_epoch=3),
    "lecture_kl_clipped_normalized": dict(
        num_epochs=6,
        num_steps_per_epoch=3,
        deltas_mode="normalized_rewards",
        loss_mode="clipped",
        kl_coef=0.1,
        compute_ref_model_period=2,
        learning_rate=1e-2,
    ),
    "lecture_freeze_pitfall": dict(
        num_epochs=3, num_steps_per_epoch=2, loss_mode="unclipped", detach_old_log_probs=False
    ),
    "transformer_clipped_entropy": dict(
        model="transformer",
        prompt_source="random",
        prompt_length=4,
        vocab_size=6,
        embedding_dim=16,
        num_layers=1,
        num_heads=2,
        prompts_per_epoch=16,
        num_responses=4,
        num_epochs=5,
        num_steps_per_epoch=2,
        loss_mode="clipped",
        entropy_coef=0.01,
        reward_fn="sort_distance_reward",
        learning_rate=3e-3,
        eval_every=2,
    ),
    "transformer_k1_unclipped_loo": dict(
        model="transformer",
        prompt_source="random",
        prompt_length=3,
        vocab_size=5,
        embedding_dim=8,
        num_layers=1,
        num_heads=2,
        prompts_per_epoch=8,
        num_responses=3,
        num_epochs=4,
        num_steps_per_epoch=2,
        deltas_mode="loo_rewards",
        loss_mode="unclipped",
        kl_coef=0.05,
        kl_estimator="k1",
        compute_ref_model_period=2,
        reward_fn="sort_distance_reward",
    ),
    "autoregressive_dedup": dict(
        model="autoregressive",
        task="sort_dedup",
        prompt_source="random",
        prompt_length=3,
        vocab_size=5,
        embedding_dim=16,
        num_layers=1,
        num_heads=2,
        prompts_per_epoch=8,
        num_responses=4,
        num_epochs=4,
        num_steps_per_epoch=2,
        loss_mode="clipped",
        epsilon_high=0.28,
        entropy_coef=0.02,
        loss_aggregation="sequence_mean",
        reward_fn="dedup_position_reward",
        learning_rate=3e-3,
        eval_every=2,
    ),
    "autoregressive_kl_token_mean": dict(
        model="autoregressive",
        task="sort_dedup",
        prompt_source="random",
        prompt_length=3,
        vocab_size=4,
        embedding_dim=8,
        num_layers=1,
        num_heads=2,
        prompts_per_epoch=6,
        num_responses=3,
        num_epochs=3,
        num_steps_per_epoch=2,
        loss_mode="clipped",
        kl_coef=0.1,
        compute_ref_model_period=2,
        reward_fn="dedup_position_reward",
        max_response_length=5,
    ),
}


def record(name: str, **overrides) -> dict:
    """The run's records plus what the History carries (prompts, refreshes, final weights).

    The run is made in float64 (``torch.set_default_dtype``, restored afterwards): every model
    weight, log-prob, loss and gradient is then float64, so the round-off that differs between
    CPUs (PyTorch picks vectorised kernels by processor) stays near 1e-14 instead of the 1e-5 that
    a float32 trajectory reaches. The loop's code is the same in both precisions.
    ``overrides`` change config fields (the planted-change test uses them).
    """
    import torch

    from pgrl_helpers.config import TrainConfig
    from pgrl_helpers.training import run_policy_gradient

    threads_before = torch.get_num_threads()
    dtype_before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        history = run_policy_gradient(TrainConfig(**{**CONFIGS[name], **overrides}))
    finally:
        torch.set_default_dtype(dtype_before)
    params = [p.detach().double() for p in history.run.model.parameters()]
    return {
        "records": [dict(r) for r in history],
        "stop_reason": history.stop_reason,
        "ref_refresh_epochs": list(history.ref_refresh_epochs),
        "validation_prompts": history.run.validation_prompts.tolist(),
        "test_prompts": history.run.test_prompts.tolist(),
        "train_prompts_with_heldout_key": history.train_prompts_with_heldout_key,
        "train_prompts": history.run.train_prompts.tolist(),
        "param_dtype": str(next(history.run.model.parameters()).dtype),
        "param_sum": float(sum(p.sum() for p in params)),
        "param_sq_sum": float(sum((p * p).sum() for p in params)),
        "threads_restored": torch.get_num_threads() == threads_before,
    }


if __name__ == "__main__":
    DATA.parent.mkdir(exist_ok=True)
    data = {name: record(name) for name in CONFIGS}
    DATA.write_text(json.dumps(data, indent=0) + "\n")
    sizes = ", ".join(f"{k} ({len(v['records'])} records)" for k, v in data.items())
    print(f"wrote {DATA}: {sizes}")
