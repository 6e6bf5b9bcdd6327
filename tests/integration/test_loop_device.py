"""The loop follows the policy's device (issue 46, item 1), checked on a CPU-only machine.

A real GPU run once crashed at the first RL step: log-probs on cuda, deltas on the CPU. These
tests catch such a mixed-device path without a GPU. ``StrictDevices`` (a
``torch.overrides.TorchFunctionMode``) makes a stand-in accelerator out of the CPU: a tensor
moved or created on ``ACCEL`` (``torch.device("cpu", 0)``) becomes an ``OnAccel`` tensor that
reports ``ACCEL`` as its device, and any operation that mixes an ``OnAccel`` tensor with a plain
CPU tensor of one or more dimensions raises, as CUDA does ("Expected all tensors to be on the
same device"). ``AccelPolicy`` wraps a toy policy as if it lived on ``ACCEL``: it refuses any
input that is not there and returns its outputs there.

Planted bugs (run by hand, issue 46): the loop of fce816c, which never moves a batch, fails
every case of ``test_the_loop_runs_on_the_policys_device`` (the held-out prompts reach
``greedy`` on the CPU); with the prompts moved but the scored batch not (``Rollout.to`` left
out of ``Resampler.draw``), the Python-reward case fails where the loss mixes the CPU deltas
with the log-probs.
"""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode

from pgrl_helpers import training
from pgrl_helpers.rollout import Rollout, policy_device

#: The stand-in accelerator: a device torch accepts on a CPU-only machine, but not "cpu".
ACCEL = torch.device("cpu", 0)


