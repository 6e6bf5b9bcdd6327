"""The notebooks' checks of their central claims, as functions that can be handed a bug.

Each ``check_*`` takes the implementation under test as an argument, computes what it should
give *independently* (by enumeration, autograd of an exact objective, or a plain-Python
reference), raises ``AssertionError`` naming the claim when they disagree, and returns the
measured discrepancy for the notebook to print. ``tests/integration/test_planted_bugs.py`` passes each
one a planted bug (wrong sign, wrong axis, missing detach, biased std, wrong direction) and
shows that it fails.

* ``check_policy_gradient`` (notebooks 01-03): a surrogate loss's expected gradient is -grad E[R];
* ``check_ratio_gradient`` (04): the ratio loss's gradient is the true policy gradient;
* ``check_kl_estimator`` (05): an estimator's exact mean is the reverse KL, KL(pi || pi_ref);
* ``check_k3_round_off`` (05, 06): k3 >= 0 holds before the clamp, which only removes round-off;
* ``check_deltas`` (06): ``compute_deltas`` against a plain-Python per-group reference;
* ``check_error_prediction`` (02): a measured Monte Carlo error matches its exact prediction
  within a factor 4/3 at every sample size;
* ``check_clip_stops_gradient`` (06): a clipped per-token loss has zero gradient exactly on
  the tokens whose ratio left [1 - eps, 1 + eps] in the direction of their delta, and the
  unclipped slope -ratio * delta everywhere else;
* ``check_reward_to_go`` (03): weighting each token's score by the rewards from that token on
  (reward-to-go) keeps the policy gradient exact; a weight that drops the token's own reward
  or keeps only the return on the last token does not.

Taught in notebook 02; also used in notebooks 03, 04, 05, 06.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

import torch

from .exact import (
    _response_length,
    all_responses,
    enumerated_rewards,
    exact_policy_gradient,
    flat_grad,
    response_log_probs,
    tabular_token_log_probs,
    tabular_token_scores,
)


def check_policy_gradient(surrogate: Callable, model, prompts, reward_fn, tol: float = 1e-5):
    """E over the policy's samples of grad ``surrogate`` must equal -grad E[R], exactly.

    ``surrogate(log_probs, rewards)`` maps float[batch, N] response log-probs and rewards to
    float[batch, N] per-sample losses (REINFORCE: -log_probs * rewards). The expectation is
    taken by enumerating every response, weights pi(a|s) detached as with real samples.
    Returns max |expected grad + exact grad|.

    Taught in notebook 02.
    """
    log_probs = response_log_probs(model, prompts)  # [batch, N]
    length = _response_length(model, prompts)
    rewards = enumerated_rewards(prompts, model.vocab_size, length, reward_fn).to(log_probs.dtype)
    per_sample = surrogate(log_probs, rewards)
    expected = (log_probs.exp().detach() * per_sample).sum(-1).mean()
    gap = (flat_grad(expected, model) + exact_policy_gradient(model, prompts, reward_fn)).abs()
    assert gap.max() < tol, f"surrogate's expected gradient != -grad E[R] (max diff {gap.max()})"
    return gap.max().item()


def check_ratio_gradient(freeze: Callable, num_tokens: int = 5, seed: int = 0, tol=1e-5):
    """The ratio loss, old log-probs made by ``freeze(log_pi)``, has the exact policy gradient.

    A categorical policy over ``num_tokens`` responses with rewards 0..n-1; at theta = theta_old
    the gradient of sum_a pi_old(a) ratio(a) A(a) must be grad E_pi[R]. ``freeze`` is how the
    code under test turns the current log-probs into old ones (right: ``lambda lp: lp.detach()``).
    Returns max |ratio-loss gradient - true gradient|.

    Taught in notebook 04.
    """
    g = torch.Generator().manual_seed(seed)
    theta = torch.randn(num_tokens, generator=g, dtype=torch.float64).requires_grad_(True)
    rewards = torch.arange(float(num_tokens), dtype=torch.float64)
    log_pi = torch.log_softmax(theta, -1)
    true = torch.autograd.grad((log_pi.exp() * rewards).sum(), theta, retain_graph=True)[0]
    old_log_pi = freeze(log_pi)
    old_probs = old_log_pi.detach().exp()
    advantages = rewards - (old_probs * rewards).sum()
    ratio = torch.exp(log_pi - old_log_pi)
    surrogate = (old_probs * ratio * advantages).sum()
    grad = torch.autograd.grad(surrogate, theta)[0]
    gap = (grad - true).abs().max().item()
    assert true.abs().max() > 0.1, "the test policy must have a non-trivial gradient"
    assert gap < tol, f"ratio loss gradient != true policy gradient (max diff {gap:.3g})"
    return gap


def check_kl_estimator(estimator: Callable, num_pairs: int = 5, seed: int = 0, tol=1e-9):
    """Exact mean of ``estimator(log_pi, log_ref)`` under pi must be KL(pi || pi_ref).

    ``num_pairs`` random pairs of 7-token categoricals, in float64, expectation by enumeration.
    Returns the largest |E_pi[k] - KL(pi || pi_ref)|.

    Taught in notebook 05.
    """
    g = torch.Generator().manual_seed(seed)
    worst = 0.0
    for _ in range(num_pairs):
        log_pi = torch.log_softmax(torch.randn(7, generator=g, dtype=torch.float64), -1)
        log_ref = torch.log_softmax(torch.randn(7, generator=g, dtype=torch.float64), -1)
        reverse = (log_pi.exp() * (log_pi - log_ref)).sum()  # written out, not categorical_kl
        mean = (log_pi.exp() * estimator(log_pi, log_ref)).sum()
        worst = max(worst, abs(mean - reverse).item())
    assert worst < tol, f"E_pi[estimator] != KL(pi || pi_ref) (max diff {worst:.3g})"
    return worst


def check_k3_round_off(k3_unclamped: Callable, k3: Callable, seed: int = 0, tol=1e-6):
    """t - 1 - log t >= 0 on *unclamped* values (up to ``tol``), and the clamp removes only that.

    Log-ratios from 1e-8 to 10 in size, float32. Returns (min unclamped value, max clamp change).

    Taught in notebook 05; also used in notebook 06.
    """
    g = torch.Generator().manual_seed(seed)
    log_pi = torch.randn(100_000, generator=g)
    log_ref = log_pi + torch.randn(100_000, generator=g) * torch.logspace(-8, 1, 100_000)
    raw, clamped = k3_unclamped(log_pi, log_ref), k3(log_pi, log_ref)
    lowest, change = raw.min().item(), (clamped - raw).abs().max().item()
    assert lowest > -tol, f"unclamped k3 reaches {lowest:.3g} < 0: not round-off"
    assert change <= tol, f"the clamp changes k3 by {change:.3g}: more than round-off"
    return lowest, change


def _reference_deltas(group: list[float], mode: str, eps: float, std_floor: float) -> list[float]:
    mean = sum(group) / len(group)
    if mode == "rewards":
        return list(group)
    if mode == "centered_rewards":
        return [r - mean for r in group]
    if mode == "normalized_rewards":
        scale = max(statistics.stdev(group), std_floor) + eps
        return [(r - mean) / scale for r in group]
    if mode == "loo_rewards":
        return [r - (sum(group) - r) / (len(group) - 1) for r in group]
    if mode == "max_rewards":
        top = max(group)
        return [r if r == top else 0.0 for r in group]
    raise ValueError(f"unknown delta mode {mode!r}")


def _reference_batch_deltas(rows, mode: str, eps: float, std_floor: float) -> list[list[float]]:
    """Group mean subtracted, then divided by a std over the whole batch (plain Python).

    batch_normalized_rewards: the std of every raw reward (TRL's scale_rewards='batch');
    reinforce_pp_baseline: the std of the group-centred rewards (REINFORCE++).
    """
    centred = [[r - sum(row) / len(row) for r in row] for row in rows]
    pool = [r for row in (rows if mode == "batch_normalized_rewards" else centred) for r in row]
    scale = max(statistics.stdev(pool), std_floor) + eps
    return [[c / scale for c in row] for row in centred]


def check_deltas(
    compute_deltas: Callable, rewards: torch.Tensor, modes, eps=1e-6, std_floor=1e-3, tol=1e-5
) -> dict[str, float]:
    """``compute_deltas(rewards, mode)`` against a plain-Python loop over the groups (rows).

    The reference uses ``statistics.stdev`` (sample std) and the documented ``eps`` and
    ``std_floor``; it shares no code with ``advantages``. Returns {mode: max |difference|}.

    Taught in notebook 06.
    """
    rows = rewards.double().tolist()
    out = {}
    for mode in modes:
        got = compute_deltas(rewards, mode)
        assert tuple(got.shape) == tuple(rewards.shape), f"{mode}: shape {list(got.shape)}"
        if mode in ("batch_normalized_rewards", "reinforce_pp_baseline"):
            want = _reference_batch_deltas(rows, mode, eps, std_floor)
        else:
            want = [_reference_deltas(row, mode, eps, std_floor) for row in rows]
        diff = max(
            abs(a - b) for ga, wa in zip(got.double().tolist(), want) for a, b in zip(ga, wa)
        )
        assert math.isfinite(diff) and diff < tol * (1 + max(map(abs, sum(want, [])))), (
            f"{mode}: compute_deltas differs from the per-group reference by {diff:.3g}"
        )
        out[mode] = diff
    return out


def check_error_prediction(measured, predicted, low: float = 0.75, high: float = 4 / 3):
    """Every measured RMS error must lie within [low, high] x its predicted value.

    ``measured``, ``predicted``: one value per sample size N (sequences of floats or 1-D
    tensors of the same length, predicted > 0). Notebook 02 measures the RMS relative error
    of REINFORCE over ``NUM_SEEDS`` (16) seeds and predicts it from the exact covariance; a
    prediction off by sqrt(3) (averaging the prompts' variances with 1/B instead of 1/B^2)
    falls outside.
    Returns the ratios measured / predicted, one per N.

    Taught in notebook 02.
    """
    measured = [float(v) for v in measured]
    predicted = [float(v) for v in predicted]
    if len(measured) != len(predicted) or not measured:
        raise ValueError(
            f"measured and predicted need the same non-zero length, got {len(measured)} "
            f"and {len(predicted)}"
        )
    if not 0 < low < 1 < high:
        raise ValueError(f"need 0 < low < 1 < high, got low={low}, high={high}")
    if min(predicted) <= 0:
        raise ValueError(f"predicted values must be > 0, got {min(predicted)}")
    ratios = [m / p for m, p in zip(measured, predicted)]
    bad = [(i, r) for i, r in enumerate(ratios) if not low < r < high]
    assert not bad, f"measured / predicted error outside ({low}, {high:.3f}) at " + ", ".join(
        f"index {i}: {r:.3f}" for i, r in bad
    )
    return ratios


def check_clip_stops_gradient(
    per_token_loss: Callable, log_probs, old_log_probs, deltas, epsilon: float, tol=1e-6
):
    """The clipped loss stops the gradient exactly where PPO's clip says it should.

    ``per_token_loss(log_probs, old_log_probs)`` -> float[batch, trial, pos], the loss under
    test (e.g. ``compute_per_token_loss(lp, deltas, "clipped", old, epsilon)``).
    ``log_probs``, ``old_log_probs`` float[batch, trial, pos], ``deltas`` float[batch, trial].
    Computed here independently: ratio r = exp(log_probs - old_log_probs); a token is clipped
    when delta > 0 and r > 1 + eps, or delta < 0 and r < 1 - eps. Its loss gradient with
    respect to its own log-prob must be 0; every other token's must be -r * delta (the
    gradient of -r delta, PPO eq. 7). Needs at least one clipped token, so that the check can
    fail. Returns (number of clipped tokens, max |gradient| on them).

    Taught in notebook 06.
    """
    lp = log_probs.detach().clone().requires_grad_(True)
    old = old_log_probs.detach()
    (grad,) = torch.autograd.grad(per_token_loss(lp, old).sum(), lp)
    with torch.no_grad():
        ratio = torch.exp(lp - old)
        delta = deltas.detach()[..., None].to(ratio.dtype).expand_as(ratio)
        clipped = ((delta > 0) & (ratio > 1 + epsilon)) | ((delta < 0) & (ratio < 1 - epsilon))
        slope = -ratio * delta
    num_clipped = int(clipped.sum())
    assert num_clipped > 0, "no token is clipped: the check would pass whatever the loss does"
    on_clipped = grad[clipped].abs().max().item()
    off_clipped = (grad - slope)[~clipped].abs().max().item() if (~clipped).any() else 0.0
    assert on_clipped <= tol, (
        f"clipped tokens still get gradient (max |d loss / d log pi| = {on_clipped:.3g})"
    )
    assert off_clipped <= tol * (1 + slope.abs().max().item()), (
        f"unclipped tokens' gradient differs from -ratio * delta by {off_clipped:.3g}"
    )
    return num_clipped, on_clipped


def check_reward_to_go(
    token_weights: Callable, vocab_size: int = 3, length: int = 3, seed: int = 0, tol=1e-10
):
    """Weighting token t's score by ``token_weights`` must keep the policy gradient exact.

    The policy is a tabular autoregressive one (``exact.tabular_token_log_probs``, float64,
    logits drawn with ``seed``); its rewards arrive per token, r_t = 1[y_t = t-th token of the
    answer 0, 1, 2, ...] (the sort distance reward of notebook 01, split by position), and the
    return is R = sum_t r_t. ``token_weights`` maps the token rewards float[N, pos] of all
    N = vocab_size ** length responses to the weight of each token's score, float[N, pos]. The
    estimator sum_t grad log pi(y_t | y_<t) w_t(y) must have the exact mean grad E[R] (autograd
    through the enumerated sum_y pi(y) R(y)) within ``tol``. The full return (w_t = R) and the
    reward-to-go (w_t = sum_{t' >= t} r_t') pass; dropping the token's own reward
    (sum_{t' > t}), keeping the past rewards (sum_{t' <= t}) or putting R on the last token only
    fail. Returns (total variance of the full-return estimator, total variance of the one under
    test), for one sampled response: sum over the P parameters of Var[estimate_k].

    Taught in notebook 03.
    """
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(
        length, vocab_size + 1, vocab_size, generator=generator, dtype=torch.float64
    )
    responses = all_responses(vocab_size, length)  # [N, pos]
    answer = torch.arange(length).clamp(max=vocab_size - 1)  # [pos]
    token_rewards = (responses == answer).double()  # [N, pos]
    theta = logits.clone().requires_grad_(True)
    probs = tabular_token_log_probs(theta, responses).sum(dim=-1).exp()  # pi(y): [N]
    (exact,) = torch.autograd.grad((probs * token_rewards.sum(dim=-1)).sum(), theta)
    exact, probs = exact.flatten(), probs.detach()
    scores = tabular_token_scores(logits, responses)  # [N, pos, P]

    def moments(weights):  # exact mean [P] and total variance of sum_t score_t * w_t
        estimate = torch.einsum("ntp,nt->np", scores, weights)
        mean = probs @ estimate
        return mean, (probs @ (estimate - mean) ** 2).sum().item()

    weights = token_weights(token_rewards)
    if tuple(weights.shape) != tuple(token_rewards.shape):
        raise ValueError(
            f"token_weights must return float[N, pos] {list(token_rewards.shape)}, "
            f"got {list(weights.shape)}"
        )
    mean, variance = moments(weights.double())
    gap = (mean - exact).abs().max().item()
    assert gap < tol, (
        f"E[sum_t grad log pi(y_t | y_<t) w_t] differs from grad E[R] by {gap:.2e}: "
        "a weight that depends on the token itself or on later tokens but leaves out their "
        "reward biases the gradient"
    )
    _, full_variance = moments(token_rewards.sum(dim=-1, keepdim=True).expand_as(token_rewards))
    return full_variance, variance
