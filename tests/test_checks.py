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
from pgrl_helpers.gae import compute_gae
from pgrl_helpers.kl import kl_k1, kl_k3
from pgrl_helpers.losses import compute_loss, compute_per_token_loss, sequence_log_ratio
from pgrl_helpers.masking import aggregate_loss, masked_mean
from pgrl_helpers.offpolicy import corrected_weights, effective_sample_size, importance_weights
from pgrl_helpers.passk import pass_at_k
from pgrl_helpers.sampling import compute_log_probs
from pgrl_helpers.sort_task import compute_reward, sort_distance_reward_batch
from pgrl_helpers.tool_task import GRADER_SLOT, tool_mask


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
    checks.check_kl_k3(lambda lp, ref: kl_k3(lp, ref), seed=1, strict=True)
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


def test_the_packages_own_function_fails_visibly_and_when_graded(capsys):
    """The rule in every notebook's header: a function imported from pgrl_helpers is not an
    answer. The visible check refuses it with the graded check's message (issue 51: it used
    to show [PASS] with a note, then score 0)."""
    for check, own in (
        (checks.check_masked_mean, masked_mean),
        (checks.check_pass_at_k, pass_at_k),
        (checks.check_kl_k3, kl_k3),
        (checks.check_sort_distance_reward, sort_distance_reward_batch),
    ):
        check(own)
        line = capsys.readouterr().out.strip()
        assert line.startswith(checks.FAIL) and "the package's own implementation" in line, line
        assert f"{own.__module__}.{own.__qualname__}" in line
        result = outcome(check, own)
        assert result.status == checks.FAIL and "your own code" in result.message, result
        assert line == str(result), "the visible and the graded message are the same"
    # a wrapper written in the notebook is not recognised: the header states the rule, an
    # instructor reading the code enforces it
    assert outcome(checks.check_pass_at_k, lambda n, c, k: pass_at_k(n, c, k)).passed


def test_a_visible_pass_means_the_graded_check_passes(capsys):
    """An answer fitted to the visible inputs (issue 51: assignment 8's exact visible numbers
    hard-coded) fails the visible check already, on the graded check's inputs, and says so."""
    visible = {
        k: sum(pass_at_k(10, int(c), k) for c in checks.passk._correct_matrix(0).sum(1)) / 6
        for k in (1, 3, 7)
    }
    hard_coded = lambda correct, k: visible[k]  # noqa: E731
    assert outcome(checks.check_mean_pass_at_k, hard_coded, seed=0).passed  # fitted to seed 0
    assert not outcome(checks.check_mean_pass_at_k, hard_coded, seed=1).passed
    checks.check_mean_pass_at_k(hard_coded)
    line = capsys.readouterr().out.strip()
    assert line.startswith("[FAIL] mean_pass_at_k: k = 1: expected"), line
    assert "on the graded check's inputs, seed=1; the visible inputs pass" in line
    # every function checker runs the graded inputs when called visibly: a right answer
    # still prints one [PASS] line, and a strict call is the check itself
    checks.check_mean_pass_at_k(lambda correct, k: ref_mean_passk(correct, k))
    assert capsys.readouterr().out.startswith("[PASS] mean_pass_at_k:")
    names = [n for n in dir(checks) if n.startswith("check_")]
    wrapped = [n for n in names if hasattr(getattr(checks, n), "__wrapped__")]
    assert set(names) - set(wrapped) == {
        "check_training_config",
        "check_diagnosis",
        "check_fix",
    }, "the checks that re-run training say which seeds they ran instead"


