"""benchmarks/report.py renders RESULTS.md from the results JSON only, one section per script.

Every ``benchmarks/bench_*.py`` exposes ``NAME``, ``main(quick, seeds, out_dir)`` and
``section(result, results_dir)`` and is listed once in ``report.SECTIONS``; the committed
RESULTS.md is exactly what ``report.render`` makes of the committed results; a missing results
file renders as "not run yet"; the report never reads RESULTS.md (its own output); and it
renders without the TRL extra installed (a benchmark imports TRL / transformers only inside the
functions that train).
"""

from __future__ import annotations

import builtins
import inspect
import io
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import _common  # noqa: E402
import report  # noqa: E402

SCRIPTS = sorted(p.stem for p in BENCHMARKS.glob("bench_*.py"))


def test_committed_results_md_is_the_rendered_report():
    rendered = report.render(_common.RESULTS_DIR)
    assert rendered == (BENCHMARKS / "RESULTS.md").read_text(), (
        "benchmarks/RESULTS.md is stale: run `python benchmarks/report.py`"
    )
    assert "<bench_" not in rendered  # every cross-reference became a section number


def test_every_script_has_the_interface_and_one_section():
    listed = [module.__name__ for module in report.SECTIONS]
    assert sorted(listed) == SCRIPTS, "SECTIONS must list every bench_*.py exactly once"
    assert len(set(listed)) == len(listed)
    for module in report.SECTIONS:
        assert isinstance(module.NAME, str) and module.NAME, module.__name__
        params = inspect.signature(module.main).parameters
        assert list(params)[:3] == ["quick", "seeds", "out_dir"], module.__name__
        assert params["quick"].default is False and params["seeds"].default is None
        assert params["out_dir"].default == _common.RESULTS_DIR, module.__name__
        assert list(inspect.signature(module.section).parameters)[:2] in (
            ["r", "results_dir"],
            ["result", "results_dir"],
            ["payload", "results_dir"],
        ), module.__name__
        source = Path(module.__file__).read_text()
        assert "main(**parse_args(" in source, f"{module.__name__}: one command-line convention"
    numbers = [line.split(".")[0] for line in report.render().splitlines() if line[:3] == "## "]
    assert numbers[1:] == [f"## {i}" for i in range(1, len(report.SECTIONS) + 1)]


def test_a_missing_results_file_renders_not_run_yet(tmp_path):
    empty = report.render(tmp_path)
    assert empty.count("not run yet") == len(report.SECTIONS) + 1  # + the machine section
    shutil.copytree(_common.RESULTS_DIR, tmp_path / "results")
    (tmp_path / "results" / f"{report.SECTIONS[0].NAME}.json").unlink()
    partial = report.render(tmp_path / "results")
    first, *others = partial.split("\n## ")[2:]
    assert first.startswith("1. ") and "not run yet" in first
    assert not any("not run yet" in section for section in others)


def test_the_report_never_reads_results_md(tmp_path, monkeypatch):
    """Rendered beside a garbage RESULTS.md, and with every way of opening RESULTS.md made to
    fail, the report is the same."""
    shutil.copytree(_common.RESULTS_DIR, tmp_path / "results")
    (tmp_path / "RESULTS.md").write_text("## 99. garbage that must not reappear\n")
    expected = report.render(_common.RESULTS_DIR)
    real_open, real_io_open = builtins.open, io.open

    def refuse(opener):
        def guarded(file, *args, **kwargs):
            if str(file).endswith("RESULTS.md"):
                raise AssertionError(f"the report opened {file}")
            return opener(file, *args, **kwargs)

        return guarded

    monkeypatch.setattr(builtins, "open", refuse(real_open))
    monkeypatch.setattr(io, "open", refuse(real_io_open))
    assert report.render(tmp_path / "results") == expected
    assert "garbage" not in expected


def test_quick_runs_never_write_the_results_folder(tmp_path):
    redirected = _common.output_dir(_common.RESULTS_DIR, quick=True)  # a new temporary folder
    assert redirected != _common.RESULTS_DIR and not any(redirected.iterdir())
    shutil.rmtree(redirected)
    assert _common.output_dir(tmp_path / "q", quick=True) == (tmp_path / "q").resolve()
    assert _common.parse_args(argv=["--quick", "--seeds", "3", "4"]) == {
        "quick": True,
        "seeds": [3, 4],
        "out_dir": _common.RESULTS_DIR,
    }


@pytest.mark.parametrize("module", ["bench_reward_throughput"])
def test_a_quick_run_writes_its_file_and_renders(tmp_path, module):
    """One quick benchmark end to end (about a second): main writes out_dir/<NAME>.json and
    returns it, and the report renders it as section 1."""
    bench = next(m for m in report.SECTIONS if m.__name__ == module)
    result = bench.main(quick=True, out_dir=tmp_path)
    assert (tmp_path / f"{bench.NAME}.json").exists() and "machine" in result
    text = report.render(tmp_path)
    assert "## 1. Reward throughput (`bench_reward_throughput.py`)" in text


#: The TRL extra (requirements-scale.txt): rendering the report needs none of it.
TRL_EXTRA = (
    "trl", "transformers", "peft", "accelerate", "datasets", "tokenizers", "safetensors",
    "huggingface_hub",
)  # fmt: skip


def render_without_the_trl_extra(benchmarks: Path) -> subprocess.CompletedProcess:
    """``report.render()`` of ``benchmarks``' committed results in a fresh interpreter where
    importing any ``TRL_EXTRA`` package fails (``sys.modules[name] = None``: ImportError), as
    on a machine without the extra; the report on stdout, the packages that loaded on stderr."""
    code = (
        "import sys\n"
        f"for name in {TRL_EXTRA!r}:\n"
        "    sys.modules[name] = None\n"
        "import report\n"
        "sys.stdout.buffer.write(report.render(report.RESULTS_DIR).encode())\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] in "
        f"{TRL_EXTRA!r} and sys.modules[m] is not None]\n"
        "sys.stderr.write(repr(loaded))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], cwd=benchmarks, capture_output=True, timeout=300
    )


def test_results_md_renders_byte_identical_without_the_trl_extra():
    done = render_without_the_trl_extra(BENCHMARKS)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert done.stdout == (BENCHMARKS / "RESULTS.md").read_bytes()
    assert done.stderr.decode().endswith("[]"), "no package of the TRL extra was loaded"


def test_an_eager_trl_import_in_a_benchmark_is_caught(tmp_path):
    """The check above fails when a benchmark imports transformers at module level (a copy of
    benchmarks/ with that one line planted in bench_trl.py)."""
    copy = tmp_path / "benchmarks"
    copy.mkdir()
    for script in BENCHMARKS.glob("*.py"):
        shutil.copyfile(script, copy / script.name)
    (copy / "results").symlink_to(BENCHMARKS / "results", target_is_directory=True)
    planted = copy / "bench_trl.py"
    source = planted.read_text()
    marker = "from __future__ import annotations\n"
    assert marker in source
    planted.write_text(source.replace(marker, marker + "\nimport transformers  # noqa\n", 1))
    done = render_without_the_trl_extra(copy)
    assert done.returncode != 0 and b"import of transformers halted" in done.stderr
