#!/usr/bin/env python3
"""Benchmarks of `aner parallel`, all measured side by side in one run.

    .venv/bin/python bench/bench.py --json bench-results.json      # what `make bench` runs
    .venv/bin/python bench/bench.py --quick                         # small sizes, smoke run
    .venv/bin/python bench/bench.py --sections kernel,scaling       # a subset

Sections: kernel, scaling, startup, memory, cluster, fixture (see bench/README.md). Each prints
a table and whether its goal was met; nothing here fails. Ratios always come from
measurements of the same run, taken interleaved (A, B, A, B, ...) and compared by their
medians, because the machine may be shared and noisy.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import dataclasses
import datetime
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# The console script next to this interpreter (a venv's bin/ is not resolved through links).
ANER = str(Path(sys.executable).parent / "aner")

SECTIONS = ("kernel", "scaling", "startup", "memory", "cluster", "fixture")

# Independent numpy oracle (aner_worker.oracle.oracle_hits), seed 42, 10**9 samples.
ORACLE_HITS_42_1E9 = 785_386_550

FULL: dict[str, Any] = {
    "kernel_samples": 5 * 10**7,
    "kernel_reps": 3,
    "scaling_samples": 10**9,
    "scaling_reps": 3,
    "startup_reps": 5,
    "memory_small": 10**7,
    "memory_big": 10**10,
    "memory_chunk": 10_000,
    "memory_cancel_after_s": 2.0,
    "cluster_samples": 10**9,
    "cluster_chunks": (65_536, 10**6),
    "cluster_reps": 3,
    "fixture_sizes": (262_147, 10_000_000),
    "fixture_steps": 16,
    # (rounds, numpy rounds) per size: numpy at 10**7 rows takes ~40 s, so it runs once, in
    # the middle round, bracketed by the kernel runs.
    "fixture_reps": ((3, 3), (3, 1)),
}

QUICK: dict[str, Any] = {
    "kernel_samples": 5 * 10**6,
    "kernel_reps": 2,
    "scaling_samples": 5 * 10**7,
    "scaling_reps": 2,
    "startup_reps": 2,
    "memory_small": 10**6,
    "memory_big": 10**10,
    "memory_chunk": 10_000,
    "memory_cancel_after_s": 1.0,
    "cluster_samples": 5 * 10**7,
    "cluster_chunks": (65_536, 10**6),
    "cluster_reps": 1,
    "fixture_sizes": (65_537, 1_000_000),
    "fixture_steps": 4,
    "fixture_reps": ((1, 1), (1, 1)),
}


# -- presentation -------------------------------------------------------------------------


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """An aligned table: first column left-aligned, the others right-aligned."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    keep = [i for i in range(len(headers)) if any(row[i] for row in cells)]
    cells = [[row[i] for i in keep] for row in cells]
    headers = cells[0]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        parts = [
            cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)
        ]
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


def goal(text: str, met: bool | None) -> None:
    verdict = "n/a" if met is None else ("MET" if met else "NOT MET")
    print(f"  goal: {text}: {verdict}", flush=True)


def secs(x: float) -> str:
    return f"{x:.3f} s"


def mega(x: float) -> str:
    return f"{x / 1e6:,.1f}"


def ratio(x: float) -> str:
    return f"{x:.2f}x"


# -- measurement helpers ------------------------------------------------------------------


def interleave(
    cases: dict[str, Callable[[], Any]],
    reps: int,
    rounds: dict[str, set[int]] | None = None,
) -> dict[str, list[tuple[float, Any]]]:
    """Run every case once per round, `reps` rounds (A, B, A, B, ...): (wall s, value) lists.

    `rounds` limits a costly case to some rounds (0-based), e.g. the middle one, so that it is
    still bracketed by the cases it is compared with."""
    runs: dict[str, list[tuple[float, Any]]] = {name: [] for name in cases}
    for index in range(reps):
        for name, fn in cases.items():
            if rounds is not None and name in rounds and index not in rounds[name]:
                continue
            start = time.perf_counter()
            value = fn()
            runs[name].append((time.perf_counter() - start, value))
    return runs


@dataclasses.dataclass(frozen=True)
class Measured:
    """A call's value and the CPU time it took: this process's and its reaped children's."""

    value: Any
    own_cpu: float
    child_cpu: float


def with_cpu(fn: Callable[[], Any]) -> Measured:
    t0 = os.times()
    value = fn()
    t1 = os.times()
    return Measured(
        value,
        (t1.user + t1.system) - (t0.user + t0.system),
        (t1.children_user + t1.children_system) - (t0.children_user + t0.children_system),
    )


@dataclasses.dataclass(frozen=True)
class Failure:
    """A measured call that raised; kept out of medians and reported."""

    text: str


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def walls(runs: Sequence[tuple[float, Any]]) -> list[float]:
    return [w for w, _ in runs]


