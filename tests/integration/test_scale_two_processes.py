"""scale/train_sort_grpo.py on 2 CPU processes (torchrun, gloo) against 1 process.

Two launches of the script with the same seed, one generation round (3 prompts x G = 4
completions, so the middle prompt's group is split between the two processes) and two
optimizer steps each: 2 processes (``torchrun --nproc_per_node 2``, gloo) and 1 process,
both ``loss_type="dapo"`` (our ``token_mean``). Each process records what its
``compute_loss`` saw and returned, and what TRL's ``bnpo`` returns on the same local batch
(``--record``). Checked:

1. the same prompts, in the same order, on 1 and on 2 processes;
2. rewards: TRL's gathered rewards are the reward function of each (prompt, completion);
3. advantages do not depend on the split: on 2 processes each process's advantages are its
   slice of ``compute_deltas`` over the *gathered* groups (a split group included), what
   one process computes for the same completions (atol 1e-6 between processes; 2e-3 against
   ours, TRL's std + 1e-4 vs our std floor); a per-process baseline would differ (asserted);
4. ``dapo``: the mean of the two processes' losses (what DDP's gradient averaging
   minimises) equals the loss one process computes on the union of their batches, to 1e-6
   (float32 sums of ~30 terms);
5. ``bnpo``: each process divides by its own token count, so the mean of their losses is
   the mean of two per-process token means, not the global token mean: it equals that
   formula to 1e-6 and differs from the 1-process loss when the processes hold different
   numbers of completion tokens (asserted to hold for this batch).

The sampled completions themselves differ between the 1- and 2-process runs (each process
draws its own random numbers), so 4-5 replay the 2-process batch on one process with a
real ``GRPOTrainer``. Wall time: about 40 s on 2 free cores (mostly imports); more when the
CPU is shared.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from pgrl_helpers.advantages import compute_deltas  # noqa: E402
from pgrl_helpers.hf import trl_bridge as tb  # noqa: E402
from pgrl_helpers.hf import trl_config as tc  # noqa: E402

pytest.importorskip("trl")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scale" / "train_sort_grpo.py"
PROMPTS, G, V, L = 3, 4, 5, 3
ARGS = [
    "--epochs", "1", "--steps-per-epoch", "2", "--prompts-per-epoch", str(PROMPTS),
    "--group-size", str(G), "--vocab-size", str(V), "--prompt-length", str(L),
    "--deltas-mode", "normalized_rewards", "--seed", "0",
]  # fmt: skip
TOL = 1e-6


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(tmp: Path, name: str, nproc: int, extra: list[str]) -> subprocess.Popen:
    script = [str(SCRIPT), *ARGS, *extra]
    script += ["--output-dir", str(tmp / name / "out"), "--record", str(tmp / name / "record")]
    if nproc == 1:
        cmd = [sys.executable, *script]
    else:
        torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or "torchrun"
        cmd = [torchrun, "--nproc_per_node", str(nproc), "--master_addr", "127.0.0.1"]
        cmd += ["--master_port", str(_free_port()), *script]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
        "CUDA_VISIBLE_DEVICES": "",
    }
    log = open(tmp / f"{name}.log", "w")  # noqa: SIM115 (closed with the process)
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{name: [records of rank 0, rank 1, ...]} for the two launches (run side by side)."""
    tmp = tmp_path_factory.mktemp("two-proc")
    jobs = {
        "dapo2": _launch(tmp, "dapo2", 2, []),
        "dapo1": _launch(tmp, "dapo1", 1, []),
    }
    out = {}
    for name, job in jobs.items():
        rc = job.wait(timeout=600)
        assert rc == 0, f"{name} failed:\n{(tmp / f'{name}.log').read_text()[-3000:]}"
        files = sorted((tmp / name / "record").glob("record-rank*.pt"))
        out[name] = [torch.load(f, weights_only=False) for f in files]
        assert len(out[name]) == int(name[-1])
        assert all(r["num_processes"] == int(name[-1]) for r in out[name])
    out["model_dir"] = tmp / "dapo2" / "out" / "init-model"
    return out


def generation(rank_record) -> dict:
    (gen,) = [r for r in rank_record["records"] if r["kind"] == "generation"]
    return gen


def losses(rank_record) -> list[dict]:
    return [r for r in rank_record["records"] if r["kind"] == "loss"]


def test_same_prompts_on_one_and_two_processes(runs):
    one = generation(runs["dapo1"][0])["gathered"]["prompt"]
    for rank in runs["dapo2"]:
        assert generation(rank)["gathered"]["prompt"] == one
    assert len(one) == PROMPTS * G


def test_rewards_are_the_reward_function_of_each_completion(runs):
    reward = tb.sort_reward_func("sort_distance_reward", V)
    for name in ("dapo1", "dapo2"):
        gathered = generation(runs[name][0])["gathered"]
        expected = reward(gathered["prompt"], gathered["completion"])
        assert gathered["rewards"]["sort_distance_reward"] == expected, name


