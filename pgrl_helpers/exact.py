"""Exact expectations and gradients, by enumerating every response of a small policy.

For a policy whose output positions are decoded independently given the prompt (the
``LectureModel``), the probability of a whole response ``a`` is the product of its
per-token probabilities, ``log pi(a|s) = sum_pos log pi(a_pos|s)``. With ``vocab``
tokens and ``length`` positions there are ``N = vocab ** length`` responses, so for a
small problem (vocab 3, length 3: N = 27) every expectation over responses is a finite
sum and can be computed exactly:

    E[R | s] = sum_a pi(a|s) R(s, a)        (differentiable: autograd gives the exact gradient)

That exact gradient is the yardstick for the Monte Carlo estimates (REINFORCE, with or
without a baseline) used in notebooks 02 and 03.

Shapes: prompts int[batch, prompt_pos]; all responses int[N, pos]; per-response quantities
float[batch, N]; flattened parameter gradients float[num_params] (the model's
parameters in ``model.parameters()`` order, each flattened and concatenated).

Taught in notebook 01; also used in notebooks 02, 03.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from einops import rearrange, repeat
from torch import nn

from ._validate import (
    check_finite,
    check_integer,
    check_ndim,
    check_positive_ints,
    check_token_range,
    is_number,
)
from .advantages import compute_deltas
from .sampling import compute_log_probs, sample_responses
from .sort_task import compute_reward

#: Refuse to enumerate more responses per prompt than this (memory grows as N * pos).
MAX_RESPONSES = 200_000

#: Refuse score-function tables with more elements than this (batch * N * num_params).
MAX_SCORE_ELEMENTS = 20_000_000

#: Baselines understood by ``reinforce_gradient_estimate`` (besides a number or tensor).
BASELINES: tuple[str, ...] = ("none", "value", "group_mean", "leave_one_out")


def _check_model(model) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not hasattr(model, "vocab_size"):
        raise TypeError("model needs a `vocab_size` attribute (like LectureModel)")


def all_responses(vocab_size: int, length: int, max_responses: int = MAX_RESPONSES) -> torch.Tensor:
    """Every response of ``length`` tokens from a ``vocab_size`` vocabulary.

    Returns int64[N, length] with N = vocab_size ** length, in lexicographic order:
    row n holds the base-``vocab_size`` digits of n, first position most significant
    (``[0, 0, 0], [0, 0, 1], ...``). Raises ValueError if N > ``max_responses``.

    Taught in notebook 01; also used in notebook 03.
    """
    check_positive_ints(vocab_size=vocab_size, length=length, max_responses=max_responses)
    num = vocab_size**length
    if num > max_responses:
        raise ValueError(
            f"enumerating every response needs vocab_size ** length = {vocab_size}**{length} "
            f"= {num} rows, more than max_responses={max_responses}; use a smaller vocabulary "
            "or shorter responses (or raise max_responses if you have the memory)"
        )
    index = torch.arange(num)
    powers = vocab_size ** torch.arange(length - 1, -1, -1)  # [length]
    return (index[:, None] // powers[None, :]) % vocab_size


def _response_length(model, prompts: torch.Tensor) -> int:
    length = getattr(model, "response_length", None)
    return int(length) if length is not None else int(prompts.shape[1])


def response_log_probs(
    model, prompts: torch.Tensor, max_responses: int = MAX_RESPONSES
) -> torch.Tensor:
    """log pi(a | s) of every response a, for every prompt s: float[batch, N].

    Columns follow ``all_responses(model.vocab_size, response_length)``. Differentiable
    in the model's parameters. Assumes positions are decoded independently given the
    prompt (true for every policy in this package), so log pi(a|s) = sum over pos.
    """
    _check_model(model)
    check_ndim(prompts, 2, "prompts", "batch, prompt_pos")
    check_integer(prompts, "prompts")
    responses = all_responses(model.vocab_size, _response_length(model, prompts), max_responses)
    expanded = repeat(responses, "n pos -> batch n pos", batch=prompts.shape[0])
    per_token = compute_log_probs(model, prompts, expanded)  # [batch, N, pos]
    return per_token.sum(dim=-1)


def response_probs(model, prompts: torch.Tensor, max_responses: int = MAX_RESPONSES):
    """pi(a | s) of every response: float[batch, N]; each row sums to 1. Differentiable.

    Taught in notebook 01; also used in notebooks 02, 03.
    """
    return response_log_probs(model, prompts, max_responses).exp()


def enumerated_rewards(
    prompts: torch.Tensor, vocab_size: int, length: int, reward_fn: str | Callable
) -> torch.Tensor:
    """R(s, a) for every prompt s and every response a: float32[batch, N].

    Taught in notebook 01; also used in notebooks 02, 03.
    """
    check_ndim(prompts, 2, "prompts", "batch, prompt_pos")
    responses = all_responses(vocab_size, length)
    expanded = repeat(responses, "n pos -> batch n pos", batch=prompts.shape[0])
    return compute_reward(prompts, expanded, reward_fn)


def exact_expected_reward(model, prompts: torch.Tensor, reward_fn: str | Callable) -> torch.Tensor:
    """E_{a ~ pi(.|s)}[R(s, a)] for every prompt, exactly: float[batch], differentiable.

    ``reward_fn`` is anything ``compute_reward`` accepts (a name or a function).
    The mean over the batch is the objective E[R] for prompts drawn uniformly from it.

    Taught in notebook 02.
    """
    log_probs = response_log_probs(model, prompts)  # [batch, N]
    rewards = enumerated_rewards(
        prompts, model.vocab_size, _response_length(model, prompts), reward_fn
    ).to(log_probs.dtype)
    return (log_probs.exp() * rewards).sum(dim=-1)


def flat_grad(scalar: torch.Tensor, model: nn.Module) -> torch.Tensor:
    """Gradient of a scalar w.r.t. every parameter of ``model``, flattened: float[num_params].

    Parameters that the scalar does not depend on contribute zeros.

    Taught in notebook 02.
    """
    if not isinstance(scalar, torch.Tensor) or scalar.numel() != 1:
        shape = list(scalar.shape) if isinstance(scalar, torch.Tensor) else type(scalar).__name__
        raise ValueError(f"flat_grad needs a scalar tensor, got {shape}")
    params = list(model.parameters())
    grads = torch.autograd.grad(scalar.reshape(()), params, allow_unused=True)
    return torch.cat(
        [(g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(grads, params)]
    )


def num_params(model: nn.Module) -> int:
    """Number of scalar parameters (length of the flat gradient vectors)."""
    return sum(p.numel() for p in model.parameters())


def exact_policy_gradient(model, prompts: torch.Tensor, reward_fn: str | Callable):
    """Exact gradient of the objective mean_s E[R | s]: float[num_params].

    Computed by autograd through the enumerated sum sum_a pi(a|s) R(s, a); no sampling.

    Taught in notebook 02; also used in notebook 03.
    """
    return flat_grad(exact_expected_reward(model, prompts, reward_fn).mean(), model)


def score_functions(model, prompts: torch.Tensor) -> torch.Tensor:
    """grad_theta log pi(a | s) for every prompt and every response: float[batch, N, num_params].

    One row per (prompt, response); columns in ``flat_grad`` order. Raises ValueError
    if the table would exceed ``MAX_SCORE_ELEMENTS`` elements.

    Taught in notebook 02; also used in notebook 03.
    """
    _check_model(model)
    check_ndim(prompts, 2, "prompts", "batch, prompt_pos")
    n = model.vocab_size ** _response_length(model, prompts)
    size = prompts.shape[0] * n * num_params(model)
    if size > MAX_SCORE_ELEMENTS:
        raise ValueError(
            f"score table would hold batch * N * num_params = {prompts.shape[0]} * {n} * "
            f"{num_params(model)} = {size} numbers, more than {MAX_SCORE_ELEMENTS}; use "
            "fewer prompts, a smaller model or a smaller vocabulary"
        )
    names = [name for name, _ in model.named_parameters()]
    params = {name: p.detach() for name, p in model.named_parameters()}

    def log_probs_of(flat_params: dict) -> torch.Tensor:
        logits = torch.func.functional_call(model, flat_params, (prompts,))
        return _log_probs_from_logits(logits, model)

    jac = torch.func.jacrev(log_probs_of)(params)  # name -> [batch, N, *param_shape]
    return torch.cat(
        [rearrange(jac[name], "batch n ... -> batch n (...)") for name in names], dim=-1
    )


def _log_probs_from_logits(logits: torch.Tensor, model) -> torch.Tensor:
    """[batch, pos, vocab] logits -> log pi(a|s) of every response, float[batch, N]."""
    log_softmax = torch.log_softmax(logits, dim=-1)  # [batch, pos, vocab]
    responses = all_responses(model.vocab_size, logits.shape[1])  # [N, pos]
    pos_index = torch.arange(logits.shape[1])
    per_token = log_softmax[:, pos_index[None, :], responses]  # [batch, N, pos]
    return per_token.sum(dim=-1)


def reinforce_gradient_estimate(
    model,
    prompts: torch.Tensor,
    num_samples: int,
    reward_fn: str | Callable,
    baseline: str | float | torch.Tensor | None = "none",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Monte Carlo (REINFORCE) estimate of the policy gradient: float[num_params].

    Samples ``num_samples`` (= G) responses per prompt, scores them, and returns

        (1 / (batch * G)) * sum_{s, i} grad log pi(a_i | s) * (R(s, a_i) - b_i)

    which estimates ``exact_policy_gradient(model, prompts, reward_fn)``. ``baseline``:

    * ``"none"`` or ``None``: b = 0 (plain REINFORCE);
    * ``"value"``: b = V(s) = E[R | s], computed exactly by enumeration;
    * ``"group_mean"``: b = mean of the G rewards of the prompt (GRPO's centering;
      the sample itself is in the mean, so the estimate is (G - 1) / G times an
      unbiased one);
    * ``"leave_one_out"``: b_i = mean of the other G - 1 rewards (RLOO; unbiased);
    * a number: one constant b for every prompt;
    * a tensor float[batch]: one b per prompt.

    (Per-parameter baselines such as the variance-optimal b* need the score table,
    ``score_functions``; notebook 03 computes them.)

    Taught in notebook 02; also used in notebook 03.
    """
    _check_model(model)
    check_ndim(prompts, 2, "prompts", "batch, prompt_pos")
    check_positive_ints(num_samples=num_samples)
    responses = sample_responses(model, prompts, num_samples, generator=generator)
    rewards = compute_reward(prompts, responses, reward_fn)  # [batch, trial]
    batch = prompts.shape[0]
    if baseline is None or (isinstance(baseline, str) and baseline == "none"):
        deltas = rewards
    elif isinstance(baseline, str):
        if baseline not in BASELINES:
            raise ValueError(
                f"unknown baseline {baseline!r}; valid names are: {', '.join(BASELINES)} "
                "(or pass a number or a float[batch] tensor)"
            )
        if baseline == "value":
            with torch.no_grad():
                values = exact_expected_reward(model, prompts, reward_fn)  # [batch]
            deltas = rewards - values[:, None].to(rewards.dtype)
        elif baseline == "group_mean":
            deltas = compute_deltas(rewards, "centered_rewards")
        else:
            deltas = compute_deltas(rewards, "loo_rewards")
    elif isinstance(baseline, torch.Tensor):
        if baseline.shape != (batch,):
            raise ValueError(
                f"a tensor baseline must be float[batch] = [{batch}] (one per prompt), "
                f"got shape {list(baseline.shape)}"
            )
        check_finite(baseline, "baseline")
        deltas = rewards - baseline[:, None].to(rewards.dtype)
    elif is_number(baseline):
        deltas = rewards - float(baseline)
        check_finite(deltas, "rewards - baseline")
    else:
        raise TypeError(
            f"baseline must be one of {BASELINES}, a number or a float[batch] tensor, "
            f"got {type(baseline).__name__}"
        )
    log_probs = compute_log_probs(model, prompts, responses).sum(dim=-1)  # [batch, trial]
    surrogate = (log_probs * deltas.detach().to(log_probs.dtype)).mean()
    return flat_grad(surrogate, model)


