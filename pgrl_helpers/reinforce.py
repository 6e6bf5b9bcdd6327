"""Plain REINFORCE by hand, tracking the exact objective (notebook 02, "the dataset moves").

No baseline, no optimizer object: sample, score, build the surrogate -mean(log pi(a) R),
backpropagate, step the parameters by plain gradient ascent. Meant for tiny policies whose
E[R] can be enumerated (``pgrl_helpers.exact``).

Taught in notebook 02.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .exact import exact_expected_reward
from .sampling import compute_log_probs, sample_responses


def plain_reinforce(
    model,
    prompt: torch.Tensor,
    reward_fn: Callable,
    num_steps: int,
    batch_size: int,
    learning_rate: float,
    generator: torch.Generator,
) -> dict[str, list]:
    """Run ``num_steps`` REINFORCE steps on one prompt int[1, pos]; returns the history.

    ``reward_fn(prompt, samples)`` -> float[1, trial]. History lists, one entry per step:
    ``p_correct`` (exact E[R] *before* the step), ``num_correct`` (samples with reward > 0,
    the size of that step's "SFT dataset") and ``surrogate`` (the loss value, on that batch).

    Taught in notebook 02.
    """
    if num_steps < 1 or batch_size < 1:
        raise ValueError(f"num_steps and batch_size must be >= 1, got {num_steps}, {batch_size}")
    history = {"p_correct": [], "num_correct": [], "surrogate": []}
    for _ in range(num_steps):
        samples = sample_responses(model, prompt, batch_size, generator=generator)
        rewards = reward_fn(prompt, samples)  # [1, trial]
        log_probs = compute_log_probs(model, prompt, samples).sum(dim=-1)  # [1, trial]
        surrogate = -(log_probs * rewards).mean()  # the REINFORCE loss
        model.zero_grad()
        surrogate.backward()
        with torch.no_grad():
            history["p_correct"].append(exact_expected_reward(model, prompt, reward_fn).item())
            for p in model.parameters():
                p -= learning_rate * p.grad
        history["num_correct"].append(int((rewards > 0).sum()))
        history["surrogate"].append(surrogate.item())
    return history