def scratch_dir(prefix: str) -> Path:
    """A private temporary directory, removed when the benchmark exits."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


@contextlib.contextmanager
def environment(**changes: str | None) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in changes}
    try:
        for key, value in changes.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class CpuMeter:
    """CPU time that other processes used while a section ran: the noise next to it.

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
        cpus = os.cpu_count() or 1
        if busy is None or busy0 is None:
            return {"wall_s": wall, "own_cpu_s": own, "other_cpu_s": None}
        other = max(0.0, busy - busy0 - own)
        return {
            "wall_s": wall,
            "own_cpu_s": own,
            "other_cpu_s": other,
            "other_share_of_capacity": other / (wall * cpus) if wall > 0 else None,
        }


# -- machine ------------------------------------------------------------------------------


def cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def version_of(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def git_revision() -> dict[str, Any]:
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


def machine_info() -> dict[str, Any]:
    from aner_coord import parallel

    inv = parallel.inventory()
    info = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cpu_model": cpu_model(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "numpy": version_of("numpy"),
        "numba": version_of("numba"),
        "llvmlite": version_of("llvmlite"),
        "aner": version_of("aner"),
        "git": git_revision(),
        "loadavg_at_start": list(os.getloadavg()),
        "inventory": inv,
    }
    heading("machine")
    rows = [
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
            f"{info['python']} / {info['numpy']} / {info['numba']} (llvmlite {info['llvmlite']})",
        ),
        (
            "aner",
            f"{info['aner']} @ {(info['git']['commit'] or '?')[:12]}"
            + (" (dirty tree)" if info["git"]["dirty"] else ""),
        ),
    ]
    print_table(("item", "value"), rows)
    for text in inv.get("notes") or []:
        note(f"inventory: {text}")
    return info


# -- 1. kernel ----------------------------------------------------------------------------


def bench_kernel(cfg: dict[str, Any]) -> dict[str, Any]:
    from aner_worker.oracle import oracle_hits
    from aner_worker.philox import count_hits, warm_up

    heading("1. kernel: Monte Carlo kernel vs numpy oracle, one thread")
    n, seed, reps = cfg["kernel_samples"], 42, cfg["kernel_reps"]
    warm_up()
    oracle_hits(seed, 0, 1000)
    runs = interleave(
        {
            "numba kernel (count_hits)": lambda: count_hits(seed, 0, n),
            "numpy oracle (oracle_hits)": lambda: oracle_hits(seed, 0, n),
        },
        reps,
    )
    out: dict[str, Any] = {"samples": n, "seed": seed, "reps": reps, "runs": {}}
    rows = []
    for name, rs in runs.items():
        med = median(walls(rs))
        hits = {v for _, v in rs}
        out["runs"][name] = {
            "seconds": walls(rs),
            "median_s": med,
            "samples_per_s": n / med,
            "hits": sorted(hits),
        }
        rows.append(
            (
                name,
                f"{n:,}",
                secs(med),
                secs(min(walls(rs))),
                mega(n / med),
                ", ".join(f"{h:,}" for h in sorted(hits)),
            )
        )
    print_table(("implementation", "samples", "median", "best", "M samples/s", "hits"), rows)
    k, o = (out["runs"][name]["median_s"] for name in runs)
    speedup = o / k
    agree = (
        out["runs"]["numba kernel (count_hits)"]["hits"]
        == out["runs"]["numpy oracle (oracle_hits)"]["hits"]
    )
    out.update(
        ratio_kernel_over_oracle=speedup,
        hits_agree=agree,
        goal_min_ratio=2.0,
        goal_met=speedup >= 2.0,
    )
    print(f"  kernel / oracle throughput: {ratio(speedup)}; hits agree: {agree}")
    goal("kernel >= 2x the numpy oracle per core", speedup >= 2.0)
    return out


# -- 2. scaling ---------------------------------------------------------------------------


