"""Policy-gradient losses, one function per loss mode, side by side in ``LOSS_FUNCTIONS``.

naive (REINFORCE), unclipped ratio, clipped ratio (PPO/GRPO, with DAPO's clip-higher), and
the 2025 family: dual-clip PPO, CISPO, SAPO and KL-Cov (a penalty on the few tokens whose
covariance drives entropy collapse); any ratio mode runs per token or, GSPO, per response.

Every mode function has the same signature and returns ``(per_token_loss, metrics)``::

    fn(log_probs, old_log_probs, delta, ratio, mask, options) -> (loss, {name: float})

* ``log_probs`` float[batch, trial, pos]: the current policy's log-probs (with gradient);
* ``old_log_probs`` float[batch, trial, pos]: the sampling policy's, frozen (None: naive);
* ``delta`` float[batch, trial, 1] (one per response, broadcast over pos) or
  float[batch, trial, pos] (one per token, e.g. GAE advantages from ``pgrl_helpers.gae``);
* ``ratio``: pi / pi_old, float[batch, trial, pos] per token or float[batch, trial, 1] per
  response (GSPO); None for naive, which reads no ratio;
* ``mask`` bool[batch, trial, pos] or None (every slot real): the real tokens;
* ``options``: a ``LossOptions`` (epsilon, epsilon_high, ...; a mode reads only its own).

The loss is float[batch, trial, pos], or float[batch, trial, 1] when ratio and delta are
both per response (it broadcasts over pos; ``per_token_loss_and_metrics`` expands it). The
metrics are defined in the mode's docstring, next to its code, and measured over the real
tokens: only the modes that clip report ``clip_fraction`` (the loop records None for the
others). Adding a mode is one function plus one entry in ``LOSS_FUNCTIONS``.

``compute_per_token_loss`` checks its inputs and returns the loss alone (the caller picks
the reduction, e.g. ``masking.aggregate_loss``); ``compute_loss`` takes the mean over every
token, as the lecture does; ``per_token_loss_and_metrics`` (the loop's entry) also returns
the metrics. Notebook 04 teaches the ratio, the clip and the freeze pitfall, 06 one GRPO
step, 11 the 2025 objectives.

Taught in notebook 04; also used in notebooks 00, 03, 05, 06, 08, 09, 11, 15.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from ._validate import (
    MAX_LOG_RATIO,
    check_choice,
    check_finite,
    check_ndim,
    check_number,
    check_same_shape,
)
from .covariance import kl_cov_tokens

#: Where the importance ratio lives: one per token (PPO/GRPO) or one per response (GSPO).
#: The one list of ``importance_sampling_level``'s values (``LossOptions`` checks it; the loop
#: reads the level only through ``loss_options``).
IMPORTANCE_SAMPLING_LEVELS: tuple[str, ...] = ("token", "sequence")

#: Loss modes that act on single tokens, so they need the 'token' level.
TOKEN_LEVEL_MODES: tuple[str, ...] = ("kl_cov",)

FREEZE_MESSAGE = (
    "old_log_probs requires grad: the ratio exp(log_probs - old_log_probs) is then "
    "exactly 1 with zero gradient on the first step (the freeze pitfall). Compute "
    "old_log_probs under torch.no_grad() or call .detach() on them; pass "
    "check_frozen=False only to demonstrate the bug."
)


@dataclass(frozen=True)
class LossOptions:
    """The loss modes' settings, checked on construction; each mode reads only its own.

    ``epsilon`` (eps_l) and ``epsilon_high`` (eps_h; None: epsilon) are the clip edges
    1 - eps_l and 1 + eps_h (clipped, dual_clip, cispo); ``epsilon`` >= 1 switches the lower
    edge off. ``dual_clip_c`` > 1 (dual_clip), ``sapo_temperature_pos`` / ``_neg`` > 0
    (sapo, for delta > 0 / <= 0), ``kl_cov_ratio`` in (0, 1] and ``kl_cov_coef`` >= 0
    (kl_cov), ``importance_sampling_level`` 'token' or 'sequence' (GSPO; every ratio mode).
    Defaults: PPO's epsilon 0.2, dual-clip PPO's c = 3, TRL's SAPO temperatures, verl's
    KL-Cov settings.
    """

    epsilon: float = 0.2
    epsilon_high: float | None = None
    dual_clip_c: float = 3.0
    sapo_temperature_pos: float = 1.0
    sapo_temperature_neg: float = 1.05
    kl_cov_ratio: float = 0.002
    kl_cov_coef: float = 1.0
    importance_sampling_level: str = "token"

    def __post_init__(self) -> None:
        check_number(self.epsilon, "epsilon", 0)
        check_number(self.epsilon_high, "epsilon_high", 0, allow_none=True)
        check_number(self.dual_clip_c, "dual_clip_c", 1)
        check_number(self.sapo_temperature_pos, "sapo_temperature_pos", 0)
        check_number(self.sapo_temperature_neg, "sapo_temperature_neg", 0)
        check_number(self.kl_cov_ratio, "kl_cov_ratio", 0, 1)
        check_number(self.kl_cov_coef, "kl_cov_coef", 0, low_inclusive=True)
        check_choice(
            self.importance_sampling_level, IMPORTANCE_SAMPLING_LEVELS, "importance_sampling_level"
        )

    @property
    def upper(self) -> float:
        """eps_h: ``epsilon_high``, or ``epsilon`` when it is None (the symmetric clip)."""
        return self.epsilon if self.epsilon_high is None else self.epsilon_high


def loss_options(config) -> LossOptions:
    """The loss settings of a ``TrainConfig``: every ``LossOptions`` field read from the config
    field of the same name, ``importance_sampling_level`` included (the one place the loop
    reads the ratio's level).

    ``TrainConfig`` declares those fields with ``LossOptions``' defaults, so the two cannot
    disagree; building the ``LossOptions`` checks every field (naming it and its bound).
    """
    return LossOptions(**{field.name: getattr(config, field.name) for field in fields(LossOptions)})


def check_level_fits_mode(mode: str, level: str) -> None:
    """Raise ValueError if loss ``mode`` acts on single tokens (``TOKEN_LEVEL_MODES``, KL-Cov)
    and ``level`` is not 'token'."""
    if mode in TOKEN_LEVEL_MODES and level != "token":
        raise ValueError(
            f"loss_mode {mode!r} penalises single tokens: it needs importance_sampling_level "
            f"'token', got {level!r}"
        )


def check_loss_fields(config) -> None:
    """Raise naming the first bad loss field of a ``TrainConfig``.

    ``loss_mode`` one of ``LOSS_MODES``; its options checked by ``loss_options``; KL-Cov
    penalises single tokens, so it needs ``importance_sampling_level`` 'token'
    (``check_level_fits_mode``).
    """
    check_choice(config.loss_mode, LOSS_MODES, "loss_mode")
    check_level_fits_mode(config.loss_mode, loss_options(config).importance_sampling_level)


def _fraction(flags: torch.Tensor, mask: torch.Tensor | None, shape) -> float:
    """Fraction of the real tokens (``mask``; None: all) where ``flags`` (broadcast to
    ``shape``) holds; NaN when the mask selects no token."""
    flags = flags.expand(shape)
    return (flags if mask is None else flags[mask]).float().mean().item()


def _ppo_objective(ratio, delta, options) -> torch.Tensor:
    """PPO-clip's objective (maximised): min(r A, clip(r, 1 - eps_l, 1 + eps_h) A)."""
    clipped_ratio = ratio.clamp(1 - options.epsilon, 1 + options.upper)
    return torch.minimum(ratio * delta, clipped_ratio * delta)


def _ppo_cut(ratio, delta, options) -> torch.Tensor:
    """bool: the clipped PPO term is active, so the token's gradient is 0 (``clip_mask``)."""
    high = (delta > 0) & (ratio > 1 + options.upper)
    return high | (delta < 0) & (ratio < 1 - options.epsilon)


# --------------------------------------------------------------------------------------
# One function per loss mode (the signature and shapes: the module docstring)
# --------------------------------------------------------------------------------------


def naive_loss(log_probs, old_log_probs, delta, ratio, mask, options):
    """REINFORCE (Williams 1992): -log pi * A. No ratio, no metrics."""
    return -log_probs * delta, {}


def unclipped_loss(log_probs, old_log_probs, delta, ratio, mask, options):
    """-r A: the importance-weighted surrogate L^CPI (PPO, Schulman et al. 2017, arXiv
    1707.06347, eq. 6); its gradient at r = 1 is REINFORCE's. No metrics."""
    return -ratio * delta, {}


def clipped_loss(log_probs, old_log_probs, delta, ratio, mask, options):
    """-min(r A, clip(r, 1 - eps_l, 1 + eps_h) A): PPO-clip (arXiv 1707.06347, eq. 7), as in
    GRPO (arXiv 2402.03300, eq. 3); eps_h != eps_l is DAPO's clip-higher (arXiv 2503.14476).

    Metric ``clip_fraction``: real tokens whose gradient the clip cuts, A > 0 with
    r > 1 + eps_h or A < 0 with r < 1 - eps_l (``clip_mask``; GSPO: every token of a
    clipped response).
    """
    objective = _ppo_objective(ratio, delta, options)
    cut = _ppo_cut(ratio, delta, options)
    return -objective, {"clip_fraction": _fraction(cut, mask, log_probs.shape)}


def dual_clip_loss(log_probs, old_log_probs, delta, ratio, mask, options):
    """PPO-clip, and for A < 0 the objective bounded below by c A:
    -max(min(r A, clip(r) A), c A) with c = ``dual_clip_c`` > 1 (dual-clip PPO, Ye et al.
    2020, arXiv 1912.09729). A huge ratio on a bad token no longer gives an unbounded update.

    Metric ``clip_fraction``: real tokens whose gradient a clip cuts: PPO's (``clip_mask``)
    plus A < 0 with r > c.
    """
    objective = _ppo_objective(ratio, delta, options)
    bounded = torch.maximum(objective, options.dual_clip_c * delta)
    objective = torch.where(delta < 0, bounded, objective)
    cut = _ppo_cut(ratio, delta, options) | (delta < 0) & (ratio > options.dual_clip_c)
    return -objective, {"clip_fraction": _fraction(cut, mask, log_probs.shape)}


def cispo_loss(log_probs, old_log_probs, delta, ratio, mask, options):
    """-sg(clip(r, 1 - eps_l, 1 + eps_h)) A log pi (CISPO, MiniMax-M1, arXiv 2506.13585,
    eq. 4-5; sg = stop-gradient): the *weight* is clipped, so no token's gradient is dropped.

    Metric ``weight_clip_fraction``: real tokens whose weight is clipped, r outside
    [1 - eps_l, 1 + eps_h] (gradient kept, only scaled; not a ``clip_fraction``).
    """
    weight = ratio.clamp(1 - options.epsilon, 1 + options.upper).detach()
    outside = (ratio < 1 - options.epsilon) | (ratio > 1 + options.upper)
    return -weight * delta * log_probs, {
        "weight_clip_fraction": _fraction(outside, mask, log_probs.shape)
    }


def sapo_loss(log_probs, old_log_probs, delta, ratio, mask, options):
    """-(4 / tau) sigmoid(tau (r - 1)) A, tau = ``sapo_temperature_pos`` for A > 0 and
    ``sapo_temperature_neg`` otherwise (SAPO, arXiv 2511.20347; TRL's ``loss_type="sapo"``):
    a soft gate with gradient weight 4 sigma (1 - sigma) r, 1 at r = 1. It never clips: no
    metrics.
    """
    tau = torch.where(
        delta > 0,
        torch.full_like(delta, float(options.sapo_temperature_pos)),
        torch.full_like(delta, float(options.sapo_temperature_neg)),
    )
    return -torch.sigmoid(tau * (ratio - 1)) * (4 / tau) * delta, {}


def kl_cov_loss(log_probs, old_log_probs, delta, ratio, mask, options):
    """-r A, plus ``kl_cov_coef`` |log pi - log pi_old| on the ``kl_cov_ratio`` fraction of
    real tokens with the largest covariance (log pi - mean)(A - mean) (``kl_cov_tokens``;
    KL-Cov, Cui et al. 2025, arXiv 2505.22617; verl's ``loss_mode="kl_cov"``). Token level
    only (``TOKEN_LEVEL_MODES``: ``per_token_loss_and_metrics`` refuses the sequence level).
    No metrics.
    """
    chosen = kl_cov_tokens(log_probs, delta.expand(log_probs.shape), options.kl_cov_ratio, mask)
    penalty = options.kl_cov_coef * (log_probs - old_log_probs).abs()
    return -ratio * delta + torch.where(chosen, penalty, torch.zeros_like(penalty)), {}


#: loss mode -> ``fn(log_probs, old_log_probs, delta, ratio, mask, options) -> (loss, metrics)``.
LOSS_FUNCTIONS: dict[str, object] = {
    "naive": naive_loss,
    "unclipped": unclipped_loss,
    "clipped": clipped_loss,
    "dual_clip": dual_clip_loss,
    "cispo": cispo_loss,
    "sapo": sapo_loss,
    "kl_cov": kl_cov_loss,
}
LOSS_MODES: tuple[str, ...] = tuple(LOSS_FUNCTIONS)
#: The modes that read no ratio (and so need no old_log_probs).
RATIO_FREE_MODES: tuple[str, ...] = ("naive",)

# --------------------------------------------------------------------------------------
# The ratio, the checked entry points
# --------------------------------------------------------------------------------------


def compute_ratio(
    log_probs: torch.Tensor, old_log_probs: torch.Tensor, max_log_ratio: float = MAX_LOG_RATIO
) -> torch.Tensor:
    """Per-token importance ratio pi/pi_old = exp(log_probs - old_log_probs), [batch, trial, pos].

    The log-ratio is clamped to [-max_log_ratio, max_log_ratio] first, so the ratio
    (and its gradient) can never be inf or NaN; beyond the clamp the gradient is 0.

    Taught in notebook 06.
    """
    check_same_shape(log_probs, old_log_probs, "log_probs", "old_log_probs")
    return torch.exp((log_probs - old_log_probs).clamp(-max_log_ratio, max_log_ratio))


def _check_deltas(deltas, shape) -> None:
    """deltas float[batch, trial] (one per response) or float[batch, trial, pos] (per token)."""
    if not isinstance(deltas, torch.Tensor):
        raise TypeError(f"deltas must be a torch.Tensor, got {type(deltas).__name__}")
    if tuple(deltas.shape) not in (tuple(shape[:2]), tuple(shape)):
        raise ValueError(
            f"deltas must be [batch, trial] or [batch, trial, pos] matching log_probs: "
            f"deltas {list(deltas.shape)}, log_probs {list(shape)}"
        )


def _per_token(deltas: torch.Tensor) -> torch.Tensor:
    """[batch, trial] -> [batch, trial, 1] (broadcasts over pos); [batch, trial, pos] as is."""
    return deltas[:, :, None] if deltas.ndim == 2 else deltas


def _bool_mask(mask, log_probs) -> torch.Tensor | None:
    """The response mask as bool[batch, trial, pos] (None: every slot is real)."""
    if mask is None:
        return None
    check_same_shape(log_probs, mask, "log_probs", "mask")
    if mask.dtype != torch.bool:
        if not ((mask == 0) | (mask == 1)).all():
            raise ValueError("mask must hold only 0 and 1 (or be bool)")
        mask = mask != 0
    return mask


def _check_old(mode, log_probs, old_log_probs, check_frozen) -> None:
    if old_log_probs is None:
        raise ValueError(
            f"loss mode {mode!r} needs old_log_probs (the frozen log-probs of the "
            "policy that sampled the responses)"
        )
    check_same_shape(log_probs, old_log_probs, "log_probs", "old_log_probs")
    check_finite(old_log_probs, "old_log_probs")
    if check_frozen and old_log_probs.requires_grad:
        raise ValueError(FREEZE_MESSAGE)


def sequence_log_ratio(
    log_probs: torch.Tensor, old_log_probs: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """GSPO's log s_i = (1/|y_i|) sum_t (log pi_t - log pi_old,t): float[batch, trial, 1].

    The mean runs over response i's real tokens (``mask`` float/bool[batch, trial, pos],
    None: all). GSPO (Zheng et al. 2025, arXiv 2507.18071) eq. 7:
    s_i = (pi(y_i|x) / pi_old(y_i|x))^(1/|y_i|). Padding is selected away (never multiplied
    by 0), so a NaN there cannot leak in.
    """
    check_same_shape(log_probs, old_log_probs, "log_probs", "old_log_probs")
    mask = _bool_mask(mask, log_probs)
    diff = log_probs - old_log_probs
    if mask is None:
        return diff.mean(dim=-1, keepdim=True)
    if not mask.any(dim=-1).all():
        raise ValueError(
            "mask: importance_sampling_level 'sequence' averages each response's log-ratio "
            "over its real tokens, but some response has none (an all-zero mask row)"
        )
    total = torch.where(mask, diff, torch.zeros_like(diff)).sum(dim=-1, keepdim=True)
    return total / mask.sum(dim=-1, keepdim=True).to(diff.dtype)


def _importance_ratio(log_probs, old_log_probs, level: str, mask) -> torch.Tensor:
    """r_t (token: float[batch, trial, pos]) or GSPO's s_i (sequence: float[batch, trial, 1]),
    the log-ratio clamped to +-MAX_LOG_RATIO before exp (arXiv 2507.18071 eq. 5-7)."""
    if level == "token":
        return compute_ratio(log_probs, old_log_probs)
    log_s = sequence_log_ratio(log_probs, old_log_probs, mask)
    return torch.exp(log_s.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO))


def per_token_loss_and_metrics(
    log_probs: torch.Tensor,
    deltas: torch.Tensor,
    mode: str,
    old_log_probs: torch.Tensor | None = None,
    options: LossOptions = LossOptions(),
    *,
    check_frozen: bool = True,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """(per-token loss float[batch, trial, pos], the mode's metrics): the checked dispatch to
    ``LOSS_FUNCTIONS[mode]``, with the ratio at ``options.importance_sampling_level``.

    log_probs float[batch, trial, pos]; deltas float[batch, trial] or [batch, trial, pos];
    old_log_probs float[batch, trial, pos], frozen (unless ``check_frozen=False``), needed by
    every mode but naive; ``mask`` float/bool[batch, trial, pos] (None: all real) is read
    by the sequence level, by kl_cov and by the metrics. The loop's objective calls this
    (``objective.surrogate_loss``).
    """
    check_choice(mode, LOSS_FUNCTIONS, "loss mode")
    check_ndim(log_probs, 3, "log_probs", "batch, trial, pos")
    _check_deltas(deltas, log_probs.shape)
    check_finite(deltas, "deltas")
    check_finite(log_probs, "log_probs")
    if not isinstance(options, LossOptions):
        raise TypeError(f"options must be a LossOptions, got {type(options).__name__}")
    check_level_fits_mode(mode, options.importance_sampling_level)
    bool_mask = _bool_mask(mask, log_probs)
    ratio = None
    if mode not in RATIO_FREE_MODES:
        _check_old(mode, log_probs, old_log_probs, check_frozen)
        level = options.importance_sampling_level
        ratio = _importance_ratio(log_probs, old_log_probs, level, bool_mask)
    fn = LOSS_FUNCTIONS[mode]
    loss, metrics = fn(log_probs, old_log_probs, _per_token(deltas), ratio, bool_mask, options)
    return loss.expand(log_probs.shape), metrics


def compute_per_token_loss(
    log_probs: torch.Tensor,
    deltas: torch.Tensor,
    mode: str,
    old_log_probs: torch.Tensor | None = None,
    epsilon: float = 0.2,
    check_frozen: bool = True,
    epsilon_high: float | None = None,
    *,
    importance_sampling_level: str = "token",
    mask: torch.Tensor | None = None,
    **mode_options,
) -> torch.Tensor:
    """Per-token loss float[batch, trial, pos] of loss ``mode``; minimise its (masked) mean.

    With r the importance ratio, A = delta (broadcast over pos), eps_l = ``epsilon``,
    eps_h = ``epsilon_high`` (None: epsilon), sg the stop-gradient (each mode's function
    in ``LOSS_FUNCTIONS`` cites its paper):

    * ``naive``:     -log_probs * A
    * ``unclipped``: -r A
    * ``clipped``:   -min(r A, clip(r, 1 - eps_l, 1 + eps_h) A)   (PPO/GRPO; DAPO clip-higher)
    * ``dual_clip``: -max(min(r A, clip(r) A), c A) for A < 0, c = ``dual_clip_c`` > 1
    * ``cispo``:     -sg(clip(r, 1 - eps_l, 1 + eps_h)) A log_probs
    * ``sapo``:      -(4 / tau) sigmoid(tau (r - 1)) A, tau by the sign of A
    * ``kl_cov``:    -r A + ``kl_cov_coef`` |log_probs - old_log_probs| on the top
      ``kl_cov_ratio`` of real tokens by covariance (token level only; reads ``mask``)

    ``importance_sampling_level``: ``"token"`` (r_t per token, ``compute_ratio``) or
    ``"sequence"`` (GSPO: s_i = exp(``sequence_log_ratio``), one ratio per response,
    broadcast over pos). ``mask`` float/bool[batch, trial, pos] says which slots are real
    (None: all); aggregate the result with ``masking.aggregate_loss`` (GSPO's eq. 5 is
    ``sequence_mean``). ``mode_options``: ``dual_clip_c``, ``sapo_temperature_pos``,
    ``sapo_temperature_neg``, ``kl_cov_ratio``, ``kl_cov_coef`` (``LossOptions``, which
    checks every option, whatever the mode). All modes have the same gradient as ``naive``
    when old_log_probs equal log_probs (detached). For the clipped tokens call ``clip_mask``;
    for the metrics, ``per_token_loss_and_metrics``.

    Taught in notebook 04; also used in notebooks 03, 06, 08, 11, 15.
    """
    options = LossOptions(
        epsilon, epsilon_high, importance_sampling_level=importance_sampling_level, **mode_options
    )
    return per_token_loss_and_metrics(
        log_probs, deltas, mode, old_log_probs, options, check_frozen=check_frozen, mask=mask
    )[0]


def compute_loss(
    log_probs: torch.Tensor,
    deltas: torch.Tensor,
    mode: str,
    old_log_probs: torch.Tensor | None = None,
    epsilon: float = 0.2,
    check_frozen: bool = True,
    epsilon_high: float | None = None,
    **objective_options,
) -> torch.Tensor:
    """Scalar loss: the mean of ``compute_per_token_loss`` over batch, trial and pos.

    ``epsilon`` defaults to 0.2 (the lecture hard-coded 0.01); ``epsilon_high`` is the
    optional separate upper clip edge (clip-higher). ``objective_options`` are passed on
    (``importance_sampling_level``, ``dual_clip_c``, the SAPO temperatures). For
    variable-length responses use ``compute_per_token_loss`` with
    ``masking.aggregate_loss`` instead of this mean.

    Taught in notebook 04; also used in notebooks 05, 06, 09.
    """
    if "mask" in objective_options:
        raise ValueError(
            "compute_loss takes the plain mean over every slot; with a mask use "
            "compute_per_token_loss(..., mask=mask) and masking.aggregate_loss"
        )
    return compute_per_token_loss(
        log_probs,
        deltas,
        mode,
        old_log_probs,
        epsilon,
        check_frozen,
        epsilon_high,
        **objective_options,
    ).mean()


def clip_mask(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    deltas: torch.Tensor,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
) -> torch.Tensor:
    """Which tokens the clipped loss cuts off: int8[batch, trial, pos].

    +1 (clipped high): delta > 0 and ratio > 1 + epsilon_high (default epsilon);
    -1 (clipped low): delta < 0 and ratio < 1 - epsilon; 0 otherwise. Exactly the tokens
    where the clipped loss has zero gradient (TRL logs their means as
    ``clip_ratio/high_mean`` and ``clip_ratio/low_mean``).
    """
    _check_deltas(deltas, log_probs.shape)
    upper = epsilon if epsilon_high is None else epsilon_high
    with torch.no_grad():
        ratio = compute_ratio(log_probs, old_log_probs)
        delta = _per_token(deltas).expand_as(ratio)
        high = (delta > 0) & (ratio > 1 + upper)
        low = (delta < 0) & (ratio < 1 - epsilon)
        return high.to(torch.int8) - low.to(torch.int8)


def clip_fraction(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    deltas: torch.Tensor,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    mask: torch.Tensor | None = None,
) -> float:
    """Fraction of tokens whose clipped term is active (gradient cut off), in [0, 1].

    A token is clipped when delta > 0 and ratio > 1 + epsilon_high (default epsilon),
    or delta < 0 and ratio < 1 - epsilon (see ``clip_mask``): exactly the tokens where
    ``clipped`` has zero gradient. A ratio outside the range with the other sign of
    delta is *not* counted (its gradient is kept). ``mask`` (float[batch, trial, pos],
    optional) restricts the count to real response tokens. The loop records the same
    number as ``clipped_loss``'s metric.

    Taught in notebook 04; also used in notebook 06.
    """
    with torch.no_grad():
        clipped = clip_mask(log_probs, old_log_probs, deltas, epsilon, epsilon_high) != 0
        if mask is None:
            return clipped.float().mean().item()
        check_same_shape(log_probs, mask, "log_probs", "mask")
        selected = mask != 0
        if not selected.any():
            raise ValueError("clip_fraction: the mask selects no tokens")
        return clipped[selected].float().mean().item()
