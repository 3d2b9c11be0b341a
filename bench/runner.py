"""The benchmark runner: measuring side by side, the tables, the JSON file, the command line.

A benchmark is a module of this package, listed in `bench/registry.py`, whose `BENCHMARK`
gives a title, the sizes of a full and of a `--quick` run, and a `run(sizes)` function. That
function measures its cases with `interleave` (A, B, A, B, ...: the machine may be shared,
so every ratio comes from medians of the same run), prints its tables with `table` and
returns its figures as a JSON-ready dict, with `goal_met` (True, False or None) when it has a
goal. The runner does the rest: a heading with the load average, the CPU time that other
processes used meanwhile, the JSON file rewritten after each benchmark, a summary of the
goals. A goal not met is a figure, not a failure; a benchmark that raises is reported, the
others still run, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import datetime
import importlib
import importlib.metadata
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

from bench.registry import BENCHMARKS

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = "aner-bench/v2"
DEFAULT_JSON = "bench-results.json"

Sizes = TypeVar("Sizes")


@dataclasses.dataclass(frozen=True)
class Benchmark(Generic[Sizes]):
    """What one benchmark module offers the runner. `full`, `quick` and `smoke` are frozen
    dataclasses of sizes and repetitions; they are recorded in the JSON file as they were
    used. `smoke` is the smallest size that still goes through every part of the benchmark
    (its figures mean nothing): the test suite runs each benchmark at it
    (tests/integration/test_bench_smoke.py), so that an interface change breaks the suite."""

    title: str
    full: Sizes
    quick: Sizes
    smoke: Sizes
    run: Callable[[Sizes], dict[str, Any]]


def load(name: str) -> Benchmark[Any]:
    benchmark: Benchmark[Any] = importlib.import_module(f"bench.{name}").BENCHMARK
    return benchmark


# -- measuring ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Series:
    """The repetitions of one case: wall seconds and what each call returned, in order."""

    walls: tuple[float, ...] = ()
    values: tuple[Any, ...] = ()

    @property
    def median(self) -> float:
        return float(statistics.median(self.walls)) if self.walls else math.nan

    @property
    def min(self) -> float:
        return min(self.walls, default=math.nan)

    @property
    def max(self) -> float:
        return max(self.walls, default=math.nan)

    def span(self) -> str:
        """The 'min:max' column."""
        return f"{self.min:.3f}:{self.max:.3f}"

    def where(self, keep: Callable[[Any], bool]) -> Series:
        pairs = [(w, v) for w, v in zip(self.walls, self.values, strict=True) if keep(v)]
        return Series(tuple(w for w, _ in pairs), tuple(v for _, v in pairs))

    def median_of(self, figure: Callable[[Any], float]) -> float:
        return float(statistics.median(figure(v) for v in self.values))

    def figures(self) -> dict[str, Any]:
        return {
            "seconds": list(self.walls),
            "median_s": self.median,
            "min_s": self.min,
            "max_s": self.max,
        }


def interleave(
    cases: Mapping[str, Callable[[], Any]],
    reps: int,
    *,
    only: Mapping[str, Collection[int]] | None = None,
) -> dict[str, Series]:
    """Run every case once per round for `reps` rounds (A, B, A, B, ...), timing each call.

    `only` limits a costly case to some rounds (0-based), e.g. the middle one, so that it is
    still bracketed by the cases it is compared with."""
    walls: dict[str, list[float]] = {name: [] for name in cases}
    values: dict[str, list[Any]] = {name: [] for name in cases}
    for index in range(reps):
        for name, call in cases.items():
            if only is not None and name in only and index not in only[name]:
                continue
            start = time.perf_counter()
            value = call()
            walls[name].append(time.perf_counter() - start)
            values[name].append(value)
    return {name: Series(tuple(walls[name]), tuple(values[name])) for name in cases}


@dataclasses.dataclass(frozen=True)
class Failure:
    """A measured call that raised: kept out of medians and reported."""

    text: str


def attempt(call: Callable[[], Any]) -> Any:
    """`call()`, or a `Failure` naming its exception: one failed run must not end the rest."""
    try:
        return call()
    except Exception as exc:
        return Failure(f"{type(exc).__name__}: {exc}")


@dataclasses.dataclass(frozen=True)
class WithCpu:
    """A call's value and the CPU time it took: this process's and its reaped children's."""

    value: Any
    own_cpu: float
    child_cpu: float


