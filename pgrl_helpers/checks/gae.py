"""Checkers: one-step TD errors and GAE (series notebook 10; Schulman et al. 2015, eq. 10, 16)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..gae import compute_gae, outcome_token_rewards
from ._core import (
    _as_tensor,
    _call,
    _check_unchanged,
    _close,
    _Failed,
    _first_match,
    _fmt_shape,
    _graded_too,
    _run,
)

#: Real tokens per response of the padded test batch [batch=2, trial=2, pos=5].
GAE_LENGTHS = ((5, 2), (3, 1))
#: What the critic happens to output in the padding slots (after the episode ended): a value
#: that must never be bootstrapped from.
PADDING_VALUE = 0.7
#: (gamma, lambda) of the main check; the limits lambda = 0 and gamma = lambda = 1 follow.
GAMMA, LAMBDA = 0.9, 0.8


def _gae_inputs(seed: int):
    """(rewards, values, mask), float[2, 2, 5]: an outcome reward on each last real token plus a
    small per-token reward (a KL penalty); values random, PADDING_VALUE in padding."""
    g = torch.Generator().manual_seed(900 + seed)
    mask = (torch.arange(5) < torch.tensor(GAE_LENGTHS)[..., None]).float()
    outcome = torch.randint(0, 5, (2, 2), generator=g).float() + 1
    rewards = outcome_token_rewards(outcome, mask) - 0.05 * torch.rand(2, 2, 5, generator=g) * mask
    values = torch.randn(2, 2, 5, generator=g)
    values = torch.where(mask > 0, values, torch.full_like(values, PADDING_VALUE))
    return rewards, values, mask


def _shift(x: torch.Tensor) -> torch.Tensor:
    """x[..., t + 1] at t, 0 after the last slot."""
    return torch.cat([x[..., 1:], torch.zeros_like(x[..., :1])], dim=-1)


def _td(rewards, values, mask, gamma, bootstrap_padding=False):
    """delta_t on real tokens, 0 on padding; bootstrap_padding=True reads V of padding slots."""
    v = values if bootstrap_padding else values * mask
    return (rewards * mask + gamma * _shift(v) - values * mask) * mask


def _recursion(td, mask, factor, forward=False, store_before=False):
    """A_t = delta_t + factor * A_{t+1} (forward=True: + factor * A_{t-1}), 0 on padding.
    store_before=True plants the off-by-one: slot t gets A_{t+1}, stored before the update."""
    out = torch.zeros_like(td)
    running = torch.zeros_like(td[..., 0])
    order = range(td.shape[-1]) if forward else reversed(range(td.shape[-1]))
    for t in order:
        if store_before:
            out[..., t] = running
        running = td[..., t] + factor * running
        if not store_before:
            out[..., t] = running
    return out * mask


# --------------------------------------------------------------------------------------
# Exercise: one-step TD errors
# --------------------------------------------------------------------------------------


@_graded_too
def check_td_errors(fn: Callable, *, seed: int = 0, strict: bool = False):
    """fn(rewards, values, mask, gamma) -> float[batch, trial, pos]: the one-step TD error
    delta_t = r_t + gamma V(s_{t+1}) - V(s_t) on real tokens, with V = 0 after the last real
    token (terminal), and 0 on padding."""

    def diagnose() -> str:
        rewards, values, mask = _gae_inputs(seed)
        before = [rewards.clone(), values.clone(), mask.clone()]
        out = _as_tensor(_call(fn, rewards, values, mask, GAMMA))
        _check_unchanged(before, [rewards, values, mask])
        want = _td(rewards, values, mask, GAMMA)
        # the package's own definition: GAE with lambda = 0 is the TD error
        assert _close(want, compute_gae(rewards, values, mask, GAMMA, 0.0)[0], 1e-5)
        if out.shape != want.shape:
            raise _Failed(f"expected shape {_fmt_shape(want)} (as rewards), got {_fmt_shape(out)}")
        if _close(out, want, 1e-5):
            return (
                f"TD errors match on {mask.shape[0] * mask.shape[1]} padded responses (lengths "
                f"{list(GAE_LENGTHS)}), V = 0 after each last real token, 0 on padding"
            )
        real = mask > 0
        if _close(out[real], want[real], 1e-5):
            slots = int((out.detach()[~real] != 0).sum())
            raise _Failed(
                f"right on every real token, but {slots} padding slot(s) are not 0: padding "
                "slots must be 0 (multiply by the mask, or torch.where(mask > 0, delta, 0), "
                "at the end)"
            )
        unmasked = rewards + GAMMA * _shift(values) - values
        mistake = _first_match(
            out,
            [
                (
                    _td(rewards, values, mask, GAMMA, bootstrap_padding=True),
                    "bootstrapping past the last real token: V after the last real token is 0 "
                    f"(the episode ended); you read the critic's padding value ({PADDING_VALUE})",
                ),
                (
                    -want,
                    "wrong sign: delta_t = r_t + gamma V(s_{t+1}) - V(s_t)",
                ),
                (
                    _td(rewards, values, mask, 1.0),
                    f"you left out gamma (= {GAMMA} here): it discounts V(s_{{t+1}})",
                ),
                (
                    (
                        rewards
                        + GAMMA * torch.cat([values[..., :1] * 0, values[..., :-1]], -1)
                        - values
                    )
                    * mask,
                    "you shifted the values the wrong way: V(s_{t+1}) is the NEXT slot",
                ),
                (unmasked, "padding slots must be 0 (multiply by the mask at the end)"),
            ],
            1e-5,
        )
        raise _Failed(mistake or "the TD errors differ from r_t + gamma V(s_{t+1}) - V(s_t)")

    __tracebackhide__ = True  # noqa: F841 (IPython hides this frame in tracebacks)
    return _run("td_errors", diagnose, strict)


# --------------------------------------------------------------------------------------
# Exercise: GAE
# --------------------------------------------------------------------------------------


@_graded_too
def check_gae(fn: Callable, *, seed: int = 0, strict: bool = False):
    """fn(rewards, values, mask, gamma, lam) -> advantages float[batch, trial, pos]:
    A_t = delta_t + gamma lam A_{t+1}, computed backwards within each response, 0 on padding
    (Schulman et al. 2015, eq. 16). Checked at (gamma, lam) = (0.9, 0.8), then at the two
    limits lam = 0 (TD error) and gamma = lam = 1 (Monte Carlo return minus V)."""

    def diagnose() -> str:
        rewards, values, mask = _gae_inputs(seed)
        before = [rewards.clone(), values.clone(), mask.clone()]
        for gamma, lam, label in (
            (GAMMA, LAMBDA, f"gamma = {GAMMA}, lambda = {LAMBDA}"),
            (GAMMA, 0.0, "the limit lambda = 0 (should equal the one-step TD errors)"),
            (1.0, 1.0, "the limit gamma = lambda = 1 (should equal the return minus V)"),
        ):
            out = _as_tensor(_call(fn, rewards, values, mask, gamma, lam))
            _check_unchanged(before, [rewards, values, mask])
            want = compute_gae(rewards, values, mask, gamma, lam)[0]
            if out.shape != want.shape:
                raise _Failed(
                    f"expected shape {_fmt_shape(want)} (as rewards), got {_fmt_shape(out)}; "
                    "return the advantages only"
                )
            if _close(out, want, 1e-5):
                continue
            real = mask > 0
            if _close(out[real], want[real], 1e-5):
                raise _Failed(
                    f"right on every real token at {label}, but "
                    f"{int((out.detach()[~real] != 0).sum())} padding slot(s) are not 0: "
                    "padding slots must be 0 (multiply by the mask)"
                )
            td = _td(rewards, values, mask, gamma)
            mistake = _first_match(
                out,
                [
                    (
                        _recursion(
                            _td(rewards, values, mask, gamma, bootstrap_padding=True),
                            mask,
                            gamma * lam,
                        ),
                        "bootstrapping past the last real token: V after the last real token "
                        f"is 0; you read the critic's padding value ({PADDING_VALUE})",
                    ),
                    (
                        _recursion(td, mask, (gamma * lam) ** 2),
                        "gamma * lambda applied twice: A_t = delta_t + gamma lambda A_{t+1} "
                        "(one factor per step; delta_t already holds gamma V(s_{t+1}))",
                    ),
                    (
                        _recursion(td, mask, gamma * lam, forward=True),
                        "reversed recursion: you ran forwards in time; A_t depends on A_{t+1}, "
                        "so loop t from the last position down to 0",
                    ),
                    (
                        _recursion(td, mask, lam),
                        f"the recursion factor is gamma * lambda; you used lambda only "
                        f"(at {label})",
                    ),
                    (
                        _recursion(td, mask, gamma),
                        f"the recursion factor is gamma * lambda; you used gamma only (at {label})",
                    ),
                    (
                        _recursion(td, mask, gamma * lam, store_before=True),
                        "off by one step: slot t holds A_{t+1}; you stored the running advantage "
                        "before adding delta_t (update A = delta_t + gamma lambda A first, then "
                        "store it at t)",
                    ),
                    (
                        _recursion(td, torch.ones_like(mask), gamma * lam),
                        "padding slots must be 0 (multiply by the mask)",
                    ),
                ],
                1e-5,
            )
            raise _Failed(mistake or f"the advantages differ from GAE at {label}")
        return (
            f"GAE matches at gamma = {GAMMA}, lambda = {LAMBDA} and at both limits on "
            f"{mask.shape[0] * mask.shape[1]} padded responses (lengths {list(GAE_LENGTHS)})"
        )

    __tracebackhide__ = True  # noqa: F841 (IPython hides this frame in tracebacks)
    return _run("gae", diagnose, strict)
