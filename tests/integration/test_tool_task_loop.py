"""The loop trains the tool task with 'group' and 'gae' (kept apart from tests/test_tool_task.py,
whose fast unit tests the mutation run uses)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_tool_task import _config

from pgrl_helpers.tool_task import ToolUsePolicy
from pgrl_helpers.training import run_policy_gradient


@pytest.mark.parametrize("estimator", ["group", "gae"])
def test_the_loop_trains_the_tool_task(estimator):
    config = _config(advantage_estimator=estimator)
    history = run_policy_gradient(config)
    assert isinstance(history.model, ToolUsePolicy) and history.model.mask_tool_tokens
    steps = [r for r in history if r["kind"] == "step"]
    assert len(steps) == 4 and history.train_prompts_with_heldout_key == 0
    assert all(r["response_length"] == 3.0 for r in steps)  # policy tokens only
    bug = run_policy_gradient(replace(config, mask_tool_tokens=False))
    assert not bug.model.mask_tool_tokens
    assert all(r["response_length"] == 6.0 for r in bug if r["kind"] == "step")