#: Refuse to enumerate more groups than this in ``group_estimate_moments``.
MAX_GROUPS = 2_000_000

#: Baselines that ``group_estimate_moments`` computes from the group itself (or not at all).
GROUP_BASELINES: tuple[str, ...] = ("none", "group_mean", "leave_one_out", "group_normalized")


def group_estimate_moments(
    probs: torch.Tensor,
    scores: torch.Tensor,
    rewards: torch.Tensor,
    group_size: int,
    baseline: str | float = "none",
    max_groups: int = MAX_GROUPS,
    chunk_size: int = 20_000,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact mean and per-parameter variance of a G-sample gradient estimate, for one prompt.

    Inputs for one prompt s: ``probs`` float[N] = pi(a|s), ``scores`` float[N, P] =
    grad log pi(a|s), ``rewards`` float[N] (all three from the enumeration helpers).
    The estimate from G i.i.d. samples a_1..a_G is

        g_hat = (1/G) sum_i scores[a_i] * (rewards[a_i] - b_i)

    with b_i = 0 (``"none"``), a number, the group mean of the G rewards
    (``"group_mean"``, GRPO without the std) or the mean of the other G - 1
    (``"leave_one_out"``, RLOO). ``"group_normalized"`` replaces (R_i - b_i) by GRPO's
    normalised delta (R_i - mean) / (max(std, std_floor) + eps), ``compute_deltas``'
    ``normalized_rewards`` (DeepSeekMath §4.1.2, used in eq. 3; a tied group gets 0).
    Every one of the N**G ordered groups is enumerated (in chunks), so the returned
    (mean float64[P], variance float64[P]) are exact up to float64 rounding.
    Raises ValueError if N**G > ``max_groups``.
    """
    check_ndim(probs, 1, "probs", "N")
    check_ndim(scores, 2, "scores", "N, num_params")
    check_ndim(rewards, 1, "rewards", "N")
    if not (probs.shape[0] == scores.shape[0] == rewards.shape[0]):
        raise ValueError(
            f"probs, scores and rewards must share N: got {list(probs.shape)}, "
            f"{list(scores.shape)}, {list(rewards.shape)}"
        )
    check_positive_ints(group_size=group_size, chunk_size=chunk_size)
    if isinstance(baseline, str):
        if baseline not in GROUP_BASELINES:
            raise ValueError(
                f"unknown baseline {baseline!r}; valid names are: {', '.join(GROUP_BASELINES)} "
                "(or pass a number)"
            )
        if baseline in ("group_mean", "leave_one_out", "group_normalized") and group_size < 2:
            raise ValueError(f"baseline {baseline!r} needs group_size >= 2, got {group_size}")
    elif not is_number(baseline):
        raise TypeError(f"baseline must be a name or a number, got {type(baseline).__name__}")
    num = probs.shape[0]
    if num**group_size > max_groups:
        raise ValueError(
            f"enumerating every group needs N ** G = {num}**{group_size} = {num**group_size} "
            f"groups, more than max_groups={max_groups}; use a smaller group or policy"
        )
    probs, scores, rewards = probs.double(), scores.double(), rewards.double()
    groups = all_responses(num, group_size, max_responses=max_groups)  # [N**G, G] indices
    total = torch.zeros(scores.shape[1], dtype=torch.float64)
    total_sq = torch.zeros_like(total)
    for start in range(0, groups.shape[0], chunk_size):
        index = groups[start : start + chunk_size]  # [chunk, G]
        weight = probs[index].prod(dim=-1)  # [chunk]
        group_rewards = rewards[index]  # [chunk, G]
        if baseline == "none":
            deltas = group_rewards
        elif baseline == "group_mean":
            deltas = compute_deltas(group_rewards, "centered_rewards")
        elif baseline == "leave_one_out":
            deltas = compute_deltas(group_rewards, "loo_rewards")
        elif baseline == "group_normalized":
            deltas = compute_deltas(group_rewards, "normalized_rewards")
        else:
            deltas = group_rewards - float(baseline)
        estimate = (scores[index] * deltas[..., None]).mean(dim=1)  # [chunk, P]
        total += weight @ estimate
        total_sq += weight @ estimate**2
    return total, (total_sq - total**2).clamp_min(0)


# ---- tokens: a tiny autoregressive policy, enumerated (notebook 03, section 6) -------------


def tabular_token_log_probs(logits: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
    """Per-token log pi(y_t | y_<t) float[N, pos] of a tabular autoregressive policy.

    The smallest policy whose token ``t`` depends on the tokens before it (here through the
    previous one, a bigram table): ``logits`` float[pos, vocab + 1, vocab] holds one table per
    position, indexed by the previous token, with row ``vocab`` for the first position (no
    previous token); ``responses`` int64[N, pos] with values in 0 .. vocab - 1. The log-prob
    of a whole response is the sum over pos (the autoregressive factorisation
    log pi(y | s) = sum_t log pi(y_t | s, y_<t)).

    Taught in notebook 03.
    """
    check_ndim(logits, 3, "logits", "pos, vocab + 1, vocab")
    check_ndim(responses, 2, "responses", "N, pos")
    check_integer(responses, "responses")
    pos, rows, vocab = logits.shape
    if rows != vocab + 1 or responses.shape[1] != pos:
        raise ValueError(
            f"logits must be [pos, vocab + 1, vocab] and responses [N, pos], got "
            f"{list(logits.shape)} and {list(responses.shape)}"
        )
    check_token_range(responses, vocab, "responses")
    start = torch.full_like(responses[:, :1], vocab)  # "no previous token"
    previous = torch.cat([start, responses[:, :-1]], dim=1)  # [N, pos]
    table = torch.log_softmax(logits, dim=-1)  # [pos, vocab + 1, vocab]
    return table[torch.arange(pos), previous, responses]


def tabular_token_scores(logits: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
    """Per-token scores grad_logits log pi(y_t | y_<t) float[N, pos, P], P = logits.numel().

    The Jacobian of ``tabular_token_log_probs`` (``torch.func.jacrev``), one row per
    (response, position). Summed over pos it is the score of the whole response.

    Taught in notebook 03.
    """
    jacobian = torch.func.jacrev(tabular_token_log_probs)(logits.detach(), responses)
    return jacobian.reshape(*responses.shape, -1)


def reward_to_go(token_rewards: torch.Tensor) -> torch.Tensor:
    """float[..., pos] -> float[..., pos]: the rewards from position t on, sum_{t' >= t} r_t'.

    With a single reward at the last position (an outcome reward) every position gets that
    reward: the reward-to-go of a terminal reward is the same for every token.

    Taught in notebook 03.
    """
    if token_rewards.ndim < 1:
        raise ValueError("token_rewards needs a last axis of positions, got a scalar")
    return token_rewards.flip(-1).cumsum(-1).flip(-1)
