"""How often ``trl_diagnose`` names a planted fault in a real TRL ``GRPOTrainer`` run.

Every run is TRL 1.16's ``GRPOTrainer`` (CPU, no vLLM) on notebook 14's small Llama checkpoint
(``python3 tasks.py checkpoint``; 75k parameters, SFT on lists of 2-4 values 0-5), with
``scale/grpo_checkpoint.py``'s rewards (correctness 1 + format 0.2), dataset and ``GRPOConfig``
(Dr. GRPO: ``loss_type="dr_grpo"``, ``scale_rewards="none"``): ``STEPS`` optimizer steps of
``PROMPTS`` prompts x ``G`` completions, ``logging_steps=1``. Its ``trainer_state.json`` is
written by ``Trainer.state.save_to_json`` (what TRL writes into each ``checkpoint-N``), then read
by ``pgrl_helpers.trl_diagnose.diagnose_path``, as the command line does.

The healthy run trains on the SFT region (``--train-regions in``), learning rate 1e-4.
Each planted fault changes one thing of it (``FAULTS``). Reported per detector, over
``REPORT_SEEDS``: hits (planted runs that get the detector's finding), false alarms on the
healthy runs. Thresholds (``trl_diagnose``'s constants) were set looking only at
``TUNING_SEEDS``; the reported seeds were run once, after.

    nice -n 5 .venv/bin/python benchmarks/bench_trl_detectors.py
    .venv/bin/python benchmarks/bench_trl_detectors.py --quick   # seed 0, 3 steps, temp folder
    .venv/bin/python benchmarks/bench_trl_detectors.py --seeds 0 --keep-logs DIR

The logs of seed ``LOG_SEED`` are kept (trimmed of nothing: as TRL wrote them) under
``results/trl_logs/<fault>/trainer_state.json``; the tests and notebook 13 read them.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

from _common import (  # noqa: E402
    RESULTS_DIR,
    markdown_table,
    output_dir,
    parse_args,
    record_splits,
    save,
    setup,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scale"))

NAME = "trl_detectors"
TUNING_SEEDS = (0, 1, 2)
REPORT_SEEDS = (3, 4, 5, 6, 7, 8, 9)
LOG_SEED = 3  # the first reported seed: its logs are committed for the tests and notebook 13
STEPS, PROMPTS, G = 30, 8, 8
QUICK_STEPS = 3
LOG_DIR = RESULTS_DIR / "trl_logs"

#: fault -> (what is planted, the CLI flags of scale/grpo_checkpoint.py it changes, the
#: reward variant, the finding it should get)
FAULTS: dict[str, tuple[str, dict, str, str]] = {
    "healthy": ("nothing: the SFT region, learning rate 1e-4", {}, "task", ""),
    "constant_reward": (
        "every reward function returns 1.0",
        {},
        "constant",
        "constant_reward",
    ),
    "prompt_only_reward": (
        "a reward that reads only the prompt (its length / 6): never varies within a group",
        {},
        "prompt_only",
        "no_variance_within_groups",
    ),
    "temperature_zero": (
        "temperature 1e-3 (greedy in effect): the G completions of a prompt are identical",
        {"temperature": 1e-3},
        "task",
        "identical_rollouts",
    ),
    "too_hard": (
        "prompts outside the SFT skill (lists of 5-6): nearly every group all wrong",
        {"train_regions": "longer"},
        "task",
        "saturated_groups",
    ),
    "truncation": (
        "max_completion_length 3 (a reply needs up to 5 tokens with its end of turn)",
        {"max_completion_length": 3},
        "task",
        "truncation",
    ),
    "lr_too_high": ("learning rate 3e-2 (300x the healthy 1e-4)", {"learning_rate": 3e-2}, "task", "reward_collapse"),
    "kl_blowup": (
        "beta 0.001 with learning rate 1e-2 (the KL term on, far too weak for the rate)",
        {"beta": 1e-3, "learning_rate": 1e-2},
        "task",
        "kl_blowup",
    ),
}  # fmt: skip


def reward_funcs(variant: str, eos_token_id: int):
    import grpo_checkpoint

    if variant == "task":
        return grpo_checkpoint.make_reward_funcs(eos_token_id)

    def constant_reward(completions, **kwargs):
        return [1.0] * len(completions)

    def prompt_only_reward(completions, numbers, **kwargs):
        return [len(n) / 6 for n in numbers]

    return [constant_reward] if variant == "constant" else [prompt_only_reward]


def one_run(fault: str, seed: int, steps: int, log_dir: Path, model=None) -> Path:
    """Train one TRL run of ``model`` (default: notebook 14's checkpoint); return the folder
    holding its trainer_state.json."""
    import grpo_checkpoint
    import transformers
    from transformers import AutoTokenizer
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from pgrl_helpers.hf import checkpoint as ck

    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    _, flags, variant, _ = FAULTS[fault]
    argv = ["--model", str(model or ck.DEFAULT_PATH), "--max-steps", str(steps), "--use-vllm", "no"]
    argv += ["--prompts-per-step", str(PROMPTS), "--num-generations", str(G), "--seed", str(seed)]
    for key, value in flags.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    args = grpo_checkpoint.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        kwargs = grpo_checkpoint.grpo_config_kwargs(args, work, False, "no")
        funcs = reward_funcs(variant, 1)
        if variant != "task":
            kwargs.pop("reward_weights")
        splits = ck.make_splits()
        keys = [m for r in args.train_regions.split(",") for m in splits[f"train_{r}"]]
        dataset = grpo_checkpoint.make_dataset(keys, steps * PROMPTS, seed)
        tokenizer = AutoTokenizer.from_pretrained(args.model)
        trainer = GRPOTrainer(
            model=args.model,
            reward_funcs=funcs,
            args=GRPOConfig(**kwargs),
            train_dataset=dataset,
            processing_class=tokenizer,
        )
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    log_dir.mkdir(parents=True, exist_ok=True)
    trainer.state.save_to_json(str(log_dir / "trainer_state.json"))
    return log_dir


def job(work: tuple) -> dict:
    """(fault, seed, steps, log folder, reuse folder or None) -> what trl_diagnose said. A run
    whose log is already in ``reuse/<fault>-<seed>/`` (an earlier run of ``one_run`` with the
    same fault, seed and steps) is read from there instead of trained again."""
    from pgrl_helpers import trl_diagnose

    setup()
    fault, seed, steps, log_dir, reuse, model = work
    start = time.process_time()
    cached = Path(reuse) / f"{fault}-{seed}" if reuse else None
    if cached is not None and (cached / "trainer_state.json").is_file():
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        shutil.copy(cached / "trainer_state.json", Path(log_dir) / "trainer_state.json")
    else:
        one_run(fault, seed, steps, Path(log_dir), model)
        if cached is not None:  # keep it, so that an interrupted benchmark resumes here
            cached.mkdir(parents=True, exist_ok=True)
            shutil.copy(Path(log_dir) / "trainer_state.json", cached / "trainer_state.json")
        cached = None
    report = trl_diagnose.diagnose_path(log_dir)
    return {
        "fault": fault,
        "seed": seed,
        "reused_log": cached is not None,
        "findings": [f.name for f in report.findings],
        "warnings": [f.name for f in report.findings if f.severity == "warning"],
        "missing": report.log.missing,
        "cpu_seconds": time.process_time() - start,
        "reward_first": report.log.steps[0]["mean_reward"],
        "reward_last": report.log.steps[-1]["mean_reward"],
    }


def rates(runs: list[dict], seeds) -> dict:
    from pgrl_helpers.trl_diagnose import TRL_CATALOGUE

    healthy = [r for r in runs if r["fault"] == "healthy" and r["seed"] in seeds]
    out = {}
    for name in TRL_CATALOGUE:
        planted = [
            r
            for r in runs
            if r["seed"] in seeds and r["fault"] != "healthy" and FAULTS[r["fault"]][3] == name
        ]
        others = [
            r
            for r in runs
            if r["seed"] in seeds and r["fault"] != "healthy" and FAULTS[r["fault"]][3] != name
        ]
        out[name] = {
            "planted_by": sorted({r["fault"] for r in planted}),
            "hits": sum(name in r["findings"] for r in planted),
            "planted_runs": len(planted),
            "missed_seeds": [r["seed"] for r in planted if name not in r["findings"]],
            "false_alarms_healthy": sum(name in r["findings"] for r in healthy),
            "healthy_runs": len(healthy),
            "false_alarm_seeds_healthy": [r["seed"] for r in healthy if name in r["findings"]],
            "fires_on_other_faults": sorted({r["fault"] for r in others if name in r["findings"]}),
        }
    return out


#: Findings of severity 'info': normal on healthy runs, never counted as false alarms.
INFO_NOTES = ("loss_near_zero",)


def table(rate: dict) -> str:
    rows = []
    for name, r in rate.items():
        planted = ", ".join(f"`{f}`" for f in r["planted_by"]) or "none planted"
        hits = f"{r['hits']}/{r['planted_runs']}" if r["planted_runs"] else "-"
        also = ", ".join(r["fires_on_other_faults"]) or "-"
        healthy = f"{r['false_alarms_healthy']}/{r['healthy_runs']}"
        if name in INFO_NOTES:
            healthy += " (info note, not an alarm)"
        rows.append([f"`{name}`", planted, hits, healthy, also])
    head = ["finding", "planted fault", "hit rate", "on healthy runs", "also fires on"]
    return markdown_table(head, rows)


def main(
    quick: bool = False, seeds=None, out_dir=RESULTS_DIR, *, keep_logs=None, reuse_logs=None
) -> dict:
    out_dir = output_dir(out_dir, quick)
    setup()
    seeds = tuple(seeds) if seeds else ((0,) if quick else TUNING_SEEDS + REPORT_SEEDS)
    steps = QUICK_STEPS if quick else STEPS
    keep = Path(keep_logs) if keep_logs else (None if quick else LOG_DIR)
    start = time.perf_counter()
    runs = []
    from pgrl_helpers.hf import checkpoint as ck

    with tempfile.TemporaryDirectory() as scratch:
        model = None
        if quick:  # a seconds-long stand-in, so the quick run needs no prepared checkpoint
            model = ck.build_checkpoint(Path(scratch) / "tiny", ck.TINY)
        elif not (ck.DEFAULT_PATH / "config.json").is_file():
            raise SystemExit(f"no checkpoint in {ck.DEFAULT_PATH}: run python3 tasks.py checkpoint")
        for seed in seeds:
            for fault in FAULTS:
                log_dir = Path(scratch) / f"{fault}-{seed}"
                runs.append(job((fault, seed, steps, log_dir, reuse_logs, model)))
                print(runs[-1]["fault"], seed, runs[-1]["findings"], flush=True)
                if keep is not None and seed == (LOG_SEED if not quick else seeds[0]):
                    (keep / fault).mkdir(parents=True, exist_ok=True)
                    shutil.copy(log_dir / "trainer_state.json", keep / fault)
    tuning = tuple(s for s in seeds if s in TUNING_SEEDS)
    report = tuple(s for s in seeds if s not in TUNING_SEEDS)
    result = {"tuning": rates(runs, tuning), "report": rates(runs, report)}
    print(table(result["report"]))
    return save(
        NAME,
        {
            "splits": splits_record(),
            "tuning_seeds": list(tuning),
            "report_seeds": list(report),
            "log_seed": LOG_SEED,
            "steps": steps, "prompts_per_step": PROMPTS, "num_generations": G,
            "faults": {k: v[0] for k, v in FAULTS.items()},
            "expected": {k: v[3] for k, v in FAULTS.items()},
            "rates": result,
            "table": table(result["report"]),
            "table_tuning": table(result["tuning"]),
            "reused_logs": sum(r["reused_log"] for r in runs),
            "cpu_seconds_total": sum(r["cpu_seconds"] for r in runs),
            "wall_seconds": time.perf_counter() - start,
            "runs": runs,
        },
        out_dir,
    )  # fmt: skip


def splits_record() -> dict:
    """The results file's split record: no test split (it scores training logs)."""
    payload = record_splits({}, validation=None, test=None, recipe="none",
                            benchmark="bench_trl_detectors.py")  # fmt: skip
    payload["splits"]["no_test_reason"] = (
        "scores trl_diagnose on training logs; thresholds set on the tuning seeds, rates "
        "reported on the disjoint report seeds"
    )
    return payload["splits"]


def add_options(parser) -> None:
    parser.add_argument("--keep-logs", type=Path, metavar="DIR", help="copy seed LOG_SEED's logs")
    parser.add_argument(
        "--reuse-logs",
        type=Path,
        metavar="DIR",
        help="read DIR/<fault>-<seed>/ instead of training",
    )


def section(r: dict, results_dir=RESULTS_DIR) -> str:
    """trl_diagnose on real TRL runs: hit and false-alarm rates per finding."""
    report = r["rates"]["report"]
    missed = "; ".join(f"{k}: {v['missed_seeds']}" for k, v in report.items() if v["missed_seeds"])
    faults = "; ".join(f"`{k}`: {v}" for k, v in r["faults"].items())
    return "\n".join(
        [
            "## Detectors on TRL runs (`bench_trl_detectors.py`, notebook 13)",
            "",
            f"TRL `GRPOTrainer` runs of notebook 14's small Llama checkpoint ({r['steps']} steps "
            f"of {r['prompts_per_step']} prompts x G {r['num_generations']}, CPU), each "
            "diagnosed from its `trainer_state.json` by `python -m pgrl_helpers.diagnose`. "
            f"Faults: {faults}. Reported seeds {r['report_seeds']}; the thresholds were set "
            f"on seeds {r['tuning_seeds']} only. {len(r['runs'])} runs; "
            f"{r.get('reused_logs', 0)} of them (tuning seeds) were read back from logs an "
            "earlier run of the same code wrote (`--reuse-logs`), the others trained in "
            f"{r['cpu_seconds_total'] / 60:.1f} CPU-minutes. Hit rate: planted runs that get "
            "the finding; on healthy runs: false alarms (`loss_near_zero` is an info note, "
            "normal on healthy runs, not an alarm).",
            "",
            r["table"],
            "",
            f"Missed on seeds: {missed or 'none'}. The same counts on the tuning seeds:",
            "",
            r["table_tuning"],
        ]
    )


if __name__ == "__main__":
    main(**parse_args(add_options))