def bench_scaling(cfg: dict[str, Any]) -> dict[str, Any]:
    from aner_coord import parallel

    heading("2. scaling: local threads, 1 worker vs all cores")
    n, seed, reps = cfg["scaling_samples"], 42, cfg["scaling_reps"]
    auto = parallel.local()
    n_all = auto.workers
    parallel.monte_carlo(samples=10**6, seed=1, execution=parallel.local(workers=1))
    parallel.monte_carlo(samples=10**6, seed=1, execution=auto)
    cases = {
        "local(workers=1)": lambda: parallel.monte_carlo(
            samples=n, seed=seed, execution=parallel.local(workers=1)
        ),
        f"local() automatic, {n_all} workers": lambda: parallel.monte_carlo(
            samples=n, seed=seed, execution=parallel.local()
        ),
    }
    runs = interleave(cases, reps)
    out: dict[str, Any] = {
        "samples": n,
        "seed": seed,
        "reps": reps,
        "workers_all": n_all,
        "runs": {},
    }
    base = median(walls(runs["local(workers=1)"]))
    rows = []
    all_hits: set[int] = set()
    for (name, rs), workers in zip(runs.items(), (1, n_all), strict=True):
        med = median(walls(rs))
        job = median([r.seconds() for _, r in rs])
        hits = {r.hits() for _, r in rs}
        all_hits |= hits
        speedup = base / med
        out["runs"][name] = {
            "workers": workers,
            "seconds": walls(rs),
            "median_s": med,
            "job_seconds_median": job,
            "samples_per_s": n / med,
            "speedup": speedup,
            "efficiency": speedup / workers,
            "hits": sorted(hits),
        }
        rows.append(
            (
                name,
                workers,
                secs(med),
                secs(job),
                mega(n / med),
                ratio(speedup),
                f"{speedup / workers:.3f}",
                ", ".join(f"{h:,}" for h in sorted(hits)),
            )
        )
    print_table(
        (
            "execution",
            "workers",
            "median wall",
            "job s",
            "M samples/s",
            "speedup",
            "efficiency",
            "hits",
        ),
        rows,
    )
    efficiency = out["runs"][f"local() automatic, {n_all} workers"]["efficiency"]
    identical = len(all_hits) == 1
    out.update(
        hits_identical=identical,
        efficiency=efficiency,
        goal_min_efficiency=0.9,
        goal_met=efficiency >= 0.9 if n_all > 1 else None,
    )
    print(
        f"  hits identical across all runs: {identical} ({', '.join(f'{h:,}' for h in all_hits)})"
    )
    if n == 10**9 and seed == 42:
        ref = ORACLE_HITS_42_1E9
        out["oracle_reference_hits"] = ref
        note(
            f"the numpy oracle gives {ref:,} hits for seed 42 at 10**9 (computed once, not "
            f"in this run); measured {'matches' if all_hits == {ref} else 'DIFFERS'}"
        )
    note(
        "'job s' is the coordinator's own elapsed (result.seconds()); speedup and "
        "efficiency use the median wall time around the API call"
    )
    goal(f"efficiency >= 0.9 with {n_all} workers", out["goal_met"])
    return out


# -- 3. startup ---------------------------------------------------------------------------


def bench_startup(cfg: dict[str, Any]) -> dict[str, Any]:
    heading("3. startup: whole-command wall time of a tiny run")
    reps = cfg["startup_reps"]
    tmp = scratch_dir("aner-bench-startup-")
    counter = iter(range(10**6))
    failures: list[str] = []

    def command(argv_fn: Callable[[], list[str]]) -> Callable[[], int]:
        def run() -> int:
            argv = argv_fn()
            try:
                proc = subprocess.run(
                    argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=60
                )
            except subprocess.TimeoutExpired:
                failures.append(f"{' '.join(argv[:4])}... did not finish in 60 s (killed)")
                return -1
            if proc.returncode != 0:
                failures.append(
                    f"{' '.join(argv[:4])}... exit {proc.returncode}: {proc.stderr.strip()[-300:]}"
                )
            return proc.returncode

        return run

    py = sys.executable
    cases = {
        "python -c pass": command(lambda: [py, "-c", "pass"]),
        "python -c 'import numba'": command(lambda: [py, "-c", "import numba"]),
        "python: import + load MC kernel cache": command(
            lambda: [py, "-c", "from aner_worker.philox import warm_up; warm_up()"]
        ),
        "aner parallel inventory --json": command(
            lambda: [ANER, "parallel", "inventory", "--json"]
        ),
        "aner parallel run --samples 1000": command(
            lambda: [
                ANER,
                "parallel",
                "run",
                "--samples",
                "1000",
                "--seed",
                "1",
                "--output",
                str(tmp / f"job-{next(counter)}"),
                "--quiet",
            ]
        ),
    }
    interleave(cases, 1)  # warm the page cache and numba's on-disk cache; not recorded
    runs = interleave(cases, reps)
    # Medians over the runs that exited 0; a failed or hung run is reported, not averaged in.
    ok = {name: [w for w, rc in rs if rc == 0] or walls(rs) for name, rs in runs.items()}
    med = {name: median(ok[name]) for name in runs}
    rows = [
        (
            name,
            secs(med[name]),
            secs(min(ok[name])),
            secs(max(ok[name])),
            f"{sum(rc == 0 for _, rc in rs)}/{len(rs)}",
        )
        for name, rs in runs.items()
    ]
    print_table(("command (same interpreter)", "median", "best", "worst", "exit 0"), rows)
    run_cost = med["aner parallel run --samples 1000"] - med["python -c 'import numba'"]
    inv_cost = med["aner parallel inventory --json"] - med["python -c pass"]
    kernel_cost = med["python: import + load MC kernel cache"] - med["python -c 'import numba'"]
    print(f"  tiny run beyond `import numba`:        {secs(run_cost)}")
    print(f"  (of which loading aner's kernel cache: {secs(kernel_cost)})")
    print(f"  inventory beyond a bare interpreter:   {secs(inv_cost)}")
    for failure in failures:
        note(f"FAILED: {failure}")
    note(
        "the tiny run includes imports, job directory creation (manifest, status, result "
        "files with fsync) and the coordinator's event loop, beyond numba itself"
    )
    return {
        "reps": reps,
        "runs": {
            name: {"seconds": walls(rs), "exit": [rc for _, rc in rs], "median_s": med[name]}
            for name, rs in runs.items()
        },
        "run_beyond_import_numba_s": run_cost,
        "kernel_cache_load_beyond_import_numba_s": kernel_cost,
        "inventory_beyond_bare_python_s": inv_cost,
        "failures": failures,
    }