def test_advantages_do_not_depend_on_the_split(runs):
    for name in ("dapo1", "dapo2"):
        gathered = generation(runs[name][0])["gathered"]
        rewards = torch.tensor(gathered["rewards"]["sort_distance_reward"]).reshape(PROMPTS, G)
        one_process = compute_deltas(rewards, "normalized_rewards").reshape(-1)
        trl = torch.tensor(gathered["advantages"])
        # TRL divides by std + 1e-4, ours floors the std at 1e-3 (notebook 09): equal
        # where a group's rewards differ, both 0 where they are all equal
        torch.testing.assert_close(trl, one_process, atol=2e-3, rtol=0)
    # each process of the 2-process run uses its slice of the gathered advantages
    ranks = runs["dapo2"]
    gathered = torch.tensor(generation(ranks[0])["gathered"]["advantages"])
    local = torch.cat([generation(r)["local_advantages"] for r in ranks])
    torch.testing.assert_close(local, gathered, atol=TOL, rtol=0)
    # the split matters: a group straddles the processes, and a per-process baseline differs
    rows = len(generation(ranks[0])["local_advantages"])
    assert rows % G, "the batch must split a group between the processes"
    rewards = torch.tensor(generation(ranks[0])["gathered"]["rewards"]["sort_distance_reward"])
    split_group = slice((rows // G) * G, (rows // G + 1) * G)
    local_only = compute_deltas(rewards[split_group][None, : rows % G], "normalized_rewards")
    if rewards[split_group].std() > 0:
        assert (local_only[0] - gathered[split_group][: rows % G]).abs().max() > 1e-3


def _union(inputs: list[dict]) -> dict:
    """The two processes' batches as one (completions right-padded to a common width)."""
    width = max(i["completion_ids"].shape[1] for i in inputs)

    def pad(t, value):
        return torch.nn.functional.pad(t, (0, width - t.shape[1]), value=value)

    return {
        "prompt_ids": torch.cat([i["prompt_ids"] for i in inputs]),
        "prompt_mask": torch.cat([i["prompt_mask"] for i in inputs]),
        "completion_ids": torch.cat([pad(i["completion_ids"], 0) for i in inputs]),
        "completion_mask": torch.cat([pad(i["completion_mask"], 0) for i in inputs]),
        "advantages": torch.cat([i["advantages"] for i in inputs]),
        "old_per_token_logps": torch.cat([pad(i["old_per_token_logps"], 0.0) for i in inputs]),
        "num_items_in_batch": inputs[0]["num_items_in_batch"],
    }


def _one_process_loss(model_dir: Path, inputs: dict, tmp: Path) -> float:
    """A real 1-process GRPOTrainer (dapo, the script's settings) on ``inputs``."""
    import transformers
    from trl import GRPOConfig, GRPOTrainer

    from pgrl_helpers.config import TrainConfig

    transformers.logging.set_verbosity_error()
    config = TrainConfig(
        deltas_mode="normalized_rewards",
        loss_mode="clipped",
        num_epochs=1,
        num_steps_per_epoch=2,
        num_responses=G,
        prompt_source="random",
        prompts_per_epoch=PROMPTS,
        prompt_length=L,
        vocab_size=V,
        reward_fn="sort_distance_reward",
        learning_rate=5e-3,
    )
    kwargs = tc.grpo_config_kwargs(
        config, output_dir=str(tmp), report_to="none", save_strategy="no", use_cpu=True
    )
    trainer = GRPOTrainer(
        model=str(model_dir),
        reward_funcs=tb.sort_reward_func("sort_distance_reward", V),
        args=GRPOConfig(**kwargs),
        train_dataset=tb.make_sort_dataset(torch.zeros(4, L, dtype=torch.long)),
        processing_class=tb.build_sort_tokenizer(V),
    )
    with torch.no_grad():
        return tb.trl_loss(trainer, inputs).item()


def test_dapo_loss_is_the_global_token_mean_and_bnpo_is_not(runs, tmp_path):
    dapo = [losses(r)[0] for r in runs["dapo2"]]  # first optimizer step: the initial weights
    union = _union([d["inputs"] for d in dapo])
    tokens = [int(d["inputs"]["completion_mask"].sum()) for d in dapo]
    assert int(union["num_items_in_batch"]) == sum(tokens) == int(union["completion_mask"].sum())
    one_process = _one_process_loss(runs["model_dir"], union, tmp_path)

    two_process_dapo = sum(d["loss"] for d in dapo) / len(dapo)
    assert abs(two_process_dapo - one_process) < TOL

    # bnpo: each process divides its token sum by its own token count. dapo's per-process
    # loss is (local token sum) / (global tokens / 2), which gives the sums back.
    sums = [d["loss"] * sum(tokens) / len(dapo) for d in dapo]
    per_process_means = [s / n for s, n in zip(sums, tokens)]
    two_process_bnpo = sum(d["loss_as_bnpo"] for d in dapo) / len(dapo)
    assert abs(two_process_bnpo - sum(per_process_means) / len(dapo)) < TOL
    assert tokens[0] != tokens[1], "the processes must hold different numbers of tokens"
    assert abs(two_process_bnpo - one_process) > 1e-3
