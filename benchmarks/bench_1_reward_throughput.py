"""Reward throughput: vectorised ``compute_reward`` vs per-example Python loops.

Shapes: prompts int[batch, pos], responses int[batch, trial, pos]; the headline case is
batch 64, G (trial) 8, length 5, values 0-9. Three ways to score the same responses:

* vectorised: ``compute_reward(prompts, responses, name)`` (one batched tensor op);
* list loop: ``compute_reward(prompts, responses, per_example_fn)`` (the package's loop
  over Python lists, converting the tensors once);
* lecture loop: the lecture's double loop that indexes the tensors element by element
  and writes into an empty tensor.

Times are the best of 7 repeats (least disturbed by other processes).
"""

from __future__ import annotations

import functools
import timeit

import torch
from _common import markdown_table, save, setup

from pgrl_helpers.sort_task import REWARD_FNS, compute_reward, make_prompts

CASES = [(64, 8, 5), (1024, 8, 5)]  # (batch, G, length); the first is the headline


def lecture_loop(prompts: torch.Tensor, responses: torch.Tensor, reward_fn) -> torch.Tensor:
    batch, trial, _ = responses.shape
    rewards = torch.empty(batch, trial, dtype=torch.float32)
    for i in range(batch):
        for j in range(trial):
            rewards[i, j] = reward_fn(prompts[i, :], responses[i, j, :])
    return rewards


def best_seconds(fn, *args, target_seconds: float = 0.2) -> float:
    """Best time of one call ``fn(*args)`` over 7 repeats, each long enough to measure."""
    fn = functools.partial(fn, *args)
    once = min(timeit.repeat(fn, number=1, repeat=3))
    number = max(1, int(target_seconds / max(once, 1e-7)))
    return min(timeit.repeat(fn, number=number, repeat=7)) / number


def main() -> None:
    setup()
    rows, records = [], []
    for batch, group, length in CASES:
        prompts = make_prompts(batch, length, 10, generator=0)
        responses = torch.randint(
            0, 10, (batch, group, length), generator=torch.Generator().manual_seed(1)
        )
        for name, per_example in REWARD_FNS.items():
            vectorised = compute_reward(prompts, responses, name)
            assert torch.equal(vectorised, compute_reward(prompts, responses, per_example))
            assert torch.equal(vectorised, lecture_loop(prompts, responses, per_example))
            t_vec = best_seconds(compute_reward, prompts, responses, name)
            t_list = best_seconds(compute_reward, prompts, responses, per_example)
            t_lecture = best_seconds(lecture_loop, prompts, responses, per_example)
            record = {
                "batch": batch,
                "G": group,
                "length": length,
                "reward": name,
                "vectorised_us": t_vec * 1e6,
                "list_loop_us": t_list * 1e6,
                "lecture_loop_us": t_lecture * 1e6,
                "speedup_vs_list_loop": t_list / t_vec,
                "speedup_vs_lecture_loop": t_lecture / t_vec,
            }
            records.append(record)
            rows.append(
                [
                    f"{batch} x {group} x {length}",
                    name,
                    f"{t_vec * 1e6:.0f}",
                    f"{t_list * 1e6:.0f}",
                    f"{t_lecture * 1e6:.0f}",
                    f"{t_list / t_vec:.0f}x",
                    f"{t_lecture / t_vec:.0f}x",
                ]
            )
    headers = [
        "batch x G x length",
        "reward",
        "vectorised (us)",
        "list loop (us)",
        "lecture loop (us)",
        "speed-up vs list loop",
        "speed-up vs lecture loop",
    ]
    table = markdown_table(headers, rows)
    print(table)
    save("reward_throughput", {"results": records, "table": table})


if __name__ == "__main__":
    main()
