"""The arms and the statistics of ``bench_real_lm_verifier.py`` (issue 47): an imperfect teacher,
a lenient parser, expert iteration, SFT on demonstrations, GRPO from a saved adapter, and the
report's paired tests.

Not a benchmark itself (``tasks.py bench`` runs only ``bench_*.py``). Everything here trains the
LoRA adapter of a model that ``bench_real_lm.load_model`` loaded, on training prompts drawn with
``task.training_prompts(..., heldout_keys)`` (validation and test multisets are never drawn; each
function checks the keys it trained on and raises if one was held out) and picks its adapter on
validation (``Picker``). Nothing here reads the test split.

* ``teacher_answer``: the imperfect teacher, a function of (seed, problem): with probability
  ``rate`` its answer is the sorted list made wrong in one realistic way (``TEACHER_KINDS``).
* ``lenient_numbers`` / ``lenient_scores``: the digits pulled out of any reply (the format-
  controlled base).
* ``select_verified`` / ``run_expert_iteration``: expert iteration (Anthony et al. 2017, "Thinking
  Fast and Slow with Deep Learning and Tree Search"; STaR, Zelikman et al. 2022; Stanford CS336,
  Spring 2025, assignment 5, which samples a large batch per round and trains one or more epochs
  on the kept replies; here its online limit, one round per GRPO step's samples): sample G
  replies per prompt, keep those the verifier scores exact, one SFT step on them (from the base, or from a saved SFT adapter:
  ``sft_imperfect_ei``).
* ``run_sft_demos``: supervised LoRA steps on gold or teacher demonstrations, the batches of
  ``bench_real_lm.run_sft``.
* ``run_grpo``: ``bench_real_lm``'s GRPO recipe (our loop, ``ChatLMPolicy``, its reward) from
  whatever adapter the model holds.
* ``collect``: copy finished run files from the folder a run machine wrote them to into the
  results folder, their folders re-recorded relative to the repository (``where``).
* ``summarize`` / ``load_runs``: the report's line per finished run (bench_real_lm's rl runs
  and this script's), each checked to be scored on the report's test split (``same_test``) and
  all at one reply cap (the rl runs of another cap are refused).
* ``choose_rate`` (a learning rate picked on validation only), ``paired`` (McNemar's exact test
  per seed, the bootstrap over seeds and problems, the sign-flip test over seeds with its floor:
  ``pgrl_helpers.paired_tests`` and ``seed_stats``), ``passk_section`` (problems gained and lost
  at n against the base, Yue et al. 2025).
"""

from __future__ import annotations

import json
import random
import re
import statistics
from pathlib import Path

import bench_real_lm as B
import torch

from pgrl_helpers.hf import real_lm as R
from pgrl_helpers.hf import real_lm_task as T
from pgrl_helpers.hf.common import right_padded
from pgrl_helpers.paired_tests import (
    bootstrap_mean_difference,
    mcnemar_exact,
    mcnemar_problems_needed,
    seeds_needed,
)
from pgrl_helpers.seed_stats import compare_seeds

# ----------------------------------------------------------------------------- the teacher

#: The realistic mistakes: two adjacent numbers of the sorted list swapped (they differ), one
#: copy of a repeated number dropped, a number that occurs once dropped.
TEACHER_KINDS = ("swapped_pair", "dropped_duplicate", "dropped_number")


def teacher_answer(numbers, seed: int, rate: float) -> tuple[list[int], str | None]:
    """(the teacher's answer, the kind of mistake or None) for the list ``numbers``.

    Deterministic in (seed, the list as written): a ``random.Random`` seeded with both decides,
    with probability ``rate``, to corrupt the sorted list, then picks one of the kinds that can
    change this list (a list of equal numbers can only lose a copy) and where. Every corrupted
    answer differs from the sorted list."""
    values = T.check_numbers(numbers)
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"rate must lie in [0, 1], got {rate}")
    gold = sorted(values)
    rng = random.Random(f"teacher:{seed}:{','.join(map(str, values))}")
    if rng.random() >= rate:
        return gold, None
    counts = {v: gold.count(v) for v in gold}
    where = {
        "swapped_pair": [i for i in range(len(gold) - 1) if gold[i] != gold[i + 1]],
        "dropped_duplicate": [i for i, v in enumerate(gold) if counts[v] > 1],
        "dropped_number": [i for i, v in enumerate(gold) if counts[v] == 1],
    }
    kind = rng.choice([k for k in TEACHER_KINDS if where[k]])
    i = rng.choice(where[kind])
    if kind == "swapped_pair":
        return gold[:i] + [gold[i + 1], gold[i]] + gold[i + 2 :], kind
    return gold[:i] + gold[i + 1 :], kind


