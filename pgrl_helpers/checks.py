"""Checkers for the classroom exercises in ``assignments/``.

Each ``check_*`` function takes the student's function (or config), runs it on test inputs
and compares what it *does* with the reference behaviour of this package. It prints exactly
one line:

* ``[PASS] name: ...`` when the behaviour matches;
* ``[TODO] name: not implemented yet ...`` while the function still raises
  ``NotImplementedError`` (the notebook keeps running, so later exercises are checked);
* ``[FAIL] name: ...`` naming the likely mistake (wrong sign, biased std, wrong axis,
  forgot to detach, wrong KL direction, ...) when it can be recognised, otherwise where the
  result differs. The reference code itself is never printed.

Every checker takes ``seed`` (test inputs are drawn from it) and ``strict``: with
``strict=True`` it prints nothing on a pass and raises ``AssertionError`` otherwise. The
instructor notebooks use ``strict=True`` with another seed inside nbgrader's hidden-test
regions, so that ``nbgrader autograde`` turns a failed check into lost points.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .advantages import compute_deltas
from .exact import all_responses, exact_expected_reward, flat_grad, score_functions
from .kl import kl_k1, kl_k2, kl_k3
from .losses import compute_loss
from .models import LectureModel
from .sampling import compute_log_probs, sample_responses
from .sort_task import compute_reward, lecture_prompts, make_prompts, sort_distance_reward_batch

PASS, FAIL, TODO = "[PASS]", "[FAIL]", "[TODO]"


@dataclass(frozen=True)
class CheckResult:
    """Outcome of one check: ``status`` is PASS, FAIL or TODO; ``message`` says why."""

    name: str
    status: str
    message: str

    @property
    def passed(self) -> bool:
        return self.status == PASS

    def __str__(self) -> str:
        return f"{self.status} {self.name}: {self.message}"


class _Failed(Exception):
    """Raised inside a diagnosis: the student's code shows the mistake in the message."""


class _NotImplemented(Exception):
    """The student's function still raises NotImplementedError."""


def _run(name: str, diagnose: Callable[[], str], strict: bool) -> CheckResult | None:
    """Run ``diagnose`` (returns the pass detail or raises _Failed); print or raise."""
    try:
        result = CheckResult(name, PASS, diagnose())
    except _NotImplemented:
        result = CheckResult(
            name,
            TODO,
            "not implemented yet (the function still raises NotImplementedError; "
            "replace the stub with your code and run this cell again)",
        )
    except _Failed as err:
        result = CheckResult(name, FAIL, str(err))
    if strict:
        if not result.passed:
            raise AssertionError(str(result))
        return None
    print(result)
    return None


def run_check(check: Callable, *args, seed: int = 0) -> CheckResult:
    """Run a ``check_*`` function and return its ``CheckResult`` instead of printing it."""
    try:
        check(*args, seed=seed, strict=True)
    except AssertionError as err:
        line = str(err)
        status = TODO if line.startswith(TODO) else FAIL
        name, _, message = line[len(status) + 1 :].partition(": ")
        return CheckResult(name, status, message)
    return CheckResult(check.__name__.removeprefix("check_"), PASS, "")


def _call(fn: Callable, *args, **kwargs):
    """Call the student's function; NotImplementedError -> TODO, any other error -> FAIL."""
    if not callable(fn):
        raise _Failed(f"expected a function, got {type(fn).__name__}")
    try:
        return fn(*args, **kwargs)
    except NotImplementedError as err:
        raise _NotImplemented from err
    except Exception as err:  # the student's bug, reported instead of crashing the notebook
        raise _Failed(
            f"your function raised {type(err).__name__}: {str(err).strip()[:300]}"
        ) from err


def _as_tensor(out, what: str = "your function") -> torch.Tensor:
    if not isinstance(out, torch.Tensor):
        raise _Failed(f"{what} returned {type(out).__name__}, expected a torch.Tensor")
    return out


def _close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-4) -> bool:
    """Same shape and equal within ``tol`` (absolute + relative); NaN never matches."""
    if not isinstance(a, torch.Tensor) or a.shape != b.shape:
        return False
    a, b = a.detach().double(), b.detach().double()
    return bool(torch.isfinite(a).all()) and bool(
        torch.allclose(a, b, atol=tol, rtol=tol, equal_nan=False)
    )


def _first_match(out: torch.Tensor, candidates: list[tuple[torch.Tensor, str]], tol=1e-4):
    for value, message in candidates:
        try:
            if _close(out, value, tol):
                return message
        except RuntimeError:  # a candidate that does not broadcast
            continue
    return None


def _check_unchanged(before: list[torch.Tensor], after: list[torch.Tensor]) -> None:
    for b, a in zip(before, after):
        if not torch.equal(b, a):
            raise _Failed(
                "your function changed its input tensors in place (e.g. sort_(), -=, "
                "masked_fill_); work on new tensors so the caller's data stay intact"
            )


def _fmt_shape(x: torch.Tensor) -> str:
    return str(list(x.shape))


# --------------------------------------------------------------------------------------
# Exercise: sort_distance_reward, vectorised
# --------------------------------------------------------------------------------------