class OnAccel(torch.Tensor):
    """A CPU tensor that stands for one on ``ACCEL`` (and says so)."""

    @property
    def device(self):
        return ACCEL


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            yield from _tensors(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from _tensors(x)


def _is_accel(device) -> bool:
    return device is not None and torch.device(device) == ACCEL


def _plain(x):
    return x.as_subclass(torch.Tensor) if isinstance(x, OnAccel) else x


class StrictDevices(TorchFunctionMode):
    """Moves to / creation on ``ACCEL`` give ``OnAccel``; moves elsewhere give plain tensors;
    an operation mixing the two (tensors with >= 1 dimension, as CUDA allows CPU scalars)
    raises RuntimeError naming the operation."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.Tensor.to, torch.Tensor.cpu, torch.Tensor.cuda):
            target = kwargs.get("device")
            rest = list(args[1:])
            if target is None and rest and isinstance(rest[0], (torch.device, str)):
                target = rest.pop(0)
            if func is torch.Tensor.cpu:
                target = "cpu"
            if target is not None:
                kwargs = {k: v for k, v in kwargs.items() if k != "device"}
                moved = _plain(args[0]).to(*rest, **kwargs)
                return moved.as_subclass(OnAccel) if _is_accel(target) else moved
        if _is_accel(kwargs.get("device")):  # a creation op on the accelerator
            kwargs = {**kwargs, "device": "cpu"}
            return func(*args, **kwargs).as_subclass(OnAccel)
        kinds = {isinstance(t, OnAccel) for t in _tensors((args, kwargs)) if t.dim() > 0}
        if len(kinds) > 1:
            name = getattr(func, "__name__", repr(func))
            raise RuntimeError(
                f"Expected all tensors to be on the same device, but found at least two "
                f"devices, {ACCEL} (stand-in accelerator) and cpu! ({name})"
            )
        return func(*args, **kwargs)


class AccelPolicy(torch.nn.Module):
    """A policy that lives on ``ACCEL``: every tensor it is given must be there, and what it
    returns is there (computed by the wrapped CPU policy, gradients included)."""

    device = ACCEL

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        for name in ("vocab_size", "prompt_length", "response_length"):
            setattr(self, name, getattr(inner, name))

    def _take(self, method, *tensors):
        for x in tensors:
            if isinstance(x, torch.Tensor) and not isinstance(x, OnAccel):
                raise AssertionError(f"{method} got a tensor on the CPU, not on {ACCEL}")
        return [_plain(x) for x in tensors]

    def _give(self, out):
        if isinstance(out, tuple):
            return tuple(self._give(x) for x in out)
        return out.as_subclass(OnAccel)

    def sample(self, prompts, num_samples, generator=None):
        (prompts,) = self._take("sample", prompts)
        return self._give(self.inner.sample(prompts, num_samples, generator))

    def log_probs(self, prompts, responses):
        return self._give(self.inner.log_probs(*self._take("log_probs", prompts, responses)))

    def token_entropy(self, prompts, responses):
        args = self._take("token_entropy", prompts, responses)
        return self._give(self.inner.token_entropy(*args))

    def mean_entropy(self, prompts, responses, mask):
        args = self._take("mean_entropy", prompts, responses, mask)
        return self._give(self.inner.mean_entropy(*args))

    def greedy(self, prompts):
        return self._give(self.inner.greedy(*self._take("greedy", prompts)))


def test_the_stand_in_accelerator_catches_mixing():
    with StrictDevices():
        a = torch.ones(3).to(ACCEL)
        assert isinstance(a, OnAccel) and a.device == ACCEL
        assert isinstance(a * 2, OnAccel)
        assert not isinstance(a.to("cpu"), OnAccel)
        assert isinstance(torch.zeros(2, device=a.device), OnAccel)
        with pytest.raises(RuntimeError, match="same device"):
            a * torch.ones(3)  # what the GPU run hit: log-probs * deltas
        with pytest.raises(RuntimeError, match="same device"):
            torch.where(a > 0, a, torch.zeros(3))


CASES = {
    "lecture run": {},
    "several steps per batch (old log-probs), clipped": dict(num_steps_per_epoch=2,
                                                             loss_mode="clipped"),
    "KL term with a reference model": dict(kl_coef=0.04, kl_estimator="k3"),
    "entropy bonus and high-entropy tokens": dict(entropy_coef=0.01, top_entropy_quantile=0.5),
    "a reward function in Python (rewards made on the CPU)": dict(
        reward_fn=lambda prompt, response: float(sorted(prompt) == list(response)),
    ),
    "dynamic sampling that draws more groups": dict(
        prompt_source="random", prompts_per_epoch=4, batch_filter="dynamic_sampling",
        dynamic_sampling_max_draws=2,
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_the_loop_runs_on_the_policys_device(tiny_config, case):
    config = tiny_config("lecture", num_epochs=2, eval_every=1, **CASES[case])
    policy = AccelPolicy(config.build_policy())
    assert policy_device(policy) == ACCEL
    with StrictDevices():
        history = training.run_policy_gradient(config, policy=policy)
    assert history.stop_reason == "max_epochs"
    assert len(history.evals()) == 3


def test_the_cpu_run_is_unchanged_by_the_wrapper(tiny_config):
    """The stand-in changes where tensors are said to be, not a number."""
    config = tiny_config("lecture", num_epochs=2, eval_every=1, num_steps_per_epoch=2)
    plain = training.run_policy_gradient(config)
    with StrictDevices():
        wrapped = training.run_policy_gradient(config, policy=AccelPolicy(config.build_policy()))
    keys = ("loss", "mean_reward", "grad_norm", "validation_exact_sort")
    assert [[r.get(k) for k in keys] for r in plain] == [[r.get(k) for k in keys] for r in wrapped]


def test_rollout_to_moves_every_tensor():
    r = Rollout(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 2, 4, dtype=torch.long),
                torch.ones(2, 2, 4), torch.zeros(2, 2), deltas=torch.zeros(2, 2),
                token_entropy=torch.zeros(2, 2, 4), metrics={"a": 1.0})  # fmt: skip
    with StrictDevices():
        moved = r.to(ACCEL)
        for name in ("prompts", "responses", "mask", "rewards", "deltas", "token_entropy"):
            assert isinstance(getattr(moved, name), OnAccel), name
    assert moved.old_log_probs is None and moved.metrics == {"a": 1.0}