def test_messages_print_enough_digits_to_show_the_difference():
    """Issue 51: an answer rounded to 4 decimals was told "expected 0.6429, got 0.6429"."""
    import re

    rounded = lambda n, c, k: round(pass_at_k(n, c, k), 4)  # noqa: E731
    for check, fn in (
        (checks.check_pass_at_k, rounded),
        (checks.check_mean_pass_at_k, lambda correct, k: round(ref_mean_passk(correct, k), 4)),
    ):
        result = outcome(check, fn)
        assert result.status == checks.FAIL, result
        want, got = re.search(r"expected ([-0-9.e]+), got ([-0-9.e]+)", result.message).groups()
        assert want != got, result.message
    from pgrl_helpers.checks._core import _expected_got

    assert _expected_got(0.642857142857, 0.6429) == "expected 0.64286, got 0.64290"
    assert _expected_got(0.5, 0.25) == "expected 0.5000, got 0.2500"
    assert _expected_got(1 / 3, 1 / 3 + 1e-15).startswith("expected 0.333")


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
    (checks.check_sort_distance_reward, lambda p, r: sort_distance_reward_batch(p, r)),
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
    (checks.check_kl_k3, lambda lp, ref: kl_k3(lp, ref)),
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
    std_batch = lambda r: (r - r.mean(-1, keepdim=True)) / (r.std(0, keepdim=True) + 1e-6)  # noqa: E731
    assert_fails(normalized, std_batch, "std over the wrong axis", "dim=0")
    std_all = lambda r: (r - r.mean(-1, keepdim=True)) / (r.std() + 1e-6)  # noqa: E731
    assert_fails(normalized, std_all, "std of the whole batch")
    both_batch = lambda r: (r - r.mean(0, keepdim=True)) / (r.std(0, keepdim=True) + 1e-6)  # noqa: E731
    assert_fails(normalized, both_batch, "mean and std over the wrong axis")
    whole = lambda r: (r - r.mean()) / (r.std() + 1e-6)  # noqa: E731
    assert_fails(normalized, whole, "mean and std of the whole batch")
    var = lambda r: (r - r.mean(-1, keepdim=True)) / (r.var(-1, keepdim=True) + 1e-6)  # noqa: E731
    assert_fails(normalized, var, "variance")
    assert_fails(normalized, lambda r: r - r.mean(-1, keepdim=True), "did not divide")
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
    assert_fails(check, lambda lp, ref: kl_k1(lp, ref), "k1")
    assert_fails(check, lambda lp, ref: -kl_k1(lp, ref), "log r", "wrong sign")
    assert_fails(check, lambda lp, ref: (ref - lp) ** 2 / 2, "k2")

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
    assert_fails(check, lambda: lecture, "never reached 80%", "transformer")
    # issue 39, minor 11: the task fields are set from checks.TRAINING_TASK, and it says so
    assert_fails(check, lambda: TrainConfig(), "must be", "TrainConfig(**checks.TRAINING_TASK")
    short = dict(
        task,
        model="transformer",
        embedding_dim=16,
        prompt_source="random",
        num_epochs=2,
        num_steps_per_epoch=1,
    )
    assert_fails(check, lambda: TrainConfig(**short, deltas_mode="rewards"), "no baseline")
    assert_fails(check, lambda: TrainConfig(**short, num_responses=2), "G = 2", "tie")
    assert_fails(check, lambda: TrainConfig(**short, learning_rate=0.1), "collapse")
    assert_fails(check, lambda: TrainConfig(**short), "learns too slowly")
    # the lecture's 3 prompts do not exist at this task's size: validate() names them
    three = dict(short, prompt_source="lecture")
    assert_fails(check, lambda: TrainConfig(**three), "invalid", "prompt_source 'lecture'")
    lecture_model = dict(short, model="lecture")
    assert_fails(check, lambda: TrainConfig(**lecture_model), "cannot represent sorting")


