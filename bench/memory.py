"""memory: peak RSS of `aner parallel run` at a small sample count (completes) and at a huge
one cancelled with SIGINT after a few seconds (exit 4), both at a small chunk. Goal: the peak
does not grow with the samples requested (ratio <= 1.10, exits 0 and 4)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.calls import run_argv
from bench.runner import Benchmark, goal, note, run_command, scratch_dir, secs, table

SEED = 1
GOAL_RATIO = 1.10

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


@dataclass(frozen=True)
class Sizes:
    small: int
    big: int
    chunk: int
    cancel_after_s: float


def read_status(job: Path) -> dict[str, Any]:
    """The job's status.json as the command wrote it; empty while there is none."""
    try:
        data: dict[str, Any] = json.loads((job / "status.json").read_text())
    except (OSError, ValueError):
        return {}
    return data


def peak_rss(
    argv: list[str], *, job: Path | None = None, cancel_after: float | None = None
) -> dict[str, Any]:
    """Run `argv` under the wrapper; with `cancel_after`, SIGINT it that many seconds after
    its start, once its job is RUNNING and has accepted work. ru_maxrss is in KiB on Linux."""
    at_signal: dict[str, Any] = {}

    def cancel(process: subprocess.Popen[bytes]) -> None:
        assert job is not None and cancel_after is not None
        start = time.perf_counter()
        deadline = start + 60
        while time.perf_counter() < deadline and process.poll() is None:
            status = read_status(job)
            if status.get("state") == "RUNNING" and status.get("accepted"):
                break
            time.sleep(0.05)
        time.sleep(max(0.0, cancel_after - (time.perf_counter() - start)))
        at_signal.update(read_status(job))
        if process.poll() is None:
            process.send_signal(signal.SIGINT)

    done = run_command(
        [sys.executable, "-c", _RSS_WRAPPER, *argv],
        timeout=120,
        capture_stdout=True,
        while_running=None if cancel_after is None else cancel,
    )
    stderr = done.stderr.strip()
    try:
        maxrss_text, code_text = done.stdout.split()
        maxrss, code = int(maxrss_text), int(code_text)
    except ValueError:
        maxrss, code = 0, -1
        stderr = f"(no report from the wrapper, exit {done.exit}) {stderr}"
    final = read_status(job) if job is not None else {}
    return {
        "exit": code,
        "wall_s": done.wall_s,
        "maxrss_kib": maxrss,
        "accepted_at_signal": at_signal.get("accepted"),
        "final_state": final.get("state"),
        "final_accepted": final.get("accepted"),
        "stderr_tail": stderr[-300:],
    }


def run(sizes: Sizes) -> dict[str, Any]:
    tmp = scratch_dir("aner-bench-memory-")
    small, big, chunk, after = sizes.small, sizes.big, sizes.chunk, sizes.cancel_after_s
    floor = peak_rss(["/bin/true"])
    baseline = peak_rss([sys.executable, "-c", "import numba"])
    small_run = peak_rss(run_argv(small, SEED, tmp / "small", chunk=chunk), job=tmp / "small")
    big_run = peak_rss(
        run_argv(big, SEED, tmp / "big", chunk=chunk), job=tmp / "big", cancel_after=after
    )
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
    table(("command", "peak RSS", "exit", "expected", "final state", "accepted", "wall"), rows)
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
    met = growth <= GOAL_RATIO and exits_ok
    goal(f"peak RSS does not grow with samples (ratio <= {GOAL_RATIO:.2f}, exits 0 and 4)", met)
    return {
        "chunk": chunk,
        "cancel_after_s": after,
        "floor_bin_true": floor,
        "import_numba": baseline,
        "small": {"samples": small, **small_run},
        "big": {"samples": big, **big_run},
        "ratio_big_over_small": growth,
        "goal_max_ratio": GOAL_RATIO,
        "goal_met": met,
    }


BENCHMARK = Benchmark(
    title="peak RSS of whole commands",
    full=Sizes(small=10**7, big=10**10, chunk=10_000, cancel_after_s=2.0),
    quick=Sizes(small=10**6, big=10**10, chunk=10_000, cancel_after_s=1.0),
    smoke=Sizes(small=10**5, big=10**10, chunk=10_000, cancel_after_s=0.5),
    run=run,
)
