"""The clip family as one function of the ratio: the per-token gradient weight w(r).

Every loss in ``losses.compute_per_token_loss`` has, for one token with ratio r and
delta A, the gradient -d loss / d log pi = w(r) * A; the naive loss has w = 1, so w says
how much of REINFORCE's push a token keeps. Closed forms (eps_l = epsilon, eps_h =
epsilon_high, sigma = sigmoid(tau (r - 1))):

* PPO-clip / clip-higher: w = r where the min picks r A, else 0 (A > 0: r <= 1 + eps_h;
  A < 0: r >= 1 - eps_l).
* dual-clip: as PPO-clip, and also 0 for A < 0 once r > c (the bound c A binds).
* CISPO: w = clip(r, 1 - eps_l, 1 + eps_h): never 0.
* SAPO: w = 4 sigma (1 - sigma) r (soft, 1 at r = 1, smooth decay on both sides).
* GSPO (sequence level, one token per response here): PPO-clip's w with the sequence
  ratio s in place of r, and the paper's tiny clip range.

``autograd_weight`` measures w through ``compute_per_token_loss`` itself, so a plot of
``weight_formula`` can be checked point by point.

Taught in notebook 11.
"""

from __future__ import annotations

import math

import torch

from ._validate import check_choice, check_number
from .losses import compute_per_token_loss

#: curve name -> (loss_mode, importance_sampling_level, epsilon, epsilon_high)
CLIP_FAMILY: dict[str, tuple[str, str, float, float]] = {
    "PPO-clip": ("clipped", "token", 0.2, 0.2),
    "clip-higher": ("clipped", "token", 0.2, 0.28),
    "dual-clip": ("dual_clip", "token", 0.2, 0.2),
    "CISPO": ("cispo", "token", 1.0, 1.0),  # no lower clip, weight capped at 2
    "SAPO": ("sapo", "token", 0.2, 0.2),
    "GSPO": ("clipped", "sequence", 3e-4, 4e-4),
}
DUAL_CLIP_C = 3.0
SAPO_TAU = {1: 1.0, -1: 1.05}  # TRL's defaults: tau_pos, tau_neg


def clip_settings(name: str, epsilon: float | None = None, epsilon_high: float | None = None):
    """(epsilon, epsilon_high) of curve ``name``: its ``CLIP_FAMILY`` defaults, or the given
    ones (PPO-clip is symmetric: it takes ``epsilon`` on both sides; SAPO has no clip)."""
    check_choice(name, CLIP_FAMILY, "curve")
    _, _, eps, eps_high = CLIP_FAMILY[name]
    eps = eps if epsilon is None else epsilon
    eps_high = eps_high if epsilon_high is None else epsilon_high
    if name == "PPO-clip":
        eps_high = eps
    check_number(eps, "epsilon", 0, allow_inf=True)
    check_number(eps_high, "epsilon_high", 0, allow_inf=True)
    return eps, eps_high


def weight_formula(
    name: str,
    ratio: float,
    sign: int,
    epsilon: float | None = None,
    epsilon_high: float | None = None,
) -> float:
    """Closed-form w(r) of ``CLIP_FAMILY[name]`` for A = sign (+1 or -1); ``epsilon`` /
    ``epsilon_high`` override the curve's clip edges (``clip_settings``)."""
    mode = CLIP_FAMILY[name][0] if name in CLIP_FAMILY else None
    eps, eps_high = clip_settings(name, epsilon, epsilon_high)
    if mode == "cispo":
        return min(max(ratio, 1 - eps), 1 + eps_high)
    if mode == "sapo":
        sig = 1 / (1 + math.exp(-SAPO_TAU[sign] * (ratio - 1)))
        return 4 * sig * (1 - sig) * ratio
    kept = ratio <= 1 + eps_high if sign > 0 else ratio >= 1 - eps
    if mode == "dual_clip" and sign < 0 and ratio > DUAL_CLIP_C:
        kept = False
    return ratio if kept else 0.0


def autograd_weight(
    name: str,
    ratio: float,
    sign: int,
    epsilon: float | None = None,
    epsilon_high: float | None = None,
) -> float:
    """w(r) measured by autograd: -d loss / d log pi / A at one token with that ratio."""
    mode, level = CLIP_FAMILY[name][:2] if name in CLIP_FAMILY else (None, None)
    eps, eps_high = clip_settings(name, epsilon, epsilon_high)
    log_probs = torch.zeros((1, 1, 1), dtype=torch.float64, requires_grad=True)
    old = torch.full((1, 1, 1), -math.log(ratio), dtype=torch.float64)
    deltas = torch.full((1, 1), float(sign), dtype=torch.float64)
    loss = compute_per_token_loss(
        log_probs, deltas, mode, old, eps, epsilon_high=eps_high,
        importance_sampling_level=level, dual_clip_c=DUAL_CLIP_C,
        sapo_temperature_pos=SAPO_TAU[1], sapo_temperature_neg=SAPO_TAU[-1],
    )  # fmt: skip
    (grad,) = torch.autograd.grad(loss.sum(), log_probs)
    return -grad.item() / sign


def plot_clip_family(ratios, axes) -> None:
    """One panel per sign of A: w(r) of every ``CLIP_FAMILY`` curve (formulas)."""
    styles = [("-", 6, 0.35), ("--", 2.5, 0.9), (":", 3, 1.0), ("-", 1.5, 1.0), ("-", 1.5, 1.0),
              ("-.", 2, 1.0)]  # fmt: skip
    for ax, sign in zip(axes, (1, -1)):
        for name, (style, width, alpha) in zip(CLIP_FAMILY, styles):
            weights = [weight_formula(name, r, sign) for r in ratios]
            ax.plot(ratios, weights, style, lw=width, alpha=alpha, label=name)
        ax.set_xlabel("ratio r = pi / pi_old (GSPO: sequence ratio s)")
        ax.set_ylabel("gradient weight w(r) (naive = 1)")
        ax.set_title(f"A {'> 0' if sign > 0 else '< 0'}")
        ax.axvline(1.0, color="grey", lw=0.5)
    axes[0].legend(fontsize=8)
