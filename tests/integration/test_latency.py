"""Latency-adaptive dispatch over a real SSH link made slow: the loopback sshd reached through
tests/delay_relay.py as the alias's ProxyCommand. Small and large chunks give the local hits
at every delay, and the window the worker reports grows with the delay."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from suite_env import child_env
from support import ANER, ROOT, write_cluster

from aner_coord.job.pacing import size_window
from aner_worker.kernels.philox import count_hits
from protocol import MAX_QUEUED_PER_SLOT

RELAY = ROOT / "tests" / "delay_relay.py"
SAMPLES = 2 * 10**8 + 17  # three chunks of 10**8, the last keeps the remainder
SEED = 11
SMALL, LARGE = 10**6, 10**8
DELAY_S = 0.05  # each way


def run(tmp_path: Path, sshd: Any, delay_s: float, chunk: int) -> tuple[dict[str, Any], Path]:
    home = tmp_path / f"home-{delay_s}"
    if not home.exists():
        proxy = f"{sys.executable} {RELAY} {delay_s} 127.0.0.1 {sshd.port}"
        sshd.write_home(home, proxy_command=proxy)
    cluster = write_cluster(tmp_path / f"c-{delay_s}", [("peer-1", "ssh", sshd.alias, ANER, 1)])
    out = tmp_path / f"job-{time.monotonic_ns()}"
    proc = subprocess.run(
        [
            ANER, "parallel", "run", "--samples", str(SAMPLES), "--seed", str(SEED),
            "--chunk", str(chunk), "--cluster", str(cluster), "--output", str(out), "--quiet",
        ],
        capture_output=True, text=True, env=child_env(sshd.env, HOME=str(home)), timeout=300,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads((out / "result.json").read_text()), out


@pytest.mark.ssh
def test_chunks_agree_and_the_window_grows_with_the_delay(tmp_path: Path, sshd: Any) -> None:
    expected = count_hits(SEED, 0, SAMPLES)
    workers = {}
    jobs = {}
    for delay in (0.0, DELAY_S):
        for chunk in (SMALL, LARGE):
            result, job = run(tmp_path, sshd, delay, chunk)
            jobs[delay, chunk] = job
            assert result["hits"] == expected, (delay, chunk)
            [worker] = result["workers"]
            assert worker["chunks"] == -(-SAMPLES // chunk)
            workers[delay, chunk] = worker
            # status.json carries the same per-worker estimates as the result.
            [in_status] = json.loads((job / "status.json").read_text())["workers"]
            assert {k: in_status[k] for k in ("rtt_s", "task_s", "window")} == {
                k: worker[k] for k in ("rtt_s", "task_s", "window")
            }
    for worker in workers.values():
        assert 2 <= worker["window"] <= MAX_QUEUED_PER_SLOT
        assert worker["rtt_s"] > 0 and worker["task_s"] > 0
    # The relay holds every byte DELAY_S each way: no round trip can be measured below that.
    assert workers[DELAY_S, SMALL]["rtt_s"] >= 2 * DELAY_S
    assert workers[DELAY_S, LARGE]["rtt_s"] >= 2 * DELAY_S
    # Small chunks: the window grows with the delay, as its estimates say it should.
    fast, slow = workers[0.0, SMALL], workers[DELAY_S, SMALL]
    assert slow["window"] > fast["window"]
    at_fast_rtt = size_window(1, fast["rtt_s"], slow["task_s"], MAX_QUEUED_PER_SLOT).size
    assert slow["window"] > at_fast_rtt  # the delay grew it, not a change in task time
    # Large chunks hide the same round trip with fewer tasks.
    assert workers[DELAY_S, LARGE]["window"] < slow["window"]
    # And the human status shows them on the worker's line.
    shown = subprocess.run(
        [ANER, "parallel", "status", "--job", str(jobs[DELAY_S, SMALL])],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    [line] = [x for x in shown.stdout.splitlines() if "peer-1:" in x]
    assert f"window {slow['window']} (round trip {slow['rtt_s'] * 1000:.1f} ms, " in line
    assert line.endswith(f"{slow['task_s'] * 1000:.1f} ms per task)")
