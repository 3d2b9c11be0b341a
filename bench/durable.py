"""durable: what durability costs (docs/contracts.md, section 11).

- The job files (the ledger, synced before each status, and `status.json`) against no job
  directory at all, on the same 10**9-sample run: an upper bound on the ledger's cost.
  Goal: at most 3%.
- A 2-worker pipe group that loses one worker half-way with `--retries 1`, against the same
  group undisturbed: the time, and the hits, which must be identical.
- How long `aner parallel resume --background` takes, after its coordinator was killed, to
  report RUNNING again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from aner_coord import parallel
from bench.calls import ANER, monte_carlo, write_cluster
from bench.runner import Benchmark, goal, interleave, note, scratch_dir, secs, table

SEED = 42
GOAL_OVERHEAD = 0.03


@dataclass(frozen=True)
class Sizes:
    samples: int
    chunk: int
    reps: int


def _status(job: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads((job / "status.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return data


def _wait(job: Path, predicate: Any, timeout: float = 600) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = _status(job)
        if status and predicate(status):
            return status
        time.sleep(0.01)
    raise TimeoutError(f"{job}: condition not reached in {timeout} s")


def _group_run(cluster: Path, sizes: Sizes, scratch: Path, *, lose_one: bool) -> dict[str, Any]:
    job = scratch / f"group-{time.monotonic_ns()}"
    argv = [
        ANER, "parallel", "run", "--samples", str(sizes.samples), "--seed", str(SEED),
        "--chunk", str(sizes.chunk), "--cluster", str(cluster), "--retries", "1",
        "--output", str(job), "--quiet",
    ]  # fmt: skip
    start = time.perf_counter()
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    if lose_one:
        _wait(job, lambda s: s["accepted"] >= sizes.samples // 2)
        workers = [
            p
            for p in psutil.Process(process.pid).children(recursive=True)
            if "worker" in " ".join(p.cmdline())
        ]
        workers[0].kill()
    process.wait()
    wall = time.perf_counter() - start
    result = json.loads((job / "result.json").read_text())
    return {"wall_s": wall, "hits": result["hits"], "losses": len(result["losses"])}


def _resume_latency(sizes: Sizes, scratch: Path) -> float:
    job = scratch / "resumed"
    subprocess.run(
        [
            ANER, "parallel", "run", "--samples", str(sizes.samples * 10), "--seed", str(SEED),
            "--chunk", str(sizes.chunk), "--workers", "1", "--output", str(job), "--background",
            "--quiet",
        ],
        check=True,
    )  # fmt: skip
    status = _wait(job, lambda s: s["state"] == "RUNNING" and s["accepted"] > 0)
    os.kill(status["pid"], signal.SIGKILL)
    while psutil.pid_exists(status["pid"]):
        time.sleep(0.01)
    start = time.perf_counter()
    subprocess.run([ANER, "parallel", "resume", "--job", str(job), "--background", "--quiet"])
    resumed = _wait(job, lambda s: s.get("resumes") == 1 and s["state"] == "RUNNING")
    latency = time.perf_counter() - start
    subprocess.run([ANER, "parallel", "cancel", "--job", str(job)], capture_output=True)
    assert resumed["resumes"] == 1
    return latency


def run(sizes: Sizes) -> dict[str, Any]:
    scratch = scratch_dir("aner-bench-durable-")
    execution = parallel.local(chunk=sizes.chunk)
    monte_carlo(10**6, 1, execution)
    counter = iter(range(10**6))

    def with_files() -> Any:
        result = parallel.monte_carlo(
            samples=sizes.samples, seed=SEED, execution=execution,
            output=scratch / f"files-{next(counter)}",
        )  # fmt: skip
        return result.hits

    runs = interleave(
        {
            "no job directory": lambda: monte_carlo(sizes.samples, SEED, execution).hits,
            "job directory + ledger": with_files,
        },
        sizes.reps,
    )
    base, files = runs["no job directory"], runs["job directory + ledger"]
    overhead = files.median / base.median - 1
    hits = {*base.values, *files.values}
    table(
        ("run", "median", "min:max s"),
        [(name, secs(s.median), s.span()) for name, s in runs.items()],
    )
    print(f"  overhead of the job files: {overhead * 100:+.1f}%; hits identical: {len(hits) == 1}")

    cluster = write_cluster(scratch / "cluster", [("w1", "local", "-", 1), ("w2", "local", "-", 1)])
    group = interleave(
        {
            "undisturbed": lambda: _group_run(cluster, sizes, scratch, lose_one=False),
            "one of two lost half-way": lambda: _group_run(cluster, sizes, scratch, lose_one=True),
        },
        sizes.reps,
    )
    group_hits = {r["hits"] for s in group.values() for r in s.values}
    table(
        ("pipe group, --retries 1", "median wall", "min:max s", "losses"),
        [
            (name, secs(s.median_of(lambda r: r["wall_s"])), s.span(), s.values[0]["losses"])
            for name, s in group.items()
        ],
    )
    print(f"  hits identical with and without the loss: {len(group_hits) == 1}")
    latency = _resume_latency(sizes, scratch)
    print(f"  resume --background to RUNNING after a SIGKILL: {secs(latency)}")
    note("the job-files figure bounds the ledger's cost: it includes status.json as well")
    met = overhead <= GOAL_OVERHEAD and len(hits) == 1
    goal(f"job files cost at most {GOAL_OVERHEAD:.0%}", met)
    return {
        "samples": sizes.samples,
        "chunk": sizes.chunk,
        "runs": {name: s.figures() for name, s in runs.items()},
        "overhead": overhead,
        "hits_identical": len(hits) == 1,
        "group": {
            name: {**s.figures(), "wall_median_s": s.median_of(lambda r: r["wall_s"])}
            for name, s in group.items()
        },
        "group_hits_identical": len(group_hits) == 1,
        "resume_to_running_s": latency,
        "goal_met": met,
    }


BENCHMARK = Benchmark(
    title="durable jobs: ledger cost, a lost worker, resume latency",
    full=Sizes(samples=10**9, chunk=4_000_000, reps=3),
    quick=Sizes(samples=10**8, chunk=1_000_000, reps=1),
    smoke=Sizes(samples=2 * 10**8, chunk=1_000_000, reps=1),  # half of it outlasts a status tick
    run=run,
)
