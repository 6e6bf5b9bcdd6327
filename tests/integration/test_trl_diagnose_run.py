"""``python -m pgrl_helpers.diagnose`` on the folders a live TRL GRPOTrainer run writes.

The Trainer itself writes ``output_dir/checkpoint-N/trainer_state.json`` (save_steps), so this
tests the reader on TRL 1.16's own files, not on a copy made by the benchmark.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scale"))

from pgrl_helpers.hf import checkpoint as ck  # noqa: E402


@pytest.fixture(scope="module")
def output_dir(tmp_path_factory):
    """A 4-step GRPOTrainer run of the TINY checkpoint with a constant reward, checkpoints at
    steps 2 and 4 (the reader must take checkpoint-4)."""
    import grpo_checkpoint
    import transformers
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    transformers.logging.set_verbosity_error()
    model = ck.build_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny", ck.TINY)
    out = tmp_path_factory.mktemp("run")
    args = grpo_checkpoint.parse_args(
        ["--model", str(model), "--max-steps", "4", "--prompts-per-step", "2",
         "--num-generations", "2", "--use-vllm", "no"]
    )  # fmt: skip
    kwargs = grpo_checkpoint.grpo_config_kwargs(args, out, False, "no")
    kwargs.pop("reward_weights")
    kwargs.update(save_strategy="steps", save_steps=2, disable_tqdm=True)
    dataset = grpo_checkpoint.make_dataset(ck.make_splits()["train_in"], 8, 0)
    trainer = GRPOTrainer(
        model=str(model),
        reward_funcs=[lambda completions, **kw: [1.0] * len(completions)],
        args=GRPOConfig(**kwargs),
        train_dataset=dataset,
        processing_class=AutoTokenizer.from_pretrained(model),
    )
    trainer.train()
    return out


def test_the_cli_reads_trls_output_dir_and_names_the_constant_reward(output_dir):
    assert (output_dir / "checkpoint-4" / "trainer_state.json").is_file()
    result = subprocess.run(
        [sys.executable, "-m", "pgrl_helpers.diagnose", str(output_dir), "--json"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    out = json.loads(result.stdout)
    assert out["source"].endswith("checkpoint-4/trainer_state.json")
    # the TINY checkpoint (5 SFT steps) rarely ends its turn: truncation is right there too
    assert [f["name"] for f in out["findings"]][0] == "constant_reward"
    assert list(out["missing_metrics"]) == ["kl"]  # beta = 0: not logged, not guessed
