"""Notebook 06's hand-written ``grpo_step`` is one inner optimizer step of the loop.

Notebook 06 shows one GRPO iteration on a single screen; ``run_policy_gradient`` runs the
same iteration inside its loop. This test keeps the two from drifting apart (CleanRL's
single-file honesty): it takes ``grpo_step`` from the notebook's code cell (parsed, never
copied here), runs it once, and compares it with the loop run for one epoch of one
optimizer step, both from the same seeded ``LectureModel``. The settings (seed, G, sizes,
learning rate, epsilon, beta, reward, delta mode, loss mode) are read from the notebook.

What is compared, and the one difference:

* The notebook samples its group with ``torch.Generator().manual_seed(SEED)``; the loop
  seeds its sampler with ``seed + 1_000_003`` (apart from the prompt stream). So the step
  is compared on the loop's own batch: ``grpo_step`` closes over ``prompts``,
  ``responses``, ``grpo_deltas``, ``old_log_probs`` and ``ref_log_probs``, and those are
  filled from the loop's rollout. That the loop draws the batch with the notebook's
  sampler (``sample_responses`` with the offset seed) and scores it with the notebook's
  reward and delta mode is checked separately.
* Everything after sampling must agree to float precision: the loss and every parameter
  after the Adam step (the loop's "token_mean" aggregation with no padding is
  ``compute_loss``'s plain mean, and its ``kl_per_response`` with no padding is
  ``compute_kl_penalty``).

Planted bugs (the freeze pitfall, deltas that are not centred, the naive loss) must make a
copy of ``grpo_step`` disagree with the loop. At this first step the ratio is 1 and the KL
term is 0 with zero gradient (the notebook's stages 5 and 6), so a bug in the clip or the KL
sign cannot show here; the naive loss has the same gradient and differs only in its value.
"""

from __future__ import annotations

import ast
import copy
import inspect
import json
from pathlib import Path

import pytest
import torch

from pgrl_helpers.advantages import compute_deltas
from pgrl_helpers.config import TrainConfig
from pgrl_helpers.kl import compute_kl_penalty
from pgrl_helpers.losses import compute_loss
from pgrl_helpers.models import LectureModel
from pgrl_helpers.registry import BATCH_FILTERS
from pgrl_helpers.sampling import compute_log_probs, sample_responses
from pgrl_helpers.sort_task import compute_reward, lecture_prompts
from pgrl_helpers.training import run_policy_gradient

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "06_grpo_step_by_step.ipynb"
SAMPLER_SEED_OFFSET = 1_000_003  # run_policy_gradient: sample_generator = seed + this
TOLERANCE = 1e-6


def code_cells() -> list[str]:
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    return ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"]


def grpo_step_source() -> str:
    """The source of the notebook's ``def grpo_step``, cut from its cell by the parser."""
    for source in code_cells():
        for node in ast.parse(source).body:
            if isinstance(node, ast.FunctionDef) and node.name == "grpo_step":
                return ast.get_source_segment(source, node)
    raise AssertionError(f"no 'def grpo_step' in {NOTEBOOK.name}")


def notebook_settings() -> dict:
    """The notebook's literal top-level settings (SEED, G, ...), its delta and loss modes."""
    settings = {}
    for source in code_cells():
        for node in ast.parse(source).body:
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
                continue
            target, value = node.targets[0], node.value
            if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
                pairs = zip(target.elts, value.elts)
            else:
                pairs = [(target, value)]
            for name, expr in pairs:
                if isinstance(name, ast.Name) and name.id.isupper():
                    try:
                        settings[name.id] = ast.literal_eval(expr)
                    except ValueError:
                        pass
            # grpo_deltas = deltas["normalized_rewards"]
            if getattr(target, "id", None) == "grpo_deltas" and isinstance(value, ast.Subscript):
                settings["delta_mode"] = ast.literal_eval(value.slice)
    step = ast.parse(grpo_step_source())
    calls = [n for n in ast.walk(step) if isinstance(n, ast.Call)]
    (loss_call,) = [c for c in calls if getattr(c.func, "id", None) == "compute_loss"]
    settings["loss_mode"] = ast.literal_eval(loss_call.args[2])
    kl_calls = [c for c in calls if getattr(c.func, "id", None) == "compute_kl_penalty"]
    assert len(kl_calls) == 1 and len(kl_calls[0].args) == 2, "the notebook's KL call changed"
    settings["kl_estimator"] = inspect.signature(compute_kl_penalty).parameters["estimator"].default
    return settings


SETTINGS = notebook_settings()


def notebook_model() -> LectureModel:
    """The notebook's policy, built as its setup cell builds it."""
    s = SETTINGS
    return LectureModel(
        s["VOCAB_SIZE"], s["EMBEDDING_DIM"], prompt_length=3, response_length=3, seed=s["SEED"]
    )


def loop_config() -> TrainConfig:
    s = SETTINGS
    return TrainConfig(
        model="lecture", task="sort", prompt_source="lecture", prompt_length=3,
        vocab_size=s["VOCAB_SIZE"], embedding_dim=s["EMBEDDING_DIM"], seed=s["SEED"],
        num_responses=s["G"], reward_fn=s["REWARD"], deltas_mode=s["delta_mode"],
        loss_mode=s["loss_mode"], epsilon=s["EPSILON"], kl_coef=s["BETA"],
        kl_estimator=s["kl_estimator"], learning_rate=s["LEARNING_RATE"],
        loss_aggregation="token_mean", num_epochs=1, num_steps_per_epoch=1,
    )  # fmt: skip


