"""The loop's entropy (metric and bonus) comes from the forward pass of the step's log-probs,
and a positional policy's first step reuses its sampling pass (``policy.remember_logits``).

Without an entropy bonus the entropy is a no-grad metric: the run is the same, number for
number, as with a pass of its own. With a bonus, the gradient of the loss and of the entropy
is summed at the shared logits instead of over two graphs: the same to float64 round-off.
Either way the loop runs fewer forward passes.
"""

from __future__ import annotations

import pytest
import torch

from pgrl_helpers import autoregressive
from pgrl_helpers import policy as policy_module
from pgrl_helpers.training import run_policy_gradient

SHAPES = ("lecture", "transformer", "autoregressive")


def run(config, monkeypatch=None, share=True):
    if not share:  # every log-prob and entropy call runs its own forward pass
        for module in (policy_module, autoregressive):
            monkeypatch.setattr(module, "reuse_logits", lambda *args: None)
    model = config.build_policy().double()
    calls = []
    model.register_forward_hook(lambda module, args, output: calls.append(1))
    history = run_policy_gradient(config, policy=model)
    params = [p.detach().clone() for p in history.run.model.parameters()]
    if monkeypatch is not None:
        monkeypatch.undo()
    return [dict(r) for r in history], params, len(calls)


def close(a, b, tol=1e-9) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= tol * max(1.0, abs(b))
    return a == b


@pytest.mark.parametrize("shape", SHAPES)
def test_without_a_bonus_the_run_is_the_same_number_for_number(shape, tiny_config, monkeypatch):
    config = tiny_config(shape, num_steps_per_epoch=2, loss_mode="clipped")
    assert config.entropy_coef == 0
    records, params, shared_calls = run(config)
    want_records, want_params, own_calls = run(config, monkeypatch, share=False)
    assert records == want_records
    assert all(torch.equal(a, b) for a, b in zip(params, want_params))
    assert shared_calls < own_calls


@pytest.mark.parametrize("shape", SHAPES)
def test_with_a_bonus_the_run_agrees_to_round_off(shape, tiny_config, monkeypatch):
    config = tiny_config(shape, num_steps_per_epoch=2, loss_mode="clipped", entropy_coef=0.05)
    records, params, shared_calls = run(config)
    want_records, want_params, own_calls = run(config, monkeypatch, share=False)
    assert len(records) == len(want_records)
    for got, want in zip(records, want_records):
        assert got.keys() == want.keys()
        assert all(close(got[k], want[k]) for k in want), (got, want)
    assert all(torch.allclose(a, b, rtol=1e-9, atol=1e-12) for a, b in zip(params, want_params))
    assert shared_calls < own_calls
