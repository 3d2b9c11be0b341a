"""A fuzz of the wire from the worker's side: a fake worker that speaks the protocol
honestly except for one deterministically mutated frame (a bit flipped in its header or its
body, cut short, given another length, sent twice, preceded by garbage, withheld, with
impossible timings or naming a task it was never given), after which it goes on answering
pings and tasks as if nothing had happened, the nastiest continuation for a coordinator.

Every case must end within its bound (no hang), and end either with the exact hits (every
result is audited, so a flipped hit count cannot pass) or with a job failure that names the
worker in one line and is not an internal error. The bounds are the product's own, shortened
through its environment."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from support import write_cluster

from aner_coord import parallel
from aner_coord.errors import JobFailed
from aner_worker.contract import source_fingerprint
from aner_worker.kernels import KERNELS
from aner_worker.kernels.montecarlo import McParams

CASES = 240
CONCURRENCY = 10
CASE_BOUND_S = 90.0  # generous: the longest product bound here is 20 s (a withheld Welcome)
SAMPLES, CHUNK, SEED = 100_000, 25_000, 7
KINDS = [
    ("flip_header", 4),
    ("flip_body", 6),
    ("truncate", 3),
    ("length", 3),
    ("duplicate", 2),
    ("garbage", 2),
    ("drop", 1),
    ("timing", 2),
    ("unknown_task", 2),
]

# The fake worker: CASE (a dict) is defined above this body in each case's script.
BODY = r"""
import os, sys
import msgspec
from protocol import (
    MAX_FRAME_BYTES, FrameEncoder, HelloReceived, PingReceived, Result, TaskReceived,
    WorkerConnection,
)

conn = WorkerConnection(CASE["fingerprint"], 2, "fuzz", {"monte-carlo"})
encoder = FrameEncoder()
hits = {int(k): v for k, v in CASE["hits"].items()}
a, b, kind = CASE["a"], CASE["b"], CASE["kind"]
count = 0


def flip(frame, i):
    return frame[:i] + bytes([frame[i] ^ (1 << (b % 8))]) + frame[i + 1:]


def mutate(frame, task, body):
    if kind == "flip_header":
        return [flip(frame, a % 4)]
    if kind == "truncate":
        return [frame[: a % len(frame)]]
    if kind == "length":
        payload = len(frame) - 4
        sizes = [MAX_FRAME_BYTES + 1, 1 << 24, MAX_FRAME_BYTES, 1 << 16, 0,
                 payload + 1 + a % 7, max(1, payload - 1 - a % 3)]
        return [sizes[b % len(sizes)].to_bytes(4, "big") + frame[4:]]
    if kind == "duplicate":
        return [frame, frame]
    if kind == "garbage":
        noise = bytes((a >> (i % 24)) & 0xFF ^ i for i in range(1 + b % 16))
        return [noise, frame]
    if kind == "drop":
        return []
    if kind == "timing" and task is not None:
        bad = [float("inf"), float("nan"), -1.0, 1e300, 1e9][a % 5]
        busy, queued = (bad, 0.0) if b % 2 else (0.001, bad)
        return [encoder.encode(Result(task.task_id, task.start, task.count, body, busy, queued))]
    if kind == "unknown_task" and task is not None:
        other = task.task_id + 1 + a % 1000
        return [encoder.encode(Result(other, task.start, task.count, body, 0.001))]
    return [flip(frame, 4 + a % (len(frame) - 4))]  # flip_body, or a kind this frame lacks


def send(frame, task=None, body=None):
    global count
    pieces = mutate(frame, task, body) if count == CASE["target"] else [frame]
    count += 1
    for piece in pieces:
        os.write(1, piece)


def events():
    data = os.read(0, 65536)
    if not data:
        sys.exit(0)
    return conn.receive(data)


hello = []
while not hello:
    hello = events()
send(conn.reply())
while True:
    for event in events():
        if isinstance(event, PingReceived):
            send(conn.pong(event.nonce))
        elif isinstance(event, TaskReceived):
            task = event.task
            body = msgspec.Raw(msgspec.msgpack.encode([hits[task.start]]))
            send(conn.result(task, body, 0.001), task, body)
