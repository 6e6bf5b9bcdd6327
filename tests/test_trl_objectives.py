"""Our objective family equals TRL's GRPOTrainer loss types on one ragged batch.

For each of TRL's grpo, bnpo, dapo, dr_grpo, cispo, sapo and GSPO (loss_type 'grpo' with
importance_sampling_level 'sequence'), TRL's ``compute_loss`` and ours agree in value and
in every parameter's gradient. Skipped only when TRL is not installed.
"""

from __future__ import annotations

import pytest

from pgrl_helpers.hf.trl_objectives import TRL_LOSS_TYPES, build_cross_check, trl_vs_ours

V, L, B, G = 5, 3, 4, 6
EPS, EPS_HIGH = 0.2, 0.28


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    pytest.importorskip("trl")
    check = build_cross_check(tmp_path_factory.mktemp("trl_objectives"), V, L, B, G)
    return tuple(check[k] for k in ("trainer", "log_probs_fn", "inputs", "deltas", "old", "mask"))


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
