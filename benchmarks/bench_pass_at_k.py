#!/usr/bin/env python3
"""What RL adds to a checkpoint: pass@k before and after GRPO (notebook 14).

Per seed: build the SFT checkpoint (``pgrl_helpers.hf.checkpoint.FULL`` with that seed), sample
n = 256 completions per held-out test problem before RL, run GRPO with TRL
(``scale/grpo_checkpoint.py``: validation picks the stopping step), sample again, and record
the per-problem correct counts c. pass@k is Chen et al. 2021 (arXiv 2107.03374) eq. 1. Regions:
'in' (the SFT distribution: length 2-4, values 0-5; RL trains on it too), 'longer' (length 5-6) and
'unseen' (a value 6-9); neither SFT nor RL trains on the last two. Test multisets are held
out by content from both SFT and RL, and scored once per seed, after training.

    nice -n 10 .venv/bin/python benchmarks/bench_pass_at_k.py --jobs 5   # 5 seeds in parallel
    .venv/bin/python benchmarks/bench_pass_at_k.py --quick   # the tiny checkpoint, n = 4, 2 steps
Writes benchmarks/results/pass_at_k.json (after every seed, so a partial run keeps its seeds).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scale"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import RESULTS_DIR, output_dir, parse_args, record_splits  # noqa: E402

from pgrl_helpers.hf import checkpoint as ck  # noqa: E402
from pgrl_helpers.seed_stats import compare_seeds  # noqa: E402

NAME = "pass_at_k"
SEEDS = (0, 1, 2, 3, 4)
WORKDIR = ROOT / ".cache" / "pgrl" / "bench_pass_at_k"
#: A quick run: the seconds-long tiny checkpoint, 4 samples per problem, 2 RL steps, seed 0.
QUICK = dict(config="tiny", n=4, steps=2)
KS = [1, 2, 4, 8, 16, 32, 64, 128, 256]
REGIONS = ("in", "longer", "unseen")
#: RL recipe: lr chosen on validation (1e-4 vs 3e-4 on seed 0's checkpoint; 1e-3 and training on
#: longer lists too lowered validation pass@1); RL trains on the SFT region only.
#: What scored the test split besides the final recipe (development runs, from this session's
#: log; their results are not kept).
EARLIER_RECIPES = [
    "checkpoint probes while building the task (QUICK size, 150-300 SFT steps, n = 32-64; "
    "the first ones with a tokenizer bug that dropped words)",
    "FULL checkpoint with 400 SFT steps + GRPO lr 1e-3 on in + longer lists, 150 steps "
    "(seed 0 only; run stopped)",
    "FULL checkpoints with 100 and 180 SFT steps, no RL, n = 64 (choosing the SFT length)",
]
GUIDED_CHOICE = (
    "The test split guided the choice of the SFT length (100 steps, so that the checkpoint's "
    "test pass@1 left room for RL), before any RL run of the final recipe; the RL learning "
    "rate was chosen on validation."
)
#: How the recipe was chosen, stored with the results.
SELECTION = (
    "SFT length (100 steps) chosen by looking at the seed-0 checkpoint's pass@k on the TEST "
    "problems at 100 and 180 SFT steps (180 left in-region pass@1 at 0.94, little room for RL), "
    "before any RL run; so the test set guided the checkpoint recipe, not the RL comparison. "
    "RL learning rate chosen on VALIDATION pass@1 (seed 0, 150 steps): 1e-4 over 3e-4; 1e-3 and "
    "training on in + longer lists lowered validation pass@1. Test scored once per seed."
)
RL_ARGS = dict(
    max_steps=200,
    prompts_per_step=8,
    num_generations=8,
    learning_rate=1e-4,
    eval_every=20,
    eval_samples=16,
    train_regions="in",
    # the script's setting when results/pass_at_k.json was made (it had no option then):
    # Dr. GRPO's constant normaliser (loss_type "dr_grpo") with GRPO's group std scaling
    scale_rewards="group",
)
#: The objective, in words, stored with the results.
OBJECTIVE = (
    'TRL loss_type "dr_grpo" (Dr. GRPO\'s constant normaliser) with scale_rewards "group" '
    "(GRPO's division by the group's reward std, which Dr. GRPO removes), beta 0"
)
#: pass@k values compared before vs after RL, per region (the SFT region at every k, where
#: the crossover of Yue et al. would show; the untrained regions at three)
COMPARED_KS = {"in": KS, "longer": [1, 16, 256], "unseen": [1, 16, 256]}


def score(model, tokenizer, splits, n: int, seed: int) -> dict:
    out = {}
    for region in REGIONS:
        r = ck.count_correct(model, tokenizer, splits[f"test_{region}"], n, seed=seed)
        out[region] = {
            "c": r["c"],
            "pass_at_k": ck.pass_at_k_curve(r["c"], n, [k for k in KS if k <= n]),
            "mean_length": r["mean_length"],
            "mean_entropy": r["mean_entropy"],
        }
    return out


def coverage(before: list[int], after: list[int]) -> dict:
    """Of the problems solved after RL (c > 0 of n), how many the checkpoint solved at k = n."""
    solved_after = [i for i, c in enumerate(after) if c > 0]
    both = [i for i in solved_after if before[i] > 0]
    return {
        "solved_after": len(solved_after),
        "solved_before": sum(c > 0 for c in before),
        "solved_after_and_before": len(both),
        "fraction": len(both) / len(solved_after) if solved_after else None,
    }


def summarize(per_seed: list[dict]) -> dict:
    """After RL vs the checkpoint at each ``COMPARED_KS`` k, paired by seed (seed k's RL run
    starts from seed k's checkpoint and is scored on the same prompts and sampling seed)."""
    summary = {}
    for region in REGIONS:
        summary[region] = {}
        for k in [k for k in COMPARED_KS[region] if k <= per_seed[0]["n"]]:
            i = KS.index(k)
            before = [s["before"][region]["pass_at_k"][i] for s in per_seed]
            after = [s["after"][region]["pass_at_k"][i] for s in per_seed]
            summary[region][f"pass@{k}"] = compare_seeds(
                after, before, "after RL", "checkpoint", paired=True
            )
    return summary


def recompare_stored(out_dir=RESULTS_DIR) -> dict:
    """Recompute the comparisons of out_dir/pass_at_k.json from its per-seed curves (paired
    by seed, every ``COMPARED_KS``) and add the objective to its recipe; runs nothing."""
    path = Path(out_dir) / f"{NAME}.json"
    payload = json.loads(path.read_text())
    payload["comparisons"] = summarize(payload["per_seed"])
    payload["recipe"].setdefault("objective", OBJECTIVE)
    path.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"recomputed the paired comparisons in {path}")
    return payload