"""


def _spec(case: int) -> dict[str, Any]:
    rng = random.Random(9000 + case)
    names = [name for name, weight in KINDS for _ in range(weight)]
    return {
        "kind": rng.choice(names),
        "target": rng.randrange(6),  # frame 0 is the Welcome; then pongs and results
        "a": rng.randrange(1 << 30),
        "b": rng.randrange(1 << 30),
    }


def _hits() -> dict[int, int]:
    kernel = KERNELS["monte-carlo"]
    return {
        start: kernel.run(McParams(SEED), start, CHUNK, None).hits
        for start in range(0, SAMPLES, CHUNK)
    }


async def _case(tmp_path: Path, case: int, spec: dict[str, Any]) -> tuple[str, str, float]:
    script = tmp_path / f"fake-{case}"
    script.write_text(f"#!{sys.executable}\nCASE = {json.dumps(spec)}\n{BODY}")
    script.chmod(0o755)
    cluster = write_cluster(tmp_path / f"cluster-{case}", [("fz", "local", "-", str(script), 1)])
    call = parallel.monte_carlo_async(
        samples=SAMPLES,
        seed=SEED,
        execution=parallel.cluster(cluster, chunk=CHUNK),
        audit=1.0,
    )
    job = asyncio.ensure_future(call)
    started = time.monotonic()
    done, _ = await asyncio.wait({job}, timeout=CASE_BOUND_S)
    seconds = time.monotonic() - started
    if not done:
        return "hang", f"still running after {CASE_BOUND_S:g} s", seconds
    try:
        result = job.result()
    except JobFailed as exc:
        return "failed", str(exc), seconds
    return "completed", str(result.hits), seconds


def test_mutated_frames_never_stall_and_fail_naming_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANER_WORKER_SILENCE_S", "0.5")
    monkeypatch.setenv("ANER_WORKER_RESULT_S", "0.5")
    monkeypatch.setenv("ANER_WORKER_HANDSHAKE_S", "20")  # a Welcome withheld
    hits = _hits()
    expected = str(sum(hits.values()))
    common = {"fingerprint": source_fingerprint(), "hits": {str(k): v for k, v in hits.items()}}
    specs = [{**common, **_spec(case)} for case in range(CASES)]

    async def main() -> list[tuple[str, str, float]]:
        gate = asyncio.Semaphore(CONCURRENCY)

        async def bounded(case: int) -> tuple[str, str, float]:
            async with gate:
                return await _case(tmp_path, case, specs[case])

        return await asyncio.gather(*(bounded(case) for case in range(CASES)))

    started = time.monotonic()
    loop = asyncio.new_event_loop()
    outcomes = loop.run_until_complete(main())
    seconds = time.monotonic() - started
    problems = []
    for case, (outcome, detail, _) in enumerate(outcomes):
        spec = {k: v for k, v in specs[case].items() if k not in common}
        if outcome == "hang":
            problems.append(f"case {case} {spec}: {detail}")
        elif outcome == "completed" and detail != expected:
            problems.append(f"case {case} {spec}: {detail} hits, expected {expected}")
        elif outcome == "failed" and (
            not detail.startswith('worker "fz" failed during ')
            or "internal error" in detail
            or "\n" in detail
        ):
            problems.append(f"case {case} {spec}: {detail}")
    if not any(outcome == "hang" for outcome, _, _ in outcomes):
        with contextlib.suppress(RuntimeError):
            loop.close()
    assert not problems, "\n".join(problems)
    kinds = Counter(outcome for outcome, _, _ in outcomes)
    slowest = sorted(outcomes, key=lambda o: -o[2])[:5]
    print(f"{CASES} cases in {seconds:.1f} s: {dict(kinds)}; slowest: {slowest}")
    # The fuzz bites both ways: mutations that break the job and mutations it survives.
    assert kinds["failed"] >= CASES // 4 and kinds["completed"] >= CASES // 20, (kinds, seconds)