def teacher_record(lists, seed: int, rate: float) -> dict:
    """The teacher's exact rate on ``lists`` and its mistakes by kind; 'exact_per_problem'."""
    answers = [teacher_answer(x, seed, rate) for x in lists]
    exact = [int(a == sorted(x)) for x, (a, _) in zip(lists, answers)]
    kinds = {k: sum(kind == k for _, kind in answers) for k in TEACHER_KINDS}
    return {"problems": len(exact), "exact": round(sum(exact) / len(exact), 4),
            "mistakes_by_kind": kinds, "exact_per_problem": exact}  # fmt: skip


# ----------------------------------------------------------------------------- lenient parser


def lenient_numbers(text: str) -> list[int]:
    """Every number written in the reply, in order, whatever surrounds it."""
    return [int(x) for x in re.findall(r"\d+", text)]


def lenient_scores(numbers, text: str) -> dict[str, float]:
    """'exact': the numbers of the reply are the sorted list; 'contains': the sorted list is a
    run of consecutive numbers somewhere in the reply (neither needs EOS)."""
    target, got = sorted(T.check_numbers(numbers)), lenient_numbers(text)
    runs = (got[i : i + len(target)] for i in range(len(got) - len(target) + 1))
    return {"exact": float(got == target), "contains": float(target in runs)}


# ----------------------------------------------------------------------------- shared pieces


class Picker:
    """Validation (greedy exact sort, partial credit breaks ties) at chosen steps; keeps the
    LoRA weights of the best step (``bench_real_lm``'s stopping rule)."""

    def __init__(self, model, tokenizer, validation, args, template, label):
        self.model, self.tokenizer, self.validation = model, tokenizer, validation
        self.args, self.template, self.label = args, template, label
        self.curve, self.best = [], {"exact": -1.0, "partial": -1.0}

    def __call__(self, step: int) -> None:
        v = B.greedy_eval(self.model, self.tokenizer, self.validation, self.args, self.template)
        self.model.train()
        self.curve.append({"step": step, **{k: v[k] for k in ("exact", "partial", "format")}})
        print(f"[{self.label}] step {step}: validation exact {v['exact']:.3f}", flush=True)
        if (v["exact"], v["partial"]) > (self.best["exact"], self.best["partial"]):
            self.best = {"step": step, "exact": v["exact"], "partial": v["partial"],
                         "state": B.lora_state(self.model)}  # fmt: skip

    def restore(self) -> dict:
        """Load the best step's weights; {'validation_curve', 'best_step'}."""
        self.model.load_state_dict(self.best["state"], strict=False)
        return {"validation_curve": self.curve, "best_step": self.best["step"]}


def check_keys(keys: set, heldout_keys: torch.Tensor, what: str) -> None:
    clash = keys & set(heldout_keys.tolist())
    if clash:
        raise AssertionError(f"{what} trained on held-out multisets {sorted(clash)[:5]}")


def sft_step(model, optimizer, tokenizer, lists, answers, template) -> float:
    """One supervised step: the loss reads the answer tokens only (``right_padded``)."""
    prompts = [T.prompt_token_ids(tokenizer, x, template) for x in lists]
    ids, mask, labels = right_padded(prompts, answers, R.pad_token_id(tokenizer),
                                     R.model_device(model))  # fmt: skip
    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return round(float(loss.detach()), 4)


def answer_ids(tokenizer, numbers: list[int]) -> list[int]:
    """A demonstration's tokens: the numbers written '2, 4, 7' (as ``bench_real_lm.sft_batch``)
    and EOS."""
    text = ", ".join(map(str, numbers))
    return list(tokenizer(text, add_special_tokens=False)["input_ids"]) + [tokenizer.eos_token_id]


# ----------------------------------------------------------------------------- SFT arms