def test_training_config_stopped_on_a_lucky_reading_is_told_so(monkeypatch):
    """A run that stopped at the validation target with test below TRAINING_TARGET is told it
    stopped at a lucky reading (not 'train longer'). The outcome is planted in the check's
    cache: finding such a seed would cost minutes of training."""
    from dataclasses import replace

    from pgrl_helpers.checks import training
    from pgrl_helpers.config import TrainConfig

    config = TrainConfig(
        **checks.TRAINING_TASK,
        model="transformer",
        embedding_dim=16,
        prompt_source="random",
        num_epochs=2,
    )
    run = replace(config, target_validation_exact_sort=checks.TRAINING_STOP, progress=False)
    monkeypatch.setitem(training._training_cache, repr(run), (0.35, 9_000, "target", 0.8))
    assert_fails(checks.check_training_config, lambda: config, "only 35%", "lucky")
    monkeypatch.setitem(training._training_cache, repr(run), (0.5, 9_000, "target", 0.8))
    result = outcome(checks.check_training_config, lambda: config)
    assert result.passed, result


# --- assignments 05-08 ---
# Checkers of assignments 05-08: the reference passes on two seeds, a blank stub is "not
# implemented", and every mistake a checker names is planted and caught with that message.


# --------------------------------------------------------------------------------------------
# Reference implementations (from the package) pass; stubs are TODO
# --------------------------------------------------------------------------------------------


def ref_masked_mean(tensor, mask, dim=None):
    return masked_mean(tensor, mask, dim=dim)


def ref_aggregate(loss, mask, aggregation, max_length):
    return aggregate_loss(loss, mask, aggregation, normalize_constant=float(max_length))


def ref_td(rewards, values, mask, gamma):
    return compute_gae(rewards, values, mask, gamma, 0.0)[0]


def ref_gae(rewards, values, mask, gamma, lam):
    return compute_gae(rewards, values, mask, gamma, lam)[0]


def ref_ratio(lp, old, mask):
    return sequence_log_ratio(lp, old, mask).squeeze(-1).exp()


def ref_cispo(lp, old, deltas, lo, hi):
    return compute_per_token_loss(lp, deltas, "cispo", old, lo, epsilon_high=hi).mean()


def ref_tis(train, sampler, mask, cap):
    return corrected_weights(importance_weights(train, sampler, mask), "tis", cap)


def ref_mean_passk(correct, k):
    n = correct.shape[1]
    return sum(pass_at_k(n, int(c), k) for c in correct.sum(1)) / correct.shape[0]


REFERENCES_05_08 = [
    (checks.check_masked_mean, ref_masked_mean),
    (checks.check_aggregate_loss, ref_aggregate),
    (checks.check_td_errors, ref_td),
    (checks.check_gae, ref_gae),
    (checks.check_sequence_ratio, ref_ratio),
    (checks.check_cispo_loss, ref_cispo),
    (checks.check_truncated_weights, ref_tis),
    (checks.check_effective_sample_size, lambda w: effective_sample_size(w)),
    (checks.check_pass_at_k, lambda n, c, k: pass_at_k(n, c, k)),
    (checks.check_mean_pass_at_k, ref_mean_passk),
]


@pytest.mark.parametrize(
    "check, reference", REFERENCES_05_08, ids=lambda x: getattr(x, "__name__", "")
)
def test_reference_passes_and_stub_is_not_implemented_05_08(check, reference):
    for seed in (0, 1):
        assert outcome(check, reference, seed).passed, outcome(check, reference, seed)
    assert outcome(check, stub).status == checks.TODO


# --------------------------------------------------------------------------------------------
# Masks and aggregation (assignment 05)
# --------------------------------------------------------------------------------------------