# -- 4. memory ----------------------------------------------------------------------------


def read_status(job: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads((job / "status.json").read_text())
        return data
    except (OSError, ValueError):
        return None


# Measures a command's peak RSS from a small parent. ru_maxrss of a child that was forked
# (or vforked) straight from this big process and then exec'ed also counts the pre-exec
# address space, i.e. this benchmark's own peak; forked from this ~10 MiB interpreter, the
# floor is that of a bare Python. It forwards SIGINT and prints "maxrss_kib exit".
_RSS_WRAPPER = """
import os, signal, sys
pid = os.fork()
if pid == 0:
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        os.execv(sys.argv[1], sys.argv[1:])
    finally:
        os._exit(127)
signal.signal(signal.SIGINT, lambda *_: os.kill(pid, signal.SIGINT))
_, status, usage = os.wait4(pid, 0)
print(usage.ru_maxrss, os.waitstatus_to_exitcode(status), flush=True)
"""


def peak_rss(
    argv: list[str], *, job: Path | None = None, cancel_after: float | None = None
) -> dict[str, Any]:
    """Run `argv`, optionally SIGINT it `cancel_after` s after start once it is RUNNING; the
    peak RSS is wait4's ru_maxrss (KiB on Linux), taken by a small wrapper process."""
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-c", _RSS_WRAPPER, *argv],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
        at_signal: dict[str, Any] | None = None
        if cancel_after is not None:
            assert job is not None
            deadline = start + 60
            while time.perf_counter() < deadline and proc.poll() is None:
                status = read_status(job)
                if status and status.get("state") == "RUNNING" and status.get("accepted"):
                    break
                time.sleep(0.05)
            time.sleep(max(0.0, cancel_after - (time.perf_counter() - start)))
            at_signal = read_status(job)
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        try:
            report, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            report, _ = proc.communicate()
        wall = time.perf_counter() - start
        err.seek(0)
        stderr = err.read().decode(errors="replace").strip()
    try:
        maxrss_text, code_text = report.split()
        maxrss, code = int(maxrss_text), int(code_text)
    except ValueError:
        maxrss, code = 0, -1
        stderr = f"(no report from the wrapper, exit {proc.returncode}) {stderr}"
    final = read_status(job) if job is not None else None
    return {
        "exit": code,
        "wall_s": wall,
        "maxrss_kib": maxrss,
        "accepted_at_signal": (at_signal or {}).get("accepted"),
        "final_state": (final or {}).get("state"),
        "final_accepted": (final or {}).get("accepted"),
        "stderr_tail": stderr[-300:],
    }


def bench_memory(cfg: dict[str, Any]) -> dict[str, Any]:
    heading("4. memory: peak RSS of whole commands")
    tmp = scratch_dir("aner-bench-memory-")
    small, big, chunk = cfg["memory_small"], cfg["memory_big"], cfg["memory_chunk"]
    after = cfg["memory_cancel_after_s"]

    def run_argv(samples: int, job: Path) -> list[str]:
        return [
            ANER,
            "parallel",
            "run",
            "--samples",
            str(samples),
            "--seed",
            "1",
            "--chunk",
            str(chunk),
            "--output",
            str(job),
            "--quiet",
        ]

    floor = peak_rss(["/bin/true"])
    baseline = peak_rss([sys.executable, "-c", "import numba"])
    small_run = peak_rss(run_argv(small, tmp / "small"), job=tmp / "small")
    big_run = peak_rss(run_argv(big, tmp / "big"), job=tmp / "big", cancel_after=after)
    rows = []
    for label, r, expect in (
        ("/bin/true (measurement floor)", floor, 0),
        ("python -c 'import numba' (reference)", baseline, 0),
        (f"run {small:,} samples (completes)", small_run, 0),
        (f"run {big:,} samples, SIGINT after {after:g} s", big_run, 4),
    ):
        accepted = r["final_accepted"]
        rows.append(
            (
                label,
                f"{r['maxrss_kib'] / 1024:,.1f} MiB",
                r["exit"],
                expect,
                r["final_state"] or "-",
                "-" if accepted is None else f"{accepted:,}",
                secs(r["wall_s"]),
            )
        )
    print_table(
        ("command", "peak RSS", "exit", "expected", "final state", "accepted", "wall"), rows
    )
    growth = big_run["maxrss_kib"] / max(1, small_run["maxrss_kib"])
    print(f"  peak RSS {big:,} (cancelled) / {small:,} (completed): {growth:.3f}")
    print(
        f"  chunk {chunk:,} for both: {-(-small // chunk):,} and {-(-big // chunk):,} "
        "chunks planned"
    )
    exits_ok = small_run["exit"] == 0 and big_run["exit"] == 4
    if not exits_ok:
        note("an exit status differs from the expected one")
        for label, r in (("small", small_run), ("big", big_run)):
            note(f"{label} run stderr: {r['stderr_tail'] or '(empty)'}")
    note(
        "peak RSS is wait4's ru_maxrss of the command, forked from a bare Python wrapper "
        "(whose own size is the floor); the cancelled run had accepted "
        f"{big_run['accepted_at_signal'] or 0:,} samples when SIGINT was sent"
    )
    met = growth <= 1.10 and exits_ok
    goal("peak RSS does not grow with samples (ratio <= 1.10, exits 0 and 4)", met)
    return {
        "chunk": chunk,
        "cancel_after_s": after,
        "floor_bin_true": floor,
        "import_numba": baseline,
        "small": {"samples": small, **small_run},
        "big": {"samples": big, **big_run},
        "ratio_big_over_small": growth,
        "goal_max_ratio": 1.10,
        "goal_met": met,
    }


# -- 5. cluster ---------------------------------------------------------------------------


def write_cluster(path: Path, records: list[tuple[str, str, str, int]]) -> Path:
    lines = ["ANER_CLUSTER 1", "# written by bench/bench.py"]
    for identity, transport, endpoint, slots in records:
        lines.append(f'worker "{identity}" {transport} "{endpoint}" "{ANER}" {slots}')
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)
    return path


