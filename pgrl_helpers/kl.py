"""Sample-based estimators of KL(p || q) with samples x ~ p.

Here p is the policy being trained (it sampled the responses) and q the
reference model, so every estimator below estimates KL(policy || ref).
Inputs are per-token log-probs of the *sampled* tokens, float[batch, trial, pos]
(the lecture's docstring wrongly says [batch, trial, pos, vocab]). With
r = q(x) / p(x) = exp(ref_log_probs - log_probs):

* k1 = -log r                 unbiased, can be negative, high variance;
* k2 = (log r)^2 / 2          biased, non-negative, low variance;
* k3 = r - 1 - log r          unbiased (E_p[r] = 1), non-negative, low variance.
"""

from __future__ import annotations

import torch

from ._validate import check_finite, check_mode, check_ndim, check_same_shape
from .losses import MAX_LOG_RATIO
from .masking import masked_normalize

KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3")


def _log_r(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    check_same_shape(log_probs, ref_log_probs, "log_probs", "ref_log_probs")
    check_finite(log_probs, "log_probs")
    check_finite(ref_log_probs, "ref_log_probs")
    # clamp so that exp never overflows into inf
    return (ref_log_probs - log_probs).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)


def kl_k1(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """k1 = log p - log q per sample (same shape as the inputs)."""
    return -_log_r(log_probs, ref_log_probs)


def kl_k2(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """k2 = (log q - log p)^2 / 2 per sample (same shape as the inputs)."""
    return 0.5 * _log_r(log_probs, ref_log_probs) ** 2


def kl_k3(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """k3 = q/p - 1 - log(q/p) per sample, >= 0, 0 exactly where log p == log q."""
    log_r = _log_r(log_probs, ref_log_probs)
    # expm1 keeps precision when log_r is tiny (exp(u) - 1 - u in float32 dips to about
    # -3e-8 by round-off); clamp_min(0) makes the documented ">= 0" hold exactly.
    return (torch.expm1(log_r) - log_r).clamp_min(0)


def kl_estimate(
    log_probs: torch.Tensor, ref_log_probs: torch.Tensor, estimator: str = "k3"
) -> torch.Tensor:
    """Per-sample estimator by name ('k1', 'k2' or 'k3'); same shape as the inputs."""
    check_mode(estimator, KL_ESTIMATORS, "KL estimator")
    return {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}[estimator](log_probs, ref_log_probs)


def compute_kl_penalty(
    log_probs: torch.Tensor, ref_log_probs: torch.Tensor, estimator: str = "k3"
) -> torch.Tensor:
    """Scalar estimate of KL(policy || ref) per response.

    log_probs, ref_log_probs float[batch, trial, pos] (samples from the policy) ->
    sum over pos (one response's KL), then mean over batch and trial.
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
    """Exact per-position KL(model || ref_model) for position-independent policies.

    prompts int[batch, pos] -> float[batch, pos]: at every output position the KL
    between the two next-token distributions softmax(logits). For a policy that
    decodes every position independently (``LectureModel``), the KL of a whole
    response is the sum over pos, which is what ``compute_kl_penalty`` estimates.
    """
    check_ndim(prompts, 2, "prompts", "batch, pos")
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