def _reward_inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """prompts int[6, 4] and responses int[6, 5, 4]: sorted, the prompt, reversed, 2 random."""
    g = torch.Generator().manual_seed(1000 + seed)
    prompts = make_prompts(6, 4, 6, generator=g)
    prompts[0] = torch.tensor([3, 1, 0, 2])
    truth = prompts.sort(dim=-1).values
    random = torch.randint(0, 6, (6, 2, 4), generator=g)
    random[:, 1, :2] = truth[:, :2]  # partly right
    responses = torch.stack([truth, prompts, truth.flip(-1), random[:, 0], random[:, 1]], dim=1)
    return prompts, responses


def check_sort_distance_reward(fn: Callable, *, seed: int = 0, strict: bool = False):
    """fn(prompts int[batch, pos], responses int[batch, trial, pos]) -> float[batch, trial]."""

    def diagnose() -> str:
        prompts, responses = _reward_inputs(seed)
        batch, trial, pos = responses.shape
        before = [prompts.clone(), responses.clone()]
        out = _as_tensor(_call(fn, prompts, responses))
        _check_unchanged(before, [prompts, responses])
        want = sort_distance_reward_batch(prompts, responses)
        if out.shape != want.shape:
            hints = {
                (batch, trial, pos): "one value per token: count the matches, summing over "
                "pos (the last axis)",
                (batch, pos): "it looks reduced over trial; sum over pos (dim=-1) instead",
                (batch,): "reduced over too many axes; keep one reward per response",
                (): "a single number; return one reward per response",
            }
            hint = hints.get(tuple(out.shape), "")
            raise _Failed(
                f"expected shape [batch, trial] = {_fmt_shape(want)}, got {_fmt_shape(out)}"
                + (f": {hint}" if hint else "")
            )
        if not out.dtype.is_floating_point:
            raise _Failed(
                f"returned dtype {out.dtype}; rewards must be floats (e.g. .float()) so that "
                "they can be averaged and centred"
            )
        if _close(out, want):
            return f"matches the reference on {batch * trial} responses ({batch} prompts x {trial})"
        truth = prompts.sort(dim=-1).values
        mistake = _first_match(
            out,
            [
                (
                    (responses == prompts[:, None, :]).sum(-1).float(),
                    "you compared each response with the prompt itself; compare with the "
                    "prompt sorted ascending",
                ),
                (
                    (responses == truth.flip(-1)[:, None, :]).sum(-1).float(),
                    "you compared with the prompt sorted in descending order; sort ascending",
                ),
                (
                    pos - want,
                    "you counted the positions that differ; count the positions that match",
                ),
                (
                    (responses == truth[:, None, :]).all(-1).float(),
                    "you scored exact sorts only (0 or 1); the reward counts every matching "
                    "position",
                ),
            ],
        )
        if mistake:
            raise _Failed(mistake)
        b, t = (out - want).abs().nonzero()[0].tolist()
        raise _Failed(
            f"wrong on {int((out - want).abs().gt(1e-4).sum())} of {batch * trial} responses, "
            f"e.g. prompt {prompts[b].tolist()}, response {responses[b, t].tolist()}: "
            f"expected {want[b, t].item():g}, got {out[b, t].item():g}"
        )

    return _run("sort_distance_reward_batch", diagnose, strict)


# --------------------------------------------------------------------------------------
# Exercise: exact expected reward by enumeration (and its gradient)
# --------------------------------------------------------------------------------------

EXACT_VOCAB, EXACT_LENGTH = 3, 3


def _exact_inputs(seed: int):
    model = LectureModel(EXACT_VOCAB, 4, EXACT_LENGTH, EXACT_LENGTH, seed=seed)
    prompts = make_prompts(4, EXACT_LENGTH, EXACT_VOCAB, generator=200 + seed)
    return model, prompts


