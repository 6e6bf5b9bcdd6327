"""Sample-based estimators of the reverse KL, KL(pi || pi_ref), with samples y ~ pi.

pi is the policy being trained (it sampled the responses) and pi_ref the frozen
reference model. KL(pi || pi_ref) = E_pi[log pi - log pi_ref] is the *reverse* KL in
the RLHF convention (InstructGPT, DeepSeekMath, TRL): the policy is the approximating
distribution and the expectation is under it. It is the KL of the
KL-regularised objective max E_pi[R] - beta KL(pi || pi_ref), whose optimum is
pi_ref exp(R / beta) / Z; sampling from pi only makes it cheap to estimate.

Inputs are per-token log-probs of the *sampled* tokens, float[batch, trial, pos]
(the lecture's docstring wrongly says [batch, trial, pos, vocab]). With
w = pi_ref(y) / pi(y) = exp(ref_log_probs - log_probs) (Schulman, "Approximating KL
divergence", 2020, http://joschu.net/blog/kl-approx.html):

* k1 = -log w                 unbiased, can be negative, high variance;
* k2 = (log w)^2 / 2          biased, non-negative, low variance;
* k3 = w - 1 - log w          unbiased (E_pi[w] = 1), non-negative, low variance.

As *loss* terms (differentiated with the samples fixed) they do not give grad KL(pi || pi_ref)
in general (Tang & Munos 2025, arXiv 2506.09477): k1's expected gradient is 0, k2's is
grad KL(pi || pi_ref), k3's is grad KL(pi_ref || pi). ``kl_k3_bias_corrected`` (k3 times the
differentiable ratio pi / pi_old: DeepSeek-V3.2, TRL ``use_bias_correction_kl``) restores
grad KL(pi || pi_ref).

Taught in notebook 05; also used in notebooks 00, 06, 09.
"""

from __future__ import annotations

import torch

from ._validate import (
    MAX_LOG_RATIO,
    check_choice,
    check_finite,
    check_ndim,
    check_number,
    check_positive_ints,
    check_same_shape,
)
from .masking import masked_normalize

KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3")


