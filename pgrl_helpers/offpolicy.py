"""Off-policy rollouts: a stale or mismatched sampler, and the TIS / MIS corrections.

In asynchronous RL (AReaL, PRIME-RL) the responses of epoch e are sampled by a copy of
the policy that lags k versions behind the trainer, and the sampling engine (vLLM) has
its own numerics, so its log-probs differ from the trainer's even at the same weights.
``StaleSource`` (``TrainConfig.rollout_source = "stale"``) reproduces both on a CPU:

* **staleness** ``k = TrainConfig.staleness`` counts *epochs* (policy versions, one
  version per weight sync, AReaL's eta): the batch of epoch e is sampled with the
  weights the trainer had at the start of epoch max(0, e - k). k = 0 is on-policy.
  Every batch of an epoch counts as that epoch's, the refills of dynamic sampling too.
* **mismatch**: the sampler's logits are divided by ``sampler_temperature`` and/or
  rounded to ``sampler_dtype`` ('bfloat16') before the softmax; the loss never sees
  either, as with an engine whose sampling settings or precision differ from training.

Which log-probs are "old", and which weight multiplies each token's loss, is
``TrainConfig.off_policy_correction`` (Yao et al. 2025, "Your efficient RL framework
secretly brings you off-policy RL training", and TRL's ``vllm_importance_sampling_mode``).
With pi_samp the sampler, pi_prox the trainer's policy when the batch arrives
(recomputed by the trainer, TRL's ``old_per_token_logps``) and w = pi_prox / pi_samp:

* ``"none"``: old = pi_samp; the loss's ratio pi / pi_samp is the whole importance
  weight (with loss_mode 'clipped': PPO against the behaviour policy);
* ``"recompute"``: old = pi_prox and no weight: the sampler is ignored (biased; what
  frameworks did before the TIS write-up);
* ``"tis"``: old = pi_prox, each token's loss times min(w, C) (truncated IS);
* ``"mis"``: old = pi_prox, each token's loss times w if w <= C else 0 (masked IS).

``correction_level`` 'token' uses per-token w; 'sequence' the product over the
response's real tokens, one weight per response. C = ``correction_cap``.

Two-sided: with ``correction_cap_low`` = C_low (None: one-sided, as above), 'tis' also
raises weights below C_low to C_low, and 'mis' also drops (weight 0) tokens or sequences
whose weight is below C_low: the token / sequence importance-sampling masks of TRL
(``vllm_importance_sampling_mode`` 'token_mask' / 'sequence_mask' with
``vllm_importance_sampling_clip_min``) and verl's rollout-correction lower threshold. A
weight far below 1 marks a token the sampler found much likelier than the trainer does.

Taught in notebook 12.
"""

from __future__ import annotations

import copy
from collections import deque

import torch

from ._validate import check_choice, check_number

CORRECTIONS: tuple[str, ...] = ("none", "recompute", "tis", "mis")
CORRECTION_LEVELS: tuple[str, ...] = ("token", "sequence")
SAMPLER_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}

#: log-weights are clamped to +-MAX_LOG_WEIGHT before exp (a sequence weight is a product).
MAX_LOG_WEIGHT = 30.0


def importance_weights(
    log_p_train: torch.Tensor,
    log_p_sampler: torch.Tensor,
    mask: torch.Tensor,
    level: str = "token",
) -> torch.Tensor:
    """Raw importance weights w = pi_train / pi_sampler, float[batch, trial, pos].

    ``level`` 'token': exp(log_p_train - log_p_sampler) per token; 'sequence':
    exp(sum over real tokens of that log-ratio), the same for every token of a response.
    Padding slots (mask 0) get weight 1. Log-weights are clamped to +-MAX_LOG_WEIGHT.
    """
    check_choice(level, CORRECTION_LEVELS, "correction_level")
    if log_p_train.shape != log_p_sampler.shape or log_p_train.shape != mask.shape:
        raise ValueError(
            f"log_p_train {list(log_p_train.shape)}, log_p_sampler "
            f"{list(log_p_sampler.shape)} and mask {list(mask.shape)} must have one shape"
        )
    log_w = (log_p_train - log_p_sampler) * mask
    if level == "sequence":
        log_w = log_w.sum(dim=-1, keepdim=True).expand_as(log_w)
    w = torch.exp(log_w.clamp(-MAX_LOG_WEIGHT, MAX_LOG_WEIGHT))
    return torch.where(mask > 0, w, torch.ones_like(w))


