"""pgrl_helpers.policy: the entropy the loop asks for right after the log-probs of the same
batch comes from the log-probs' forward pass (``remember_logits`` / ``reuse_logits``), for the
positional policies (``LectureModel``, ``SortTransformer``: the sampling pass is reused too)
and ``AutoregressiveSortPolicy``. These tests pin that the reuse gives the numbers of a pass of
its own and never stale ones: after a parameter update, without the graph a gradient needs,
after a backward pass freed that graph, or for other tensors."""

from __future__ import annotations

import weakref

import pytest
import torch

from pgrl_helpers import autoregressive
from pgrl_helpers import policy as policy_module

SHAPES = ("lecture", "transformer", "autoregressive")


def batch(config, model):
    generator = torch.Generator().manual_seed(0)
    prompts = config.build_task().random_prompts(4, generator)
    responses, mask = model.sample(prompts, 3, generator)
    return prompts, responses, mask


def fresh_entropy(model, prompts, responses, mask):
    """The entropy from a pass of its own (no remembered logits)."""
    policy_module._LAST_LOGITS.pop(model, None)
    return model.mean_entropy(prompts, responses, mask)


def count_forwards(model) -> list:
    calls = []
    model.register_forward_hook(lambda module, args, output: calls.append(1))
    return calls


@pytest.mark.parametrize("shape", SHAPES)
def test_entropy_after_log_probs_reuses_the_pass_and_equals_its_own(shape, tiny_config):
    config = tiny_config(shape)
    model = config.build_policy().double()
    prompts, responses, mask = batch(config, model)
    want = fresh_entropy(model, prompts, responses, mask).detach()
    calls = count_forwards(model)
    model.log_probs(prompts, responses)
    got = model.mean_entropy(prompts, responses, mask)
    assert len(calls) == 1, "one forward pass for the log-probs and the entropy"
    assert torch.equal(got.detach(), want)
    assert got.requires_grad  # the bonus's gradient flows through the shared pass


@pytest.mark.parametrize("shape", ("lecture", "transformer"))
def test_positional_log_probs_reuse_the_sampling_pass(shape, tiny_config):
    config = tiny_config(shape)
    model = config.build_policy().double()
    generator = torch.Generator().manual_seed(0)
    prompts = config.build_task().random_prompts(4, generator)
    calls = count_forwards(model)
    responses, _ = model.sample(prompts, 3, generator)
    got = model.log_probs(prompts, responses)
    assert len(calls) == 1
    policy_module._LAST_LOGITS.pop(model, None)
    assert torch.equal(got, model.log_probs(prompts, responses))


@pytest.mark.parametrize("shape", SHAPES)
def test_no_stale_entropy_after_a_parameter_update(shape, tiny_config):
    config = tiny_config(shape)
    model = config.build_policy().double()
    prompts, responses, mask = batch(config, model)
    before = fresh_entropy(model, prompts, responses, mask).detach()
    model.log_probs(prompts, responses)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)  # in place, as optimizer.step() updates
    got = model.mean_entropy(prompts, responses, mask)
    assert not torch.equal(got.detach(), before)
    assert torch.equal(got.detach(), fresh_entropy(model, prompts, responses, mask).detach())


@pytest.mark.parametrize("shape", SHAPES)
def test_a_gradient_is_never_taken_from_a_pass_without_a_graph(shape, tiny_config):
    config = tiny_config(shape)
    model = config.build_policy().double()
    prompts, responses, mask = batch(config, model)
    policy_module._LAST_LOGITS.pop(model, None)  # not the sampling pass (it has a graph)
    with torch.no_grad():
        model.log_probs(prompts, responses)  # e.g. the frozen old log-probs
    entropy = model.mean_entropy(prompts, responses, mask)
    assert entropy.requires_grad
    entropy.backward()


@pytest.mark.parametrize("shape", SHAPES)
def test_a_backward_pass_forgets_the_logits_whose_graph_it_freed(shape, tiny_config):
    config = tiny_config(shape)
    model = config.build_policy().double()
    prompts, responses, mask = batch(config, model)
    model.log_probs(prompts, responses).sum().backward()  # frees the pass's graph
    model.mean_entropy(prompts, responses, mask).backward()  # needs a pass of its own


@pytest.mark.parametrize("shape", SHAPES)
def test_other_tensors_get_a_pass_of_their_own(shape, tiny_config):
    config = tiny_config(shape)
    model = config.build_policy().double()
    prompts, responses, mask = batch(config, model)
    model.log_probs(prompts, responses)
    other = prompts.flip(0)
    got = model.token_entropy(other, responses.flip(0))
    policy_module._LAST_LOGITS.pop(model, None)
    assert torch.equal(got, model.token_entropy(other, responses.flip(0)))


def test_the_remembered_pass_is_used_once_and_never_keeps_the_policy_alive(tiny_config):
    config = tiny_config("autoregressive")
    model = config.build_policy()
    prompts, responses, mask = batch(config, model)
    model.log_probs(prompts, responses)
    assert autoregressive.reuse_logits(model, prompts, responses) is not None
    assert autoregressive.reuse_logits(model, prompts, responses) is None
    model.log_probs(prompts, responses)
    assert model in policy_module._LAST_LOGITS
    # other tests in this process may have left their (live) policies' entries: follow this one
    alive = weakref.ref(model)
    del model
    import gc

    gc.collect()
    assert alive() is None, "the remembered pass keeps the policy alive"