def _log_w(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """log w = log pi_ref - log pi per sample, unclamped (inputs checked)."""
    check_same_shape(log_probs, ref_log_probs, "log_probs", "ref_log_probs")
    check_finite(log_probs, "log_probs")
    check_finite(ref_log_probs, "ref_log_probs")
    return ref_log_probs - log_probs


def _log_r(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    # k3 exponentiates log w: clamp so that exp never overflows into inf (k1, k2 need no cap)
    return _log_w(log_probs, ref_log_probs).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)


def kl_k1(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """k1 = log pi - log pi_ref per sample (same shape and dtype as the inputs).

    Not capped: -log w is finite for finite inputs, and its gradient (+-1) must keep
    pulling on the tokens that drifted furthest (verl and Schulman's k1 have no cap;
    OpenRLHF clamps the *output* of every estimator at +-10 instead).

    Taught in notebook 05.
    """
    return -_log_w(log_probs, ref_log_probs)


def kl_k2(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """k2 = (log pi_ref - log pi)^2 / 2 per sample (same shape and dtype), not capped.

    A square of finite numbers: no overflow to guard against below ~1e154 (float64) or
    ~1e19 (float32), far beyond any log-prob difference.

    Taught in notebook 05.
    """
    return 0.5 * _log_w(log_probs, ref_log_probs) ** 2


def kl_k3_unclamped(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """k3 = w - 1 - log w per sample, w = pi_ref / pi, *without* the final clamp.

    Mathematically >= 0 (log t <= t - 1); in floating point it can dip below 0 by
    round-off only. Use it to check that claim; ``kl_k3`` clamps the round-off away.

    Taught in notebook 05; also used in notebook 06.
    """
    log_r = _log_r(log_probs, ref_log_probs)
    # expm1 keeps precision when log_r is tiny (exp(u) - 1 - u in float32 loses it)
    return torch.expm1(log_r) - log_r


def kl_k3(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """k3 = pi_ref/pi - 1 - log(pi_ref/pi) per sample, >= 0, 0 exactly where log pi == log pi_ref.

    ``kl_k3_unclamped`` followed by clamp_min(0), which removes float round-off only (the
    unclamped value is never below about -1e-7 in float32; see the tests).

    Taught in notebook 05; also used in notebook 06.
    """
    return kl_k3_unclamped(log_probs, ref_log_probs).clamp_min(0)


def kl_k3_bias_corrected(
    log_probs: torch.Tensor, old_log_probs: torch.Tensor, ref_log_probs: torch.Tensor
) -> torch.Tensor:
    """k3 weighted by the differentiable ratio pi / pi_old, per token (same shape as inputs).

    log_probs (with gradients), old_log_probs (frozen, the policy that sampled), ref_log_probs,
    all float[batch, trial, pos]. Samples come from pi_old, so E_old[(pi/pi_old) k3] =
    E_pi[k3] = KL(pi || pi_ref), and because the ratio carries the gradient of the sampling
    weights, its expected gradient is grad KL(pi || pi_ref) (plain k3 gives grad
    KL(pi_ref || pi)). DeepSeek-V3.2 (arXiv 2512.02556, "unbiased KL estimate");
    TRL ``GRPOConfig(use_bias_correction_kl=True)`` multiplies k3 by the same ratio.
    """
    check_same_shape(log_probs, old_log_probs, "log_probs", "old_log_probs")
    check_finite(old_log_probs, "old_log_probs")
    if old_log_probs.requires_grad:
        raise ValueError(
            "old_log_probs requires grad: the ratio pi/pi_old would be exactly 1 with zero "
            "gradient (the freeze pitfall); compute them under torch.no_grad() or .detach()"
        )
    ratio = torch.exp((log_probs - old_log_probs).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO))
    return ratio * kl_k3(log_probs, ref_log_probs)


def kl_estimate(
    log_probs: torch.Tensor, ref_log_probs: torch.Tensor, estimator: str = "k3"
) -> torch.Tensor:
    """Per-sample estimator by name ('k1', 'k2' or 'k3'); same shape as the inputs."""
    check_choice(estimator, KL_ESTIMATORS, "KL estimator")
    return {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}[estimator](log_probs, ref_log_probs)


def compute_kl_penalty(
    log_probs: torch.Tensor, ref_log_probs: torch.Tensor, estimator: str = "k3"
) -> torch.Tensor:
    """Scalar estimate of the reverse KL, KL(pi || pi_ref), per response.

    log_probs, ref_log_probs float[batch, trial, pos] (samples from the policy) ->
    sum over pos (one response's KL), then mean over batch and trial.

    Taught in notebook 05; also used in notebooks 06, 09.
    """
    check_ndim(log_probs, 3, "log_probs", "batch, trial, pos")
    return kl_estimate(log_probs, ref_log_probs, estimator).sum(dim=-1).mean()


# --------------------------------------------------------------------------------------
# Exact (closed-form) KL between categorical distributions, to check the estimators
# --------------------------------------------------------------------------------------


def categorical_kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """Closed-form KL(p || q) = sum_x p(x) (log p(x) - log q(x)) over the last axis.

    p_logits, q_logits float[..., vocab] (unnormalised logits; softmax is taken here)
    -> float[...] (one KL per distribution, in nats, >= 0). Both arguments must have the
    same shape; -inf logits are not allowed (the KL would be undefined or infinite).

    Taught in notebook 05.
    """
    check_same_shape(p_logits, q_logits, "p_logits", "q_logits")
    if p_logits.ndim < 1:
        raise ValueError("p_logits and q_logits need a vocab axis (at least 1 dim), got scalars")
    check_finite(p_logits, "p_logits")
    check_finite(q_logits, "q_logits")
    log_p = torch.log_softmax(p_logits, dim=-1)
    log_q = torch.log_softmax(q_logits, dim=-1)
    # clamp_min(0) removes tiny negative round-off; KL is >= 0 exactly
    return (log_p.exp() * (log_p - log_q)).sum(dim=-1).clamp_min(0)


def policy_token_kl(prompts: torch.Tensor, model, ref_model) -> torch.Tensor:
    """Exact per-position reverse KL(model || ref_model) for position-independent policies.

    prompts int[batch, prompt_pos] -> float[batch, pos]: at every output position the KL
    between the two next-token distributions softmax(logits). For a policy that
    decodes every position independently (``LectureModel``), the KL of a whole
    response is the sum over pos, which is what ``compute_kl_penalty`` estimates.

    Taught in notebook 05.
    """
    check_ndim(prompts, 2, "prompts", "batch, prompt_pos")
    logits = model(prompts)
    ref_logits = ref_model(prompts)
    check_ndim(logits, 3, "model output (logits)", "batch, pos, vocab")
    check_ndim(ref_logits, 3, "ref_model output (logits)", "batch, pos, vocab")
    return categorical_kl(logits, ref_logits)


def kl_per_response(
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    estimator: str,
    mask: torch.Tensor,
) -> torch.Tensor:
    """Scalar KL(policy || ref) estimate per response: sum over real tokens, mean over responses.

    log_probs, ref_log_probs, mask float[batch, trial, pos]; padding (mask 0) never
    counts. With every slot real this is exactly ``compute_kl_penalty`` (computed that way).
    """
    check_ndim(log_probs, 3, "log_probs", "batch, trial, pos")
    if mask.shape != log_probs.shape:
        raise ValueError(
            f"mask must match log_probs: got {list(mask.shape)} and {list(log_probs.shape)}"
        )
    if bool((mask != 0).all()):
        return compute_kl_penalty(log_probs, ref_log_probs, estimator)
    per_token = kl_estimate(log_probs, ref_log_probs, estimator)
    batch, trial, _ = log_probs.shape
    return masked_normalize(per_token, mask, float(batch * trial))


# --------------------------------------------------------------------------------------
# The KL coefficient: fixed, or adapted to a target (Ziegler et al. 2019)
# --------------------------------------------------------------------------------------


class FixedKLController:
    """beta stays ``kl_coef`` (the loop's default: ``TrainConfig.kl_target`` None)."""

    def __init__(self, kl_coef: float):
        self.value = kl_coef

    def update(self, current_kl: float, n_steps: int) -> float:
        """Nothing to adapt; returns beta."""
        return self.value

    def penalty(self, kl: torch.Tensor) -> torch.Tensor:
        """This step's KL term, beta x kl (beta never changes)."""
        return self.value * kl


class AdaptiveKLController:
    """Ziegler et al. 2019 (arXiv 1909.08593, sec. 2.2), the proportional controller of beta.

    e_t = clip(KL_t / KL_target - 1, -0.2, 0.2) and beta_{t+1} = beta_t (1 + K_beta e_t), with
    K_beta = n_steps / horizon (their code, lm-human-preferences ``AdaptiveKLController``:
    n_steps = responses in the batch; the paper quotes K_beta = 0.1). KL_t is the measured
    KL(pi || pi_ref) per response. beta grows while the policy is further from the
    reference than the target and shrinks while it is closer; the clip bounds each update to
    a factor 1 +- 0.2 K_beta.

    Schedule, as in lm-human-preferences (``train_policy.py``, ``PPOTrainer.step``: one
    ``kl_ctl.update(mean KL of the rollouts, batch_size)`` per rollout batch, after its PPO
    epochs): the loop calls ``update`` once per epoch, after the epoch's optimizer steps, with
    KL_t = the KL of its first step (the policy that sampled the batch, on-policy) and
    n_steps = the batch's responses; every step of the epoch is penalised with the same
    beta_t (``penalty``).
    """

    def __init__(self, init_kl_coef: float, target: float, horizon: int):
        check_number(init_kl_coef, "init_kl_coef", 0)
        check_number(target, "kl_target", 0)
        check_positive_ints(kl_horizon=horizon)
        self.value = float(init_kl_coef)
        self.target = float(target)
        self.horizon = horizon

    def penalty(self, kl: torch.Tensor) -> torch.Tensor:
        """This step's KL term, beta_t x kl (beta changes only in ``update``)."""
        return self.value * kl

    def update(self, current_kl: float, n_steps: int) -> float:
        """One controller step from the measured KL; returns the new beta."""
        check_positive_ints(n_steps=n_steps)
        current_kl = float(current_kl)
        check_number(current_kl, "current_kl")
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon
        return self.value


def check_kl_fields(config) -> None:
    """Raise naming the first bad KL field of a ``TrainConfig``.

    kl_coef a finite number >= 0; kl_estimator one of ``KL_ESTIMATORS``; the reference
    model's refresh period and the adaptive controller's horizon positive ints. ``kl_target``
    (the adaptive controller) starts from kl_coef, so it needs kl_coef > 0 and the KL term in
    the loss (kl_in_reward False); ``AdaptiveKLController`` checks the target itself.
    """
    check_number(config.kl_coef, "kl_coef", 0, low_inclusive=True)
    check_choice(config.kl_estimator, KL_ESTIMATORS, "kl_estimator")
    period = config.compute_ref_model_period
    check_number(period, "compute_ref_model_period", 1, low_inclusive=True, integer=True)
    check_number(config.kl_horizon, "kl_horizon", 1, low_inclusive=True, integer=True)
    if config.kl_target is not None:
        if config.kl_coef <= 0 or config.kl_in_reward:
            raise ValueError(
                "kl_target adapts the KL term's coefficient, starting from kl_coef: it "
                f"needs kl_coef > 0 and kl_in_reward False, got {config.kl_coef!r} and "
                f"{config.kl_in_reward!r}"
            )
        AdaptiveKLController(config.kl_coef, config.kl_target, config.kl_horizon)  # checks


def build_kl_controller(config):
    """The run's beta: ``AdaptiveKLController`` when ``config.kl_target`` is set (starting at
    ``kl_coef``, horizon ``kl_horizon``), else ``FixedKLController(config.kl_loss_coef)``."""
    if config.kl_target is None:
        return FixedKLController(config.kl_loss_coef)
    return AdaptiveKLController(config.kl_coef, config.kl_target, config.kl_horizon)