def corrected_weights(
    weights: torch.Tensor, correction: str, cap: float, cap_low: float | None = None
) -> torch.Tensor:
    """The per-token loss weights of a correction, from raw weights w (any shape).

    'tis': min(w, cap) (truncated IS), and max(., cap_low) when cap_low is given; 'mis': w
    where w <= cap (and w >= cap_low, when given), else exactly 0 (masked IS, one- or
    two-sided); 'none' / 'recompute': ones (no weight). cap may be math.inf; cap_low must be
    in [0, cap) or None.
    """
    check_choice(correction, CORRECTIONS, "off_policy_correction")
    check_number(cap, "correction_cap", 0, allow_inf=True)
    check_number(
        cap_low,
        "correction_cap_low",
        0,
        cap,
        low_inclusive=True,
        high_inclusive=False,
        allow_none=True,
        note="below correction_cap",
    )
    if correction == "tis":
        return weights.clamp(min=cap_low, max=cap)
    if correction == "mis":
        keep = weights <= cap
        if cap_low is not None:
            keep = keep & (weights >= cap_low)
        return torch.where(keep, weights, torch.zeros_like(weights))
    return torch.ones_like(weights)


def effective_sample_size(weights: torch.Tensor) -> float:
    """Kong's (1992) effective sample size (sum w)^2 / sum w^2 of a 1-D tensor of weights.

    Equal weights give the sample count n; one dominant weight gives about 1.
    """
    if weights.ndim != 1 or weights.numel() == 0:
        raise ValueError(f"weights must be a non-empty 1-D tensor, got {list(weights.shape)}")
    if not torch.isfinite(weights).all() or (weights < 0).any():
        raise ValueError("weights must be finite and >= 0")
    total = weights.double().sum()
    squares = (weights.double() ** 2).sum()
    if squares == 0:
        raise ValueError("weights are all zero: the effective sample size is undefined")
    return (total**2 / squares).item()


def weight_units(weights: torch.Tensor, mask: torch.Tensor, level: str) -> torch.Tensor:
    """The weights as one 1-D sample: real tokens ('token') or one per response ('sequence')."""
    if level == "sequence":
        return weights[..., 0].flatten()
    return weights[mask > 0]


def cut_fraction(units: torch.Tensor, cap: float, cap_low: float | None = None) -> float:
    """Fraction of raw weights ``units`` (1-D) outside [cap_low, cap]: those TIS clamps and MIS
    drops. A weight equal to a bound is kept; ``cap_low`` None: one-sided (only w > cap)."""
    cut = units > cap
    if cap_low is not None:
        cut = cut | (units < cap_low)
    return cut.float().mean().item()


def check_off_policy_fields(config) -> None:
    """Raise ValueError naming the first bad off-policy field of a ``TrainConfig``."""
    k, t = config.staleness, config.sampler_temperature
    check_number(k, "staleness", 0, low_inclusive=True, integer=True, note="epochs of lag")
    check_number(t, "sampler_temperature", 0)
    check_choice(config.sampler_dtype, SAMPLER_DTYPES, "sampler_dtype")
    check_choice(config.off_policy_correction, CORRECTIONS, "off_policy_correction")
    check_choice(config.correction_level, CORRECTION_LEVELS, "correction_level")
    low = config.correction_cap_low
    corrected_weights(torch.ones(1), "tis", config.correction_cap, low)  # checks the caps
    if low is not None and config.off_policy_correction not in ("tis", "mis"):
        raise ValueError(
            "correction_cap_low bounds the weights of 'tis' / 'mis' from below: set "
            f"off_policy_correction to one of them, got {config.off_policy_correction!r}"
        )
    uses_stale = config.rollout_source == "stale"
    if not uses_stale and (
        k != 0
        or t != 1
        or config.sampler_dtype != "float32"
        or config.off_policy_correction != "none"
    ):
        raise ValueError(
            "staleness, sampler_temperature, sampler_dtype and off_policy_correction act "
            f"only with rollout_source 'stale' (got rollout_source {config.rollout_source!r})"
        )