def test_masked_mean_mistakes():
    check = checks.check_masked_mean

    def times_mask(t, m, dim=None):  # right on finite padding, leaks a NaN
        s = (t * m).sum() if dim is None else (t * m).sum(dim)
        c = m.sum() if dim is None else m.sum(dim)
        if (c == 0).any():
            raise ValueError("empty")
        return s / c

    def no_raise(t, m, dim=None):
        if not m.any():
            return torch.tensor(float("nan"))
        return masked_mean(t, m, dim=dim)

    assert_fails(check, lambda t, m, dim=None: t.mean() if dim is None else t.mean(dim), "padding")
    zeroed = lambda t, m, dim=None: (t * m).mean() if dim is None else (t * m).mean(dim)  # noqa: E731
    assert_fails(check, zeroed, "averaged over padding", "mask.sum()")

    def per_seq(t, m, dim=None):
        return masked_mean(t, m, -1).mean() if dim is None else masked_mean(t, m, dim)

    assert_fails(check, per_seq, "per-sequence instead of per-token")
    summed = lambda t, m, dim=None: (t * m).sum() if dim is None else (t * m).sum(dim)  # noqa: E731
    assert_fails(check, summed, "masked sum")
    assert_fails(check, times_mask, "nan", "torch.where")
    assert_fails(check, no_raise, "all-zero mask", "ValueError")
    assert_fails(check, lambda t, m, dim=None: masked_mean(t, m), "dim=-1", "shape")

    def only_whole_mask_raises(t, m, dim=None):  # NaN for an empty row (issue 39)
        if not m.any():
            raise ValueError("empty mask")
        real = m > 0
        total = torch.where(real, t, torch.zeros_like(t))
        if dim is None:
            return total.sum() / real.sum()
        return total.sum(dim) / real.sum(dim)

    assert_fails(check, only_whole_mask_raises, "selects nothing", "ValueError", "every slice")

    def float64_loop(t, m, dim=None):  # another correct implementation: loops, float64
        if dim is None:
            picked = [float(x) for x, keep in zip(t.flatten(), m.flatten()) if keep > 0]
            if not picked:
                raise ValueError("empty")
            return torch.tensor(sum(picked) / len(picked), dtype=torch.float64)
        rows = []
        for x_row, m_row in zip(t.reshape(-1, t.shape[-1]), m.reshape(-1, m.shape[-1])):
            picked = [float(x) for x, keep in zip(x_row, m_row) if keep > 0]
            if not picked:
                raise ValueError("empty row")
            rows.append(sum(picked) / len(picked))
        return torch.tensor(rows, dtype=torch.float64).reshape(t.shape[:-1])

    assert outcome(check, float64_loop).passed
    assert outcome(check, float64_loop, seed=1).passed


def test_aggregate_loss_mistakes():
    check = checks.check_aggregate_loss

    def variant(wrong: dict):
        def agg(loss, mask, aggregation, max_length):
            real = mask > 0
            zeroed = torch.where(real, loss, torch.zeros_like(loss))
            n = mask.shape[0] * mask.shape[1]
            kind = wrong.get(aggregation, aggregation)
            if kind == "plain":
                return loss.mean()
            if kind == "sequence_mean":
                return masked_mean(loss, mask, dim=-1).mean()
            if kind == "token_mean":
                return zeroed.sum() / mask.sum()
            if kind == "no_count":
                return zeroed.sum() / max_length
            if kind == "detach":
                return (zeroed.sum() / mask.sum()).detach()
            if kind == "per_prompt":  # each prompt's token mean, then the mean over prompts
                return (zeroed.sum((1, 2)) / mask.sum((1, 2))).mean()
            if kind == "times_mask":  # right on finite padding, 0 x NaN leaks
                multiplied = loss * mask
                if aggregation == "sequence_mean":
                    return (multiplied.sum(-1) / mask.sum(-1)).mean()
                if aggregation == "token_mean":
                    return multiplied.sum() / mask.sum()
                return multiplied.sum() / (max_length * n)
            if kind == "sum":
                return zeroed.sum()
            if kind == "own_length":
                return (zeroed.sum(-1) / mask.sum(-1)).mean()
            if kind == "zeroed":
                return zeroed.mean()
            return zeroed.sum() / (max_length * n)

        return agg

    assert outcome(check, variant({})).passed
    assert_fails(check, variant({"token_mean": "plain"}), "token_mean", "averaged over padding")
    assert_fails(
        check, variant({"token_mean": "sequence_mean"}), "per-sequence instead of per-token"
    )
    assert_fails(check, variant({"sequence_mean": "token_mean"}), "per-token instead of")
    assert_fails(check, variant({"constant_normalizer": "sequence_mean"}), "its own length")
    assert_fails(check, variant({"constant_normalizer": "no_count"}), "number of responses")
    assert_fails(check, variant({"token_mean": "detach"}), "no gradient")
    # issue 39: the prompts hold different token counts, and the padding holds NaN
    assert_fails(check, variant({"token_mean": "per_prompt"}), "per-prompt token mean", "[10, 7]")
    for aggregation in ("sequence_mean", "token_mean", "constant_normalizer"):
        times = variant({aggregation: "times_mask"})
        assert_fails(check, times, aggregation, "NaN", "torch.where")
    assert_fails(check, variant({"token_mean": "zeroed"}), "zeroed the padding")
    assert_fails(check, variant({"sequence_mean": "plain"}), "sequence_mean", "padding")
    assert_fails(check, variant({"token_mean": "sum"}), "masked sum")

    def float64_loops(loss, mask, aggregation, max_length):  # correct, another style
        per_response = []
        for b in range(mask.shape[0]):
            for i in range(mask.shape[1]):
                real = mask[b, i] > 0
                per_response.append((loss[b, i][real].double().sum(), int(real.sum())))
        if aggregation == "sequence_mean":
            return sum(t / n for t, n in per_response) / len(per_response)
        if aggregation == "token_mean":
            return sum(t for t, _ in per_response) / sum(n for _, n in per_response)
        return sum(t for t, _ in per_response) / (max_length * len(per_response))

    for seed in (0, 1):
        assert outcome(check, float64_loops, seed).passed, outcome(check, float64_loops, seed)


