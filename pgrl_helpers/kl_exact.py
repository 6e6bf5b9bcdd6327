"""Exact studies of the KL penalty on one categorical distribution (notebook 05).

Everything here enumerates the tokens of a small categorical policy pi = softmax(theta)
instead of sampling, so that expectations and expected gradients are exact:

* ``estimator_stats``: exact and Monte Carlo mean / spread of k1, k2, k3 against the exact
  reverse KL, KL(pi || pi_ref);
* ``kl_regularized_objective`` / ``kl_regularized_optimum``: J(pi) = E_pi[R] - beta KL(pi || pi_ref)
  and its maximiser pi_ref exp(R / beta) / Z (Rafailov et al. 2023, DPO, eq. 4; Korbak et al.
  2022, "RL with KL penalties is better viewed as Bayesian inference");
* ``kl_placement_gradients``: the expected gradient of each way of putting the KL into training
  (an estimator in the loss; k1 in the reward, fixed at rollout as in PPO-RLHF or
  re-evaluated at pi_theta, with or without the ratio; the bias-corrected k3).

Taught in notebook 05.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ._validate import check_finite, check_same_shape
from .kl import categorical_kl, kl_k1, kl_k2, kl_k3, kl_k3_bias_corrected

ESTIMATORS: dict[str, Callable] = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}


def estimator_stats(
    logits: torch.Tensor,
    ref_logits: torch.Tensor,
    num_samples: int,
    seed: int = 0,
    estimators: dict[str, Callable] = ESTIMATORS,
) -> dict:
    """Mean and spread of each estimator of KL(pi || pi_ref), exactly and by Monte Carlo.

    logits, ref_logits float[vocab] (pi = softmax(logits), pi_ref = softmax(ref_logits)).
    Returns {"kl": exact KL, name: {"exact_mean", "exact_std", "mc_mean", "mc_se"}}: the
    exact mean and per-sample std by enumerating the vocab, and the mean and standard error
    of ``num_samples`` tokens drawn from pi (seeded), as a training loop sees them.

    Taught in notebook 05.
    """
    check_same_shape(logits, ref_logits, "logits", "ref_logits")
    if logits.ndim != 1:
        raise ValueError(f"logits must be 1-D [vocab], got shape {list(logits.shape)}")
    if num_samples < 2:
        raise ValueError(f"num_samples must be >= 2, got {num_samples}")
    log_p, log_ref = torch.log_softmax(logits, -1), torch.log_softmax(ref_logits, -1)
    p = log_p.exp()
    gen = torch.Generator().manual_seed(seed)
    x = torch.multinomial(p, num_samples, replacement=True, generator=gen)
    stats = {"kl": categorical_kl(logits, ref_logits).item()}
    for name, estimator in estimators.items():
        per_token = estimator(log_p, log_ref)  # the estimator's value at every token
        mean = (p * per_token).sum()
        samples = per_token[x]
        stats[name] = {
            "exact_mean": mean.item(),
            "exact_std": (p * (per_token - mean) ** 2).sum().sqrt().item(),
            "mc_mean": samples.mean().item(),
            "mc_se": (samples.std() / num_samples**0.5).item(),
        }
    return stats


def _check_bandit(logits, ref_logits, rewards, beta):
    check_same_shape(logits, ref_logits, "logits", "ref_logits")
    check_same_shape(logits, rewards, "logits", "rewards")
    check_finite(rewards, "rewards")
    if not beta > 0:
        raise ValueError(f"beta must be > 0, got {beta!r}")


def kl_regularized_objective(
    logits: torch.Tensor, ref_logits: torch.Tensor, rewards: torch.Tensor, beta: float
) -> torch.Tensor:
    """J = E_pi[R] - beta KL(pi || pi_ref) for pi = softmax(logits); all float[vocab].

    Taught in notebook 05.
    """
    _check_bandit(logits, ref_logits, rewards, beta)
    p = torch.softmax(logits, -1)
    return (p * rewards).sum() - beta * categorical_kl(logits, ref_logits)


def kl_regularized_optimum(
    ref_logits: torch.Tensor, rewards: torch.Tensor, beta: float
) -> torch.Tensor:
    """log pi* with pi* = pi_ref exp(R / beta) / Z, the maximiser of ``kl_regularized_objective``.

    Because E_pi[R] - beta KL(pi || pi_ref) = beta log Z - beta KL(pi || pi*), the maximum is
    beta log Z, reached only at pi = pi*. float[vocab] -> float[vocab].

    Taught in notebook 05.
    """
    _check_bandit(ref_logits, ref_logits, rewards, beta)
    return torch.log_softmax(torch.log_softmax(ref_logits, -1) + rewards / beta, -1)


def _grad(objective: Callable, theta: torch.Tensor) -> torch.Tensor:
    theta = theta.detach().clone().requires_grad_(True)
    objective(theta).backward()
    return theta.grad


def kl_placement_gradients(
    theta: torch.Tensor, ref_logits: torch.Tensor, old_logits: torch.Tensor | None = None
) -> dict[str, torch.Tensor]:
    """Expected gradient (beta = 1, as a term to *minimise*) of each KL placement; float[vocab].

    Every row samples y from pi_old = softmax(old_logits), the policy that sampled the batch
    (``old_logits`` None: pi_old = pi_theta = softmax(theta), the first inner step). The
    sampling weights carry no gradient, as with real samples; rho = pi_theta / pi_old.

    * ``"grad KL(pi||pi_ref)"`` and ``"grad KL(pi_ref||pi)"``: autograd of the exact KLs of
      pi_theta;
    * ``"k1/k2/k3 in the loss"``: grad of sum_y pi_old(y) k(y; theta), the estimator added to
      the loss without a ratio;
    * ``"k1 fixed at rollout"``: k1 in the reward, as PPO-RLHF defines it, in the REINFORCE
      loss (no ratio): k1 = log pi_old - log pi_ref computed once when the batch is sampled,
      a constant: grad of sum_y pi_old(y) k1_old(y) log pi_theta(y);
    * ``"k1 fixed at rollout x ratio"``: the same constant reward in PPO's ratio loss
      (InstructGPT eq. 2, TRL's PPO): grad of sum_y pi_old(y) k1_old(y) rho(y);
    * ``"k1 at pi_theta"``: k1 re-evaluated at the current policy on every inner step (no
      gradient through it), no ratio: grad of sum_y pi_old(y) sg(k1(y; theta)) log pi_theta(y).
      Its gradient is that of ``"k2 in the loss"`` at every theta (grad k2 = sg(k1) grad log pi);
    * ``"k1 at pi_theta x ratio"``: the same in the ratio loss: grad of
      sum_y pi_old(y) sg(k1(y; theta)) rho(y), = grad KL(pi||pi_ref) at every theta;
    * ``"k3 x ratio (bias-corrected)"``: grad of sum_y pi_old(y) rho(y) k3(y) (DeepSeek-V3.2).

    With pi_old = pi_theta the four k1 rows and "k2 in the loss" equal grad KL(pi||pi_ref)
    and "k3 in the loss" equals grad KL(pi_ref||pi); once pi_old differs, only the rows that
    evaluate the KL at pi_theta *and* carry the ratio keep following grad KL(pi||pi_ref).

    Taught in notebook 05.
    """
    check_same_shape(theta, ref_logits, "theta", "ref_logits")
    log_ref = torch.log_softmax(ref_logits, -1)
    old = theta if old_logits is None else old_logits
    check_same_shape(theta, old, "theta", "old_logits")
    log_old = torch.log_softmax(old, -1).detach()
    p_old = log_old.exp()

    def in_loss(estimator):
        def objective(th):
            log_p = torch.log_softmax(th, -1)
            return (p_old * estimator(log_p, log_ref)).sum()

        return objective

    k1_old = kl_k1(log_old, log_ref).detach()  # fixed at rollout: pi_old's k1, a constant

    def k1_reward(at_theta: bool, with_ratio: bool):
        def objective(th):
            log_p = torch.log_softmax(th, -1)
            k1 = kl_k1(log_p, log_ref).detach() if at_theta else k1_old
            carrier = torch.exp(log_p - log_old) if with_ratio else log_p
            return (p_old * k1 * carrier).sum()

        return objective

    def bias_corrected(th):
        log_p = torch.log_softmax(th, -1)
        return (p_old * kl_k3_bias_corrected(log_p, log_old, log_ref)).sum()

    out = {
        "grad KL(pi||pi_ref)": _grad(lambda th: categorical_kl(th, ref_logits), theta),
        "grad KL(pi_ref||pi)": _grad(lambda th: categorical_kl(ref_logits, th), theta),
    }
    for name, estimator in ESTIMATORS.items():
        out[f"{name} in the loss"] = _grad(in_loss(estimator), theta)
    out["k1 fixed at rollout"] = _grad(k1_reward(at_theta=False, with_ratio=False), theta)
    out["k1 fixed at rollout x ratio"] = _grad(k1_reward(at_theta=False, with_ratio=True), theta)
    out["k1 at pi_theta"] = _grad(k1_reward(at_theta=True, with_ratio=False), theta)
    out["k1 at pi_theta x ratio"] = _grad(k1_reward(at_theta=True, with_ratio=True), theta)
    out["k3 x ratio (bias-corrected)"] = _grad(bias_corrected, theta)
    return out