def bench_cluster(cfg: dict[str, Any]) -> dict[str, Any]:
    from aner_coord import parallel
    from aner_worker.contract import source_fingerprint

    heading("5. cluster: local threads vs worker groups (pipes, SSH on loopback)")
    # The coordinator caches its source fingerprint; take it afresh from the tree as it is
    # now, so that an edit made earlier in a long run is not mistaken for a mismatch.
    source_fingerprint.cache_clear()
    n, seed, reps = cfg["cluster_samples"], 42, cfg["cluster_reps"]
    chunks = cfg["cluster_chunks"]
    n_all = parallel.local().workers
    tmp = scratch_dir("aner-bench-cluster-")
    tmp.chmod(0o700)
    groups: dict[str, tuple[Path, dict[str, str | None]]] = {
        f"pipes {n_all} x 1 slot": (
            write_cluster(
                tmp / "pipes-nx1", [(f"pipe-{i + 1}", "local", "-", 1) for i in range(n_all)]
            ),
            {},
        ),
        f"pipes 1 x {n_all} slots": (
            write_cluster(tmp / "pipes-1xn", [("pipe-1", "local", "-", n_all)]),
            {},
        ),
    }
    server = None
    ssh_note = None
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        try:
            from sshd_support import start_sshd

            (tmp / "sshd").mkdir(mode=0o700)
            server = start_sshd(tmp / "sshd")
            groups[f"ssh 1 x {n_all} slots"] = (
                write_cluster(tmp / "ssh-1xn", [("peer-1", "ssh", server.alias, n_all)]),
                {"HOME": str(server.home), "SSH_AUTH_SOCK": None},
            )
        except Exception as exc:  # report and go on without SSH
            ssh_note = f"SSH group skipped: {type(exc).__name__}: {str(exc)[:300]}"

        def local_case(chunk: int, samples: int) -> Callable[[], Any]:
            return lambda: with_cpu(
                lambda: parallel.monte_carlo(
                    samples=samples, seed=seed, execution=parallel.local(workers=n_all, chunk=chunk)
                )
            )

        def group_case(
            path: Path, env: dict[str, str | None], chunk: int, samples: int
        ) -> Callable[[], Any]:
            def run() -> Any:
                try:
                    with environment(**env):
                        return with_cpu(
                            lambda: parallel.monte_carlo(
                                samples=samples,
                                seed=seed,
                                execution=parallel.cluster(path, chunk=chunk),
                            )
                        )
                except Exception as exc:  # a failed job is reported, not fatal
                    return Failure(f"{type(exc).__name__}: {exc}")

            return run

        local_name = f"local threads, {n_all} workers"
        tiny = 4 * 65_536  # fixed cost: start, handshake, shutdown, ~1 ms of work
        cases: dict[str, Callable[[], Any]] = {}
        for chunk in chunks:
            cases[f"{local_name}|{chunk}"] = local_case(chunk, n)
            for name, (path, env) in groups.items():
                cases[f"{name}|{chunk}"] = group_case(path, env, chunk, n)
        cases[f"{local_name}|tiny"] = local_case(65_536, tiny)
        for name, (path, env) in groups.items():
            cases[f"{name}|tiny"] = group_case(path, env, 65_536, tiny)
        # Warm-up round (first worker start-ups, the coordinator's imports): not recorded.
        interleave({k: v for k, v in cases.items() if k.endswith("|tiny")}, 1)
        runs = interleave(cases, reps)
    finally:
        if server is not None:
            server.stop()
        sys.path.remove(str(ROOT / "tests"))

    failures = sorted(
        {
            f"{name.replace('|', ', chunk ')}: {r.text[:400]}"
            for name, rs in runs.items()
            for _, r in rs
            if isinstance(r, Failure)
        }
    )
    good = {
        name: [(w, r) for w, r in rs if not isinstance(r, Failure)] for name, rs in runs.items()
    }
    nan = float("nan")
    fixed = {
        name.split("|")[0]: median(walls(rs)) if rs else nan
        for name, rs in good.items()
        if name.endswith("|tiny")
    }
    out: dict[str, Any] = {
        "samples": n,
        "seed": seed,
        "reps": reps,
        "slots_total": n_all,
        "fixed_cost_job": {"samples": tiny, "chunk": 65_536, "median_wall_s": fixed},
        "runs": {},
        "ssh_note": ssh_note,
        "failures": failures,
    }
    rows = []
    all_hits: set[int] = set()
    for chunk in chunks:
        local_med = median(walls(good[f"{local_name}|{chunk}"]))
        local_adj = local_med - fixed[local_name]
        for name in [local_name, *groups]:
            rs = good[f"{name}|{chunk}"]
            if not rs:
                out["runs"][f"{name}, chunk {chunk}"] = {"chunk": chunk, "failed": True}
                rows.append((name, f"{chunk:,}", "failed", "-", "-", "-", "-", "-", "-", "-", ""))
                continue
            med = median(walls(rs))
            job = median([m.value.seconds() for _, m in rs])
            hits = {m.value.hits() for _, m in rs}
            own_cpu = median([m.own_cpu for _, m in rs])
            child_cpu = median([m.child_cpu for _, m in rs])
            all_hits |= hits
            adj = med - fixed[name]
            # With noise larger than the signal a difference can come out <= 0: no ratio then.
            adj_ratio = adj / local_adj if adj > 0 and local_adj > 0 else None
            fails = len(runs[f"{name}|{chunk}"]) - len(rs)
            entry = {
                "chunk": chunk,
                "seconds": walls(rs),
                "median_s": med,
                "job_seconds_median": job,
                "samples_per_s": n / med,
                "fixed_cost_s": fixed[name],
                "median_minus_fixed_s": adj,
                "ratio_vs_local": med / local_med,
                "ratio_vs_local_excluding_fixed": adj_ratio,
                "hits": sorted(hits),
                "this_process_cpu_s": own_cpu,
                "reaped_children_cpu_s": child_cpu,
                "runs_ok": f"{len(rs)}/{len(runs[f'{name}|{chunk}'])}",
            }
            out["runs"][f"{name}, chunk {chunk}"] = entry
            rows.append(
                (
                    name,
                    f"{chunk:,}",
                    secs(med),
                    secs(job),
                    mega(n / med),
                    secs(fixed[name]),
                    ratio(med / local_med),
                    "n/a (noise)" if adj_ratio is None else ratio(adj_ratio),
                    f"{own_cpu:.2f} s",
                    f"{child_cpu:.2f} s",
                    f"{fails} failed" if fails else "",
                )
            )
    print(
        f"  {n:,} samples, seed {seed}, {reps} interleaved round(s); same total slots "
        f"({n_all}) everywhere"
    )
    print_table(
        (
            "execution",
            "chunk",
            "median wall",
            "job s",
            "M samples/s",
            "fixed cost",
            "vs local",
            "vs local - fixed",
            "CPU here",
            "CPU children",
            "",
        ),
        rows,
    )
    identical = len(all_hits) == 1
    out["hits_identical"] = identical
    print(
        f"  hits identical across all runs: {identical} "
        f"({', '.join(f'{h:,}' for h in sorted(all_hits))})"
    )
    note(
        f"'fixed cost' is the median wall time of a {tiny:,}-sample job on the same "
        "execution: worker process start (Python, numba import, kernel cache load), "
        "handshake and shutdown; local threads pay almost none of it"
    )
    note(
        "'CPU here' is this process's CPU time per run (the coordinator; for local threads "
        "also the kernels), 'CPU children' that of the pipe workers it started and reaped; "
        "SSH workers run under the sshd this benchmark started and are only accounted when "
        "it stops, so not per run (on loopback they share the same cores)"
    )
    note(
        "'job s' (result.seconds()) starts when the coordinator starts, so for a group it "
        "also includes the worker start-up; 'vs local - fixed' subtracts each execution's "
        "fixed cost from its wall time and compares the remainder"
    )
    if ssh_note:
        note(ssh_note)
    for failure in failures:
        note(f"FAILED: {failure}")
    default = chunks[0]
    verdicts = {}
    for name in groups:
        entry = out["runs"][f"{name}, chunk {default}"]
        if entry.get("failed"):
            verdicts[name] = {"raw": False, "excluding_fixed": None}
            continue
        verdicts[name] = {
            "raw": entry["ratio_vs_local"] <= 1.10,
            "excluding_fixed": None
            if entry["ratio_vs_local_excluding_fixed"] is None
            else entry["ratio_vs_local_excluding_fixed"] <= 1.10,
        }
    out["goal_met_by_group"] = verdicts
    out["goal_met"] = any(v["raw"] for v in verdicts.values())
    for name, v in verdicts.items():
        print(
            f"  {name} at chunk {default:,}: within 10% of local threads: "
            f"{'yes' if v['raw'] else 'no'} (wall, start-up included), "
            f"{ {True: 'yes', False: 'no', None: 'n/a'}[v['excluding_fixed']] } "
            "(start-up excluded)"
        )
    goal(
        f"a group within 10% of local threads at the default chunk {default:,} "
        "(wall time, start-up included)",
        out["goal_met"],
    )
    return out