def check_expected_reward(fn: Callable, *, seed: int = 0, strict: bool = False):
    """fn(model, prompts int[batch, pos]) -> float[batch]: exact E[R | s] under
    ``sort_distance_reward``, differentiable in the model's parameters."""

    def diagnose() -> str:
        model, prompts = _exact_inputs(seed)
        batch = prompts.shape[0]
        out = _as_tensor(_call(fn, model, prompts))
        want = exact_expected_reward(model, prompts, "sort_distance_reward")
        n = EXACT_VOCAB**EXACT_LENGTH
        if out.shape != want.shape:
            hints = {
                (): "that is one number: return E[R | s] for every prompt (do not average over "
                "prompts)",
                (batch, n): "that is one value per response: sum pi(a|s) R(s, a) over the "
                "responses",
                (batch, n, EXACT_LENGTH): "that is one value per token: a response's "
                "log-probability is the sum over pos",
            }
            hint = hints.get(tuple(out.shape), "")
            raise _Failed(
                f"expected shape [batch] = {_fmt_shape(want)}, got {_fmt_shape(out)}"
                + (f": {hint}" if hint else "")
            )
        if not _close(out, want):
            with torch.no_grad():
                responses = all_responses(EXACT_VOCAB, EXACT_LENGTH)
                expanded = responses[None].expand(batch, -1, -1)
                token_lp = compute_log_probs(prompts, expanded, model)  # [batch, N, pos]
                log_pi = token_lp.sum(-1)
                rewards = compute_reward(prompts, expanded, "sort_distance_reward")
            mistake = _first_match(
                out,
                [
                    (-want, "wrong sign: E[R | s] = + sum_a pi(a|s) R(s, a)"),
                    (
                        (log_pi * rewards).sum(-1),
                        "you weighted rewards by log-probabilities; use the probabilities "
                        "pi(a|s) = exp(log pi(a|s))",
                    ),
                    (
                        want / n,
                        "you averaged over the responses; the expectation is the sum of "
                        "pi(a|s) R(s, a) over all responses",
                    ),
                    (
                        rewards.mean(-1),
                        "that is the average reward of all responses, ignoring the policy: "
                        "weight each response by its probability pi(a|s)",
                    ),
                    (
                        (token_lp.exp().mean(-1) * rewards).sum(-1),
                        "a response's probability is the product of its token probabilities "
                        "(sum the log-probs over pos, then exp)",
                    ),
                    (
                        (token_lp.mean(-1).exp() * rewards).sum(-1),
                        "a response's log-probability is the sum over pos, not the mean",
                    ),
                ],
            )
            raise _Failed(
                mistake
                or f"values differ from the exact E[R | s]: expected "
                f"{[round(v, 4) for v in want.tolist()]}, got "
                f"{[round(v, 4) for v in out.detach().tolist()]}"
            )
        if not out.requires_grad:
            raise _Failed(
                "values are right but carry no gradient: do not use torch.no_grad(), "
                ".detach(), .item() or numpy; autograd must see pi(a|s)"
            )
        got_grad = flat_grad(out.sum(), model)
        want_grad = flat_grad(want.sum(), model)
        if not _close(got_grad, want_grad, 1e-3):
            if got_grad.abs().max() == 0:
                raise _Failed(
                    "values are right but the gradient is zero: the probabilities were "
                    "detached from the model somewhere"
                )
            raise _Failed("values are right but the gradient differs from the exact one")
        return f"exact E[R | s] and its gradient match on {batch} prompts ({n} responses each)"

    return _run("expected_reward", diagnose, strict)


# --------------------------------------------------------------------------------------
# Exercises: deltas (centred, normalised, leave-one-out)
# --------------------------------------------------------------------------------------


def _delta_rewards(seed: int) -> torch.Tensor:
    """rewards float[4, 5] with distinct batch and group sizes; row 2 is a tie."""
    g = torch.Generator().manual_seed(300 + seed)
    rewards = torch.randint(0, 6, (4, 5), generator=g).float()
    rewards[0] = torch.tensor([0.0, 1.0, 2.0, 3.0, 5.0])
    rewards[2] = 2.0
    rewards[3, 0] = rewards[3, 1] + 3  # make sure row 3 varies
    return rewards


def _delta_check(
    name: str, fn: Callable, mode: str, seed: int, extra: Callable[[torch.Tensor], list]
) -> str:
    rewards = _delta_rewards(seed)
    before = [rewards.clone()]
    out = _as_tensor(_call(fn, rewards))
    _check_unchanged(before, [rewards])
    want = compute_deltas(rewards, mode)
    if out.shape != want.shape:
        raise _Failed(
            f"expected shape [batch, trial] = {_fmt_shape(want)} (same as rewards), got "
            f"{_fmt_shape(out)}: reduce over trial with keepdim=True so it broadcasts"
        )
    if _close(out, want):
        return f"matches the reference on {rewards.shape[0]} groups of G = {rewards.shape[1]}"
    if not torch.isfinite(out).all():
        rows = sorted({int(i) for i in (~torch.isfinite(out)).nonzero()[:, 0]})
        tied = [r for r in rows if bool((rewards[r] == rewards[r, 0]).all())]
        if tied:
            raise _Failed(
                f"NaN/inf for the group whose rewards all tie (row {tied[0]}: "
                f"{rewards[tied[0]].tolist()}): its std is 0; add eps to the std before dividing"
            )
        raise _Failed(f"non-finite values in rows {rows}")
    mean_trial = rewards.mean(-1, keepdim=True)
    common = [
        (-want, "wrong sign: a reward above the baseline must get a positive delta"),
        (rewards, "you returned the rewards unchanged: subtract the baseline"),
        (
            rewards - rewards.mean(0, keepdim=True),
            "averaged over the wrong axis (batch, dim=0): the baseline is the mean of each "
            "prompt's own group, over trial (dim=-1)",
        ),
        (
            rewards - rewards.mean(),
            "you subtracted the mean of the whole batch; subtract each group's own mean "
            "(over trial, dim=-1, keepdim=True)",
        ),
        (mean_trial - rewards, "wrong sign: delta = reward - baseline"),
    ]
    mistake = _first_match(out, extra(rewards) + common)
    raise _Failed(
        mistake
        or f"differs from the reference, e.g. group {rewards[0].tolist()}: expected "
        f"{[round(v, 3) for v in want[0].tolist()]}, got "
        f"{[round(v, 3) for v in out[0].detach().tolist()]}"
    )


