"""Scaling: what it costs GRPO to reach 99% held-out exact-sort as prompts get longer.

For prompt lengths 3, 4, 5, 6 (values 0-9; one process per length) and seeds 0, 1, 2: the
GRPO setting of ``bench_3_generalization`` (only the length changes) trained until greedy
exact-sort on the validation multisets reaches 99%, then ``EPOCHS_AFTER_TARGET`` more
epochs; reported: wall time, sampled responses, exact-sort on the test multisets at the
target, and the largest validation drop after it.

Reference point: the same SortTransformer trained by supervised learning (cross-entropy
on the sorted answers of fresh random prompts, same optimizer and learning rate), and
the number of labelled examples it needs to reach the same 99%. The ratio "sampled
responses / labelled examples" is the price of learning from a reward instead of answers.
"""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from _common import RESULTS_DIR, markdown_table, median, save, setup, train_to_target  # noqa: E402
from bench_3_generalization import CONFIG  # noqa: E402

from pgrl_helpers.sort_task import make_prompts, sorted_responses  # noqa: E402
from pgrl_helpers.training import evaluate_greedy, heldout_split  # noqa: E402

LENGTHS = (3, 4, 5, 6)
SEEDS = (0, 1, 2)
TARGET = 0.99
MAX_SECONDS = 150.0  # per run (GRPO: CPU seconds to the target); hitting it = "not reached"
#: Stability: GRPO keeps training this many epochs (one optimizer step each, as in bench_3)
#: after validation reaches the target; the table reports the largest validation drop in
#: that window (bench_3_stability: 400 optimizer steps).
EPOCHS_AFTER_TARGET = 120
SFT_BATCH = 64
SFT_CHECK_EVERY = 10  # optimizer steps between validation checks


def grpo_config(length: int, seed: int):
    return replace(CONFIG, prompt_length=length, seed=seed, num_eval_prompts=None)