def run_seed(seed: int, n: int, steps: int, workdir: Path, config=ck.FULL) -> dict:
    import grpo_checkpoint

    splits = ck.make_splits()
    start = time.perf_counter()
    path = ck.build_checkpoint(
        workdir / f"checkpoint-seed{seed}", dataclasses.replace(config, seed=seed)
    )
    sft_seconds = time.perf_counter() - start
    model, tokenizer = ck.load(path)
    before = score(model, tokenizer, splits, n, seed=1000 + seed)
    rl = dict(RL_ARGS, max_steps=steps)
    argv = [
        "--model",
        str(path),
        "--output-dir",
        str(workdir / f"rl-seed{seed}"),
        "--seed",
        str(seed),
        "--quiet",
    ]
    for name, value in rl.items():
        argv += [f"--{name.replace('_', '-')}", str(value)]
    start = time.perf_counter()
    summary = grpo_checkpoint.train(argv)
    rl_seconds = time.perf_counter() - start
    model, tokenizer = ck.load(summary["final_dir"])
    after = score(model, tokenizer, splits, n, seed=1000 + seed)
    return {
        "seed": seed,
        "n": n,
        "checkpoint": json.loads((path / ck.METADATA).read_text()),
        "before": before,
        "after": after,
        "coverage": {r: coverage(before[r]["c"], after[r]["c"]) for r in REGIONS},
        "rl": {
            k: summary[k]
            for k in (
                "steps",
                "chosen_step",
                "validation",
                "reward",
                "mean_length",
                "entropy",
                "heldout_keys_in_training",
                "train_multisets",
            )
        },
        "seconds": {"sft": sft_seconds, "rl": rl_seconds},
        "load_avg_1min_end": os.getloadavg()[0],
    }