def check_centered_deltas(fn: Callable, *, seed: int = 0, strict: bool = False):
    """fn(rewards float[batch, trial]) -> float[batch, trial]: reward minus the group mean."""
    return _run(
        "centered_deltas",
        lambda: _delta_check("centered_deltas", fn, "centered_rewards", seed, lambda r: []),
        strict,
    )


def check_normalized_deltas(fn: Callable, *, seed: int = 0, strict: bool = False):
    """fn(rewards float[batch, trial]) -> float[batch, trial]: (r - mean) / (std + eps)."""

    def extra(r: torch.Tensor) -> list:
        g = r.shape[-1]
        centred = r - r.mean(-1, keepdim=True)
        factor = math.sqrt(g / (g - 1))
        eps = 1e-6
        return [
            (
                centred / (r.std(-1, keepdim=True, unbiased=False) + eps),
                f"off by a factor sqrt(G/(G-1)) = {factor:.3f} (G = {g}): you used the biased "
                "std (divides by G); GRPO uses the sample std, torch.std's default (divides by "
                "G - 1)",
            ),
            (
                r / (r.std(-1, keepdim=True) + eps),
                "you divided the raw rewards by the std: centre them first (subtract the "
                "group mean)",
            ),
            (
                centred / (r.var(-1, keepdim=True) + eps),
                "you divided by the variance; divide by the standard deviation",
            ),
            (
                (r - r.mean(0, keepdim=True)) / (r.std(0, keepdim=True) + eps),
                "mean and std over the wrong axis (batch, dim=0): use each group, over trial "
                "(dim=-1)",
            ),
            (
                (r - r.mean()) / (r.std() + eps),
                "you normalised with the mean and std of the whole batch; use each group's "
                "own (over trial, dim=-1, keepdim=True)",
            ),
            (
                centred,
                "you centred but did not divide by the group's std",
            ),
        ]

    return _run(
        "normalized_deltas",
        lambda: _delta_check("normalized_deltas", fn, "normalized_rewards", seed, extra),
        strict,
    )


def check_loo_deltas(fn: Callable, *, seed: int = 0, strict: bool = False):
    """fn(rewards float[batch, trial]) -> float[batch, trial]: r_i - mean of the others."""

    def extra(r: torch.Tensor) -> list:
        g = r.shape[-1]
        total = r.sum(-1, keepdim=True)
        return [
            (
                r - r.mean(-1, keepdim=True),
                f"that is the centred delta: the mean includes the response itself (smaller "
                f"by (G-1)/G = {(g - 1) / g:.2f}); leave the response out of its own baseline",
            ),
            (
                r - (total - r) / g,
                "you divided the others' sum by G; there are G - 1 others",
            ),
            (
                (total - r) / (g - 1) - r,
                "wrong sign: delta_i = r_i - mean of the other rewards",
            ),
            (
                r - (r.sum(0, keepdim=True) - r) / (r.shape[0] - 1),
                "left one out over the wrong axis (batch, dim=0): the group is the trial axis "
                "(dim=-1)",
            ),
        ]

    return _run(
        "loo_deltas",
        lambda: _delta_check("loo_deltas", fn, "loo_rewards", seed, extra),
        strict,
    )


# --------------------------------------------------------------------------------------
# Exercise: choose a baseline and measure its variance
# --------------------------------------------------------------------------------------

BASELINE_G = 4
BASELINE_DRAWS = 2000