def train_sft(config, target: float = TARGET, max_seconds: float = MAX_SECONDS) -> dict:
    """Supervised reference: cross-entropy on sorted(prompt), same model/optimizer/held-out."""
    torch.manual_seed(config.seed)
    start, cpu_start = time.perf_counter(), time.process_time()
    model = config.build_policy()
    optimizer = torch.optim.Adam(model.parameters(), lr=config.learning_rate)
    task = config.build_task()
    validation, test_prompts = heldout_split(config)  # the GRPO runs' split, by multiset
    heldout_keys = task.prompt_key(torch.cat([validation, test_prompts]))
    generator = torch.Generator().manual_seed(config.seed)
    steps, reached, score = 0, False, 0.0
    while time.process_time() - cpu_start < max_seconds:  # CPU seconds: load-independent
        prompts = make_prompts(SFT_BATCH, config.prompt_length, config.vocab_size, generator)
        keep = ~torch.isin(task.prompt_key(prompts), heldout_keys)
        prompts = prompts[keep]  # never train on a held-out multiset
        logits = model(prompts)  # [batch, pos, vocab]
        loss = F.cross_entropy(logits.flatten(0, 1), sorted_responses(prompts).flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        steps += 1
        if steps % SFT_CHECK_EVERY == 0:
            score = evaluate_greedy(model, validation, task)["exact_sort"]
            if score >= target:
                reached = True
                break
    test = evaluate_greedy(model, test_prompts, task)["exact_sort"]
    return {
        "reached": reached,
        "seconds": time.perf_counter() - start,
        "cpu_seconds": time.process_time() - cpu_start,
        "labelled_examples": steps * SFT_BATCH,
        "validation_exact_sort": score,
        "test_exact_sort": test,
    }


def run_length(length: int) -> tuple[list[dict], list[dict]]:
    """GRPO and SFT runs of every seed at one prompt length (one process per length)."""
    setup()
    grpo, sft = [], []
    for seed in SEEDS:
        config = grpo_config(length, seed)
        g = train_to_target(
            config, TARGET, max_seconds=MAX_SECONDS, epochs_after_target=EPOCHS_AFTER_TARGET
        )
        g.pop("curve")
        s = train_sft(config)
        grpo.append(g)
        sft.append(s)
        print(
            f"length {length} seed {seed}: GRPO {g['reached']} {g['seconds']:.1f} s "
            f"{g['responses_sampled']} responses (test {g['test_exact_sort_at_target']:.3f}, "
            f"drop after {g['largest_drop_after_target']}); "
            f"SFT {s['reached']} {s['seconds']:.1f} s {s['labelled_examples']} examples "
            f"(test {s['test_exact_sort']:.3f})",
            flush=True,
        )
    return grpo, sft


def run_sft_length(length: int) -> list[dict]:
    setup()
    return [train_sft(grpo_config(length, seed)) for seed in SEEDS]


def main(sft_only: bool = False) -> None:
    """All runs; ``sft_only``: keep the GRPO runs of results/scaling.json, redo SFT only."""
    setup()
    with ProcessPoolExecutor(len(LENGTHS)) as pool:
        if sft_only:
            saved = json.loads((RESULTS_DIR / "scaling.json").read_text())["grpo_runs"]
            grpo = {length: saved[str(length)] for length in LENGTHS}
            sft = dict(zip(LENGTHS, pool.map(run_sft_length, LENGTHS)))
        else:
            per_length = dict(zip(LENGTHS, pool.map(run_length, LENGTHS)))
            grpo = {length: runs[0] for length, runs in per_length.items()}
            sft = {length: runs[1] for length, runs in per_length.items()}
    headers = [
        "length",
        "held-out (val + test)",
        "GRPO reached (seeds)",
        "GRPO wall time (s, median)",
        "GRPO sampled responses (median)",
        "GRPO test exact-sort at target (median)",
        f"GRPO largest validation drop in {EPOCHS_AFTER_TARGET} epochs after target (max)",
        "SFT reached",
        "SFT wall time (s)",
        "SFT labelled examples (median)",
        "responses per labelled example",
    ]
    rows, summary = [], []
    for length in LENGTHS:
        g, s = grpo[length], sft[length]
        g_resp = median([r["responses_sampled"] for r in g])
        s_ex = median([r["labelled_examples"] for r in s])
        row = {
            "length": length,
            "heldout": g[0]["num_validation"] + g[0]["num_test"],
            "grpo_reached": sum(r["reached"] for r in g),
            "grpo_seconds": median([r["seconds"] for r in g]),
            "grpo_responses": g_resp,
            "grpo_test": median([r["test_exact_sort_at_target"] for r in g]),
            "grpo_largest_drop": max(r["largest_drop_after_target"] or 0.0 for r in g),
            "sft_reached": sum(r["reached"] for r in s),
            "sft_seconds": median([r["seconds"] for r in s]),
            "sft_examples": s_ex,
            "ratio": g_resp / s_ex,
        }
        summary.append(row)
        rows.append(
            [
                length,
                row["heldout"],
                f"{row['grpo_reached']}/3",
                f"{row['grpo_seconds']:.1f}",
                f"{g_resp:.0f}",
                f"{row['grpo_test']:.3f}",
                f"{row['grpo_largest_drop']:.3f}",
                f"{row['sft_reached']}/3",
                f"{row['sft_seconds']:.1f}",
                f"{s_ex:.0f}",
                f"{row['ratio']:.0f}",
            ]
        )
    table = markdown_table(headers, rows)
    print(table)

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot(
        LENGTHS, [r["grpo_responses"] for r in summary], "o-", label="GRPO: sampled responses"
    )
    left.plot(LENGTHS, [r["sft_examples"] for r in summary], "s-", label="SFT: labelled examples")
    left.set_yscale("log")
    left.set_xlabel("prompt length (values 0-9)")
    left.set_ylabel("samples to reach 99% held-out (median of 3)")
    left.set_title("Samples needed")
    left.set_xticks(LENGTHS)
    left.legend()
    right.plot(LENGTHS, [r["grpo_seconds"] for r in summary], "o-", label="GRPO")
    right.plot(LENGTHS, [r["sft_seconds"] for r in summary], "s-", label="SFT")
    right.set_yscale("log")
    right.set_xlabel("prompt length (values 0-9)")
    right.set_ylabel("wall time to 99% (s, 1 CPU thread, median of 3)")
    right.set_title("Time needed")
    right.set_xticks(LENGTHS)
    right.legend()
    fig.tight_layout()
    fig.savefig(RESULTS_DIR / "scaling.png", dpi=100)
    save(
        "scaling",
        {
            "grpo_runs": grpo,
            "sft_runs": sft,
            "summary": summary,
            "table": table,
            "sft_batch": SFT_BATCH,
            "max_seconds_per_run": MAX_SECONDS,
            "epochs_after_target": EPOCHS_AFTER_TARGET,
        },
    )


if __name__ == "__main__":
    main(sft_only="--sft-only" in sys.argv)
