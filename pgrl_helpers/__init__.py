"""pgrl_helpers: the shared code of the pgrl notebook series.

Importing the package loads nothing else: each public name below is imported from its home
module the first time it is used (PEP 562), so ``import pgrl_helpers.gae`` loads ``gae`` and
``_validate`` only, and a broken optional dependency (widgets, TRL) cannot break the math.
Notebooks import from the concept modules (``from pgrl_helpers.advantages import
compute_deltas``); ``pgrl_helpers.X`` is the reuse API, one home per name.

Where things live, by room:

* the lecture's math (tensors in, tensors out; imports only ``_validate`` and each other):
  ``sort_task``, ``task``, ``models``, ``policy``, ``sampling``, ``advantages``, ``losses``,
  ``covariance``, ``kl``, ``masking``, ``gae``
* the loop: ``rollout`` (the batch type, batch filters), ``objective`` (deltas, the per-token
  loss's glue, the token remedies), ``registry`` (the extension points' tables side by side),
  ``config`` (``TrainConfig``), ``recipes`` (named presets), ``history`` (``METRICS``, ``History``
  = the records, ``Run`` = the run's objects), ``training`` (``run_policy_gradient``)
* extensions the loop plugs in through ``registry``: ``autoregressive``, ``dedup_task``,
  ``tool_task``, ``value``, ``offpolicy``, ``infra``, ``memory``
* exact studies and instruments (one or two notebooks each): ``exact``, ``kl_exact``,
  ``baselines``, ``reinforce``, ``credit``, ``claims``, ``clip_family``, ``diagnose``,
  ``symptoms``, ``trl_log``, ``trl_diagnose`` (TRL logs read without TRL), ``collapse``,
  ``seed_stats``, ``passk``, ``bench_results``
* optional dependencies, in subpackages named after the pip extras: ``ui`` (``ui.dashboard``,
  ``ui.figures``, ``ui.gae_widget``, ``ui.clip_widget``; extra ``widgets``: ipywidgets,
  matplotlib) and ``hf`` (``hf.trl_config``, ``hf.trl_bridge``, ``hf.trl_objectives``,
  ``hf.hf_policy``, ``hf.checkpoint``, ``hf.real_lm``, ``hf.real_lm_task``; extra ``trl``:
  transformers, trl, peft). No top-level module imports them, so the core works without
  either extra
* ``checks``: the exercise checkers of the classroom assignments

``pgrl_helpers.__version__`` is the installed version (pyproject.toml's; CHANGELOG.md says
what each version changed), so a reuse can be pinned.
"""

from __future__ import annotations

import importlib

#: public name -> the module that defines it (its one home)
_HOMES: dict[str, str] = {
    # the lecture's math
    "LECTURE_PROMPTS": "sort_task",
    "REWARD_FNS": "sort_task",
    "compute_reward": "sort_task",
    "exact_sort": "sort_task",
    "lecture_prompts": "sort_task",
    "make_prompts": "sort_task",
    "max_reward": "sort_task",
    "sort_distance_reward": "sort_task",
    "sort_distance_reward_batch": "sort_task",
    "sort_inclusion_ordering_reward": "sort_task",
    "sort_inclusion_ordering_reward_batch": "sort_task",
    "sorted_responses": "sort_task",
    "LectureModel": "models",
    "SortTransformer": "models",
    "Policy": "policy",
    "compute_log_probs": "sampling",
    "entropy_from_logits": "sampling",
    "greedy_responses": "sampling",
    "sample_responses": "sampling",
    "token_entropy": "sampling",
    "DELTA_FUNCTIONS": "advantages",
    "DELTA_MODES": "advantages",
    "compute_deltas": "advantages",
    "LOSS_FUNCTIONS": "losses",
    "LOSS_MODES": "losses",
    "LossOptions": "losses",
    "per_token_loss_and_metrics": "losses",
    "clip_fraction": "losses",
    "clip_mask": "losses",
    "compute_loss": "losses",
    "compute_per_token_loss": "losses",
    "compute_ratio": "losses",
    "sequence_log_ratio": "losses",
    "KL_ESTIMATORS": "kl",
    "compute_kl_penalty": "kl",
    "kl_estimate": "kl",
    "kl_k1": "kl",
    "kl_k2": "kl",
    "kl_k3": "kl",
    "kl_k3_bias_corrected": "kl",
    "aggregate_loss": "masking",
    "masked_mean": "masking",
    "compute_gae": "gae",
    "whiten": "gae",
    # the loop
    "Rollout": "rollout",
    "TrainConfig": "config",
    "RECIPES": "recipes",
    "METRICS": "history",
    "History": "history",
    "Run": "history",
    "history_columns": "history",
    "run_policy_gradient": "training",
}

__all__ = sorted(_HOMES)


def _version() -> str:
    """The installed distribution's version; from a source tree that was never installed,
    pyproject.toml's; else "unknown"."""
    from importlib.metadata import PackageNotFoundError, version
    from pathlib import Path

    try:
        return version("pgrl-helpers")
    except PackageNotFoundError:
        pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
        if pyproject.exists():
            for line in pyproject.read_text(encoding="utf-8").splitlines():
                if line.startswith("version = "):
                    return line.split("=", 1)[1].strip().strip('"')
        return "unknown"


def __getattr__(name: str):
    """Import ``name`` from its home module on first use (PEP 562)."""
    if name == "__version__":
        globals()[name] = _version()
        return globals()[name]
    if name not in _HOMES:
        raise AttributeError(f"module 'pgrl_helpers' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES) | {"__version__"})