# --------------------------------------------------------------------------------------------
# GAE (assignment 06)
# --------------------------------------------------------------------------------------------


def _shift(x):
    return torch.cat([x[..., 1:], torch.zeros_like(x[..., :1])], dim=-1)


def _td_variant(kind):
    def td(rewards, values, mask, gamma):
        v = values if kind == "bootstrap" else values * mask
        g = 1.0 if kind == "no_gamma" else gamma
        out = rewards * mask + g * _shift(v) - values * mask
        if kind == "sign":
            out = -out
        return out if kind == "unmasked" else out * mask

    return td


def test_td_error_mistakes():
    check = checks.check_td_errors
    assert outcome(check, _td_variant("correct")).passed
    assert_fails(check, _td_variant("bootstrap"), "bootstrapping past the last real token")
    assert_fails(check, _td_variant("sign"), "wrong sign")
    assert_fails(check, _td_variant("no_gamma"), "gamma")
    assert_fails(check, lambda r, v, m, g: r + g * _shift(v) - v, "padding slots must be 0")

    def padding_not_zeroed(rewards, values, mask, gamma):  # right on real tokens only
        out = _td_variant("correct")(rewards, values, mask, gamma)
        return torch.where(mask > 0, out, torch.full_like(out, 0.3))

    assert_fails(check, padding_not_zeroed, "right on every real token", "padding slots must be 0")

    def wrong_shift(r, v, m, g):  # V(s_{t-1}) instead of V(s_{t+1})
        return (r + g * torch.cat([v[..., :1] * 0, v[..., :-1]], -1) - v) * m

    assert_fails(check, wrong_shift, "wrong way")


def _gae_variant(kind):
    def gae(rewards, values, mask, gamma, lam):
        v = values if kind == "bootstrap" else values * mask
        td = (rewards * mask + gamma * _shift(v) - values * mask) * mask
        factor = (gamma * lam) ** 2 if kind == "twice" else gamma * lam
        out = torch.zeros_like(td)
        running = torch.zeros_like(td[..., 0])
        order = range(td.shape[-1]) if kind == "forward" else reversed(range(td.shape[-1]))
        if kind in ("lambda_only", "gamma_only"):
            factor = lam if kind == "lambda_only" else gamma
        for t in order:
            if kind == "store_before":
                out[..., t] = running
            running = td[..., t] + factor * running
            if kind != "store_before":
                out[..., t] = running
        return out if kind == "unmasked" else out * mask

    return gae


