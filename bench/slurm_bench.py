#!/usr/bin/env python3
"""Slurm workers against local pipes, measured side by side on a real single-node Slurm.

    .venv/bin/python bench/slurm_bench.py                 # 10**9 samples, prints JSON
    .venv/bin/python bench/slurm_bench.py --quick         # small sizes, smoke run

Starts its own Slurm as the tests do (tests/slurm_support.py: munged, slurmctld, slurmd in a
temporary directory; needs root and .ci/ensure-slurm), then measures, interleaved (A, B, A,
B, ...) and summarised by median and min:max:

- `handshake_s`: start-up of a worker group alone: `aner_coord.job.link.connect()` for two
  workers at once until both have answered the handshake (a 2-step Slurm group, 2 srun job
  steps of one slot, against 2 local pipe workers);
- `job_wall_s`: `aner parallel run` of the whole computation (seed 42, chunks of 4 M), timed
  from outside; `startup_job_s`: the same command for 2 samples (process start, job
  directory, workers, handshake, one tiny task each); `steady_s = job_wall_s - startup_job_s`
  and `steady_samples_per_s` from it;
- `frame_rtt_us`: the round trip of one 64-byte frame to `cat` and back, through `srun
  --unbuffered` against a direct pipe, over the same Transport interface.

Prints one JSON object. Every run must give the oracle's hits, or the script fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from slurm_support import SlurmCluster, start_slurm  # noqa: E402

from aner_coord.clusterfile import SlurmEndpoint, WorkerRecord, load_cluster_file  # noqa: E402
from aner_coord.job.link import connect  # noqa: E402
from aner_coord.transports.base import Transport  # noqa: E402
from aner_coord.transports.pipe import open_pipe  # noqa: E402
from aner_coord.transports.registry import open_slurm  # noqa: E402
from aner_worker.contract import source_fingerprint  # noqa: E402
from protocol import CoordinatorConnection  # noqa: E402

ANER = str(Path(sys.executable).parent / "aner")
# docs/contracts.md, section 1, seed 42; other sizes must agree between every run of the same size.
REFERENCE_HITS = {10**9: 785_386_550}
_seen_hits: dict[int, int] = {}


def summary(values: list[float]) -> dict[str, float]:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def write_cluster(path: Path, transport: str) -> Path:
    lines = ["ANER_CLUSTER 1"]
    for i in (1, 2):
        lines.append(f'worker "{transport}-{i}" {transport} "-" "{ANER}" 1')
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)
    return path


def run_job(cluster: Path, samples: int, out: Path, env: dict[str, str]) -> float:
    started = time.monotonic()
    done = subprocess.run(
        [
            ANER, "parallel", "run", "--samples", str(samples), "--seed", "42",
            "--chunk", "4000000" if samples > 4_000_000 else "1",
            "--cluster", str(cluster), "--output", str(out), "--quiet",
        ],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"aner failed ({done.returncode}): {done.stderr.strip()}")
    result = json.loads((out / "result.json").read_text())
    expected = REFERENCE_HITS.get(samples, _seen_hits.setdefault(samples, result["hits"]))
    if result["hits"] != expected:
        raise SystemExit(f"wrong hits {result['hits']} for {samples} samples (not {expected})")
    return wall


async def handshake(cluster: Path, env: dict[str, str]) -> float:
    """Both workers of the group started and through the handshake, in seconds."""
    config = load_cluster_file(cluster)
    fingerprint = source_fingerprint()

    async def one(record: WorkerRecord) -> Transport:
        connection = CoordinatorConnection(record.identity, record.slots, fingerprint)
        return (await connect(record, connection, env=env)).transport

    started = time.monotonic()
    transports = await asyncio.gather(*(one(r) for r in config.workers))
    elapsed = time.monotonic() - started
    await asyncio.gather(*(t.close() for t in transports))
    return elapsed


async def frame_rtt(kind: str, env: dict[str, str], frames: int) -> float:
    """Mean microseconds for one 64-byte frame to `cat` and back."""
    argv = ["/bin/cat"]
    if kind == "slurm":
        transport = await open_slurm("rtt", SlurmEndpoint(), 1, argv, env=env)
    else:
        transport = await open_pipe("rtt", argv)
    frame = (60).to_bytes(4, "big") + b"x" * 60
    try:
        for _ in range(20):  # warm up
            await _echo(transport, frame)
        started = time.monotonic()
        for _ in range(frames):
            await _echo(transport, frame)
        return (time.monotonic() - started) / frames * 1e6
    finally:
        await transport.close()


async def _echo(transport: Transport, frame: bytes) -> None:
    await transport.write(frame)
    got = b""
    while len(got) < len(frame):
        data = await transport.read(len(frame) - len(got))
        if not data:
            raise SystemExit("the echo ended early")
        got += data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10**8 samples, fewer repetitions")
    args = parser.parse_args()
    samples = 10**8 if args.quick else 10**9
    reps = 2 if args.quick else 3
    frames = 300 if args.quick else 2000

    with tempfile.TemporaryDirectory(prefix="aner-slurm-bench-") as tmp:
        work = Path(tmp)
        cluster: SlurmCluster = start_slurm(work / "slurm")
        try:
            env = cluster.env
            files = {
                kind: write_cluster(work / f"{kind}.cluster", kind) for kind in ("slurm", "local")
            }
            measured: dict[str, dict[str, list[float]]] = {
                kind: {"handshake_s": [], "startup_job_s": [], "job_wall_s": []} for kind in files
            }
            rtt: dict[str, list[float]] = {"slurm": [], "local": []}
            # One unmeasured round first: numba's cache, the page cache and Slurm's first job.
            for kind, path in files.items():
                run_job(path, 2, work / f"warm-{kind}", env)
            for rep in range(reps):
                for kind, path in files.items():
                    measured[kind]["handshake_s"].append(asyncio.run(handshake(path, env)))
                    measured[kind]["startup_job_s"].append(
                        run_job(path, 2, work / f"small-{kind}-{rep}", env)
                    )
                    measured[kind]["job_wall_s"].append(
                        run_job(path, samples, work / f"big-{kind}-{rep}", env)
                    )
                    rtt[kind].append(asyncio.run(frame_rtt(kind, env, frames)))
        finally:
            cluster.stop()

    report: dict[str, Any] = {
        "samples": samples,
        "workers": 2,
        "slots_per_worker": 1,
        "cpus": os.cpu_count(),
        "repetitions": reps,
        "groups": {},
        "frame_rtt_us": {
            "srun_unbuffered": summary(rtt["slurm"]),
            "direct_pipe": summary(rtt["local"]),
            "frames_per_measurement": frames,
        },
    }
    for kind, values in measured.items():
        steady = [w - statistics.median(values["startup_job_s"]) for w in values["job_wall_s"]]
        report["groups"]["slurm_2_steps" if kind == "slurm" else "pipe_2_workers"] = {
            "handshake_s": summary(values["handshake_s"]),
            "startup_job_s": summary(values["startup_job_s"]),
            "job_wall_s": summary(values["job_wall_s"]),
            "steady_s": summary(steady),
            "steady_samples_per_s": samples / statistics.median(steady),
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
