"""Checkers for the classroom exercises in ``assignments/`` (one module per exercise family).

Each ``check_*`` function takes the student's function (or config), runs it on test inputs
and compares what it *does* with the reference behaviour of this package. It prints exactly
one line:

* ``[PASS] name: ...`` when the behaviour matches;
* ``[TODO] name: not implemented yet ...`` while the function still raises
  ``NotImplementedError`` (the notebook keeps running, so later exercises are checked);
* ``[FAIL] name: ...`` naming the likely mistake (wrong sign, biased std, wrong axis,
  forgot to detach, wrong KL direction, ...) when it can be recognised, otherwise where the
  result differs. The reference code itself is never printed.

Every checker takes ``seed`` (test inputs are drawn from it) and ``strict``: with
``strict=True`` it prints nothing on a pass and raises ``AssertionError`` otherwise. The
instructor notebooks use ``strict=True`` with another seed inside nbgrader's hidden-test
regions, so that ``nbgrader autograde`` turns a failed check into lost points.

Modules: ``rewards`` (sort_distance_reward, exact expected reward), ``deltas`` (deltas and
baselines), ``losses`` (the inner loop's freeze bug, the clipped loss), ``kl`` (k3),
``training`` (a configuration that reaches the held-out target), ``masks`` (masked mean, the
three loss aggregations), ``gae`` (TD errors, GAE), ``objectives`` (GSPO's sequence ratio,
CISPO's loss), ``offpolicy`` (truncated importance weights, effective sample size),
``passk`` (unbiased pass@k), ``multiturn`` (a tool's tokens kept out of the loss),
``capstone`` (three broken runs: a diagnosis from the history, then a fix); ``_core``
holds what they share.
"""

from ._core import (  # noqa: F401
    FAIL,
    PASS,
    TODO,
    CheckResult,
    run_check,
)
from .capstone import (  # noqa: F401
    CAPSTONE_BUDGET,
    CAPSTONE_READING,
    CAPSTONE_RERUN_SEEDS,
    CAPSTONE_STOP,
    CAPSTONE_TARGET,
    CAPSTONE_TASK,
    CAUSE_FIELDS,
    CAUSES,
    EVAL_METRICS,
    RUN_NAMES,
    STEP_METRICS,
    broken_run,
    check_diagnosis,
    check_fix,
)
from .deltas import (  # noqa: F401
    BASELINE_DRAWS,
    BASELINE_G,
    baseline_variance_table,
    check_baseline,
    check_centered_deltas,
    check_loo_deltas,
    check_normalized_deltas,
    reinforce_estimates,
    total_variance,
)
from .gae import (  # noqa: F401
    check_gae,
    check_td_errors,
)
from .kl import (  # noqa: F401
    check_kl_k3,
)
from .losses import (  # noqa: F401
    check_clipped_loss,
    check_inner_loop,
)
from .masks import (  # noqa: F401
    check_aggregate_loss,
    check_masked_mean,
)
from .multiturn import (  # noqa: F401
    check_multi_turn_loss,
)
from .objectives import (  # noqa: F401
    check_cispo_loss,
    check_sequence_ratio,
)
from .offpolicy import (  # noqa: F401
    check_effective_sample_size,
    check_truncated_weights,
)
from .passk import (  # noqa: F401
    brute_force_pass_at_k,
    check_mean_pass_at_k,
    check_pass_at_k,
)
from .rewards import (  # noqa: F401
    check_expected_reward,
    check_sort_distance_reward,
)
from .training import (  # noqa: F401
    TRAINING_BUDGET,
    TRAINING_STOP,
    TRAINING_TARGET,
    TRAINING_TASK,
    check_training_config,
)
