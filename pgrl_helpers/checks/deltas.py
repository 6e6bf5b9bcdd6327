"""Checkers: deltas (centred, normalised, leave-one-out) and the baseline exercise."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..advantages import compute_deltas
from ..exact import all_responses, exact_expected_reward, flat_grad, score_functions
from ..models import LectureModel
from ..sampling import compute_log_probs
from ..sort_task import compute_reward, make_prompts
from ._core import (
    _as_tensor,
    _call,
    _check_unchanged,
    _close,
    _Failed,
    _first_match,
    _fmt_shape,
    _graded_too,
    _NotImplemented,
    _run,
)
from .rewards import EXACT_LENGTH, EXACT_VOCAB

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


@_graded_too
def check_centered_deltas(fn: Callable, *, seed: int = 0, strict: bool = False):
    """fn(rewards float[batch, trial]) -> float[batch, trial]: reward minus the group mean."""
    __tracebackhide__ = True  # noqa: F841 (IPython hides this frame in tracebacks)
    return _run(
        "centered_deltas",
        lambda: _delta_check("centered_deltas", fn, "centered_rewards", seed, lambda r: []),
        strict,
    )


@_graded_too
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
                centred / (r.std(0, keepdim=True) + eps),
                "the std over the wrong axis (batch, dim=0): you centred within each group but "
                "divided by the std across prompts; divide by each group's own std (over "
                "trial, dim=-1, keepdim=True)",
            ),
            (
                centred / (r.std() + eps),
                "you divided by the std of the whole batch; divide by each group's own std "
                "(over trial, dim=-1, keepdim=True)",
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

    __tracebackhide__ = True  # noqa: F841 (IPython hides this frame in tracebacks)
    return _run(
        "normalized_deltas",
        lambda: _delta_check("normalized_deltas", fn, "normalized_rewards", seed, extra),
        strict,
    )


@_graded_too
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

    __tracebackhide__ = True  # noqa: F841 (IPython hides this frame in tracebacks)
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
            compute_log_probs(model, prompts, responses[None].expand(batch, -1, -1)).sum(-1)
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


@_graded_too
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

    __tracebackhide__ = True  # noqa: F841 (IPython hides this frame in tracebacks)
    return _run("my_baseline", diagnose, strict)
