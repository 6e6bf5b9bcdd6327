"""The loop's extension points (pgrl_helpers.registry): the tables, build_estimator and the
task and model factories. The objective (not a table): tests/test_objective.py.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from pgrl_helpers import registry
from pgrl_helpers.advantages import compute_deltas
from pgrl_helpers.objective import group_baseline_deltas
from pgrl_helpers.registry import ROLLOUT_SOURCES
from pgrl_helpers.rollout import OnPolicySource

#: Other test files whose tests also pin pgrl_helpers/registry.py (tests/mutation.py).
MUTATION_ALSO = (
    "test_objective.py",
    "test_offpolicy.py",
    "test_value.py",
    "test_rollout.py",
    "test_config.py",
)


def test_the_tables_and_no_second_dispatch_of_the_ratio_level():
    assert ROLLOUT_SOURCES["on_policy"] is OnPolicySource
    tables = {name for name, value in vars(registry).items() if name.isupper()}
    assert tables == {"TASKS", "MODELS", "ROLLOUT_SOURCES", "BATCH_FILTERS", "ADVANTAGE_ESTIMATORS"}


# --- mutants ---
# the advantage estimators


R = [[1.0, 2.0, 3.0, 6.0], [0.0, 0.0, 1.0, 1.0]]


def test_build_estimator_wraps_functions_and_builds_classes():
    from pgrl_helpers.registry import ADVANTAGE_ESTIMATORS, build_estimator
    from pgrl_helpers.value import GAEEstimator

    rollout = SimpleNamespace(rewards=torch.tensor(R))
    config = SimpleNamespace(deltas_mode="loo_rewards")
    group = build_estimator("group", None, config)
    assert group.fn is ADVANTAGE_ESTIMATORS["group"] is group_baseline_deltas
    assert torch.equal(group(rollout, config), compute_deltas(rollout.rewards, "loo_rewards"))
    assert group.after_epoch(rollout) is None
    calls = []

    class Recorder:
        def __init__(self, policy, config):
            calls.append((policy, config))

    ADVANTAGE_ESTIMATORS["recorder"] = Recorder
    try:
        built = build_estimator("recorder", "the policy", config)
    finally:
        del ADVANTAGE_ESTIMATORS["recorder"]
    assert isinstance(built, Recorder) and calls == [("the policy", config)]
    assert ADVANTAGE_ESTIMATORS["gae"] is GAEEstimator
    with pytest.raises(KeyError):
        build_estimator("critic", None, config)


def _same_weights(a, b) -> bool:
    """Same parameters, and the same log-probs on sampled responses (num_heads changes only
    the latter: the attention heads split the same weight matrices differently)."""
    sa, sb = a.state_dict(), b.state_dict()
    if sa.keys() != sb.keys() or not all(torch.equal(sa[k], sb[k]) for k in sa):
        return False
    length = 2 if hasattr(b, "mask_tool_tokens") else 3
    prompts = torch.randint(0, 7, (4, length), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        responses, _ = b.sample(prompts, 2, torch.Generator().manual_seed(2))
        return torch.equal(a.log_probs(prompts, responses), b.log_probs(prompts, responses))


def test_every_model_factory_passes_every_size_and_the_seed():
    """Sizes and seed off their defaults: a dropped or None argument changes the weights."""
    from pgrl_helpers.autoregressive import AutoregressiveSortPolicy
    from pgrl_helpers.config import TrainConfig
    from pgrl_helpers.models import LectureModel, SortTransformer
    from pgrl_helpers.registry import MODELS
    from pgrl_helpers.tool_task import ToolUsePolicy

    sizes = dict(embedding_dim=12, num_layers=3, num_heads=3, seed=7, vocab_size=7)
    lecture = TrainConfig(**sizes)
    assert _same_weights(MODELS["lecture"](lecture), LectureModel(7, 12, 3, 3, seed=7))
    transformer = TrainConfig(model="transformer", prompt_source="random", **sizes)
    expected = SortTransformer(7, 3, d_model=12, num_layers=3, num_heads=3, seed=7)
    assert _same_weights(MODELS["transformer"](transformer), expected)
    ar = TrainConfig(
        model="autoregressive", task="sort_dedup", prompt_source="random",
        reward_fn="dedup_position_reward", max_response_length=6, **sizes,
    )  # fmt: skip
    expected = AutoregressiveSortPolicy(7, 3, 6, d_model=12, num_layers=3, num_heads=3, seed=7)
    got = MODELS["autoregressive"](ar)
    assert type(got) is AutoregressiveSortPolicy and _same_weights(got, expected)
    for mask in (True, False):
        tool = TrainConfig(
            model="autoregressive", task="tool_compare", prompt_source="random", prompt_length=2,
            mask_tool_tokens=mask, **sizes,
        )  # fmt: skip
        got = MODELS["autoregressive"](tool)
        expected = ToolUsePolicy(
            7, d_model=12, num_layers=3, num_heads=3, seed=7, mask_tool_tokens=mask
        )
        assert type(got) is ToolUsePolicy and got.mask_tool_tokens is mask
        assert _same_weights(got, expected)


def test_every_task_factory_passes_its_settings():
    from pgrl_helpers.config import TrainConfig
    from pgrl_helpers.registry import TASKS
    from pgrl_helpers.sort_task import lecture_prompts

    lecture = TASKS["sort"](TrainConfig())
    assert torch.equal(lecture.fixed_prompts, lecture_prompts())
    fresh = TASKS["sort"](TrainConfig(prompt_source="random", prompt_length=4, vocab_size=6))
    assert fresh.fixed_prompts is None
    assert (fresh.prompt_length, fresh.vocab_size) == (4, 6)
    dedup = TASKS["sort_dedup"](
        TrainConfig(
            model="autoregressive", task="sort_dedup", prompt_source="random",
            reward_fn="dedup_exact_reward", prompt_length=4, vocab_size=6,
        )
    )  # fmt: skip
    assert dedup.reward_fn == "dedup_exact_reward"
    assert (dedup.prompt_length, dedup.vocab_size, dedup.eos_token) == (4, 6, 6)
    tool = TASKS["tool_compare"](
        TrainConfig(model="autoregressive", task="tool_compare", prompt_source="random",
                    prompt_length=2, vocab_size=9)
    )  # fmt: skip
    assert (tool.prompt_length, tool.vocab_size, tool.eos_token) == (2, 9, 9)
