"""Cancelling the task that awaits a `*_async` call follows asyncio's convention
(aner_coord/calls.py, `awaited`): the job is cancelled gracefully, and only once it has
stopped (its job directory says CANCELLED, no worker process of a one-off call is left) does
`asyncio.CancelledError` reach the awaiting task. So too when the task is cancelled a second
time while the job stops, for one-off calls and session calls alike, and under `asyncio.run`
interrupted by a real SIGINT, which asyncio turns into KeyboardInterrupt. (The blocking forms
raise JobCancelled chained from the KeyboardInterrupt: tests/integration/test_interrupt.py,
test_session.py and test_notebook.py.) Each case runs in a fresh process of its own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import TESTS, write_pipe_pair

PRELUDE = """
import asyncio, json, os, pathlib, signal, sys, threading, time
import psutil
from aner_coord import parallel
sys.path.append({tests!r})
from support import read_status
from aner_coord.jobdir.status import JobState

GROUP = parallel.cluster({cluster!r}, chunk=10**8)
LOCAL = parallel.local(2, chunk=10**8)
HERE = {here!r}

def computing(job):
    status = read_status(job)
    return status is not None and status.state is JobState.RUNNING and status.accepted > 0

async def until_computing(job):
    while not computing(job):
        await asyncio.sleep(0.02)

def workers():
    return [c.pid for c in psutil.Process().children(recursive=True)
            if c.status() != psutil.STATUS_ZOMBIE]

def stopped(job, began):
    # What holds at the moment the CancelledError arrives.
    return {{
        "took": time.monotonic() - began,
        "state": read_status(job).state.value,
        "workers": workers(),
        "threads": [t.name for t in threading.enumerate() if t.name.startswith("aner-coord")],
    }}

async def cancel(call, job, twice):
    task = asyncio.create_task(call(samples=10**10, seed=1, output=job))
    await until_computing(job)
    began = time.monotonic()
    task.cancel()
    second = None
    if twice:
        for _ in range(3):  # the task takes the first cancellation and begins the stop
            await asyncio.sleep(0)
        second = task.cancel()  # True: the task had not ended yet
    try:
        await task
    except asyncio.CancelledError:
        return {{**stopped(job, began), "second": second}}
    raise AssertionError("the await was not cancelled")
"""

ONE_OFF = """
async def main():
    execution = {execution}
    call = lambda **kw: parallel.monte_carlo_async(execution=execution, **kw)
    report = await cancel(call, pathlib.Path(HERE, "job"), {twice})
    print(json.dumps(report))

asyncio.run(main())
"""

IN_SESSION = """
async def main():
    with parallel.session(GROUP) as s:
        report = await cancel(s.monte_carlo_async, pathlib.Path(HERE, "job"), {twice})
        report["next"] = (await s.monte_carlo_async(samples=10**7, seed=42, chunk=10**6)).hits
    print(json.dumps(report))

asyncio.run(main())
"""

UNDER_ASYNCIO_RUN = """
job = pathlib.Path(HERE, "job")
seen = {}

def interrupt_when_computing():
    while not computing(job):
        time.sleep(0.02)
    seen["began"] = time.monotonic()
    os.kill(os.getpid(), signal.SIGINT)

async def main():
    threading.Thread(target=interrupt_when_computing, daemon=True).start()
    try:
        await parallel.monte_carlo_async(samples=10**10, seed=1, execution=GROUP, output=job)
    except asyncio.CancelledError:
        seen.update(stopped(job, seen["began"]))
        raise

try:
    asyncio.run(main())
except KeyboardInterrupt:
    print(json.dumps({**seen, "raised": "KeyboardInterrupt"}))
"""


UNDER_A_TIMEOUT = """
async def main():
    job = pathlib.Path(HERE, "job")
    try:
        async with asyncio.timeout(None) as timeout:
            call = asyncio.ensure_future(
                parallel.monte_carlo_async(samples=10**10, seed=1, execution=LOCAL, output=job)
            )
            await until_computing(job)
            began = time.monotonic()
            timeout.reschedule(asyncio.get_running_loop().time())  # it expires now
            await call
    except TimeoutError:
        print(json.dumps({**stopped(job, began), "raised": "TimeoutError"}))

asyncio.run(main())
"""


def run(tmp_path: Path, body: str) -> dict[str, object]:
    cluster = write_pipe_pair(tmp_path / "cluster")
    prelude = PRELUDE.format(tests=str(TESTS), cluster=str(cluster), here=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-c", prelude + body], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    print(report)  # `took`, seconds from the cancellation to the CancelledError, for the log
    return report


@pytest.mark.parametrize("twice", [False, True], ids=["once", "twice"])
@pytest.mark.parametrize("execution", ["LOCAL", "GROUP"])
def test_a_cancelled_await_raises_cancelled_error_after_the_job_stopped(
    tmp_path: Path, execution: str, twice: bool
) -> None:
    report = run(tmp_path, ONE_OFF.format(execution=execution, twice=twice))
    assert report["state"] == "CANCELLED"
    assert report["workers"] == [] and report["threads"] == []
    assert report["second"] is (True if twice else None)


@pytest.mark.parametrize("twice", [False, True], ids=["once", "twice"])
def test_a_cancelled_await_of_a_session_call_and_the_session_goes_on(
    tmp_path: Path, twice: bool
) -> None:
    report = run(tmp_path, IN_SESSION.format(twice=twice))
    assert report["state"] == "CANCELLED" and report["threads"] == []
    assert report["second"] is (True if twice else None)
    assert report["next"] == 7_856_672  # docs/contracts.md, section 1: seed 42, 10**7 samples


def test_an_interrupted_asyncio_run_cancels_the_job_first(tmp_path: Path) -> None:
    report = run(tmp_path, UNDER_ASYNCIO_RUN)
    assert report["raised"] == "KeyboardInterrupt"
    assert report["state"] == "CANCELLED" and report["workers"] == []


def test_a_timeout_that_expires_raises_timeout_error_after_the_job_stopped(
    tmp_path: Path,
) -> None:
    report = run(tmp_path, UNDER_A_TIMEOUT)
    assert report["raised"] == "TimeoutError"
    assert report["state"] == "CANCELLED" and report["threads"] == []