def run_sft_demos(model, tokenizer, task, heldout_keys, args, seed, template, picker,
                  teacher_rate: float | None) -> dict:  # fmt: skip
    """``--sft-steps`` supervised LoRA steps of ``--sft-batch`` training prompts (the prompts
    ``bench_real_lm.run_sft`` draws for this seed), answered by the teacher
    (``teacher_answer(.., seed, teacher_rate)``) or, with ``teacher_rate`` None, by the sorted
    list (gold). Validation every ``--val-every`` steps (and at 0) picks the adapter."""
    optimizer = torch.optim.Adam(
        [p for p in model.parameters() if p.requires_grad], lr=args.sft_learning_rate
    )
    generator = torch.Generator().manual_seed(seed + 2024)  # bench_real_lm.run_sft's batches
    losses, keys, demos = [], set(), []
    start = B.clocks()
    picker(0)
    model.train()
    for step in range(1, args.sft_steps + 1):
        prompts = task.training_prompts(args.sft_batch, generator, heldout_keys)
        keys |= set(task.prompt_key(prompts).tolist())
        lists = T.decode_numbers(prompts)
        if teacher_rate is None:
            answers = [sorted(x) for x in lists]
        else:
            answers = [teacher_answer(x, seed, teacher_rate)[0] for x in lists]
        demos += lists
        ids = [answer_ids(tokenizer, a) for a in answers]
        losses.append(sft_step(model, optimizer, tokenizer, lists, ids, template))
        if step % args.val_every == 0 or step == args.sft_steps:
            picker(step)
    check_keys(keys, heldout_keys, "SFT")
    out = {
        "steps": args.sft_steps, "batch": args.sft_batch, "learning_rate": args.sft_learning_rate,
        "demonstrations": "gold (sorted lists)" if teacher_rate is None else
        f"imperfect teacher, error rate {teacher_rate}", "loss": losses, "time": B.since(start),
        "distinct_multisets": len(keys), "heldout_multisets_in_training": 0,
    }  # fmt: skip
    if teacher_rate is not None:
        record = teacher_record(demos, seed, teacher_rate)
        out["teacher_on_demonstrations"] = {k: v for k, v in record.items()
                                            if k != "exact_per_problem"}  # fmt: skip
    return out | picker.restore()


# ----------------------------------------------------------------------------- expert iteration


def select_verified(task, prompts, responses, mask) -> tuple[list[list[int]], list[list[int]]]:
    """(lists, reply token ids up to and including EOS) of the replies the verifier scores
    exact (``RealLMSortTask.scores``: EOS written and the reply is the sorted list)."""
    exact = task.scores(prompts, responses)["exact"]  # [batch, trial]
    lists = T.decode_numbers(prompts)
    kept_lists, kept_ids = [], []
    for i, j in (exact > 0).nonzero().tolist():
        length = int(mask[i, j].sum())
        kept_lists.append(lists[i])
        kept_ids.append(responses[i, j, :length].tolist())
    return kept_lists, kept_ids


def run_expert_iteration(model, tokenizer, task, heldout_keys, args, seed, template,
                         picker) -> dict:  # fmt: skip
    """``--ei-steps`` steps: ``--prompts`` training prompts, G = ``--group`` replies each sampled
    at temperature 1 with ``--reply-tokens`` slots (the sampling of the ``rl`` arm: the loop's
    policy, prompt generator seeded ``seed`` and sample generator ``seed + 1_000_003``), keep
    the replies scored exact, one SFT step (learning rate ``--ei-learning-rate``) on them; a
    step with none is skipped and counted. Validation every ``--val-every`` steps."""
    policy = R.ChatLMPolicy(model, tokenizer, template, max_new_tokens=args.reply_tokens)
    device = R.model_device(model)
    prompt_generator = torch.Generator().manual_seed(seed)  # as run_policy_gradient's
    sample_generator = torch.Generator(device=device).manual_seed(seed + 1_000_003)
    optimizer = torch.optim.Adam(
        [p for p in model.parameters() if p.requires_grad], lr=args.ei_learning_rate
    )
    keys, log = set(), []
    start = B.clocks()
    picker(0)
    model.train()
    for step in range(1, args.ei_steps + 1):
        prompts = task.training_prompts(args.prompts, prompt_generator, heldout_keys)
        keys |= set(task.prompt_key(prompts).tolist())
        responses, mask = policy.sample(prompts, args.group, sample_generator)
        lists, ids = select_verified(task, prompts, responses, mask)
        row = {"kept": len(ids), "generated_tokens": int(mask.sum()),
               "token_slots": int(mask.numel())}  # fmt: skip
        if ids:
            row["loss"] = sft_step(model, optimizer, tokenizer, lists, ids, template)
        log.append(row)
        if step % args.val_every == 0 or step == args.ei_steps:
            picker(step)
    check_keys(keys, heldout_keys, "expert iteration")
    return {
        "steps": args.ei_steps, "prompts": args.prompts, "group": args.group,
        "reply_tokens": args.reply_tokens, "temperature": 1.0,
        "learning_rate": args.ei_learning_rate, "time": B.since(start),
        "skipped_steps": sum(r["kept"] == 0 for r in log),
        "kept_replies": sum(r["kept"] for r in log),
        "sampled_replies": args.ei_steps * args.prompts * args.group,
        "generated_tokens": sum(r["generated_tokens"] for r in log),
        "token_slots": sum(r["token_slots"] for r in log), "per_step": log,
        "distinct_multisets": len(keys), "heldout_multisets_in_training": 0,
    } | picker.restore()  # fmt: skip