@pytest.fixture(scope="module")
def loop_step():
    """One epoch, one optimizer step of the loop: (its rollout, its step record, its policy)."""
    rollouts = []
    keep_all = BATCH_FILTERS["none"]

    def spy(rollout, config):
        rollouts.append(keep_all(rollout, config))
        return rollouts[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(BATCH_FILTERS, "none", spy)
        history = run_policy_gradient(loop_config())
    (step,) = history.steps()
    (rollout,) = rollouts
    return rollout, step, history.run.model


def run_notebook_step(source: str, rollout) -> tuple[float, LectureModel]:
    """Execute ``source`` (a ``grpo_step``) once, on the globals the notebook's cells make."""
    s = SETTINGS
    model = notebook_model()
    prompts, responses = rollout.prompts, rollout.responses
    with torch.no_grad():
        old_log_probs = compute_log_probs(model, prompts, responses)  # frozen snapshot
        ref_model = copy.deepcopy(model).requires_grad_(False)
        ref_log_probs = compute_log_probs(ref_model, prompts, responses)
    namespace = {
        "torch": torch,
        "compute_log_probs": compute_log_probs,
        "compute_loss": compute_loss,
        "compute_kl_penalty": compute_kl_penalty,
        "model": model,
        "prompts": prompts,
        "responses": responses,
        "grpo_deltas": rollout.deltas,
        "old_log_probs": old_log_probs,
        "ref_log_probs": ref_log_probs,
        "optimizer": torch.optim.Adam(model.parameters(), lr=s["LEARNING_RATE"]),
        "EPSILON": s["EPSILON"],
        "BETA": s["BETA"],
    }
    exec(compile(source, str(NOTEBOOK), "exec"), namespace)
    return namespace["grpo_step"](), model


def differences(source: str, loop_step) -> tuple[float, float]:
    """(max |parameter difference|, |loss difference|) after one step of each."""
    rollout, step, loop_policy = loop_step
    loss, model = run_notebook_step(source, rollout)
    params = max(
        (a - b).abs().max().item()
        for a, b in zip(model.parameters(), loop_policy.parameters(), strict=True)
    )
    return params, abs(loss - step["loss"])


def test_the_notebook_settings_are_read():
    assert SETTINGS["delta_mode"] == "normalized_rewards" and SETTINGS["loss_mode"] == "clipped"
    assert SETTINGS["BETA"] > 0 and SETTINGS["G"] > 1  # the KL term and a real group
    assert "optimizer.step()" in grpo_step_source()


def test_the_loop_starts_from_the_notebooks_model_and_batch(loop_step):
    rollout, _, _ = loop_step
    fresh = loop_config().build_policy()
    for a, b in zip(fresh.parameters(), notebook_model().parameters(), strict=True):
        assert torch.equal(a, b)  # the same seeded initial weights
    assert torch.equal(rollout.prompts, lecture_prompts())
    seed = SETTINGS["SEED"] + SAMPLER_SEED_OFFSET  # the one difference: the sampler's seed
    generator = torch.Generator().manual_seed(seed)
    expected = sample_responses(notebook_model(), rollout.prompts, SETTINGS["G"], generator)
    assert torch.equal(rollout.responses, expected)
    rewards = compute_reward(rollout.prompts, rollout.responses, SETTINGS["REWARD"])
    assert torch.equal(rollout.rewards, rewards)
    assert torch.equal(rollout.deltas, compute_deltas(rewards, SETTINGS["delta_mode"]))


def test_one_grpo_step_equals_one_inner_step_of_the_loop(loop_step):
    params, loss = differences(grpo_step_source(), loop_step)
    assert params <= TOLERANCE and loss <= TOLERANCE, (params, loss)
    _, step, loop_policy = loop_step
    moved = max(
        (a - b).abs().max().item()
        for a, b in zip(loop_policy.parameters(), notebook_model().parameters(), strict=True)
    )
    assert moved > 100 * TOLERANCE  # the step did move the policy: the match is not vacuous
    assert step["kl"] == pytest.approx(0.0, abs=1e-7)  # policy = reference at this step


PLANTED = {
    # the freeze pitfall (notebook 04): old log-probs not detached, the ratio has no gradient
    "ratio not detached": (
        "old_log_probs=old_log_probs,",
        "old_log_probs=lp, check_frozen=False,",
    ),
    # the deltas lose their group mean: every response is pushed up a little
    "deltas not centred": ("compute_loss(lp, grpo_deltas,", "compute_loss(lp, grpo_deltas + 1,"),
    # same gradient at ratio 1, another loss value
    "naive loss": ('"clipped"', '"naive"'),
}


@pytest.mark.parametrize("bug", sorted(PLANTED))
def test_a_planted_bug_in_grpo_step_does_not_match_the_loop(bug, loop_step):
    before, after = PLANTED[bug]
    source = grpo_step_source()
    assert source.count(before) == 1, f"the notebook's grpo_step changed: fix PLANTED[{bug!r}]"
    params, loss = differences(source.replace(before, after), loop_step)
    assert params > TOLERANCE or loss > TOLERANCE, (bug, params, loss)
