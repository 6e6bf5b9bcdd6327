"""pgrl_helpers.checks: the reference passes, a blank stub is "not implemented", and for
every checker typical planted mistakes are caught with a message naming the mistake."""

from __future__ import annotations

import math

import pytest
import torch

from pgrl_helpers import checks
from pgrl_helpers.advantages import compute_deltas
from pgrl_helpers.checks.losses import _reference_loop
from pgrl_helpers.exact import all_responses, exact_expected_reward
from pgrl_helpers.kl import kl_k1, kl_k3
from pgrl_helpers.losses import compute_loss
from pgrl_helpers.sampling import compute_log_probs
from pgrl_helpers.sort_task import compute_reward, sort_distance_reward_batch


def stub(*args, **kwargs):
    raise NotImplementedError()


def outcome(check, fn, seed=0) -> checks.CheckResult:
    return checks.run_check(check, fn, seed=seed)


def assert_fails(check, fn, *words, seed=0):
    result = outcome(check, fn, seed)
    assert result.status == checks.FAIL, result
    for word in words:
        assert word.lower() in result.message.lower(), result


# --------------------------------------------------------------------------------------------
# The machinery
# --------------------------------------------------------------------------------------------


def test_prints_exactly_one_line_for_pass_todo_and_fail(capsys):
    for fn, tag in (
        (lambda r: compute_deltas(r, "centered_rewards"), checks.PASS),
        (stub, checks.TODO),
        (lambda r: r, checks.FAIL),
    ):
        assert checks.check_centered_deltas(fn) is None
        lines = capsys.readouterr().out.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"{tag} centered_deltas: "), lines
    checks.check_centered_deltas(stub)
    assert "not implemented yet" in capsys.readouterr().out


def test_strict_is_silent_on_pass_and_raises_otherwise(capsys):
    checks.check_kl_k3(kl_k3, seed=1, strict=True)
    assert capsys.readouterr().out == ""
    with pytest.raises(AssertionError, match=r"\[TODO\] kl_k3: not implemented yet"):
        checks.check_kl_k3(stub, strict=True)
    with pytest.raises(AssertionError, match=r"\[FAIL\] kl_k3: .*k1"):
        checks.check_kl_k3(kl_k1, strict=True)


def test_other_exceptions_are_reported_not_raised():
    def broken(rewards):
        return rewards - rewards.mean(dim=-1)  # [4, 5] - [4]: does not broadcast

    assert_fails(checks.check_centered_deltas, broken, "raised RuntimeError")
    assert_fails(checks.check_centered_deltas, 42, "expected a function")
    assert_fails(checks.check_centered_deltas, lambda r: r.tolist(), "expected a torch.Tensor")


def test_in_place_changes_to_inputs_are_caught():
    def in_place(rewards):
        rewards -= rewards.mean(dim=-1, keepdim=True)
        return rewards

    assert_fails(checks.check_centered_deltas, in_place, "in place")


def test_no_reference_code_in_messages():
    for fn in (lambda p, r: (r == p[:, None]).sum(-1).float(), lambda p, r: r.sum(-1).float()):
        message = outcome(checks.check_sort_distance_reward, fn).message
        assert "sort(dim" not in message and "truth[" not in message and "return" not in message


# --------------------------------------------------------------------------------------------
# Reference passes, stub is TODO (every checker)
# --------------------------------------------------------------------------------------------


def _expected(model, prompts):
    return exact_expected_reward(model, prompts, "sort_distance_reward")


def _loo_baseline(rewards):
    return (rewards.sum(-1, keepdim=True) - rewards) / (rewards.shape[-1] - 1)


def _loop(*args, **kwargs):
    _reference_loop(*args, **kwargs)


REFERENCES = [
    (checks.check_sort_distance_reward, sort_distance_reward_batch),
    (checks.check_expected_reward, _expected),
    (checks.check_centered_deltas, lambda r: compute_deltas(r, "centered_rewards")),
    (checks.check_normalized_deltas, lambda r: compute_deltas(r, "normalized_rewards")),
    (checks.check_loo_deltas, lambda r: compute_deltas(r, "loo_rewards")),
    (checks.check_baseline, _loo_baseline),
    (checks.check_inner_loop, _loop),
    (
        checks.check_clipped_loss,
        lambda lp, old, d, eps=0.2: compute_loss(lp, d, "clipped", old_log_probs=old, epsilon=eps),
    ),
    (checks.check_kl_k3, kl_k3),
]