def test_gae_mistakes():
    check = checks.check_gae
    assert outcome(check, _gae_variant("correct")).passed
    assert_fails(check, _gae_variant("bootstrap"), "bootstrapping past the last real token")
    assert_fails(check, _gae_variant("twice"), "applied twice")
    assert_fails(check, _gae_variant("forward"), "reversed recursion")
    assert_fails(check, lambda r, v, m, g, lam: ref_gae(r, v, m, g, lam)[..., :-1], "shape")
    assert_fails(check, _gae_variant("store_before"), "off by one step")
    assert_fails(check, _gae_variant("lambda_only"), "lambda only")
    assert_fails(check, _gae_variant("gamma_only"), "gamma only")
    padded = lambda r, v, m, g, lam: torch.where(m > 0, ref_gae(r, v, m, g, lam), 0.5)  # noqa: E731
    assert_fails(check, padded, "right on every real token", "padding slots must be 0")


# --------------------------------------------------------------------------------------------
# Clip family and off-policy (assignment 07)
# --------------------------------------------------------------------------------------------


def test_sequence_ratio_mistakes():
    check = checks.check_sequence_ratio

    def masked_diff(lp, old, mask):
        return torch.where(mask > 0, lp - old, torch.zeros_like(lp))

    assert_fails(
        check, lambda lp, o, m: masked_diff(lp, o, m).sum(-1).exp(), "not length-normalised"
    )
    assert_fails(
        check, lambda lp, o, m: (masked_diff(lp, o, m).sum(-1) / m.shape[-1]).exp(), "padding"
    )
    arith = lambda lp, o, m: (torch.exp(lp - o) * m).sum(-1) / m.sum(-1)  # noqa: E731
    assert_fails(check, arith, "geometric mean")
    assert_fails(check, lambda lp, o, m: torch.exp(lp - o) * m, "one ratio per response")
    assert_fails(check, lambda lp, o, m: ref_ratio(lp, o, m).detach(), "no gradient")
    assert_fails(check, lambda lp, o, m: (lp - o).mean(-1).exp(), "padding entered the mean")
    assert_fails(check, lambda lp, o, m: 1 / ref_ratio(lp, o, m), "inverted")
    # issue 39: right on finite padding, NaN with -inf in the padding of log_probs
    times_mask = lambda lp, o, m: (((lp - o) * m).sum(-1) / m.sum(-1)).exp()  # noqa: E731
    assert_fails(check, times_mask, "padding may hold anything", "-inf", "torch.where")

    def boolean_index_loop(lp, old, mask):  # correct, another style: indexing, float64
        rows = []
        for b in range(mask.shape[0]):
            for i in range(mask.shape[1]):
                real = mask[b, i] > 0
                rows.append((lp[b, i][real].double() - old[b, i][real].double()).mean().exp())
        return torch.stack(rows).reshape(mask.shape[:2])

    for seed in (0, 1):
        assert outcome(check, boolean_index_loop, seed).passed


def test_cispo_mistakes():
    check = checks.check_cispo_loss

    def variant(kind):
        def loss(lp, old, deltas, lo, hi):
            d = deltas[:, :, None]
            ratio = torch.exp(lp - old)
            top = lo if kind == "symmetric" else hi
            weight = ratio.clamp(1 - lo, 1 + top)
            if kind == "no_lower":
                weight = ratio.clamp(max=1 + hi)
            if kind == "no_upper":
                weight = ratio.clamp(min=1 - lo)
            if kind == "no_clip":
                weight = ratio
            if kind != "inside":
                weight = weight.detach()
            if kind == "ppo":
                return -torch.minimum(ratio * d, ratio.clamp(1 - lo, 1 + hi) * d).mean()
            per_token = -weight * d * lp
            if kind == "sign":
                return -per_token.mean()
            return per_token.sum() if kind == "sum" else per_token.mean()

        return loss

    assert outcome(check, variant("correct")).passed
    assert_fails(check, variant("inside"), "clip is inside the gradient", "detach")
    assert_fails(check, variant("ppo"), "PPO's clipped loss")
    assert_fails(check, variant("no_clip"), "forgot to clip")
    assert_fails(check, variant("symmetric"), "eps_high")
    assert_fails(check, variant("sign"), "wrong sign")
    assert_fails(check, variant("sum"), "summed")
    assert_fails(check, variant("no_lower"), "lower clip edge is missing")
    assert_fails(check, variant("no_upper"), "upper clip edge is missing")

    def no_log(lp, old, d, lo, hi):  # -clip(r) * delta: the log_probs factor left out
        return (-(torch.exp(lp - old).clamp(1 - lo, 1 + hi)) * d[:, :, None]).mean()

    assert_fails(check, no_log, "LOG_PROBS")


