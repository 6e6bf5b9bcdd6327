"""pgrl_helpers: the shared code of the pgrl notebook series.

Where things live (one module per concept):

* ``sort_task``  - prompts, ground truth, rewards, ``compute_reward``
* ``models``     - ``LectureModel`` (the lecture's toy policy, fixed), ``SortTransformer``
* ``sampling``   - ``sample_responses`` / ``generate_responses``, ``compute_log_probs``
* ``advantages`` - ``compute_deltas`` (rewards, centered, normalized, max, leave-one-out)
* ``losses``     - ``compute_loss`` (naive, unclipped, clipped), ``compute_ratio``
* ``kl``         - k1/k2/k3 estimators, ``compute_kl_penalty``, exact ``categorical_kl``
* ``exact``      - enumerate every response of a small policy: exact E[R], exact gradients,
                   exact moments of G-sample estimates
* ``training``   - ``run_policy_gradient`` (the one training loop, top to bottom)
* ``config``     - ``TrainConfig`` (the flat dataclass a run is set up with)
* ``task``, ``policy``, ``rollout`` - the loop's three interfaces: Task (prompts, rewards,
                   held-out key), Policy (sample, log-probs, entropy, greedy), Rollout (one
                   epoch's batch); rollout sources and batch filters live in ``rollout``
* ``history``    - ``METRICS``, ``History``, ``history_columns``
* ``memory``     - bytes per line of a GRPO / PPO step: policy, reference, value and reward models, caches
* ``diagnose``, ``symptoms`` - ``diagnose(history)``: findings from a run's metrics; the catalogue
* ``widgets``    - the training dashboard (``make_dashboard``) on top of ``run_policy_gradient``
* ``autoregressive``, ``masking``, ``dedup_task`` - token-by-token policy, response masks,
                   loss aggregations, a variable-length task (notebook 08)
* ``checks``     - exercise checkers for the classroom assignments
* ``trl_bridge`` - our settings -> Hugging Face TRL ``GRPOConfig`` (needs requirements-scale.txt)
"""

from .advantages import DELTA_MODES, compute_deltas
from .config import TrainConfig
from .history import METRICS, History, history_columns
from .kl import KL_ESTIMATORS, compute_kl_penalty, kl_estimate, kl_k1, kl_k2, kl_k3
from .losses import (
    LOSS_MODES,
    clip_fraction,
    compute_loss,
    compute_per_token_loss,
    compute_ratio,
)
from .models import LectureModel, Model, SortTransformer
from .policy import Policy
from .rollout import Rollout
from .sampling import (
    compute_log_probs,
    entropy_from_logits,
    generate_responses,
    greedy_responses,
    sample_responses,
    token_entropy,
)
from .sort_task import (
    LECTURE_PROMPTS,
    REWARD_FNS,
    compute_reward,
    exact_sort,
    lecture_prompts,
    make_prompts,
    max_reward,
    sort_distance_reward,
    sort_distance_reward_batch,
    sort_inclusion_ordering_reward,
    sort_inclusion_ordering_reward_batch,
    sorted_responses,
)
from .training import run_policy_gradient

__all__ = [
    "DELTA_MODES",
    "KL_ESTIMATORS",
    "LECTURE_PROMPTS",
    "LOSS_MODES",
    "REWARD_FNS",
    "LectureModel",
    "METRICS",
    "History",
    "Policy",
    "Rollout",
    "SortTransformer",
    "TrainConfig",
    "Model",
    "clip_fraction",
    "compute_deltas",
    "compute_kl_penalty",
    "compute_log_probs",
    "compute_loss",
    "compute_per_token_loss",
    "compute_ratio",
    "compute_reward",
    "exact_sort",
    "entropy_from_logits",
    "generate_responses",
    "greedy_responses",
    "history_columns",
    "kl_estimate",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "lecture_prompts",
    "make_prompts",
    "run_policy_gradient",
    "max_reward",
    "sample_responses",
    "sort_distance_reward",
    "sort_distance_reward_batch",
    "sort_inclusion_ordering_reward",
    "sort_inclusion_ordering_reward_batch",
    "sorted_responses",
    "token_entropy",
]