def mismatched_sampler(policy, temperature: float = 1.0, dtype: str = "float32"):
    """A frozen deep copy of ``policy`` whose logits are rounded to ``dtype`` and divided
    by ``temperature`` before every softmax (a forward hook; none when both are neutral).
    """
    sampler = copy.deepcopy(policy)
    for p in sampler.parameters():
        p.requires_grad_(False)
    torch_dtype = SAMPLER_DTYPES[dtype]
    if temperature != 1 or torch_dtype != torch.float32:

        def engine_logits(module, args, logits):
            return logits.to(torch_dtype).float() / temperature

        sampler.register_forward_hook(engine_logits)
    return sampler


class StaleSource:
    """Rollout source ``"stale"``: a lagging, possibly mismatched copy of the policy samples.

    The first ``sample`` of an epoch (the first call after an optimizer step, or the very
    first) stores the trainer's current weights as a new version; every ``sample`` draws with
    the version ``staleness`` epochs old (or the oldest kept, early on). A refill within the
    epoch (dynamic sampling's ``Resampler``) stores nothing, so it uses the epoch's sampler
    and the lag stays ``staleness`` epochs. ``old_log_probs`` computes the sampler's and the
    trainer's log-probs, sets ``rollout.loss_weights``, adds ``ess_fraction``,
    ``is_weight_max`` and ``is_cut_fraction`` to ``rollout.metrics`` (keeping what a batch
    filter put there) and returns the old log-probs chosen by ``off_policy_correction``
    (module docstring).
    """

    def __init__(self, policy, config):
        self.policy = policy
        self.config = config
        self.sampler = mismatched_sampler(policy, config.sampler_temperature, config.sampler_dtype)
        self.versions: deque = deque(maxlen=config.staleness + 1)
        self.trainer_moved = True  # True: the next sample starts an epoch (a new version)

    def sample(self, prompts, num_samples, generator):
        if self.trainer_moved:
            state = {name: t.detach().clone() for name, t in self.policy.state_dict().items()}
            self.versions.append(state)
            self.sampler.load_state_dict(self.versions[0])
            self.trainer_moved = False
        return self.sampler.sample(prompts, num_samples, generator)

    def old_log_probs(self, rollout) -> torch.Tensor:
        config = self.config
        behaviour = self.sampler.log_probs(rollout.prompts, rollout.responses)
        proximal = self.policy.log_probs(rollout.prompts, rollout.responses)
        raw = importance_weights(proximal, behaviour, rollout.mask, config.correction_level)
        units = weight_units(raw, rollout.mask, config.correction_level)
        low = config.correction_cap_low
        rollout.metrics.update(
            ess_fraction=effective_sample_size(units) / units.numel(),
            is_weight_max=units.max().item(),
            is_cut_fraction=cut_fraction(units, config.correction_cap, low),
        )
        if config.off_policy_correction in ("tis", "mis"):
            weights = corrected_weights(
                raw, config.off_policy_correction, config.correction_cap, low
            )
            rollout.loss_weights = weights
        if config.off_policy_correction == "none":
            return behaviour
        return proximal

    def after_optimizer_step(self) -> None:
        """The trainer's weights changed: the next ``sample`` begins a new epoch's version."""
        self.trainer_moved = True
