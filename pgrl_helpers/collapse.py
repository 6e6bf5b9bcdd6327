"""Entropy collapse: the one rule that labels a training run "collapsed".

Notebooks 08 and 11 and the benchmarks ``bench_collapse.py`` and ``bench_objectives.py`` all
use ``is_collapsed``; nothing else in the course defines the word.

**Rule.** A run is *collapsed* when, at its end,

1. the policy is nearly deterministic: the mean token entropy of its last ``tail`` epochs
   (nats per real response token) is below ``entropy_threshold``, and
2. it is still wrong: its last greedy exact score on the **validation** prompts is below the
   run's ``target``.

A run whose loop stopped at the target ends with validation exact >= target, so it is never
collapsed, however low its entropy: a policy that answers right is allowed to be deterministic.
The rule reads only training-side signals (entropy) and the validation set; it takes no test
score, so a diagnostic label can never leak the test set into a decision. This is the state
Cui et al. (2025, arXiv 2505.22617, section 2) describe: entropy spent before the reward is
earned, so the G samples of a prompt agree, their rewards tie and the group gives no gradient.

The thresholds (0.1 nats, the last 5 epochs) were fixed before the benchmarks ran. A run that
logged its entropy on some epochs only (``bench_objectives.py`` stores it at each evaluation,
every 5 epochs) passes ``entropy_epochs``: the end entropy is then the mean of the values
recorded within the last ``tail`` epochs.

Taught in notebooks 08, 11.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

#: nats per real response token: below this (mean of the last ``TAIL_EPOCHS`` epochs) the
#: policy is called nearly deterministic.
ENTROPY_THRESHOLD = 0.1
#: epochs averaged for the end-of-run entropy
TAIL_EPOCHS = 5

RULE = (
    f"collapsed: mean token entropy of the last {TAIL_EPOCHS} epochs below "
    f"{ENTROPY_THRESHOLD} nats and final validation exact below the target "
    "(never reads the test set)"
)


def _finite_list(values: Sequence[float], name: str) -> list[float]:
    values = [float(v) for v in values]
    if not values:
        raise ValueError(f"{name} must hold at least one value, got an empty sequence")
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"{name} must be finite, got {values}")
    return values


def end_entropy(
    entropy: Sequence[float],
    tail: int = TAIL_EPOCHS,
    entropy_epochs: Sequence[int] | None = None,
) -> float:
    """Mean entropy (nats per token) over the last ``tail`` epochs of a run.

    entropy: one value per epoch [epochs]; or, with ``entropy_epochs`` (the epoch of each
    value, increasing), values logged on some epochs only: then the mean of those logged
    within the last ``tail`` epochs (epoch > last epoch - tail). A run shorter than ``tail``
    epochs averages all its values."""
    if not isinstance(tail, int) or isinstance(tail, bool) or tail < 1:
        raise ValueError(f"tail must be an int >= 1, got {tail!r}")
    values = _finite_list(entropy, "entropy")
    if min(values) < 0:
        raise ValueError(f"entropy must be >= 0 nats, got a minimum of {min(values)}")
    if entropy_epochs is None:
        last = values[-tail:]
    else:
        epochs = list(entropy_epochs)
        if len(epochs) != len(values):
            raise ValueError(
                f"entropy_epochs must give one epoch per entropy value: {len(epochs)} epochs "
                f"for {len(values)} values"
            )
        if any(b <= a for a, b in zip(epochs, epochs[1:])):
            raise ValueError(f"entropy_epochs must increase, got {epochs}")
        last = [v for e, v in zip(epochs, values) if e > epochs[-1] - tail]
    return sum(last) / len(last)


def is_collapsed(
    validation_exact: Sequence[float],
    entropy: Sequence[float],
    target: float,
    entropy_threshold: float = ENTROPY_THRESHOLD,
    tail: int = TAIL_EPOCHS,
    entropy_epochs: Sequence[int] | None = None,
) -> bool:
    """True when the run ended nearly deterministic and still below ``target`` on validation.

    validation_exact: greedy exact on the validation prompts at each evaluation, in order
        [evals] (only the last one is read; the list makes the call site pass the curve,
        not a test score).
    entropy: mean token entropy per epoch [epochs], nats per real response token (or per
        logged epoch, with ``entropy_epochs``; see ``end_entropy``).
    target: the run's validation target in (0, 1].
    entropy_threshold: > 0 nats; tail: epochs averaged (>= 1).

    Taught in notebooks 08, 11.
    """
    if not (isinstance(target, int | float) and 0 < target <= 1):
        raise ValueError(f"target must be in (0, 1], got {target!r}")
    if not (isinstance(entropy_threshold, int | float) and entropy_threshold > 0):
        raise ValueError(f"entropy_threshold must be > 0 nats, got {entropy_threshold!r}")
    validation = _finite_list(validation_exact, "validation_exact")
    if not all(0 <= v <= 1 for v in validation):
        raise ValueError(f"validation_exact must lie in [0, 1], got {validation}")
    low_entropy = end_entropy(entropy, tail, entropy_epochs) < entropy_threshold
    still_wrong = validation[-1] < target
    return low_entropy and still_wrong
