"""Named recipes: the methods of notebooks 03-11 as ``TrainConfig`` field overrides.

``RECIPES[name]`` is what a method changes relative to the lecture's defaults;
``TrainConfig.preset(name, **overrides)`` builds it (the overrides win). One table, one line
of citation per method, so "what is DAPO, in this course's fields?" has one answer, which
``benchmarks/bench_objectives.py`` reads too (its ``OBJECTIVES`` are these recipes less what
its shared ``BASE`` already sets).

Conventions: a recipe names every field the method's paper (or TRL's recommended setting)
fixes, even where it equals the lecture's default (``loss_aggregation='token_mean'``), so the
table reads as the method's definition; a method's recipe never names run sizes (epochs, G,
learning rate), which stay the reader's choice. The whole-run recipes are the exception
(``notebook_08``, ``generalizing_transformer``): they fix everything a run needs, sizes
included, so that a notebook or the dashboard reproduces that one run. The KL term stays off
(``kl_coef`` 0) as in DAPO, Dr. GRPO and TRL's default; DeepSeekMath's GRPO used beta = 0.04
(add ``kl_coef=0.04``). A method whose batch filter reads EOS (DAPO's overlong shaping) needs
the variable-length task, so its recipe names that task too.

``recipe_table()`` renders the method recipes as the README's table "What GRPO, Dr. GRPO, DAPO,
GSPO, ... are in these fields" (``tests/test_recipes.py`` checks the README holds it verbatim).
This module is data: it imports nothing from the package (``config`` imports it).

Taught in notebook 11.
"""

from __future__ import annotations

#: The variable-length task of notebook 08 (sort, drop repeats, end with EOS) and its policy
#: (a causal transformer: d_model 32, 4 heads, 2 layers).
_SORT_DEDUP = {
    "model": "autoregressive",
    "task": "sort_dedup",
    "prompt_source": "random",
    "reward_fn": "dedup_position_reward",
    "embedding_dim": 32,
}

#: name -> the ``TrainConfig`` fields the recipe sets (everything else: the defaults).
RECIPES: dict[str, dict] = {
    # The lecture's run (notebooks 02-07): REINFORCE with centred rewards. Every field is
    # TrainConfig's default (tests/test_recipes.py checks it); the four objective axes are
    # named, so ``recipe_table`` reads a default from here, not from ``config``.
    "lecture": {
        "deltas_mode": "centered_rewards",
        "loss_mode": "naive",
        "importance_sampling_level": "token",
        "loss_aggregation": "token_mean",
    },
    # GRPO, Shao et al. 2024 (DeepSeekMath, arXiv 2402.03300): group-normalised rewards,
    # PPO's clipped ratio, each response's token mean averaged over responses.
    "grpo": {
        "deltas_mode": "normalized_rewards",
        "loss_mode": "clipped",
        "loss_aggregation": "sequence_mean",
    },
    # Dr. GRPO, Liu et al. 2025 ("Understanding R1-Zero-like training", arXiv 2503.20783):
    # no std division, and a constant normaliser instead of the response length.
    "dr_grpo": {
        "deltas_mode": "centered_rewards",
        "loss_mode": "clipped",
        "loss_aggregation": "constant_normalizer",
    },
    # DAPO, Yu et al. 2025 (arXiv 2503.14476): clip-higher (0.2 / 0.28), token-level mean,
    # overlong reward shaping and dynamic sampling (batch_filter 'dapo'; up to 3 refills).
    "dapo": {
        **_SORT_DEDUP,
        "deltas_mode": "normalized_rewards",
        "loss_mode": "clipped",
        "loss_aggregation": "token_mean",
        "epsilon_high": 0.28,
        "batch_filter": "dapo",
        "dynamic_sampling_max_draws": 3,
    },
    # GSPO, Zheng et al. 2025 (arXiv 2507.18071): one length-normalised ratio per sequence,
    # clipped at 1 - 3e-4 and 1 + 4e-4 (the paper's ranges), sequence-level mean.
    "gspo": {
        "deltas_mode": "normalized_rewards",
        "loss_mode": "clipped",
        "importance_sampling_level": "sequence",
        "epsilon": 3e-4,
        "epsilon_high": 4e-4,
        "loss_aggregation": "sequence_mean",
    },
    # CISPO, MiniMax 2025 (MiniMax-M1, arXiv 2506.13585): clip the (detached) IS weight,
    # never the gradient: no lower clip (epsilon 1), weights capped at 1 + 4 = 5 (TRL's
    # recommended cap for loss_type 'cispo', its epsilon_high 5).
    "cispo": {
        "deltas_mode": "normalized_rewards",
        "loss_mode": "cispo",
        "epsilon": 1.0,
        "epsilon_high": 4.0,
        "loss_aggregation": "token_mean",
    },
    # RLOO, Ahmadian et al. 2024 ("Back to Basics", arXiv 2402.14740; Kool et al. 2019):
    # REINFORCE with the leave-one-out mean of the other G - 1 rewards as the baseline.
    "rloo": {"deltas_mode": "loo_rewards"},
    # REINFORCE++ (-baseline), Hu et al. 2025 (arXiv 2501.03262): group-mean baseline, then
    # normalised over the whole batch; PPO's clipped ratio.
    "reinforce_pp": {"deltas_mode": "reinforce_pp_baseline", "loss_mode": "clipped"},
    # Notebook 08's last run: GRPO-style training on the variable-length sort-dedup task
    # (stops at 90% validation exact; about a minute).
    "notebook_08": {
        **_SORT_DEDUP,
        "prompt_length": 4,
        "vocab_size": 6,
        "max_response_length": 6,
        "deltas_mode": "normalized_rewards",
        "loss_mode": "clipped",
        "loss_aggregation": "token_mean",
        "num_responses": 16,
        "entropy_coef": 0.05,
        "prompts_per_epoch": 32,
        "num_epochs": 150,
        "num_steps_per_epoch": 4,
        "learning_rate": 3e-3,
        "eval_every": 10,
        "num_eval_prompts": 42,
        "target_validation_exact_sort": 0.9,
    },
    # A whole run, sizes included (like notebook_08), that learns in seconds: the dashboard's
    # default preset, notebook 07 section 4's setting on its seed 1. SortTransformer on
    # random prompts of length 5, values 0-9, 200 validation + 200 test multisets held out;
    # held-out exact-sort climbs from 0 to above 90% in its 200 epochs (~10 CPU seconds).
    "generalizing_transformer": {
        "model": "transformer",
        "embedding_dim": 32,
        "num_layers": 2,
        "num_heads": 4,
        "prompt_source": "random",
        "prompts_per_epoch": 128,
        "vocab_size": 10,
        "prompt_length": 5,
        "num_responses": 8,
        "reward_fn": "sort_distance_reward",
        "deltas_mode": "centered_rewards",
        "loss_mode": "clipped",
        "num_steps_per_epoch": 1,
        "learning_rate": 1e-3,
        "num_eval_prompts": 200,
        "num_epochs": 200,
        "seed": 1,
    },
}