# ----------------------------------------------------------------------------- GRPO


def run_grpo(model, tokenizer, args, seed, template, picker, validation, test) -> dict:
    """``bench_real_lm``'s GRPO (``train_config``: ``--prompts`` x ``--group``, reward
    ``WEIGHTS``, ``--learning-rate``, ``--rl-steps``) from the adapter the model holds, with
    validation every ``--val-every`` steps (and at 0: the adapter it started from)."""
    from pgrl_helpers.training import run_policy_gradient

    task = B.ScoredTask(tokenizer, B.WEIGHTS)
    policy = R.ChatLMPolicy(model, tokenizer, template, max_new_tokens=args.reply_tokens)
    start = B.clocks()
    picker(0)

    def callback(epoch, history):
        if (epoch + 1) % args.val_every == 0 or epoch + 1 == args.rl_steps:
            picker(epoch + 1)

    model.train()
    history = run_policy_gradient(B.train_config(args, seed), callback=callback, policy=policy,
                                  task=task, score_test=False)  # fmt: skip
    if history.train_prompts_with_heldout_key:  # the loop redraws them: this never happens
        raise AssertionError(f"{history.train_prompts_with_heldout_key} training prompts held out")
    assert torch.equal(history.run.validation_prompts, validation)
    assert torch.equal(history.run.test_prompts, test)
    steps = history.steps()
    replies = args.prompts * args.group
    return {
        "steps": args.rl_steps, "prompts": args.prompts, "group": args.group,
        "learning_rate": args.learning_rate, "time": B.since(start),
        "train_reward": [round(s["mean_reward"], 4) for s in steps],
        "train_scores": task.log[: len(steps)],
        "sampled_replies": len(steps) * replies,
        "generated_tokens": int(round(sum(s["response_length"] * replies for s in steps))),
        "token_slots": len(steps) * replies * args.reply_tokens,
        "training_prompts": history.num_train_prompts,
        "heldout_multisets_in_training": history.train_prompts_with_heldout_key,
    } | picker.restore()  # fmt: skip


# ----------------------------------------------------------------------------- the report


#: The keys of a run file that name a folder (an adapter, a runs folder).
PATH_KEYS = ("adapter", "init_adapter", "save_adapter", "grpo_runs", "out_dir")
NOT_COMMITTED = "not committed (adapter on the running machine: {})"


def where(path):
    """``path`` as a results file records it: relative to the repository when it lies inside,
    else ``NOT_COMMITTED`` with its last folder's name (a run machine's folder is never
    recorded); None and relative paths unchanged."""
    if not isinstance(path, str) or not Path(path).is_absolute():
        return path
    inside = B.rel(path)
    return inside if not Path(inside).is_absolute() else NOT_COMMITTED.format(Path(path).name)


def rerecord(record):
    """A copy of a run file's record with every folder of ``PATH_KEYS`` re-recorded by
    ``where`` (at any depth); every other value unchanged."""
    if isinstance(record, dict):
        return {k: where(v) if k in PATH_KEYS else rerecord(v) for k, v in record.items()}
    if isinstance(record, list):
        return [rerecord(v) for v in record]
    return record