def with_cpu(call: Callable[[], Any]) -> WithCpu:
    t0 = os.times()
    value = call()
    t1 = os.times()
    return WithCpu(
        value,
        (t1.user + t1.system) - (t0.user + t0.system),
        (t1.children_user + t1.children_system) - (t0.children_user + t0.children_system),
    )


@dataclasses.dataclass(frozen=True)
class Command:
    """How a whole command ended. `exit` is -1 when it was killed at its time limit."""

    argv: tuple[str, ...]
    exit: int
    wall_s: float
    stdout: str
    stderr: str

    def failure(self) -> str | None:
        """One line for a command that did not exit 0, or None."""
        if self.exit == 0:
            return None
        head = " ".join(self.argv[:4])
        if self.exit == -1:
            return f"{head}... did not finish in time (killed)"
        return f"{head}... exit {self.exit}: {self.stderr.strip()[-300:]}"


def run_command(
    argv: Sequence[str],
    *,
    timeout: float,
    capture_stdout: bool = False,
    while_running: Callable[[subprocess.Popen[bytes]], None] | None = None,
) -> Command:
    """Run a command to its end (killed after `timeout` s); stderr is kept, stdout only when
    asked. `while_running(process)` is called right after the start, e.g. to signal it; the
    command must not write more than a pipe holds meanwhile.

    The end is seen on the pipes (`communicate`), not by polling `wait(timeout)`, whose
    growing sleeps would add up to 50 ms to every short command."""
    start = time.perf_counter()
    process = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE if capture_stdout else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    with process:
        try:
            if while_running is not None:
                while_running(process)
            out, err = process.communicate(timeout=max(0.0, start + timeout - time.perf_counter()))
            code = process.returncode
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
            code = -1
        finally:
            if process.poll() is None:
                process.kill()
    return Command(
        tuple(argv),
        code,
        time.perf_counter() - start,
        (out or b"").decode(errors="replace"),
        (err or b"").decode(errors="replace"),
    )


def scratch_dir(prefix: str) -> Path:
    """A private temporary directory, removed when the benchmark exits."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


class CpuMeter:
    """CPU time that other processes used while a benchmark ran: the noise next to it.

    Busy time of the whole machine (/proc/stat) minus this process's own and its reaped
    children's (the loopback sshd and its SSH workers included, once sshd is reaped)."""

    def __init__(self) -> None:
        self.start = (time.perf_counter(), self._busy(), self._own())

    @staticmethod
    def _busy() -> float | None:
        try:
            fields = Path("/proc/stat").read_text().splitlines()[0].split()
        except OSError:
            return None
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[1:9])
        return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _own() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def report(self) -> dict[str, Any]:
        wall0, busy0, own0 = self.start
        wall, busy, own = time.perf_counter() - wall0, self._busy(), self._own() - own0
        if busy is None or busy0 is None:
            return {"wall_s": wall, "own_cpu_s": own, "other_cpu_s": None}
        other = max(0.0, busy - busy0 - own)
        return {
            "wall_s": wall,
            "own_cpu_s": own,
            "other_cpu_s": other,
            "other_share_of_capacity": other / (wall * (os.cpu_count() or 1)) if wall > 0 else None,
        }


# -- presentation -------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """An aligned table: first column left-aligned, the others right-aligned; columns that
    are empty throughout are left out."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    keep = [i for i in range(len(headers)) if any(row[i] for row in cells)]
    cells = [[row[i] for i in keep] for row in cells]
    widths = [max(len(row[i]) for row in cells) for i in range(len(keep))]

    def line(row: Sequence[str]) -> str:
        parts = [c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(row)]
        return "  " + "  ".join(parts).rstrip()

    print(line(cells[0]))
    print(("  " + "  ".join("-" * w for w in widths)).rstrip())
    for row in cells[1:]:
        print(line(row))


def heading(title: str) -> None:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\n== {title} ==  (load average {load})", flush=True)


def note(text: str) -> None:
    print(f"  note: {text}")


def verdict(met: bool | None) -> str:
    return "n/a" if met is None else ("MET" if met else "NOT MET")


def goal(text: str, met: bool | None) -> None:
    print(f"  goal: {text}: {verdict(met)}", flush=True)


def secs(x: float) -> str:
    return f"{x:.3f} s"


def mega(x: float) -> str:
    return f"{x / 1e6:,.1f}"


def ratio(x: float) -> str:
    return f"{x:.2f}x"


def counts(values: Collection[int]) -> str:
    return ", ".join(f"{v:,}" for v in sorted(values))


