#!/usr/bin/env python3
"""Make the capstone's three broken runs and store their histories with the package.

    .venv/bin/python assignments/make_capstone_runs.py          # rewrite the stored runs
    .venv/bin/python assignments/make_capstone_runs.py --check  # compare, write nothing

``09_capstone_broken_runs.ipynb`` hands students the logged history of three runs, each made
by ``run_policy_gradient`` from the capstone's healthy recipe
(``pgrl_helpers.checks.capstone._healthy``) with ONE thing broken. Which thing is the answer
to the exercise, so it lives here, with the instructor's material, and not in the package:
the package stores only the histories (``pgrl_helpers/checks/_capstone_runs.py``, compressed
JSON), and its checks judge a diagnosis by the evidence in them. About 4 CPU-seconds per run.

``--check`` re-makes the runs and compares every logged number with the stored one (relative
1e-4: another CPU may round differently); it exits 1 when a run differs.
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import sys
import textwrap
import zlib
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pgrl_helpers.checks import capstone  # noqa: E402

OUT = ROOT / "pgrl_helpers" / "checks" / "_capstone_runs.py"

#: run name -> (the field(s) that break the recipe, the cause in ``capstone.CAUSES`` it is)
BREAKS: dict[str, tuple[dict, str]] = {
    "A": ({"kl_coef": 5.0, "seed": 3}, "kl_penalty_too_strong"),
    "B": ({"learning_rate": 0.1, "seed": 5}, "learning_rate_too_high"),
    "C": ({"detach_old_log_probs": False, "seed": 7}, "old_log_probs_not_detached"),
}


def broken_config(run: str):
    """The TrainConfig broken run ``run`` was made from."""
    return replace(capstone._healthy(), **BREAKS[run][0])


def make(run: str) -> dict:
    from pgrl_helpers.training import run_policy_gradient

    history = run_policy_gradient(broken_config(run))
    return {
        "records": [dict(r) for r in history],
        "stop_reason": history.stop_reason,
        "target_epoch": history.target_epoch,
        "validation_prompts": history.run.validation_prompts.tolist(),
        "test_prompts": history.run.test_prompts.tolist(),
        "train_prompts": history.run.train_prompts.tolist(),
        "heldout_keys": history.heldout_keys.tolist(),
        "num_train_prompts": history.num_train_prompts,
        "train_prompts_with_heldout_key": history.train_prompts_with_heldout_key,
    }


def encode(runs: dict) -> str:
    blob = base64.b64encode(zlib.compress(json.dumps(runs, sort_keys=True).encode(), 9))
    lines = textwrap.wrap(blob.decode(), 96)
    body = "\n".join(f'    "{line}"' for line in lines)
    return (
        '"""The capstone\'s three broken runs, as ``run_policy_gradient`` logged them (written by\n'
        "``assignments/make_capstone_runs.py``; do not edit): JSON, zlib-compressed, base64.\n"
        "``load()`` returns {run name: {records, stop_reason, target_epoch, prompts, ...}}.\n"
        '"""\n\n'
        "import base64\nimport functools\nimport json\nimport zlib\n\n"
        f"_DATA = (\n{body}\n)\n\n\n"
        "@functools.cache\n"
        "def load() -> dict:\n"
        '    """{run name: its stored history}, decoded once."""\n'
        "    return json.loads(zlib.decompress(base64.b64decode(_DATA)))\n"
    )


def same(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-9)
    return a == b


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    args = parser.parse_args(argv)
    runs = {run: json.loads(json.dumps(make(run))) for run in BREAKS}
    if args.check:
        from pgrl_helpers.checks._capstone_runs import load

        stored = load()
        bad = [run for run in runs if not same(runs[run], stored.get(run))]
        print("stored runs up to date" if not bad else f"runs differ: {', '.join(bad)}")
        return 1 if bad else 0
    OUT.write_text(encode(runs))
    print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
