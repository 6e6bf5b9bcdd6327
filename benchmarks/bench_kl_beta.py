"""What the KL coefficient beta does to a training run: reward, KL and entropy against beta.

``SortTransformer`` on random prompts (length 5, values 0-9, the generalization task), GRPO
with centered deltas and the clipped loss, k3 KL penalty in the loss with the reference fixed
at the initial policy for the whole run (``compute_ref_model_period`` > ``num_epochs``, as in
RLHF), ``EPOCHS`` epochs, seeds ``SEEDS``. Per beta: the mean reward of the last 5 epochs'
samples, greedy exact-sort on held-out prompts, the *exact* KL(pi || pi_init) per response
on those prompts (summed over positions: the policy decodes positions independently, so
``policy_token_kl`` is exact, and it is measured for beta = 0 too), and the policy's entropy
at the end. Writes results/kl_beta.json.

    python benchmarks/bench_kl_beta.py [--quick] [--seeds S ...] [--out DIR]
"""

from __future__ import annotations

import copy
import dataclasses
import statistics

from _common import RESULTS_DIR, markdown_table, output_dir, parse_args, save, setup

from pgrl_helpers.config import TrainConfig
from pgrl_helpers.history import history_columns
from pgrl_helpers.kl import policy_token_kl
from pgrl_helpers.training import run_policy_gradient

NAME = "kl_beta"
BETAS = (0.0, 0.03, 0.3, 1.0)
SEEDS = (0, 1, 2)
EPOCHS = 30
#: The recipe ``generalizing_transformer`` (notebook 07's task and policy) with 4 optimizer
#: steps per batch, a short run, one evaluation at the end and a fixed reference.
CONFIG = TrainConfig.preset(
    "generalizing_transformer",
    num_steps_per_epoch=4,
    num_epochs=EPOCHS,
    compute_ref_model_period=EPOCHS + 1,  # the reference stays the initial policy
    kl_estimator="k3",
    eval_every=EPOCHS,
    num_eval_prompts=500,
    seed=0,  # the recipe's seed is 1; each run here sets its own
)
#: A quick run: 2 epochs of 16 prompts, 20 held-out prompts.
QUICK = dict(
    num_epochs=2,
    compute_ref_model_period=3,
    eval_every=2,
    prompts_per_epoch=16,
    num_eval_prompts=20,
)


def run(beta: float, seed: int, base: TrainConfig = CONFIG) -> dict:
    config = dataclasses.replace(base, kl_coef=beta, seed=seed)
    model = config.build_policy()
    initial = copy.deepcopy(model).requires_grad_(False)
    history = run_policy_gradient(config, policy=model)
    steps = history_columns(history, "step")
    per_epoch = steps["mean_reward"][:: config.num_steps_per_epoch]
    kl = policy_token_kl(history.run.validation_prompts, history.run.model, initial).sum(-1).mean()
    return {
        "beta": beta,
        "seed": seed,
        "final_mean_reward": statistics.mean(per_epoch[-5:]),
        "validation_exact_sort": history.evals()[-1]["validation_exact_sort"],
        "kl_to_initial": kl.item(),
        "final_entropy": steps["entropy"][-1],
        "initial_entropy": steps["entropy"][0],
    }


def main(quick: bool = False, seeds=None, out_dir=RESULTS_DIR) -> dict:
    """Every beta on every seed (default ``SEEDS``; ``quick``: seed 0, ``QUICK`` sizes)."""
    out_dir = output_dir(out_dir, quick)
    setup()
    seeds = tuple(seeds) if seeds else (SEEDS[:1] if quick else SEEDS)
    base = dataclasses.replace(CONFIG, **QUICK) if quick else CONFIG
    runs, rows = [], []
    for beta in BETAS:
        these = [run(beta, s, base) for s in seeds]
        runs += these

        def avg(key, these=these):
            return statistics.mean(r[key] for r in these)

        rows.append(
            [
                f"{beta:g}",
                f"{avg('final_mean_reward'):.2f}",
                f"{avg('validation_exact_sort'):.1%}",
                f"{avg('kl_to_initial'):.3f}",
                f"{avg('final_entropy'):.3f}",
            ]
        )
        print(rows[-1], flush=True)
    table = markdown_table(
        [
            "beta",
            "mean reward, last 5 epochs (max 5)",
            "held-out exact-sort",
            "KL(pi || pi_init) per response (nats, exact)",
            "final entropy (nats/position)",
        ],
        rows,
    )
    print(table)
    return save(
        NAME,
        {
            "config": {k: v for k, v in dataclasses.asdict(base).items()},
            "betas": list(BETAS),
            "seeds": list(seeds),
            "runs": runs,
            "table": table,
        },
        out_dir,
    )


def section(r: dict, results_dir=RESULTS_DIR) -> str:
    """Reward, held-out exact-sort, KL to the initial policy and entropy per beta."""
    title = "## The KL coefficient beta on a training run (`bench_kl_beta.py`, notebook 05)"
    return "\n".join([title, "", r["table"]])


if __name__ == "__main__":
    main(**parse_args())
