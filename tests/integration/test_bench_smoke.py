"""The benchmarks (bench/) still run: each registered benchmark at its `smoke` sizes, as `make
bench` runs it (`python -m bench NAME --smoke`, a process of its own), and every module of
bench/ imports. Their figures mean nothing at these sizes and no goal is judged; what is
checked is that an import or an interface the benchmarks use has not changed under them
(`python -m bench search` once crashed on a function that folds no longer had, and nothing
noticed until the next `make bench`)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT

from bench.registry import BENCHMARKS

BENCH = ROOT / "bench"
# Smokes of more than a few seconds (whole commands, several executions, worker groups).
SLOW = frozenset({"cluster", "durable", "plan", "dense", "search", "dense_workers"})
# A benchmark that cannot run without the loopback sshd (the others skip their SSH group).
SSH = frozenset({"latency"})


def _marks(name: str) -> list[pytest.MarkDecorator]:
    marks = [pytest.mark.slow] if name in SLOW or name in SSH else []
    return marks + ([pytest.mark.ssh] if name in SSH else [])


def test_every_benchmark_module_is_registered() -> None:
    runnable = {
        path.stem for path in BENCH.glob("*.py") if "\nBENCHMARK = Benchmark(" in path.read_text()
    }
    assert runnable == set(BENCHMARKS)


# Not imported here: `__main__`, the runner's command line (it runs the benchmarks when
# imported), and `dense_torch`, which runs in an interpreter with torch (not a dependency).
MODULES = sorted(p.stem for p in BENCH.glob("*.py") if p.stem not in {"__main__", "dense_torch"})


@pytest.mark.parametrize("module", MODULES)
def test_every_bench_module_imports(module: str) -> None:
    # The standalone scripts (dense_bench.py, slurm_bench.py) and the helpers too.
    importlib.import_module(f"bench.{module}")


@pytest.mark.parametrize("name", [pytest.param(n, marks=_marks(n)) for n in BENCHMARKS])
def test_benchmark_runs_at_its_smoke_size(name: str, tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # the benchmarks' scratch directories
    done = subprocess.run(
        [sys.executable, "-m", "bench", name, "--smoke", "--json", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    figures = json.loads(out.read_text())
    assert figures["mode"] == "smoke"
    assert "error" not in figures[name], figures[name]["error"]
    assert "goal_met" in figures[name], sorted(figures[name])  # its summary line was reached
