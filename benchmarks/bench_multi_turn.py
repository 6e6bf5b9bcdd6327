"""Multi-turn tool use: masked environment tokens vs the planted bug (unmasked), over seeds.

The task is ``tool_task.ToolCompareTask`` ("which of items a, b is more expensive?", hidden
prices, a ``compare x y`` tool), trained by ``run_policy_gradient`` with the
autoregressive ``ToolUsePolicy``. Two conditions differ only in ``mask_tool_tokens``:
True masks the tool's reply out of the loss (correct), False leaves the tool's two reply
tokens in it (the bug). The grader's slot (the right answer) is out of the mask in both: in
the loss it would also train the policy on the answer, a second change that no real
framework's bug makes. Every other setting is shared (``CONFIG``).

**Paired design.** Seed k of both conditions starts from the same weights, trains on the same
prompts and starts the same sampling stream, so the two conditions are compared seed by seed:
``compare_seeds(..., paired=True)``, the exact sign-flip test over the per-seed differences.
Ten seeds, because a paired test over five can never give p < 0.05 (its smallest p is 2/32).

**Float64.** Every run trains in float64 (``torch.set_default_dtype``), so its curve is the
same on CPUs with other vector kernels (``ATEN_CPU_CAPABILITY``): notebook 15 re-runs seed 0
and must reproduce it exactly on any machine. In float32 the bug's seed-0 curve parts at
epoch 98 between AVX-512 and the default kernels.

Per seed: the training curve (mean reward of every epoch's sampled episodes), validation
exact every ``eval_every`` epochs (the loop's held-out set; no stopping rule reads it:
every run trains ``num_epochs``), and the TEST score, read once at the end: greedy
episodes of the final policy on the loop's test prompts (disjoint by key from training
and validation), each with ``TEST_PRICE_DRAWS`` draws of the hidden prices, which are a
function of the prompt's key and ``TEST_SEED`` (``tool_task.keyed_prices``: a prompt's score
does not depend on its row in the test batch). ``called_with_prompt``: fraction of those
episodes whose call names the prompt's items.

    python benchmarks/bench_multi_turn.py --jobs 2     # 10 seeds per condition
    python benchmarks/bench_multi_turn.py --seeds 0 1  # quicker
    python benchmarks/bench_multi_turn.py --quick      # seed 0, 2 epochs, a temporary folder
Writes benchmarks/results/multi_turn.json.
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
from dataclasses import replace

import torch
from _common import RESULTS_DIR, loop_splits, machine, output_dir, parse_args, record_splits, save

from pgrl_helpers.config import TrainConfig
from pgrl_helpers.seed_stats import compare_seeds, format_comparison, pair_by_seed
from pgrl_helpers.tool_task import ToolCompareTask, run_tool_episodes
from pgrl_helpers.training import run_policy_gradient

NAME = "multi_turn"
SEEDS = tuple(range(10))
#: Seeds the recipe was chosen on (some of 0-4; the record of which is lost). Seeds 5-9 were
#: added afterwards and chose nothing.
RECIPE_SEEDS = (0, 1, 2, 3, 4)
QUICK_EPOCHS = 2
#: the shared recipe (chosen once, on the masked condition's training reward, so that it
#: learns on most seeds; not tuned per condition)
CONFIG = TrainConfig(
    model="autoregressive",
    task="tool_compare",
    prompt_source="random",
    prompt_length=2,
    vocab_size=8,
    embedding_dim=32,
    num_layers=1,
    num_heads=2,
    prompts_per_epoch=32,
    num_responses=16,
    num_epochs=200,
    num_steps_per_epoch=1,
    loss_mode="clipped",
    deltas_mode="normalized_rewards",
    learning_rate=3e-3,
    eval_every=20,
    num_eval_prompts=14,
)
CONDITIONS = {"masked": True, "unmasked (bug)": False}
TEST_PRICE_DRAWS = 32
TEST_SEED = 2024
#: the last epochs whose mean training reward is compared
LAST_EPOCHS = 20
DTYPE = torch.float64
RECIPE = (
    "tool_compare, V = 8, G = 16, 32 prompts x 200 epochs, clipped loss, normalized_rewards, "
    "lr 3e-3, float64, seeds 0-9; masked vs tool reply left in the mask; test: greedy, 32 "
    "keyed price draws per prompt (TEST_SEED 2024)"
)
EARLIER_RECIPES = [
    "the same recipe in float32, seeds 0-4, with the bug leaving the grader's slot in the mask "
    "too and the test prices drawn per row of the test batch (commit 3b0af9b)"
]
GUIDED_CHOICE = (
    "The earlier five-seed run's scores on this test split guided the choice of the seed "
    "count only: ten seeds, because a paired test over five can never reach p < 0.05; the "
    "recipe is unchanged, the bug lost the grader's slot (review finding: a confound) and the "
    "test prices became a function of the prompt (review R3), neither chosen by a score."
)


def test_score(history, config: TrainConfig) -> dict:
    """Greedy episodes of the final policy on the test prompts, TEST_PRICE_DRAWS keyed price
    draws each."""
    task = ToolCompareTask(config.vocab_size)
    prompts = history.run.test_prompts
    responses = run_tool_episodes(
        history.run.model, prompts, TEST_PRICE_DRAWS, greedy=True, price_seed=TEST_SEED
    )  # [batch, draws, 6]
    return {
        "test_exact": task.exact(prompts, responses).float().mean().item(),
        "called_with_prompt": task.called_with_prompt(prompts, responses).float().mean().item(),
        "test_prompts": prompts.shape[0],
    }


def run_one(config: TrainConfig) -> dict:
    """One run in float64 on one torch thread (a worker process of ``main``)."""
    torch.set_num_threads(1)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(DTYPE)
    try:
        start, cpu_start = time.perf_counter(), time.process_time()
        history = run_policy_gradient(config)
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
        score = test_score(history, config)
    finally:
        torch.set_default_dtype(previous)
    steps = [r for r in history if r["kind"] == "step"]
    task = ToolCompareTask(config.vocab_size)
    return {
        "seed": config.seed,
        "mask_tool_tokens": config.mask_tool_tokens,
        "train_reward": [r["mean_reward"] for r in steps],
        "validation": [(e["epoch"], e["validation_exact_sort"]) for e in history.evals()],
        "train_prompts_with_heldout_key": history.train_prompts_with_heldout_key,
        "heldout_keys": {
            "validation": sorted(set(task.prompt_key(history.run.validation_prompts).tolist())),
            "test": sorted(set(task.prompt_key(history.run.test_prompts).tolist())),
        },
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        **score,
    }


def last_mean(run: dict) -> float:
    """Mean training reward of the last LAST_EPOCHS epochs."""
    return statistics.fmean(run["train_reward"][-LAST_EPOCHS:])


def main(quick: bool = False, seeds=None, out_dir=RESULTS_DIR, *, jobs: int = 1) -> dict:
    """Both conditions on every seed (default ``SEEDS``; ``quick``: seed 0, ``QUICK_EPOCHS``
    epochs), ``jobs`` worker processes."""
    out_dir = output_dir(out_dir, quick)
    seeds = tuple(seeds) if seeds else (SEEDS[:1] if quick else SEEDS)
    config = replace(CONFIG, num_epochs=QUICK_EPOCHS) if quick else CONFIG
    work = [
        replace(config, seed=seed, mask_tool_tokens=mask)
        for mask in CONDITIONS.values()
        for seed in seeds
    ]
    start = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        results = pool.map(run_one, work, chunksize=1)
    wall = time.perf_counter() - start
    runs: dict[str, list[dict]] = {}
    for name, mask in CONDITIONS.items():
        runs[name] = [r for r in results if r["mask_tool_tokens"] is mask]
        for r in runs[name]:
            print(
                f"{name:15s} seed {r['seed']}: training reward (last {LAST_EPOCHS} epochs) "
                f"{last_mean(r):.3f}, test exact {r['test_exact']:.3f}, called with the prompt "
                f"{r['called_with_prompt']:.3f}, {r['cpu_seconds']:.1f} CPU s",
                flush=True,
            )
    keys = {str(r["heldout_keys"]) for r in results}
    assert len(keys) == 1, "every run must share one held-out split"
    heldout_keys = results[0]["heldout_keys"]
    for r in results:
        del r["heldout_keys"]
    a, b = ([r["test_exact"] for r in runs[name]] for name in CONDITIONS)
    comparison = compare_seeds(a, b, *CONDITIONS, higher_is_better=True, paired=True)
    ta, tb = ([last_mean(r) for r in runs[name]] for name in CONDITIONS)
    train_comparison = compare_seeds(ta, tb, *CONDITIONS, higher_is_better=True, paired=True)
    print("test exact:", format_comparison(comparison))
    print(f"training reward (last {LAST_EPOCHS} epochs):", format_comparison(train_comparison))
    splits = loop_splits(config, "bench_multi_turn.py")
    payload = {
        "config": {k: v for k, v in vars(config).items() if not callable(v)},
        "dtype": str(DTYPE).removeprefix("torch."),
        "test_price_draws": TEST_PRICE_DRAWS,
        "test_price_seed": TEST_SEED,
        "last_epochs": LAST_EPOCHS,
        "recipe_seeds": list(RECIPE_SEEDS),
        "paired": "seed k of both conditions: same initial weights, prompts and sampling stream",
        "heldout_keys": heldout_keys,
        "runs": runs,
        "comparison_test_exact": comparison,
        "comparison_train_reward": train_comparison,
        "wall_seconds": round(wall, 1),
        "jobs": jobs,
        "machine_at_end": machine(),
    }
    record_splits(
        payload,
        validation=splits["validation"],
        test=splits["test"],
        recipe=RECIPE,
        earlier_recipes=EARLIER_RECIPES,
        guided_choice=GUIDED_CHOICE,
        benchmark="bench_multi_turn.py",
    )
    return save(NAME, payload, out_dir)


def add_options(parser) -> None:
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")


def rendered_comparisons(r: dict) -> dict:
    """{"test exact": ..., "training reward": ...}: masked vs unmasked, each recomputed by
    ``compare_seeds(..., paired=True)`` from the stored runs, paired by seed (``pair_by_seed``;
    training reward: the mean of the last ``last_epochs`` epochs). A file written before the
    verdict named its floor still holds "within seed noise", which the report must not print."""
    last = r.get("last_epochs", LAST_EPOCHS)
    names = list(r["runs"])
    values = {
        "test exact": lambda x: x["test_exact"],
        "training reward": lambda x: statistics.fmean(x["train_reward"][-last:]),
    }
    out = {}
    for what, value in values.items():
        per_seed = [{x["seed"]: value(x) for x in r["runs"][n]} for n in names]
        _, a, b = pair_by_seed(*per_seed)
        out[what] = compare_seeds(a, b, *names, higher_is_better=True, paired=True)
    return out


def section(r: dict, results_dir=RESULTS_DIR) -> str:
    """Test exact and training reward per condition (masked vs the planted bug), compared
    (recomputed from the per-seed values: ``rendered_comparisons``)."""
    c, runs = r["config"], r["runs"]
    first = next(iter(runs.values()))
    m = r["machine_at_end"]
    last = r.get("last_epochs", 20)
    rows = []
    for name, rs in runs.items():
        tests = [x["test_exact"] for x in rs]
        trains = [statistics.fmean(x["train_reward"][-last:]) for x in rs]
        called = [x["called_with_prompt"] for x in rs]
        rows.append(
            f"| {name} | {statistics.median(trains):.3f} ({min(trains):.3f}) | "
            f"{statistics.median(tests):.3f} ({min(tests):.3f}) | "
            + " ".join(f"{x:.2f}" for x in tests)
            + f" | {statistics.median(called):.2f} "
            f"| {statistics.median(x['cpu_seconds'] for x in rs):.1f} |"
        )
    cpu = sum(x["cpu_seconds"] for rs in runs.values() for x in rs)
    leaked = sum(x["train_prompts_with_heldout_key"] for rs in runs.values() for x in rs)
    guided = (r.get("splits") or {}).get("test_guided_choice") or ""
    fresh = rendered_comparisons(r)
    return "\n".join(
        [
            "## Multi-turn tool use: the environment's tokens in the loss "
            "(`bench_multi_turn.py`, notebook 15)",
            "",
            "`tool_task.ToolCompareTask` (which of two items is more expensive; hidden prices, a "
            "`compare x y` tool) trained by `run_policy_gradient` with the autoregressive "
            f"`ToolUsePolicy` in {r.get('dtype', 'float32')}: {c['vocab_size']} items, "
            f"G = {c['num_responses']}, "
            f"{c['prompts_per_epoch']} prompts and {c['num_steps_per_epoch']} optimizer step(s) "
            f"per epoch, {c['num_epochs']} epochs (no stopping rule), {c['loss_mode']} loss, "
            f"{c['deltas_mode']}, lr {c['learning_rate']:g}; seeds "
            f"{', '.join(str(x['seed']) for x in first)} per condition, paired by seed (same "
            "initial weights, prompts and sampling stream). The two conditions "
            "differ only in `mask_tool_tokens`: *masked* keeps the tool's reply out of the "
            "loss, *unmasked* is the planted bug (the tool's two reply tokens in the loss; the "
            "grader's slot stays out in both). Test: greedy episodes of the "
            f"final policy on the loop's {first[0]['test_prompts']} test prompts (disjoint by "
            f"key from training and validation; {leaked} training prompts had a held-out key), "
            f"{r['test_price_draws']} draws of the hidden prices each (a function of the prompt "
            "and a seed, not of its row), read once at the end; "
            "*called with the prompt*: the fraction of those episodes whose tool call names the "
            f"prompt's items. {cpu / 60:.1f} CPU-minutes; load average "
            f"{m['load_average_1_5_15_min']} at the end on {m['logical_cores']} shared cores. "
            + guided,
            "",
            f"| condition | training reward, last {last} epochs, median (worst seed) | test "
            "exact median (worst seed) | test exact per seed | called with the prompt "
            "(median) | CPU s per run (median) |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
            "Paired comparisons (`seed_stats.compare_seeds(..., paired=True)`, exact sign-flip p "
            "over the seeds): "
            + "; ".join(f"{what}: {format_comparison(x)}" for what, x in fresh.items())
            + ".",
        ]
    )


if __name__ == "__main__":
    main(**parse_args(add_options))