#: The recipes that define a method (the rest, ``notebook_08`` and ``generalizing_transformer``,
#: fix a whole run): the rows of ``recipe_table``.
METHOD_RECIPES: tuple[str, ...] = (
    "lecture", "grpo", "dr_grpo", "dapo", "gspo", "cispo", "rloo", "reinforce_pp",
)  # fmt: skip

#: The objective's four axes, in the order the loop applies them: rewards -> deltas
#: (= advantages), the per-token loss, the ratio's level, the aggregation over tokens.
OBJECTIVE_FIELDS: tuple[str, ...] = (
    "deltas_mode", "loss_mode", "importance_sampling_level", "loss_aggregation",
)  # fmt: skip


def recipe_table(names: tuple[str, ...] = METHOD_RECIPES) -> str:
    """Markdown table: one row per recipe, its ``OBJECTIVE_FIELDS`` and the other fields it sets.

    A field the recipe leaves alone shows the lecture's default (``RECIPES["lecture"]``, which
    is ``TrainConfig``'s); DAPO's variable-length task (the five ``_SORT_DEDUP`` fields) is
    named once, as "notebook 08's task".

    Taught in notebook 11.
    """
    defaults = RECIPES["lecture"]
    header = "| recipe | " + " | ".join(f"`{field}`" for field in OBJECTIVE_FIELDS)
    lines = [header + " | also sets |", "|---" * (len(OBJECTIVE_FIELDS) + 2) + "|"]
    for name in names:
        recipe = RECIPES[name]
        axes = [f"`{recipe.get(field, defaults[field])}`" for field in OBJECTIVE_FIELDS]
        task = _SORT_DEDUP.items() <= recipe.items()
        others = [
            f"`{field}={value!r}`"
            for field, value in recipe.items()
            if field not in OBJECTIVE_FIELDS and not (task and field in _SORT_DEDUP)
        ]
        if task:
            others.append("notebook 08's task (`task='sort_dedup'`, autoregressive policy)")
        lines.append(f"| `{name}` | " + " | ".join(axes) + f" | {', '.join(others) or '-'} |")
    return "\n".join(lines)
