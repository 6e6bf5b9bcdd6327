"""Render benchmarks/RESULTS.md from the results files the benchmarks wrote, and nothing else.

``SECTIONS`` orders the report; a section is numbered by its place in the list and written by
the ``section()`` of the script whose ``results/<NAME>.json`` it reads, so a file's format is
known in one place. A section may refer to another as ``<bench_name>``: it becomes that
section's number. A missing results file gives "not run yet".

    python benchmarks/report.py              # benchmarks/results/*.json -> benchmarks/RESULTS.md
    python benchmarks/report.py DIR          # DIR/*.json -> DIR/RESULTS.md (e.g. a --quick run)
"""

from __future__ import annotations

import re
import sys
from importlib import import_module
from pathlib import Path

from _common import RESULTS_DIR, load

#: The report's order: the benchmark scripts (modules), one section each.
SECTIONS = [import_module(name) for name in (
    "bench_reward_throughput", "bench_lecture", "bench_generalization", "bench_stability",
    "bench_unseen_regime", "bench_autoregressive", "bench_scaling", "bench_trl",
    "bench_trl_vs_loop", "bench_lecture_ablation", "bench_kl_beta", "bench_ppo_vs_grpo",
    "bench_detectors", "bench_objectives", "bench_entropy", "bench_collapse",
    "bench_length_drift", "bench_staleness", "bench_pass_at_k", "bench_multi_turn",
    "bench_real_lm", "bench_trl_detectors", "bench_real_lm_verifier",
)]  # fmt: skip

HEADER = """# Benchmark results

Produced by `make bench` (= `python3 tasks.py bench`): runs every `benchmarks/bench_*.py`; each \
prints its table and writes `benchmarks/results/<name>.json` (+ a PNG); `benchmarks/report.py` \
renders this file from those JSON files only, one numbered section per script. The full runs \
are not part of the test suite (`tasks.py test` runs each script's `--quick` version, tiny \
sizes, into a temporary folder)."""


def machine_section(results: list[dict]) -> str:
    """The first result's machine; the highest load average any of them recorded."""
    results = [r for r in results if "load_average_1_5_15_min" in r.get("machine", {})]
    if not results:
        return "## Machine\n\n(not run yet)"
    m = results[0]["machine"]
    top = max(max(r["machine"]["load_average_1_5_15_min"]) for r in results)
    return (
        f"## Machine\n\n- CPU: {m['cpu']}, {m['logical_cores']} logical cores; torch {m['torch']} "
        f"(CPU build), Python {m['python']}, {m['platform']}\n- torch ran on {m['torch_threads']} "
        "thread (fastest for these tiny models; `TrainConfig.num_threads` defaults to 1)\n"
        f"- measured {m['date_utc']} UTC; the 1-minute load average reached {top:.1f} while the "
        f"benchmarks ran: other processes were sharing the {m['logical_cores']} cores, so wall "
        "times are pessimistic and vary by run"
    )


def render(results_dir: Path | str = RESULTS_DIR) -> str:
    """The whole report from results_dir/<NAME>.json of every module in ``SECTIONS``."""
    number = {module.__name__: i for i, module in enumerate(SECTIONS, 1)}
    results = {module: load(module.NAME, Path(results_dir)) for module in SECTIONS}
    parts = [HEADER, machine_section([r for r in results.values() if r is not None])]
    for module, result in results.items():
        script = f"`{module.__name__}.py`"
        if result is None:
            text = f"## {module.NAME} ({script})\n\n(not run yet: {script} writes it)"
        else:
            text = module.section(result, Path(results_dir)).strip("\n")
        text = re.sub(r"<(bench_\w+)>", lambda m: str(number[m[1]]), text)
        parts.append(text.replace("## ", f"## {number[module.__name__]}. ", 1))
    return "\n\n".join(parts) + "\n"


if __name__ == "__main__":
    results_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else RESULTS_DIR
    out = (results_dir if len(sys.argv) > 1 else RESULTS_DIR.parent) / "RESULTS.md"
    out.write_text(render(results_dir))
    print(f"wrote {out}")
