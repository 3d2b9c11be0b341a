"""An interrupt of the calling thread cancels an API call's job cooperatively: the call
raises JobCancelled chained from the KeyboardInterrupt, and within a second nothing of the
job (no coordinator thread, no worker thread or process) is still computing. Checked in a
real process that receives a real SIGINT, with and without a running event loop (the
notebook case), and for the async form."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = """
import asyncio, os, signal, threading, time
import psutil
from aner_coord import parallel

def interrupt_soon():
    time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGINT)

def call():
    threading.Thread(target=interrupt_soon, daemon=True).start()
    began = time.monotonic()
    try:
        parallel.monte_carlo(samples=10**10, seed=1, execution=EXECUTION)
    except parallel.JobCancelled as exc:
        assert isinstance(exc.__cause__, KeyboardInterrupt), repr(exc.__cause__)
        return time.monotonic() - began
    raise AssertionError("the call was not cancelled")

def quiet_afterwards():
    me = psutil.Process()
    time.sleep(0.3)
    threads = [t.name for t in threading.enumerate() if t is not threading.current_thread()]
    children = [c for c in me.children(recursive=True) if c.status() != psutil.STATUS_ZOMBIE]
    before = sum(me.cpu_times()[:2])
    time.sleep(1.0)
    busy = sum(me.cpu_times()[:2]) - before
    print("threads", threads, "children", len(children), "busy", round(busy, 3))
    assert not [t for t in threads if t.startswith("aner")], threads
    assert children == [], children
    assert busy < 0.5, busy
"""

CASES = {
    "plain": "print('took', call()); quiet_afterwards()",
    "in a running loop": (
        "async def main():\n    print('took', call())\n"
        "loop = asyncio.new_event_loop()\nloop.run_until_complete(main())\nquiet_afterwards()"
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("execution", ["parallel.local(2)", "GROUP"])
def test_an_interrupted_call_cancels_its_job_and_leaves_nothing_running(
    case: str, execution: str, tmp_path: object
) -> None:
    from pathlib import Path

    from support import write_pipe_pair

    prelude = ""
    if execution == "GROUP":
        cluster = write_pipe_pair(Path(str(tmp_path)) / "c")
        prelude = f"GROUP = parallel.cluster({str(cluster)!r}, chunk=10**9)\n"
    script = SCRIPT + prelude + f"EXECUTION = {execution}\n" + CASES[case]
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    took = float(done.stdout.split()[1])
    assert took < 60  # cancelled, not run to its end (10**10 samples take minutes here)


def test_the_async_form_never_blocks_the_callers_loop() -> None:
    script = """
import asyncio, time
from aner_coord import parallel

async def main():
    ticks = 0
    async def ticker():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1
    t = asyncio.create_task(ticker())
    result = await parallel.monte_carlo_async(
        samples=10**7, seed=42, execution=parallel.local(1, chunk=10**6)
    )
    t.cancel()
    print(result.hits, ticks)

asyncio.run(main())
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    hits, ticks = map(int, done.stdout.split())
    assert hits == 7_856_672
    assert ticks > 5  # the loop kept turning while the job ran