def collect(source: Path, runs: Path) -> list[str]:
    """Copy the finished run files of ``source`` (parts run, base, passk) into ``runs``, their
    folders re-recorded (``rerecord``), every number kept. Returns the names copied."""
    runs.mkdir(parents=True, exist_ok=True)
    copied = []
    for path in sorted(Path(source).glob("*.json")):
        record = json.loads(path.read_text())
        if record.get("part") not in ("run", "base", "passk"):
            continue
        (runs / path.name).write_text(json.dumps(rerecord(record), indent=1) + "\n")
        copied.append(path.name)
    return copied


def summarize(record: dict, source: str) -> dict:
    """One run's line of the report (bench_real_lm's rl records and this script's)."""
    if "rl" in record:  # bench_real_lm's rl arm: GRPO from the base
        rl, s = record["rl"], record["settings"]
        steps, replies = rl["steps"], rl["prompts"] * rl["group"]
        training = {"learning_rate": rl["learning_rate"], "best_step": rl["best_step"],
                    "validation_curve": rl["validation_curve"], "sampled_replies": steps * replies,
                    "token_slots": steps * replies * s["reply_tokens"],
                    "generated_tokens": None,  # not recorded by bench_real_lm
                    "heldout": rl["training_prompts_with_heldout_multiset"]}  # fmt: skip
    else:
        t = record["training"]
        training = {"learning_rate": t["learning_rate"], "best_step": t["best_step"],
                    "validation_curve": t["validation_curve"],
                    "sampled_replies": t.get("sampled_replies", 0),
                    "token_slots": t.get("token_slots", 0),
                    "generated_tokens": t.get("generated_tokens", 0),
                    "heldout": t["heldout_multisets_in_training"]}  # fmt: skip
        for k in ("skipped_steps", "kept_replies"):
            if k in t:
                training[k] = t[k]
        if "teacher_on_test" in record:
            training["teacher"] = {"error_rate": record["settings"]["teacher_error_rate"],
                                   "on_demonstrations": t["teacher_on_demonstrations"]}  # fmt: skip
    best = max(training["validation_curve"], key=lambda p: (p["exact"], p["partial"]))
    time_ = record.get("wall_and_cpu", {})
    return {
        "seed": record["seed"], "source": source,
        "test_exact": record["test_greedy"]["exact"], "test_format": record["test_greedy"]["format"],
        "exact_per_problem": record["test_greedy"]["exact_per_problem"],
        "validation_best_exact": best["exact"], **training,
        "cpu_minutes": round(time_["cpu_seconds"] / 60, 1) if time_ else None,
        "wall_minutes": round(time_["seconds"] / 60, 1) if time_ else None,
        "peak_rss_mib": record.get("peak_rss_mib"), "adapter": where(record.get("adapter")),
        "init_adapter": where(record.get("init_adapter")),
        "reply_tokens": record["settings"]["reply_tokens"],
        "load_average": [record.get("load_average_before"), record.get("load_average_after")],
    }  # fmt: skip


def cpu_minutes(record: dict) -> float:
    return round(record["wall_and_cpu"]["cpu_seconds"] / 60, 1)


def same_test(path: Path, outcomes: list) -> None:
    if len(outcomes) != B.HELDOUT:
        raise SystemExit(f"{B.rel(path)} scored {len(outcomes)} test problems, this report's "
                         f"test split has {B.HELDOUT}: a run of another split (--quick?)")  # fmt: skip


def load_runs(grpo_runs: Path, runs: Path) -> dict:
    """{arm: {learning rate: [run summaries by seed]}} of the finished runs found (each scored
    on this report's test split): the rl runs in ``grpo_runs``, this script's in ``runs``."""
    found = {}
    for path in sorted(Path(grpo_runs).glob("rl_seed*.json")):
        record = json.loads(path.read_text())
        if "paused_after_steps" not in record:
            found.setdefault("grpo", []).append(summarize(record, B.rel(path)))
    for path in sorted(Path(runs).glob("*.json")):
        record = json.loads(path.read_text())
        if record.get("part") == "run":
            found.setdefault(record["arm"], []).append(summarize(record, B.rel(path)))
    caps = {row["reply_tokens"] for rows in found.values() for row in rows}
    if len(caps) > 1:  # e.g. bench_real_lm's old rl runs (cap 14) beside these (16)
        by_cap = {c: sorted({r["source"] for rows in found.values() for r in rows
                             if r["reply_tokens"] == c}) for c in sorted(caps)}  # fmt: skip
        raise SystemExit(f"the runs were trained at different reply caps: {by_cap}; give "
                         "--grpo-runs the folder of rl runs at this report's cap")  # fmt: skip
    out = {}
    for arm, rows in found.items():
        for row in rows:
            same_test(Path(row["source"]), row["exact_per_problem"])
        for row in sorted(rows, key=lambda r: r["seed"]):
            out.setdefault(arm, {}).setdefault(row["learning_rate"], []).append(row)
    return out