# -- 6. fixture ---------------------------------------------------------------------------


def numpy_fixture(seed: int, rows: int, steps: int, rate: float) -> dict[str, Any]:
    """The whole fixture run (steps + 2 passes) in one process with vectorised numpy."""
    import numpy as np

    from aner_worker.oracle import numpy_fixture_pass

    theta = np.zeros(9)
    _, loss, correct, valid = numpy_fixture_pass(seed, 0, rows, theta)
    initial_loss, initial_accuracy = loss / valid, correct / valid
    for _ in range(steps):
        grad, _, _, valid = numpy_fixture_pass(seed, 0, rows, theta)
        assert valid == rows
        theta = theta - rate * grad / valid
    _, loss, correct, valid = numpy_fixture_pass(seed, 0, rows, theta)
    return {
        "theta": [float(t) for t in theta],
        "initial_loss": initial_loss,
        "initial_accuracy": initial_accuracy,
        "final_loss": loss / valid,
        "fit_accuracy": correct / valid,
    }


def bench_fixture(cfg: dict[str, Any]) -> dict[str, Any]:
    from aner_coord import parallel
    from aner_worker.fixture import warm_up

    heading("6. fixture: logistic-regression passes, kernel path vs numpy")
    seed, rate, steps = 3, 0.5, cfg["fixture_steps"]
    passes = steps + 2
    n_all = parallel.local().workers
    warm_up()
    parallel.regression(
        samples=10_000, steps=1, rate=rate, seed=seed, execution=parallel.local(workers=1)
    )
    parallel.regression(samples=10_000, steps=1, rate=rate, seed=seed, execution=parallel.local())
    numpy_fixture(seed, 1000, 1, rate)
    out: dict[str, Any] = {
        "seed": seed,
        "rate": rate,
        "steps": steps,
        "passes": passes,
        "sizes": {},
    }
    kernel1, kernel_n, numpy_name = (
        "kernel, local(workers=1)",
        f"kernel, local() {n_all} workers",
        "numpy, 1 process",
    )
    for rows_n, (reps, numpy_reps) in zip(cfg["fixture_sizes"], cfg["fixture_reps"], strict=True):
        first = (reps - numpy_reps) // 2
        numpy_rounds = set(range(first, first + numpy_reps))

        def kernel(execution: Any, rows: int = rows_n) -> dict[str, Any]:
            r = parallel.regression(
                samples=rows, steps=steps, rate=rate, seed=seed, execution=execution
            )
            return {
                "theta": list(r.theta),
                "initial_loss": r.initial_loss,
                "initial_accuracy": r.initial_accuracy,
                "final_loss": r.final_loss,
                "fit_accuracy": r.fit_accuracy,
                "job_seconds": r.seconds,
            }

        runs = interleave(
            {
                kernel1: lambda: kernel(parallel.local(workers=1)),
                kernel_n: lambda: kernel(parallel.local()),
                numpy_name: lambda rows=rows_n: numpy_fixture(seed, rows, steps, rate),
            },
            reps,
            rounds={numpy_name: numpy_rounds},
        )
        med = {name: median(walls(rs)) for name, rs in runs.items()}
        work = rows_n * passes
        size: dict[str, Any] = {
            "rows": rows_n,
            "reps": reps,
            "numpy_reps": numpy_reps,
            "row_passes": work,
            "runs": {},
        }
        table = []
        for name, rs in runs.items():
            size["runs"][name] = {
                "seconds": walls(rs),
                "median_s": med[name],
                "row_passes_per_s": work / med[name],
                "vs_numpy": med[numpy_name] / med[name],
                "result": rs[-1][1],
            }
            table.append(
                (
                    name,
                    f"{rows_n:,}",
                    passes,
                    secs(med[name]),
                    mega(work / med[name]),
                    ratio(med[numpy_name] / med[name]),
                    len(rs),
                )
            )
        print(
            f"  {rows_n:,} rows x {steps} steps ({passes} passes), rate {rate}, seed {seed}, "
            f"{reps} interleaved round(s), numpy in {numpy_reps} of them"
        )
        print_table(
            ("implementation", "rows", "passes", "median", "M row-passes/s", "vs numpy", "runs"),
            table,
        )

        def max_diff(runs: dict[str, Any], a: str, b: str, key: str) -> float:
            ra, rb = runs[a][-1][1], runs[b][-1][1]
            if key == "theta":
                return max(abs(x - y) for x, y in zip(ra["theta"], rb["theta"], strict=True))
            return float(abs(ra[key] - rb[key]))

        diffs = {
            f"{x} vs {y}": {
                k: max_diff(runs, x, y, k)
                for k in ("theta", "initial_loss", "final_loss", "fit_accuracy")
            }
            for x, y in ((kernel1, numpy_name), (kernel_n, numpy_name), (kernel1, kernel_n))
        }
        size["max_abs_differences"] = diffs
        numpy_ok = all(diffs[f"{k} vs {numpy_name}"]["theta"] <= 1e-9 for k in (kernel1, kernel_n))
        size["theta_agrees_with_numpy_1e-9"] = numpy_ok
        print_table(
            ("max |difference|", "theta", "initial loss", "final loss", "fit accuracy"),
            [(pair, *(f"{d[k]:.2e}" for k in d)) for pair, d in diffs.items()],
        )
        print(
            f"  theta agrees with numpy within 1e-9: {numpy_ok}; final theta (kernel): "
            + ", ".join(f"{t:.6f}" for t in runs[kernel_n][-1][1]["theta"])
        )
        out["sizes"][str(rows_n)] = size
    largest = out["sizes"][str(cfg["fixture_sizes"][-1])]
    speed = largest["runs"][kernel_n]["vs_numpy"]
    out.update(
        largest_rows=largest["rows"],
        parallel_vs_numpy_at_largest=speed,
        goal_min_ratio=1.5,
        goal_met=speed >= 1.5,
    )
    note(
        "numpy runs the same steps + 2 passes with oracle.numpy_fixture_pass (pieces of "
        "131,072 rows); its matrix-vector product may use BLAS threads, the rest is one "
        "thread"
    )
    goal(f"parallel kernel path >= 1.5x numpy at {largest['rows']:,} rows", speed >= 1.5)
    return out