@pytest.mark.parametrize("check, reference", REFERENCES, ids=lambda x: getattr(x, "__name__", ""))
def test_reference_passes_and_stub_is_not_implemented(check, reference):
    for seed in (0, 1):
        assert outcome(check, reference, seed).passed, outcome(check, reference, seed)
    assert outcome(check, stub).status == checks.TODO


# --------------------------------------------------------------------------------------------
# Planted mistakes, one checker at a time
# --------------------------------------------------------------------------------------------


def test_reward_mistakes():
    check = checks.check_sort_distance_reward
    assert_fails(check, lambda p, r: (r == p[:, None]).sum(-1).float(), "prompt itself")
    desc = lambda p, r: (r == p.sort(-1, descending=True).values[:, None]).sum(-1).float()  # noqa: E731
    assert_fails(check, desc, "descending")
    assert_fails(check, lambda p, r: r == p.sort(-1).values[:, None], "one value per token")
    assert_fails(check, lambda p, r: (r == p.sort(-1).values[:, None]).sum(-1), "float")
    exact_only = lambda p, r: (r == p.sort(-1).values[:, None]).all(-1).float()  # noqa: E731
    assert_fails(check, exact_only, "exact sorts only")


def test_expected_reward_mistakes():
    check = checks.check_expected_reward

    def parts(model, prompts):
        responses = all_responses(3, 3)[None].expand(prompts.shape[0], -1, -1)
        token = compute_log_probs(model, prompts, responses)
        return token, compute_reward(prompts, responses, "sort_distance_reward")

    def log_weights(model, prompts):
        token, rewards = parts(model, prompts)
        return (token.sum(-1) * rewards).sum(-1)

    def mean_over_pos(model, prompts):
        token, rewards = parts(model, prompts)
        return (token.mean(-1).exp() * rewards).sum(-1)

    assert_fails(check, log_weights, "log-probabilities")
    assert_fails(check, mean_over_pos, "sum over pos")
    assert_fails(check, lambda m, p: _expected(m, p).detach(), "no gradient")
    assert_fails(check, lambda m, p: _expected(m, p).mean(), "one number")
    assert_fails(check, lambda m, p: -_expected(m, p), "wrong sign")


def test_delta_mistakes():
    centered, normalized, loo = (
        checks.check_centered_deltas,
        checks.check_normalized_deltas,
        checks.check_loo_deltas,
    )
    assert_fails(centered, lambda r: r - r.mean(0, keepdim=True), "wrong axis")
    assert_fails(centered, lambda r: r - r.mean(), "whole batch")
    assert_fails(centered, lambda r: r.mean(-1, keepdim=True) - r, "wrong sign")

    def biased(r, eps=1e-6):
        return (r - r.mean(-1, keepdim=True)) / (r.std(-1, keepdim=True, unbiased=False) + eps)

    result = outcome(normalized, biased)
    assert result.status == checks.FAIL and "biased" in result.message
    assert f"{math.sqrt(5 / 4):.3f}" in result.message and "sqrt(G/(G-1))" in result.message
    no_eps = lambda r: (r - r.mean(-1, keepdim=True)) / r.std(-1, keepdim=True)  # noqa: E731
    assert_fails(normalized, no_eps, "tie", "eps")
    not_centred = lambda r: r / (r.std(-1, keepdim=True) + 1e-6)  # noqa: E731
    assert_fails(normalized, not_centred, "centre them")
    assert_fails(loo, lambda r: compute_deltas(r, "centered_rewards"), "includes the response")
    by_g = lambda r: r - (r.sum(-1, keepdim=True) - r) / r.shape[-1]  # noqa: E731
    assert_fails(loo, by_g, "G - 1")


def test_baseline_mistakes():
    check = checks.check_baseline
    self_mean = lambda r: r.mean(-1, keepdim=True).expand_as(r)  # noqa: E731
    assert_fails(check, self_mean, "biased", "own reward")
    assert_fails(check, lambda r: r, "biased")
    assert_fails(check, torch.zeros_like, "variance only changes")
    assert_fails(check, lambda r: r.mean(-1), "one b_i per sample")
    assert outcome(check, torch.ones_like).passed, "a constant baseline is unbiased"