def test_truncated_weight_mistakes():
    check = checks.check_truncated_weights
    assert_fails(check, lambda t, s, m, c: torch.exp(s - t).clamp(max=c), "wrong policy pair")
    assert_fails(check, lambda t, s, m, c: torch.exp((t - s).clamp(max=c)), "before the exp")
    assert_fails(check, lambda t, s, m, c: torch.exp(t - s), "did not truncate")
    mis = lambda t, s, m, c: corrected_weights(importance_weights(t, s, m), "mis", c)  # noqa: E731
    assert_fails(check, mis, "masked IS")
    assert_fails(check, lambda t, s, m, c: ref_tis(t, s, m, c)[..., 0], "one weight per token")
    # padding may hold anything: only real tokens are compared
    padded = lambda t, s, m, c: torch.where(m > 0, ref_tis(t, s, m, c), 7.0)  # noqa: E731
    assert outcome(check, padded).passed


def test_ess_mistakes():
    check = checks.check_effective_sample_size
    assert_fails(check, lambda w: (w**2).sum() / w.sum() ** 2, "inverted")
    assert_fails(check, lambda w: effective_sample_size(w) / w.numel(), "ess_fraction")
    assert_fails(check, lambda w: (w**2).sum() / w.sum(), "square the SUM")
    assert_fails(check, lambda w: w.sum() / (w**2).sum(), "wrong numerator", "SQUARE of the sum")
    assert_fails(check, lambda w: (w**2).sum() / (w**2).sum(), "wrong numerator")
    assert_fails(check, lambda w: w**2, "one number")
    assert outcome(check, lambda w: torch.tensor(effective_sample_size(w))).passed


# --------------------------------------------------------------------------------------------
# pass@k (assignment 08)
# --------------------------------------------------------------------------------------------


def test_brute_force_is_the_combinatorial_formula():
    for n, c, k in ((5, 2, 2), (8, 3, 4), (6, 0, 3), (6, 5, 2)):
        want = 1 - math.comb(n - c, k) / math.comb(n, k)
        assert checks.brute_force_pass_at_k(n, c, k) == pytest.approx(want, abs=1e-12)


def test_pass_at_k_mistakes():
    check = checks.check_pass_at_k
    assert_fails(check, lambda n, c, k: 1 - (1 - c / n) ** k, "biased estimator", "replacement")
    assert_fails(check, lambda n, c, k: math.comb(n - c, k) / math.comb(n, k), "all k fail")
    assert_fails(check, lambda n, c, k: c / n, "pass@1")

    def wrong_edge(n, c, k):  # right wherever n - c >= k, 0 where every k-subset passes
        return 0.0 if n - c < k else 1 - math.comb(n - c, k) / math.comb(n, k)

    result = outcome(check, wrong_edge)
    assert result.status == checks.FAIL and "n - c < k" in result.message, result
    assert "C(n - c, k) = 0 and pass@k = 1" in result.message
    assert "all k fail" not in result.message, "issue 51: it named the wrong mistake"

    def factorials(n, c, k):  # right for small n, overflows floats at n = 200
        f = lambda x: float(math.factorial(x))  # noqa: E731
        if n - c < k:
            return 1.0
        return 1 - (f(n - c) / (f(k) * f(n - c - k))) / (f(n) / (f(k) * f(n - k)))

    assert_fails(check, factorials, "n = 200", "factorials", "math.comb")