# -- main ---------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", metavar="FILE", help="write every figure to this JSON file")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help=f"comma-separated subset of {','.join(SECTIONS)}",
    )
    args = parser.parse_args(argv)
    chosen = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SECTIONS]
    if unknown or not chosen:
        parser.error(
            f"unknown section(s) {', '.join(unknown) or '(none)'}; "
            f"choose from {', '.join(SECTIONS)}"
        )
    cfg = QUICK if args.quick else FULL
    started = time.perf_counter()
    results: dict[str, Any] = {
        "schema": "aner-bench/v1",
        "mode": "quick" if args.quick else "full",
        "config": cfg,
        "machine": machine_info(),
    }
    functions = {
        "kernel": bench_kernel,
        "scaling": bench_scaling,
        "startup": bench_startup,
        "memory": bench_memory,
        "cluster": bench_cluster,
        "fixture": bench_fixture,
    }

    def save() -> None:
        if args.json:
            results["total_seconds"] = time.perf_counter() - started
            Path(args.json).write_text(json.dumps(results, indent=2) + "\n")

    for name in SECTIONS:
        if name not in chosen:
            continue
        meter = CpuMeter()
        results[name] = functions[name](cfg)
        cpu = meter.report()
        results[name]["section_seconds"] = cpu["wall_s"]
        results[name]["cpu_noise"] = cpu
        results[name]["loadavg_after"] = list(os.getloadavg())
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
    rows = []
    for name in SECTIONS:
        if name in results and "goal_met" in results[name]:
            met = results[name]["goal_met"]
            rows.append((name, "n/a" if met is None else ("MET" if met else "NOT MET")))
    print_table(("section", "goal"), rows)
    total = time.perf_counter() - started
    print(f"  total {total:.1f} s ({results['mode']} mode)")
    save()
    if args.json:
        print(f"  figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
