"""PPO + GAE (a critic) vs GRPO vs RLOO on the autoregressive sort-dedup task (issue 14).

The same loop and policy; only the advantage estimator differs. Per method, 5 seeds: train
until greedy exact on the validation half of the held-out prompts (unseen by content)
reaches VALIDATION_TARGET or the epoch budget (150 epochs = 19,200 responses) runs out;
then score the test half once. The task is notebook 10's small one (values 0-3, prompts of
length 3: 64 prompts, 32 held out = 16 validation + 16 test), chosen so that 15 runs fit in
minutes on a loaded 2-core machine; with 16 test prompts one prompt is 6.25 points.
Reports responses sampled and wall time to the target, final test exact, and the worst seed.
Settings are shared (one learning rate, G, batch), not tuned per method: a first
comparison, not a verdict on tuned methods. Runs go WORKERS at a time in parallel
processes; wall times depend on that and on the machine's load (recorded in the JSON).
"""

from __future__ import annotations

import time
from dataclasses import replace
from multiprocessing import Pool

import torch
from _common import NUM_THREADS, markdown_table, median, save, setup

from pgrl_helpers.training import TrainConfig, evaluate_greedy, run_policy_gradient

SEEDS = (0, 1, 2, 3, 4)
VALIDATION_TARGET = 0.75
MAX_SECONDS = 600.0  # a safety net only: the budget is num_epochs (responses)
WORKERS = 3  # runs in parallel processes (one torch thread each)

BASE = TrainConfig(
    model="autoregressive",
    task="sort_dedup",
    prompt_source="random",
    prompt_length=3,
    vocab_size=4,
    embedding_dim=16,
    num_layers=1,
    num_heads=2,
    reward_fn="dedup_position_reward",
    loss_mode="clipped",
    deltas_mode="normalized_rewards",
    num_responses=8,
    prompts_per_epoch=16,
    num_epochs=150,
    num_steps_per_epoch=2,
    learning_rate=1e-2,
    eval_every=5,
    num_eval_prompts=32,
)

METHODS = {
    "PPO + GAE": replace(
        BASE, advantage_estimator="gae", gae_lambda=0.95, critic_learning_rate=1e-2
    ),
    "GRPO": BASE,
    "RLOO": replace(BASE, deltas_mode="loo_rewards"),
}


def run(config: TrainConfig) -> dict:
    task = config.build_task()
    start = time.perf_counter()
    state = {"reached": False, "responses": None, "seconds": None, "validation": 0.0}

    def callback(epoch, history):
        if (epoch + 1) % config.eval_every:
            return False
        half = len(history.heldout_prompts) // 2
        score = evaluate_greedy(history.model, history.heldout_prompts[:half], task)
        state["validation"] = score["exact_sort"]
        if score["exact_sort"] >= VALIDATION_TARGET:
            state.update(
                reached=True,
                seconds=time.perf_counter() - start,
                responses=(epoch + 1) * config.batch_prompts * config.num_responses,
            )
            return "stop"
        return time.perf_counter() - start > MAX_SECONDS

    history = run_policy_gradient(config, callback=callback)
    heldout = history.heldout_prompts
    test = evaluate_greedy(history.model, heldout[len(heldout) // 2 :], task)
    return {
        "reached": state["reached"],
        "seconds_to_target": state["seconds"],
        "responses_to_target": state["responses"],
        "seconds": time.perf_counter() - start,
        "epochs": history.steps()[-1]["epoch"] + 1,
        "validation_exact": state["validation"],
        "test_exact": test["exact_sort"],
    }


def _job(job: tuple[str, int]) -> tuple[str, dict]:
    name, seed = job
    torch.set_num_threads(NUM_THREADS)
    result = run(replace(METHODS[name], seed=seed)) | {"seed": seed}
    print(f"{name} seed {seed}: {result}", flush=True)
    return name, result


def main() -> None:
    setup()
    results: dict[str, list[dict]] = {name: [] for name in METHODS}
    jobs = [(name, seed) for seed in SEEDS for name in METHODS]
    with Pool(WORKERS) as pool:
        for name, result in pool.imap(_job, jobs):
            results[name].append(result)
    rows = []
    for name, runs in results.items():
        reached = [r for r in runs if r["reached"]]
        worst_responses = (
            max(r["responses_to_target"] for r in runs)
            if len(reached) == len(runs)
            else "not reached"
        )
        rows.append(
            [
                name,
                f"{len(reached)}/{len(runs)}",
                median([r["responses_to_target"] for r in reached]) if reached else "-",
                worst_responses,
                f"{median([r['seconds_to_target'] for r in reached]):.1f}" if reached else "-",
                f"{median([r['test_exact'] for r in runs]):.3f}",
                f"{min(r['test_exact'] for r in runs):.3f}",
            ]
        )
    headers = [
        "method",
        f"seeds reaching {VALIDATION_TARGET:.0%} (validation)",
        "median responses to target",
        "worst-seed responses to target",
        "median wall time to target (s)",
        "median test exact",
        "worst-seed test exact",
    ]
    table = markdown_table(headers, rows)
    print(table)
    save(
        "ppo_vs_grpo",
        {
            "validation_target": VALIDATION_TARGET,
            "max_seconds": MAX_SECONDS,
            "parallel_workers": WORKERS,
            "configs": {name: vars(config) for name, config in METHODS.items()},
            "runs": results,
            "table": table,
        },
    )


if __name__ == "__main__":
    main()