def test_baseline_variance_table(capsys):
    table = checks.baseline_variance_table({"none": None, "loo": _loo_baseline, "stub": stub})
    out = capsys.readouterr().out
    assert "stub" in out and "not implemented yet" in out and "stub" not in table
    assert table["none"]["ratio"] == pytest.approx(1.0)
    assert table["loo"]["ratio"] > 2 and abs(table["loo"]["bias"]) < 0.05


def _loop_variant(mode):
    def loop(model, prompts, responses, deltas, num_steps=3, learning_rate=0.5):
        optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate)
        with torch.no_grad():
            old = compute_log_probs(model, prompts, responses)
        for _ in range(num_steps):
            if mode == "unfrozen":
                old = compute_log_probs(model, prompts, responses)
            elif mode == "refresh":
                with torch.no_grad():
                    old = compute_log_probs(model, prompts, responses)
            log_probs = compute_log_probs(model, prompts, responses)
            loss = -(torch.exp(log_probs - old) * deltas[:, :, None])
            loss = loss.sum() if mode == "sum" else loss.mean()
            if mode == "sign":
                loss = -loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    return loop


def test_inner_loop_mistakes():
    check = checks.check_inner_loop
    assert outcome(check, _loop_variant("correct")).passed
    assert_fails(check, _loop_variant("unfrozen"), "did not move", "no_grad")
    assert_fails(check, _loop_variant("refresh"), "refreshed at every step")
    assert_fails(check, _loop_variant("sign"), "wrong sign")
    assert_fails(check, _loop_variant("sum"), ".mean()")


def test_clipped_loss_mistakes():
    check = checks.check_clipped_loss

    def variant(kind):
        def loss(lp, old, d, eps=0.2):
            ratio = torch.exp(lp - old) if kind != "logs" else lp / old
            d = d[:, :, None]
            pair = (ratio * d, ratio.clamp(1 - eps, 1 + eps) * d)
            if kind == "max":
                return -torch.maximum(*pair).mean()
            if kind == "noclip":
                return -pair[0].mean()
            per_token = -torch.minimum(*pair)
            if kind == "sign":
                return -per_token.mean()
            if kind == "sum":
                return per_token.sum()
            if kind == "detach":
                return per_token.mean().detach()
            return per_token.mean()

        return loss

    assert outcome(check, variant("correct")).passed
    assert_fails(check, variant("sign"), "wrong sign")
    assert_fails(check, variant("max"), "max", "min")
    assert_fails(check, variant("logs"), "not log_probs / old_log_probs")
    assert_fails(check, variant("noclip"), "forgot to clip")
    assert_fails(check, variant("sum"), "summed")
    assert_fails(check, variant("detach"), "no gradient")
    assert_fails(check, lambda lp, old, d, eps=0.2: -(torch.exp(lp - old) * d), "raised")


def test_kl_mistakes():
    check = checks.check_kl_k3
    assert_fails(check, lambda lp, ref: kl_k3(ref, lp), "wrong KL direction")
    assert_fails(check, kl_k1, "k1")

    def no_minus_one(lp, ref):
        return (ref - lp).exp() - (ref - lp)

    assert_fails(check, no_minus_one, "-1")
    assert_fails(check, lambda lp, ref: kl_k3(lp, ref).sum(-1), "one value per token")


# --------------------------------------------------------------------------------------------
# The training exercise (runs are short; the task checks happen before any training)
# --------------------------------------------------------------------------------------------


def test_training_config_mistakes():
    training = pytest.importorskip("pgrl_helpers.training")
    TrainConfig = training.TrainConfig
    check = checks.check_training_config
    assert outcome(check, stub).status == checks.TODO
    assert_fails(check, lambda: {"model": "transformer"}, "expected a TrainConfig")
    task = checks.TRAINING_TASK
    assert_fails(check, lambda: TrainConfig(**(task | {"vocab_size": 7})), "fixed", "vocab_size")
    big = TrainConfig(**task, prompt_source="random", prompts_per_epoch=64, num_epochs=100)
    assert_fails(check, lambda: big, "over budget", "64,000")
    lecture = TrainConfig(**task, prompt_source="random", num_epochs=2, num_steps_per_epoch=1)
    assert_fails(check, lambda: lecture, "the target is 80%", "transformer")
