"""Our objective family equals TRL's GRPOTrainer loss types on one ragged batch.

For each of TRL's grpo, bnpo, dapo, dr_grpo, cispo, sapo and GSPO (loss_type 'grpo' with
importance_sampling_level 'sequence'), TRL's ``compute_loss`` and ours agree in value and
in every parameter's gradient. Skipped only when TRL is not installed.
"""

from __future__ import annotations

import pytest
import torch

from pgrl_helpers import trl_bridge as tb
from pgrl_helpers.config import TrainConfig
from pgrl_helpers.sort_task import make_prompts
from pgrl_helpers.trl_objectives import TRL_LOSS_TYPES, trl_masked_inputs, trl_vs_ours

V, L, B, G = 5, 3, 4, 6
EPS, EPS_HIGH = 0.2, 0.28


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    pytest.importorskip("trl")
    import transformers
    from trl import GRPOConfig, GRPOTrainer

    transformers.logging.set_verbosity_error()
    tmp = tmp_path_factory.mktemp("trl_objectives")
    tok = tb.build_sort_tokenizer(V)
    config = TrainConfig(
        deltas_mode="normalized_rewards", loss_mode="clipped", num_epochs=1,
        num_steps_per_epoch=1, num_responses=G, prompt_source="random", prompts_per_epoch=B,
        loss_aggregation="token_mean",
    )  # fmt: skip
    kwargs = tb.grpo_config_kwargs(
        config, output_dir=str(tmp), report_to="none", save_strategy="no", use_cpu=True
    )
    trainer = GRPOTrainer(
        model=tb.build_tiny_gpt2(tok, seed=0),
        reward_funcs=tb.sort_reward_func("sort_distance_reward", V),
        args=GRPOConfig(**kwargs),
        train_dataset=tb.make_sort_dataset(make_prompts(8, L, V, generator=0)),
        processing_class=tok,
    )
    prompts = make_prompts(B, L, V, generator=1)
    g = torch.Generator().manual_seed(2)
    completion_ids = torch.randint(0, V, (B, G, L), generator=g) + len(tb.SPECIAL_TOKENS)
    prompt_ids = torch.tensor([tok(tb.format_prompt(p))["input_ids"] for p in prompts.tolist()])
    prompt_ids = prompt_ids[:, None, :].expand(B, G, -1)
    lengths = torch.randint(1, L + 1, (B, G), generator=g)
    mask = (torch.arange(L) < lengths[..., None]).float()
    deltas = torch.randn((B, G), generator=g)
    rows = B * G

    def log_probs_fn():
        flat = tb.completion_log_probs(
            trainer.model, prompt_ids.reshape(rows, -1), completion_ids.reshape(rows, -1)
        )
        return flat.reshape(B, G, L)

    with torch.no_grad():
        old = log_probs_fn() + 0.3 * torch.randn((B, G, L), generator=g)
    inputs = trl_masked_inputs(prompt_ids, completion_ids, mask, deltas, old)
    return trainer, log_probs_fn, inputs, deltas, old, mask


@pytest.mark.parametrize("name", sorted(TRL_LOSS_TYPES))
def test_trl_loss_and_gradient_equal_ours(setup, name):
    trainer, log_probs_fn, inputs, deltas, old, mask = setup
    assert 0 < mask.mean() < 1, "the batch must be ragged"
    loss_diff, grad_diff, ours = trl_vs_ours(
        trainer, name, log_probs_fn, inputs, deltas, old, mask, EPS, EPS_HIGH
    )
    assert loss_diff < 1e-6 and grad_diff < 1e-6, (name, loss_diff, grad_diff)
    assert abs(ours) > 1e-4


def test_a_wrong_aggregation_is_caught(setup):
    # planted bug: pair TRL's dr_grpo with our token_mean; the losses must differ
    trainer, log_probs_fn, inputs, deltas, old, mask = setup
    saved = TRL_LOSS_TYPES["dr_grpo"]
    TRL_LOSS_TYPES["dr_grpo"] = saved[:4] + ("token_mean",)
    try:
        loss_diff, _, _ = trl_vs_ours(
            trainer, "dr_grpo", log_probs_fn, inputs, deltas, old, mask, EPS, EPS_HIGH
        )
    finally:
        TRL_LOSS_TYPES["dr_grpo"] = saved
    assert loss_diff > 1e-4