def test_mean_pass_at_k_mistakes():
    check = checks.check_mean_pass_at_k

    def from_mean_count(correct, k):
        n = correct.shape[1]
        return pass_at_k(n, round(correct.sum(1).float().mean().item()), k)

    def biased(correct, k):
        n = correct.shape[1]
        return sum(1 - (1 - int(c) / n) ** k for c in correct.sum(1)) / correct.shape[0]

    result = outcome(check, from_mean_count)
    assert result.status == checks.FAIL and "rounded" in result.message, result
    assert "only the rounding is wrong at k = 1" in result.message, "pass@1 is linear in c"

    def from_mean_count_k3(correct, k):  # right at k = 1 (no rounding), wrong at k = 3
        n = correct.shape[1]
        if k == 1:
            return ref_mean_passk(correct, k)
        return pass_at_k(n, round(correct.sum(1).float().mean().item()), k)

    assert_fails(check, from_mean_count_k3, "mean count", "not linear")
    assert_fails(check, biased, "biased")
    assert_fails(check, lambda correct, k: correct.any(1).float().mean(), "pass@n")
    first_k = lambda correct, k: correct[:, :k].any(1).float().mean()  # noqa: E731
    result = outcome(check, first_k)
    assert result.status == checks.FAIL and "FIRST k samples" in result.message, result
    assert "mean count" not in result.message


# --------------------------------------------------------------------------------------------
# Multi-turn masks (assignment 10)
# --------------------------------------------------------------------------------------------


def _multi_turn_variant(kind):
    def loss(log_probs, deltas):
        mask = tool_mask(tuple(deltas.shape), mask_tool_tokens=kind != "leak").bool()
        if kind == "grader_leaks":
            mask[..., GRADER_SLOT] = True
        per_token = -deltas[:, :, None] * log_probs
        zeroed = torch.where(mask, per_token, torch.zeros_like(per_token))
        if kind == "all_slots":
            return zeroed.sum() / per_token.numel()
        if kind == "sign":
            return -zeroed.sum() / mask.sum()
        return zeroed.sum() / mask.sum()

    return loss


def test_multi_turn_loss_reference_and_mistakes():
    check = checks.check_multi_turn_loss
    for seed in (0, 1):
        assert outcome(check, _multi_turn_variant("correct"), seed).passed
    assert outcome(check, stub).status == checks.TODO
    assert_fails(check, _multi_turn_variant("leak"), "tool token leaks", "2 (written by the tool)")
    assert_fails(check, _multi_turn_variant("grader_leaks"), "5 (written by the grader)")
    assert_fails(check, _multi_turn_variant("all_slots"), "still in the count")
    assert_fails(check, _multi_turn_variant("sign"), "wrong sign")
    assert_fails(check, lambda lp, d: (-d[:, :, None] * lp).mean().detach(), "no gradient")


# --------------------------------------------------------------------------------------------
# Short tracebacks in nbgrader's feedback
# --------------------------------------------------------------------------------------------


def test_every_checker_frame_is_hidden_from_ipython_tracebacks():
    """A failed hidden check (strict=True) shows its one-line message; IPython skips every
    frame that sets __tracebackhide__, so the checker's own code stays out of the feedback."""
    names = sorted(n for n in dir(checks) if n.startswith("check_"))
    assert len(names) >= 20
    for name in names:
        check = getattr(checks, name)
        args = {"check_diagnosis": ("A",), "check_fix": ("A", stub)}.get(name, ())
        with pytest.raises(AssertionError) as info:
            check(stub, *args, strict=True)
        frames = []
        tb = info.value.__traceback__
        while tb is not None:
            frames.append(tb.tb_frame)
            tb = tb.tb_next
        shown = [f.f_code.co_name for f in frames if not f.f_locals.get("__tracebackhide__", False)]
        assert name not in shown, f"{name}'s frame would show in a traceback: {shown}"