def split_record(name: str, splits: dict) -> dict:
    """The split facts tests/repo/test_test_splits.py reads: id, seed, sizes, key."""
    keys = [m for r in REGIONS for m in splits[f"test_{r}"]] if name == "test" else splits[name]
    what = "test_in + test_longer + test_unseen" if name == "test" else name
    return {
        "id": f"bench_pass_at_k.py: checkpoint.make_splits(split_seed=0) {what}, {len(keys)} multisets",
        "seed": 0,
        "sizes": {"prompts": len(keys), "keys": len(keys)},
        "key": "multiset of the prompt (sorted tuple)",
    }


def rendered_comparisons(r: dict) -> dict:
    """The comparisons of a pass_at_k.json payload recomputed by ``summarize`` (``compare_seeds``,
    paired by seed) from its per-seed curves, {} for one seed: a file written before the verdict
    named its floor still holds "within seed noise", which the report must not print."""
    return summarize(r["per_seed"]) if len(r["per_seed"]) > 1 else {}


def section(r: dict, results_dir=RESULTS_DIR) -> str:
    """pass@k before and after RL at every compared k, per region, over the seeds, with the
    verdicts recomputed from the per-seed curves (``rendered_comparisons``)."""
    n, seeds = r["n"], r["seeds"]
    region_in = r["recipe"]["regions"]["in"].split(" (")[0]
    lines = [
        "## pass@k before and after RL (`bench_pass_at_k.py`, notebook 14)",
        "",
        f"Per seed, the SFT checkpoint ("
        f"{r['recipe']['checkpoint']['sft_steps']} SFT steps on lists of {region_in}), "
        f"then GRPO with TRL ({r['recipe']['rl']['max_steps']} steps, lr "
        f"{r['recipe']['rl']['learning_rate']:g}, RL prompts from the SFT region; validation "
        f"picks the stop), scored once on {r['recipe']['test_problems_per_region']['in']} held-out "
        f"test multisets per region with n = {n} samples each (temperature 1). Seeds {seeds}. "
        "Medians over seeds, worst seed, exact sign-flip p paired by seed (after vs before; "
        f"{len(seeds)} paired seeds cannot give p below {2 / 2 ** len(seeds):.4f}). "
        + (r["recipe"].get("objective", "") + ". " if r["recipe"].get("objective") else "")
        + (r.get("splits") or {}).get("test_guided_choice", ""),
        "",
        "| region | k | checkpoint median (worst) | after RL median (worst) | p | verdict |",
        "|---|---|---|---|---|---|",
    ]
    fresh = rendered_comparisons(r)
    for region, by_k in fresh.items():
        for k_name, c in by_k.items():
            lines.append(
                f"| {region} | {k_name} | {c['median_b']:.3f} ({c['worst_b']:.3f}) | "
                f"{c['median_a']:.3f} ({c['worst_a']:.3f}) | {c['p_value']:.3f} | {c['verdict']} |"
            )
    verdicts = [c["verdict"] for by_k in fresh.values() for c in by_k.values()]
    kinds = {  # compare_seeds' three verdicts, at its default level 0.05
        "after RL better (p < 0.05)": "after RL better (p < ",
        "checkpoint better (p < 0.05)": "checkpoint better (p < ",
        "undecided (the smallest p the test could give on these values is not below 0.05)":
            "undecided: ",
        "no difference detected at 0.05": "no difference detected at ",
    }  # fmt: skip
    kinds = {kind: sum(part in v for v in verdicts) for kind, part in kinds.items()}
    counts = "; ".join(f"{n} {kind}" for kind, n in kinds.items() if n)
    lines += [
        "",
        (f"Verdicts (of {len(verdicts)}): {counts}" if verdicts else "Verdicts: none (one seed)")
        + f". Recipe selection: {r['recipe'].get('selection')}",
    ]
    return "\n".join(lines)


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def main(
    quick: bool = False,
    seeds=None,
    out_dir=RESULTS_DIR,
    *,
    jobs: int = 1,
    n: int = 256,
    steps: int = RL_ARGS["max_steps"],
    workdir=WORKDIR,
    checkpoint: str = "full",
    recompare: bool = False,
) -> dict:
    """Every seed (default ``SEEDS``): checkpoint, pass@k, RL, pass@k; ``jobs`` seeds at a time.
    ``n`` samples per test problem, ``steps`` RL steps, ``checkpoint`` the SFT size (full,
    quick or tiny); ``quick``: ``QUICK`` (tiny checkpoint, n 4, 2 steps), seed 0, its work
    folder inside the temporary output folder. ``recompare``: only ``recompare_stored``."""
    import torch

    if recompare:
        return recompare_stored(out_dir)
    out_dir = output_dir(out_dir, quick)
    torch.set_num_threads(1)
    seeds = list(seeds) if seeds else ([0] if quick else list(SEEDS))
    if quick:
        checkpoint, n, steps, workdir = (
            QUICK["config"],
            QUICK["n"],
            QUICK["steps"],
            out_dir / "work",
        )
    splits = ck.make_splits()
    config = {"full": ck.FULL, "quick": ck.QUICK, "tiny": ck.TINY}[checkpoint]
    per_seed = []
    if jobs > 1:  # one process per seed, one torch thread each
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(jobs, initializer=_one_thread) as pool:
            done = pool.starmap(run_seed, [(s, n, steps, Path(workdir), config) for s in seeds])
    for i, seed in enumerate(seeds):
        if jobs > 1:
            per_seed.append(done[i])
        else:
            per_seed.append(run_seed(seed, n, steps, Path(workdir), config))
        s = per_seed[-1]
        print(
            f"seed {seed}: "
            + "; ".join(
                f"{r} pass@1 {s['before'][r]['pass_at_k'][0]:.3f}->{s['after'][r]['pass_at_k'][0]:.3f}"
                f" pass@256 {s['before'][r]['pass_at_k'][-1]:.3f}->{s['after'][r]['pass_at_k'][-1]:.3f}"
                for r in REGIONS
            )
            + f" ({s['seconds']['rl']:.0f} s RL, load {s['load_avg_1min_end']:.1f})",
            flush=True,
        )
        payload = {
            "what": __doc__.split("\n\n")[1],
            "ks": [k for k in KS if k <= n],
            "n": n,
            "seeds": [s["seed"] for s in per_seed],
            "recipe": {
                "checkpoint": dataclasses.asdict(config),
                "rl": dict(RL_ARGS, max_steps=steps),
                "sampling": "temperature 1.0, no top-k / top-p, max 8 new tokens",
                "regions": {
                    "in": "length 2-4, values 0-5 (SFT and RL train on other multisets)",
                    "longer": "length 5-6, values 0-5 (never trained)",
                    "unseen": "length 2-4 with a value 6-9 (never trained)",
                },
                "test_problems_per_region": {r: len(splits[f"test_{r}"]) for r in REGIONS},
                "selection": SELECTION,
                "objective": OBJECTIVE,
            },
            "per_seed": per_seed,
            "comparisons": summarize(per_seed) if len(per_seed) > 1 else None,
            "machine": {"cores": os.cpu_count(), "torch_threads": 1, "jobs": jobs},
        }
        record_splits(
            payload,
            validation=split_record("validation_in", splits),
            test=split_record("test", splits),
            recipe=f"SFT {config.sft_steps} steps + GRPO {json.dumps(payload['recipe']['rl'])}",
            earlier_recipes=EARLIER_RECIPES,
            guided_choice=GUIDED_CHOICE,
            benchmark="bench_pass_at_k.py",
        )
        (out_dir / f"{NAME}.json").write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote {out_dir / f'{NAME}.json'}")
    return payload


def add_options(parser) -> None:
    parser.add_argument("--jobs", type=int, default=1, help="seeds run in parallel processes")
    parser.add_argument("--n", type=int, default=256, help="samples per test problem")
    parser.add_argument("--steps", type=int, default=RL_ARGS["max_steps"], help="RL steps")
    parser.add_argument("--workdir", type=Path, default=WORKDIR, help="checkpoints and RL runs")
    parser.add_argument(
        "--checkpoint",
        choices=("full", "quick", "tiny"),
        default="full",
        help="checkpoint size (tiny: the seconds-long smoke test)",
    )
    parser.add_argument(
        "--recompare",
        action="store_true",
        help="only recompute the stored comparisons (paired by seed) from the stored curves",
    )


if __name__ == "__main__":
    main(**parse_args(add_options))