def choose_rate(by_rate: dict) -> tuple[float, dict]:
    """The learning rate whose runs have the best mean validation exact (validation only)."""
    tried = {str(lr): {"seeds": [r["seed"] for r in rows], "validation_best_exact_mean": round(
        statistics.fmean(r["validation_best_exact"] for r in rows), 4)}
        for lr, rows in by_rate.items()}  # fmt: skip
    best = max(by_rate, key=lambda lr: (tried[str(lr)]["validation_best_exact_mean"], -lr))
    return best, tried


def paired(a_rows: dict, b_rows: dict, a: str, b: str) -> dict:
    """McNemar per shared seed, the bootstrap over seeds and problems, the sign-flip over seeds."""
    seeds = sorted(set(a_rows) & set(b_rows))
    if not seeds:
        return {}
    x = [a_rows[s] for s in seeds]
    y = [b_rows[s] for s in seeds]
    tests = [{"seed": s, **mcnemar_exact(p, q)} for s, p, q in zip(seeds, x, y)]
    for t in tests:  # the smallest two-sided p its discordant lists allow (all on one side)
        t["floor"] = min(1.0, 2 * 0.5 ** (t["a_only"] + t["b_only"]))
    boot = bootstrap_mean_difference(x, y)
    boot = {k: round(v, 4) if isinstance(v, float) else v for k, v in boot.items()}
    means = [statistics.fmean(v) for v in x], [statistics.fmean(v) for v in y]
    sign = compare_seeds(means[0], means[1], a, b, paired=True)
    floor = 2 / 2 ** len(seeds)
    sign["floor"] = floor
    if floor >= 0.05:
        sign["verdict"] = (
            f"cannot reach 0.05 with {len(seeds)} seed{'s' * (len(seeds) > 1)} "
            f"(smallest p {floor:g})"
        )
    # power (Connor 1987; normal approximation over seeds): the sample these rates would need
    a_only, b_only = sum(t["a_only"] for t in tests), sum(t["b_only"] for t in tests)
    power = {"level_per_seed": 0.01, "level_seeds": 0.05, "power": 0.8,
             "problems_per_seed": mcnemar_problems_needed(a_only, b_only, len(x[0]) * len(seeds),
                                                          alpha=0.01),
             "seeds": seeds_needed([p - q for p, q in zip(*means)])}  # fmt: skip
    return {"a": a, "b": b, "seeds": seeds, "mcnemar": tests, "bootstrap": boot,
            "sign_flip": sign, "power": power}  # fmt: skip


def passk_section(passk: dict) -> dict:
    """Curves, and per arm run the problems gained and lost at n against each base."""
    out = {"curves": {k: v["pass_at_k"] for k, v in passk.items()}, "vs_base": {}}
    for label, p in passk.items():
        if label.startswith("base_"):
            continue
        for base_label in ("base_example", "base_issue"):
            base = passk.get(base_label)
            if base is None or base["n"] != p["n"]:
                continue
            b, a = base["correct_per_problem"], p["correct_per_problem"]
            ks = [k for k in p["pass_at_k"] if p["pass_at_k"][k] <= base["pass_at_k"][k]]
            out["vs_base"][f"{label}_vs_{base_label}"] = {
                "gained_at_n": [i for i, (x, y) in enumerate(zip(b, a)) if x == 0 < y],
                "lost_at_n": [i for i, (x, y) in enumerate(zip(b, a)) if y == 0 < x],
                "solved_at_n": [sum(c > 0 for c in a), sum(c > 0 for c in b)],
                "first_k_base_at_or_above": int(ks[0]) if ks else None,
            }  # fmt: skip
    out["n_below_64"] = sorted(k for k, v in passk.items() if v["n"] < 64)
    return out