# -- the machine --------------------------------------------------------------------------


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _version_of(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git_revision() -> dict[str, Any]:
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(
                ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD"), "dirty": None if status is None else bool(status)}


def machine() -> dict[str, Any]:
    """What the figures were measured on; printed as the first table."""
    from aner_coord import parallel

    inv = parallel.inventory()
    info: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cpu_model": _cpu_model(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "numpy": _version_of("numpy"),
        "numba": _version_of("numba"),
        "llvmlite": _version_of("llvmlite"),
        "aner": _version_of("aner"),
        "git": _git_revision(),
        "loadavg_at_start": list(os.getloadavg()),
        "inventory": inv,
    }
    heading("machine")
    table(
        ("item", "value"),
        [
            ("date (UTC)", info["date"]),
            ("CPU model", info["cpu_model"]),
            ("logical CPUs", inv.get("logical_cpus")),
            ("physical cores", inv.get("physical_cores")),
            ("effective CPUs", inv.get("effective_cpus")),
            ("automatic workers", inv.get("auto_workers")),
            ("cgroup CPU quota", inv.get("cgroup_quota_cpus")),
            ("memory total", f"{(inv.get('memory_total') or 0) / 2**30:.1f} GiB"),
            ("platform", " ".join(str(v) for v in (inv.get("platform") or {}).values())),
            (
                "python / numpy / numba",
                f"{info['python']} / {info['numpy']} / {info['numba']} "
                f"(llvmlite {info['llvmlite']})",
            ),
            (
                "aner",
                f"{info['aner']} @ {(info['git']['commit'] or '?')[:12]}"
                + (" (dirty tree)" if info["git"]["dirty"] else ""),
            ),
        ],
    )
    for text in inv.get("notes") or []:
        note(f"inventory: {text}")
    return info


# -- the command line ---------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmarks of aner, all measured side by side in one run.",
        epilog=f"benchmarks, in the order they run: {', '.join(BENCHMARKS)}",
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help="benchmarks to run (default: all)")
    parser.add_argument(
        "--json",
        metavar="FILE",
        default=DEFAULT_JSON,
        help=f"write every figure to this JSON file (default: {DEFAULT_JSON})",
    )
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--quick", action="store_true", help="small sizes, for a short run")
    sizes.add_argument(
        "--smoke",
        action="store_true",
        help="the smallest sizes, whose figures mean nothing: does every benchmark still run?",
    )
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.list:
        for name in BENCHMARKS:
            print(f"{name:10}  {load(name).title}")
        return 0
    unknown = sorted(set(args.names) - set(BENCHMARKS))
    if unknown:
        parser.error(
            f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}"
        )
    chosen = [name for name in BENCHMARKS if not args.names or name in args.names]
    benchmarks = {name: load(name) for name in chosen}
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    sizes = {name: getattr(b, mode) for name, b in benchmarks.items()}

    started = time.perf_counter()
    results: dict[str, Any] = {
        "schema": SCHEMA,
        "mode": mode,
        "config": {name: dataclasses.asdict(s) for name, s in sizes.items()},
        "machine": machine(),
    }
    output = Path(args.json)

    def save() -> None:
        results["total_seconds"] = time.perf_counter() - started
        output.write_text(json.dumps(results, indent=2) + "\n")

    crashed = []
    for name, benchmark in benchmarks.items():
        heading(f"{BENCHMARKS.index(name) + 1}. {name}: {benchmark.title}")
        meter = CpuMeter()
        try:
            figures = benchmark.run(sizes[name])
        except Exception:
            crashed.append(name)
            text = traceback.format_exc()
            print(text, file=sys.stderr, flush=True)
            figures = {"error": text.strip().splitlines()[-1], "goal_met": False}
        cpu = meter.report()
        figures.update(
            section_seconds=cpu["wall_s"], cpu_noise=cpu, loadavg_after=list(os.getloadavg())
        )
        results[name] = figures
        other = cpu["other_cpu_s"]
        noise = (
            "unknown"
            if other is None
            else f"{other:.1f} core-s, {100 * cpu['other_share_of_capacity']:.0f}% of capacity"
        )
        print(
            f"  ({name}: {cpu['wall_s']:.1f} s; CPU used by other processes meanwhile: {noise})",
            flush=True,
        )
        save()

    heading("summary")
    table(
        ("benchmark", "goal"),
        [
            (name, "CRASHED" if name in crashed else verdict(results[name]["goal_met"]))
            for name in chosen
            if "goal_met" in results[name]
        ],
    )
    print(f"  total {time.perf_counter() - started:.1f} s ({results['mode']} mode)")
    save()
    print(f"  figures written to {output}")
    return 1 if crashed else 0