def reinforce_estimates(
    baseline_fn: Callable | None, num_draws: int = BASELINE_DRAWS, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE gradient estimates with a baseline computed from each group's rewards.

    Policy: ``LectureModel(3, 4, 3, 3)``, 3 prompts, G = 4 samples per prompt, reward
    ``sort_distance_reward``. Each draw samples G responses per prompt and forms

        g = 1 / (batch * G) * sum_{s, i} grad log pi(a_i | s) * (R_i - b_i)

    with b = ``baseline_fn(rewards float[batch, G]) -> float[batch, G]`` (None: b = 0).
    Returns (estimates float[num_draws, num_params], exact gradient float[num_params]).
    Uses the exact score table, so thousands of draws take a fraction of a second.
    """
    model = LectureModel(EXACT_VOCAB, 4, EXACT_LENGTH, EXACT_LENGTH, seed=7 + seed)
    prompts = make_prompts(3, EXACT_LENGTH, EXACT_VOCAB, generator=400 + seed)
    batch = prompts.shape[0]
    with torch.no_grad():
        scores = score_functions(model, prompts)  # [batch, N, P]
    exact = flat_grad(exact_expected_reward(model, prompts, "sort_distance_reward").mean(), model)
    responses = all_responses(EXACT_VOCAB, EXACT_LENGTH)
    table = compute_reward(
        prompts, responses[None].expand(batch, -1, -1), "sort_distance_reward"
    )  # [batch, N]
    g = torch.Generator().manual_seed(500 + seed)
    with torch.no_grad():
        probs = torch.exp(
            compute_log_probs(prompts, responses[None].expand(batch, -1, -1), model).sum(-1)
        )  # [batch, N]
        idx = torch.multinomial(
            probs.repeat_interleave(num_draws, 0), BASELINE_G, replacement=True, generator=g
        ).reshape(batch, num_draws, BASELINE_G)
        idx = idx.permute(1, 0, 2)  # [draws, batch, G]
        rewards = torch.gather(table[None].expand(num_draws, -1, -1), 2, idx)
    flat = rewards.reshape(num_draws * batch, BASELINE_G)
    if baseline_fn is None:
        base = torch.zeros_like(flat)
    else:
        base = _as_tensor(_call(baseline_fn, flat.clone()), "your baseline")
        if base.shape != flat.shape:
            raise _Failed(
                f"the baseline must have the rewards' shape [batch, trial] = "
                f"{_fmt_shape(flat)}, got {_fmt_shape(base)}"
            )
        base = base.detach().to(flat.dtype)
        if not torch.isfinite(base).all():
            raise _Failed("the baseline contains NaN or inf")
    deltas = (flat - base).reshape(num_draws, batch, BASELINE_G)
    picked = scores[torch.arange(batch)[None, :, None], idx]  # [draws, batch, G, P]
    estimates = torch.einsum("dbgp,dbg->dp", picked, deltas) / (batch * BASELINE_G)
    return estimates, exact


def total_variance(estimates: torch.Tensor) -> float:
    """Sum over parameters of the variance across draws: float[draws, P] -> float."""
    return estimates.var(dim=0).sum().item()


def baseline_variance_table(
    baselines: dict[str, Callable | None], num_draws: int = BASELINE_DRAWS, seed: int = 0
) -> dict[str, dict[str, float]]:
    """Print and return the variance and bias of the REINFORCE estimate for each baseline.

    ``baselines`` maps a label to ``fn(rewards float[batch, trial]) -> float[batch, trial]``
    (None: no baseline). Per label: ``variance`` (total over parameters, across draws),
    ``ratio`` (variance without a baseline / this variance) and ``bias`` (relative error of
    the mean estimate along the exact gradient: <mean, exact> / |exact|^2 - 1). A function
    that still raises NotImplementedError (or fails) gets a row saying so instead of a crash.
    """
    plain, exact = reinforce_estimates(None, num_draws, seed)
    plain_var = total_variance(plain)
    table: dict[str, dict[str, float]] = {}
    print(f"{'baseline':28s} {'total variance':>15s} {'cut':>7s} {'bias':>7s}")
    for label, fn in baselines.items():
        try:
            estimates, _ = reinforce_estimates(fn, num_draws, seed)
        except _NotImplemented:
            print(f"{label:28s} not implemented yet")
            continue
        except _Failed as err:
            print(f"{label:28s} failed: {err}")
            continue
        variance = total_variance(estimates)
        bias = (estimates.mean(0) @ exact / (exact @ exact)).item() - 1
        table[label] = {"variance": variance, "ratio": plain_var / variance, "bias": bias}
        print(f"{label:28s} {variance:15.4f} {plain_var / variance:6.1f}x {bias:+7.3f}")
    return table


def check_baseline(fn: Callable, *, seed: int = 0, strict: bool = False):
    """fn(rewards float[batch, trial]) -> baselines float[batch, trial] (b_i for each sample).

    Passes when b_i never depends on the sample's own reward r_i (so the estimate stays
    unbiased) and the gradient estimator's variance drops by at least 1.5x.
    """

    def diagnose() -> str:
        g = torch.Generator().manual_seed(600 + seed)
        rewards = torch.randint(0, 4, (3, BASELINE_G), generator=g).float()
        rewards[:, 0] = torch.tensor([0.0, 1.0, 3.0])
        rewards[:, 1] = torch.tensor([2.0, 3.0, 0.0])
        base = _as_tensor(_call(fn, rewards.clone()), "your baseline")
        if base.shape != rewards.shape:
            raise _Failed(
                f"the baseline must have the rewards' shape [batch, trial] = "
                f"{_fmt_shape(rewards)}, got {_fmt_shape(base)}: one b_i per sample"
            )
        for b in range(rewards.shape[0]):
            for i in range(rewards.shape[1]):
                bumped = rewards.clone()
                bumped[b, i] += 1.7
                moved = _as_tensor(_call(fn, bumped), "your baseline")
                if abs(moved[b, i].item() - base[b, i].item()) > 1e-6:
                    raise _Failed(
                        "biased: b_i changes when the sample's own reward r_i changes (e.g. "
                        "the group mean including the sample itself). Then E[b_i grad log "
                        "pi(a_i)] != 0; build b_i from the other samples' rewards only"
                    )
        estimates, exact = reinforce_estimates(fn, seed=seed)
        plain, _ = reinforce_estimates(None, seed=seed)
        ratio = total_variance(plain) / total_variance(estimates)
        if ratio < 1.5:
            raise _Failed(
                f"unbiased, but the variance only changes by a factor {ratio:.2f} (total "
                f"variance {total_variance(plain):.4f} without a baseline, "
                f"{total_variance(estimates):.4f} with yours); aim for at least 1.5x: a good "
                "baseline is close to the expected reward of the prompt"
            )
        return (
            f"unbiased (b_i ignores r_i) and cuts the total variance of the gradient estimate "
            f"{ratio:.1f}x ({total_variance(plain):.4f} -> {total_variance(estimates):.4f}, "
            f"{BASELINE_DRAWS} draws of G = {BASELINE_G})"
        )

    return _run("my_baseline", diagnose, strict)


# --------------------------------------------------------------------------------------
# Exercise: fix the freeze bug in an inner loop
# --------------------------------------------------------------------------------------


def _loop_inputs(seed: int):
    model = LectureModel(5, 6, 3, 3, seed=20 + seed)
    prompts = lecture_prompts()
    responses = sample_responses(model, prompts, 6, generator=torch.Generator().manual_seed(seed))
    rewards = compute_reward(prompts, responses, "sort_distance_reward")
    if bool((rewards == rewards[:, :1]).all()):  # pragma: no cover - every seed tried varies
        rewards[0, 0] += 1
    deltas = compute_deltas(rewards, "centered_rewards")
    return model, prompts, responses, deltas


def _reference_loop(model, prompts, responses, deltas, num_steps, learning_rate, refresh=False):
    """The correct inner loop (refresh=True: old log-probs recomputed every step, frozen)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate)
    with torch.no_grad():
        old = compute_log_probs(prompts, responses, model)
    for _ in range(num_steps):
        if refresh:
            with torch.no_grad():
                old = compute_log_probs(prompts, responses, model)
        log_probs = compute_log_probs(prompts, responses, model)
        loss = compute_loss(log_probs, deltas, "unclipped", old_log_probs=old)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def _params(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def check_inner_loop(fn: Callable, *, seed: int = 0, strict: bool = False):
    """fn(model, prompts, responses, deltas, num_steps, learning_rate) -> None.

    Trains ``model`` in place with SGD on the unclipped ratio loss mean(-ratio * delta),
    ratio = exp(log_probs - old_log_probs), old log-probs frozen before the first step.
    """

    def diagnose() -> str:
        model, prompts, responses, deltas = _loop_inputs(seed)
        lr = 0.5
        start = _params(model)
        results = {}
        for steps in (1, 3):
            student = copy.deepcopy(model)
            inputs = [prompts.clone(), responses.clone(), deltas.clone()]
            _call(fn, student, *inputs, num_steps=steps, learning_rate=lr)
            _check_unchanged([prompts, responses, deltas], inputs)
            reference = copy.deepcopy(model)
            _reference_loop(reference, prompts, responses, deltas, steps, lr)
            results[steps] = (_params(student) - start, _params(reference) - start)
        moved, want = results[1]
        if moved.abs().max() == 0:
            raise _Failed(
                "the parameters did not move at the first step: the ratio's gradient is zero. "
                "old_log_probs still carry gradients (ratio == 1 identically); compute them "
                "under torch.no_grad() (or .detach() them) once, before the loop"
            )
        if _close(moved, -want, 1e-5):
            raise _Failed("wrong sign: the first step climbs the loss; minimise -ratio * delta")
        if not _close(moved, want, 1e-5):
            scale = (moved @ want / (want @ want)).item()
            if _close(moved, scale * want, 1e-5):
                raise _Failed(
                    f"the first step points the right way but is {scale:.3g}x the reference: "
                    "average the per-token loss over every token (.mean()), SGD with the given "
                    "learning_rate"
                )
            raise _Failed(
                "the first step differs from the reference (SGD with the given learning_rate "
                "on the mean over every token of -ratio * delta)"
            )
        moved, want = results[3]
        if _close(moved, want, 1e-5):
            return "the ratio has a gradient at the first step and 3 steps match the reference"
        refreshed = copy.deepcopy(model)
        _reference_loop(refreshed, prompts, responses, deltas, 3, lr, refresh=True)
        if _close(moved, _params(refreshed) - start, 1e-5):
            raise _Failed(
                "the first step is right, but old_log_probs are refreshed at every step: "
                "compute them once, before the loop (they belong to the policy that sampled "
                "the responses)"
            )
        raise _Failed("the first step is right but after 3 steps the parameters differ")

    return _run("inner_loop", diagnose, strict)


# --------------------------------------------------------------------------------------
# Exercise: the clipped loss
# --------------------------------------------------------------------------------------


def _loss_inputs(seed: int):
    g = torch.Generator().manual_seed(700 + seed)
    old = -torch.rand(2, 3, 4, generator=g) * 2 - 0.1  # [batch, trial, pos], log-probs < 0
    shift = (torch.rand(2, 3, 4, generator=g) - 0.5) * 1.0  # ratios from 0.6 to 1.65
    log_probs = (old + shift).requires_grad_(True)
    deltas = torch.tensor([[1.0, -0.5, 2.0], [-1.5, 0.7, -0.2]])
    return log_probs, old, deltas


def check_clipped_loss(fn: Callable, *, seed: int = 0, strict: bool = False):
    """fn(log_probs, old_log_probs float[batch, trial, pos], deltas float[batch, trial],
    epsilon) -> scalar: mean over tokens of -min(ratio * delta, clip(ratio) * delta)."""

    def diagnose() -> str:
        eps = 0.2
        log_probs, old, deltas = _loss_inputs(seed)
        before = [log_probs.detach().clone(), old.clone(), deltas.clone()]
        out = _as_tensor(_call(fn, log_probs, old, deltas, eps))
        _check_unchanged(before, [log_probs.detach(), old, deltas])
        want = compute_loss(log_probs, deltas, "clipped", old_log_probs=old, epsilon=eps)
        if out.shape != want.shape:
            raise _Failed(
                f"expected a scalar (shape []), got shape {_fmt_shape(out)}: return the mean "
                "of the per-token losses over batch, trial and pos"
            )
        if not _close(out, want, 1e-5):
            with torch.no_grad():
                lp = log_probs.detach()
                d = deltas[:, :, None]
                ratio = torch.exp(lp - old)
                clipped = ratio.clamp(1 - eps, 1 + eps)
                per_token = -torch.minimum(ratio * d, clipped * d)
                log_ratio = lp / old
            mistake = _first_match(
                out,
                [
                    (-want, "wrong sign: minimise the NEGATIVE clipped objective"),
                    (
                        -torch.maximum(ratio * d, clipped * d).mean(),
                        "you took the max of the two terms; PPO's pessimistic bound is the min",
                    ),
                    (
                        (
                            -torch.minimum(log_ratio * d, log_ratio.clamp(1 - eps, 1 + eps) * d)
                        ).mean(),
                        "the ratio is a quotient of probabilities, exp(log_probs - "
                        "old_log_probs), not log_probs / old_log_probs",
                    ),
                    (
                        (-clipped * d).mean(),
                        "you dropped the unclipped term: take the min of ratio * delta and "
                        "clip(ratio) * delta",
                    ),
                    ((-ratio * d).mean(), "you forgot to clip the ratio"),
                    (
                        per_token.sum(),
                        "you summed over the tokens; average (mean over batch, trial and pos)",
                    ),
                    (
                        per_token.sum(-1).mean(),
                        "you summed over pos and averaged the rest; average over every token",
                    ),
                    (
                        (
                            -torch.minimum(ratio * d, ratio.clamp(1 - 2 * eps, 1 + 2 * eps) * d)
                        ).mean(),
                        "the clip range is [1 - epsilon, 1 + epsilon]",
                    ),
                ],
                1e-5,
            )
            raise _Failed(
                mistake
                or f"value differs from the reference: expected {want.item():.5f}, got "
                f"{out.item():.5f}"
            )
        if not out.requires_grad:
            raise _Failed(
                "value is right but carries no gradient: do not detach log_probs or use .item()"
            )
        (got_grad,) = torch.autograd.grad(out, log_probs, allow_unused=True)
        (want_grad,) = torch.autograd.grad(want, log_probs)
        if got_grad is None or not _close(got_grad, want_grad, 1e-5):
            raise _Failed(
                "value is right but the gradient with respect to log_probs differs: "
                "gradients must flow through the ratio (clamp cuts them where it is active)"
            )
        return "value and gradient match the reference on both sides of the clip range"

    return _run("clipped_loss", diagnose, strict)


# --------------------------------------------------------------------------------------
# Exercise: the k3 KL estimator
# --------------------------------------------------------------------------------------


def check_kl_k3(fn: Callable, *, seed: int = 0, strict: bool = False):
    """fn(log_probs, ref_log_probs float[batch, trial, pos]) -> float[batch, trial, pos]:
    k3 = r - 1 - log r with r = exp(ref_log_probs - log_probs), estimating KL(policy || ref)."""

    def diagnose() -> str:
        g = torch.Generator().manual_seed(800 + seed)
        log_probs = -torch.rand(2, 3, 4, generator=g) * 3
        ref_log_probs = -torch.rand(2, 3, 4, generator=g) * 3
        before = [log_probs.clone(), ref_log_probs.clone()]
        out = _as_tensor(_call(fn, log_probs, ref_log_probs))
        _check_unchanged(before, [log_probs, ref_log_probs])
        want = kl_k3(log_probs, ref_log_probs)
        if out.shape != want.shape:
            raise _Failed(
                f"expected one value per token, shape {_fmt_shape(want)} (the inputs' shape), "
                f"got {_fmt_shape(out)}"
            )
        if _close(out, want):
            if not _close(_call(fn, log_probs, log_probs), torch.zeros_like(log_probs), 1e-6):
                raise _Failed("k3 must be exactly 0 when log_probs == ref_log_probs")
            return "matches k3 = r - 1 - log r, r = exp(ref_log_probs - log_probs), on 24 tokens"
        log_r = ref_log_probs - log_probs
        r = log_r.exp()
        mistake = _first_match(
            out,
            [
                (
                    kl_k3(ref_log_probs, log_probs),
                    "wrong KL direction: r must be q/p = exp(ref_log_probs - log_probs) (the "
                    "samples come from the policy p); you used p/q",
                ),
                (kl_k1(log_probs, ref_log_probs), "that is k1 = -log r, not k3"),
                (-kl_k1(log_probs, ref_log_probs), "that is log r (k1 with the wrong sign)"),
                (kl_k2(log_probs, ref_log_probs), "that is k2 = (log r)^2 / 2, not k3"),
                (r - 1 + log_r, "wrong sign on log r: k3 = r - 1 - log r"),
                (r - log_r, "you forgot the -1: k3 = r - 1 - log r"),
                (1 - r + log_r, "wrong sign: k3 = r - 1 - log r is never negative"),
                (
                    (-log_r).exp() - 1 + log_r,
                    "wrong KL direction: r must be exp(ref_log_probs - log_probs); you used "
                    "its inverse",
                ),
            ],
        )
        if mistake is None and (out < -1e-6).any():
            mistake = "some values are negative; every k3 term is >= 0 (r - 1 >= log r)"
        raise _Failed(mistake or "values differ from k3 = r - 1 - log r")

    return _run("kl_k3", diagnose, strict)


# --------------------------------------------------------------------------------------
# Exercise: pick a training configuration that reaches a held-out target
# --------------------------------------------------------------------------------------

#: The training exercise: greedy exact-sort rate on the held-out prompts to reach ...
TRAINING_TARGET = 0.8
#: ... within this many sampled responses (epochs x prompts per epoch x G).
TRAINING_BUDGET = 20_000
#: The task is fixed: the lecture's prompt length and vocabulary, and the default held-out set.
TRAINING_TASK = {"prompt_length": 3, "vocab_size": 5, "eval_seed": 12345, "num_eval_prompts": None}

_training_cache: dict[str, tuple[float, int, str]] = {}


def _training_outcome(config) -> tuple[float, int, str]:
    """(best held-out exact-sort, responses sampled when reached/at the end, stop reason)."""
    from .training import run_policy_gradient

    key = repr(config)
    if key not in _training_cache:
        history = run_policy_gradient(config)
        evals = history.evals()
        best = max(evals, key=lambda r: r["heldout_exact_sort"])
        _training_cache[key] = (
            best["heldout_exact_sort"],
            best["responses_sampled"],
            str(history.stop_reason),
        )
    return _training_cache[key]


def check_training_config(fn: Callable, *, seed: int | None = None, strict: bool = False):
    """fn() -> TrainConfig whose run reaches TRAINING_TARGET held-out greedy exact-sort
    within TRAINING_BUDGET sampled responses. ``seed`` replaces the config's seed when given
    (the hidden test reruns the config with another seed). Results are cached per config."""
    from dataclasses import replace

    from .training import TrainConfig

    def diagnose() -> str:
        config = _call(fn)
        if not isinstance(config, TrainConfig):
            raise _Failed(f"my_config() returned {type(config).__name__}, expected a TrainConfig")
        for name, value in TRAINING_TASK.items():
            if getattr(config, name) != value:
                raise _Failed(
                    f"the task and the held-out set are fixed: leave {name} at {value!r} "
                    f"(got {getattr(config, name)!r})"
                )
        try:
            config.validate()
        except (TypeError, ValueError) as err:
            raise _Failed(f"the config is invalid: {err}") from err
        budget = config.num_epochs * config.batch_prompts * config.num_responses
        if budget > TRAINING_BUDGET:
            raise _Failed(
                f"over budget: num_epochs x prompts per epoch x num_responses = "
                f"{config.num_epochs} x {config.batch_prompts} x {config.num_responses} = "
                f"{budget:,} sampled responses, more than {TRAINING_BUDGET:,}"
            )
        run = replace(config, target_heldout_exact_sort=TRAINING_TARGET, progress=False)
        if seed is not None:
            run = replace(run, seed=config.seed + seed)
        best, responses, _ = _training_outcome(run)
        seed_note = "" if seed is None else f" (rerun with seed {run.seed})"
        if best >= TRAINING_TARGET:
            return (
                f"held-out greedy exact-sort {best:.0%} >= {TRAINING_TARGET:.0%} after "
                f"{responses:,} sampled responses (budget {TRAINING_BUDGET:,}){seed_note}"
            )
        hints = []
        if config.model == "lecture":
            hints.append(
                "the lecture's model decodes every position from one linear code and cannot "
                "represent sorting: try model='transformer'"
            )
        if config.prompt_source == "lecture":
            hints.append(
                "prompt_source='lecture' trains on 3 prompts only, which teaches 3 answers, "
                "not sorting: try 'random'"
            )
        if not config.detach_old_log_probs and config.loss_mode != "naive":
            hints.append(
                "detach_old_log_probs=False is the freeze pitfall: the ratio has no gradient"
            )
        raise _Failed(
            f"best held-out greedy exact-sort was {best:.0%}, below the target "
            f"{TRAINING_TARGET:.0%}{seed_note}"
            + (
                "; " + "; ".join(hints)
                if hints
                else "; try more epochs, a larger group or another learning rate"
            )
        )

    return _run("my_config", diagnose, strict)
