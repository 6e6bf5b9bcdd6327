"""The loop trains the tool task with 'group' and 'gae' (kept apart from tests/test_tool_task.py,
whose fast unit tests the mutation run uses)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from test_tool_task import _config

from pgrl_helpers.tool_task import ToolUsePolicy
from pgrl_helpers.training import evaluate_greedy, run_policy_gradient


@pytest.mark.parametrize("estimator", ["group", "gae"])
def test_the_loop_trains_the_tool_task(estimator):
    config = _config(advantage_estimator=estimator)
    history = run_policy_gradient(config)
    assert isinstance(history.run.model, ToolUsePolicy) and history.run.model.mask_tool_tokens
    steps = [r for r in history if r["kind"] == "step"]
    assert len(steps) == 4 and history.train_prompts_with_heldout_key == 0
    assert all(r["response_length"] == 3.0 for r in steps)  # policy tokens only
    bug = run_policy_gradient(replace(config, mask_tool_tokens=False))
    assert not bug.run.model.mask_tool_tokens
    # the bug lets the tool's two reply tokens into the mask, never the grader's slot
    assert all(r["response_length"] == 5.0 for r in bug if r["kind"] == "step")


def test_validation_scores_prompts_not_positions():
    """Review R3: the loop's greedy evaluation of a trained policy is a function of each prompt:
    every prompt (here all V * V of them) gets the same episode in any order of the batch."""
    config = _config(num_epochs=3)
    history = run_policy_gradient(config)
    task = config.build_task()
    prompts = torch.tensor(
        [[a, b] for a in range(config.vocab_size) for b in range(config.vocab_size)]
    )
    order = torch.randperm(len(prompts), generator=torch.Generator().manual_seed(0))
    exact = task.exact(prompts, history.run.model.greedy(prompts))[:, 0]
    shuffled = task.exact(prompts[order], history.run.model.greedy(prompts[order]))[:, 0]
    assert torch.equal(exact[order], shuffled)
    assert evaluate_greedy(history.run.model, prompts, task) == evaluate_greedy(
        history.run.model, prompts[order], task
    )
