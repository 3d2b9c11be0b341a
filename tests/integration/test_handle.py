"""A submitted call's handle and every call's `progress=` (`aner_coord.handle`,
`aner_coord.progressbar`; issue 27 item 4): real jobs on local workers and a session.

What must hold: the snapshots are the job directory's own type; a progress callback that
sleeps 50 ms an update leaves the result bitwise the same (the wall times are printed, not
asserted); `watch()` gives newer snapshots only, to the final one, synchronously and
asynchronously; `cancel()` ends the job as cancelled and leaves no thread of it; a bad
`progress=` or an unknown call or argument is refused in one line before anything starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np
import pytest
from suite_env import child_env
from support import ROOT, wait_for

from aner_coord import parallel
from aner_coord.arguments import ArgumentError
from aner_coord.errors import RequestError
from aner_coord.jobdir.status import JobState, StatusSnapshot

TEACHER = {"teacher": (6_000, 12, 3), "hidden": (16,), "batch": 64, "epochs": 3, "seed": 5}


def _aner_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("aner")]


def _slow(seen: list[StatusSnapshot]) -> Any:
    def progress(snapshot: StatusSnapshot) -> None:
        seen.append(snapshot)
        time.sleep(0.05)

    return progress


def test_a_slow_progress_callback_leaves_a_training_bitwise_the_same() -> None:
    execution = parallel.local(2, chunk=32)
    parallel.dense_fit(**TEACHER, execution=execution)  # the kernels loaded: times compare
    seen: list[StatusSnapshot] = []
    began = time.monotonic()
    watched = parallel.dense_fit(**TEACHER, execution=execution, progress=_slow(seen))
    shown_s = time.monotonic() - began
    began = time.monotonic()
    plain = parallel.dense_fit(**TEACHER, execution=execution)
    quiet_s = time.monotonic() - began
    print(f"dense_fit: {quiet_s:.3f} s without progress, {shown_s:.3f} s with a 50 ms callback")
    for a, b in zip(plain.model.params, watched.model.params, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)

    def numbers(fit: Any) -> list[Any]:
        kept = [(r.train_loss, r.validation_loss, r.validation_accuracy) for r in fit.history]
        return [kept, fit.test_loss, fit.test_accuracy, fit.committed_steps, fit.best_epoch]

    assert numbers(plain.result) == numbers(watched.result)
    assert len(seen) > 1 and all(isinstance(s, StatusSnapshot) for s in seen)
    assert seen[-1].state is JobState.COMPLETED and seen[-1].fraction == 1.0
    assert [s.seq for s in seen] == sorted(set(s.seq for s in seen))  # newer ones only
    assert not _aner_threads()


def test_a_progress_callback_on_monte_carlo_and_its_bitwise_hits() -> None:
    execution = parallel.local(2, chunk=10**5)
    seen: list[StatusSnapshot] = []
    result = parallel.monte_carlo(samples=10**7, seed=42, execution=execution, progress=seen.append)
    assert result.hits == 7_856_672
    assert seen[-1].state is JobState.COMPLETED and seen[-1].accepted == 10**7
    fractions = [s.fraction for s in seen]
    assert fractions == sorted(fractions)


def test_the_async_form_takes_progress_too() -> None:
    seen: list[StatusSnapshot] = []
    call = parallel.monte_carlo_async(samples=10**7, seed=42, progress=seen.append)
    assert asyncio.run(call).hits == 7_856_672
    assert seen[-1].state is JobState.COMPLETED
    wait_for(lambda: not _aner_threads(), 30, "the progress thread to end")


def test_submit_returns_a_handle_to_watch_and_its_result() -> None:
    handle = parallel.submit(
        parallel.monte_carlo, samples=10**7, seed=42, execution=parallel.local(2, chunk=10**5)
    )
    seen = list(handle.watch())
    assert seen and seen[-1].state is JobState.COMPLETED
    assert [s.seq for s in seen] == sorted(set(s.seq for s in seen))
    assert handle.status() == seen[-1]
    assert handle.result().hits == 7_856_672 and handle.done()
    assert handle.result().hits == 7_856_672  # kept
    assert list(handle.watch()) == [seen[-1]]  # a new watch: the final snapshot, then the end
    wait_for(lambda: not _aner_threads(), 30, "the job's threads to end")


def test_a_session_submits_by_name_and_watches_asynchronously() -> None:
    async def follow(handle: parallel.JobHandle[Any]) -> list[StatusSnapshot]:
        return [snapshot async for snapshot in handle.watch()]

    with parallel.session(parallel.local(2)) as s:
        handle = s.submit("regression", samples=20_000, steps=30, rate=0.5, seed=1, chunk=2_000)
        seen = asyncio.run(follow(handle))
        fit = handle.result()
        given: list[StatusSnapshot] = []
        alone = s.regression(
            samples=20_000, steps=30, rate=0.5, seed=1, chunk=2_000, progress=given.append
        )
    assert seen[-1].state is JobState.COMPLETED and seen[-1].kind == "regression"
    assert given[-1].state is JobState.COMPLETED and given[-1].pass_index == 32
    assert fit.theta == alone.theta and fit.final_loss == alone.final_loss


def test_cancel_ends_the_job_as_cancelled() -> None:
    handle = parallel.submit("monte_carlo", samples=10**10, seed=1, execution=parallel.local(2))
    for snapshot in handle.watch():
        if snapshot.state is JobState.RUNNING and snapshot.accepted > 0:
            handle.cancel()
    assert snapshot.state is JobState.CANCELLED
    with pytest.raises(parallel.JobCancelled):
        handle.result()
    handle.cancel()  # idempotent, and harmless once it has ended
    wait_for(lambda: not _aner_threads(), 30, "the job's threads to end")


def test_a_callback_that_raises_is_dropped_and_the_job_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[int] = []

    def broken(snapshot: StatusSnapshot) -> None:
        calls.append(snapshot.seq)
        raise ValueError("a bug of the caller's")

    result = parallel.monte_carlo(samples=10**6, seed=42, progress=broken)
    assert result.hits > 0 and len(calls) == 1
    assert "progress= callback failed" in caplog.text


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: parallel.monte_carlo(samples=10, seed=1, progress=3),
            "monte_carlo() takes progress= as a function of one status snapshot, or True",
        ),
        (
            lambda: parallel.submit("monte_carl", samples=10, seed=1),
            "submit() takes a call of the API (run, monte_carlo, regression, dense_fit, "
            "cross_validate, search), got 'monte_carl'",
        ),
        (
            lambda: parallel.submit(parallel.monte_carlo, samples=10, sed=1),
            "monte_carlo() has no argument sed= (did you mean seed=?)",
        ),
        (
            lambda: parallel.submit(parallel.dense_fit, teacher=(100, 4, 2), seed=1, progres=True),
            "dense_fit() has no argument progres= (did you mean progress=?)",
        ),
        (
            lambda: asyncio.run(parallel.regression_async(samples=10, steps=1, rate=1, seed=1,
                                                          progress="yes")),
            "regression_async() takes progress= as a function",
        ),
    ],
)  # fmt: skip
def test_bad_progress_and_submissions_are_refused_in_one_line(call: Any, message: str) -> None:
    with pytest.raises(RequestError) as refused:
        call()
    assert message in str(refused.value) and "\n" not in str(refused.value)
    assert not _aner_threads()
    assert isinstance(refused.value, ArgumentError) or "progress=" in message


def test_progress_true_draws_a_bar_on_a_terminal() -> None:
    """`progress=True` with stderr on a pseudo-terminal: rich's bar, left as the job ended."""
    script = (
        "from aner_coord import parallel\n"
        "r = parallel.monte_carlo(samples=10**7, seed=42, progress=True,\n"
        "                         execution=parallel.local(2, chunk=10**5))\n"
        "print(r.hits)\n"
    )
    leader, follower = os.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=follower,
            cwd=ROOT, env=child_env(COLUMNS="120", TERM="xterm"), timeout=300,
            check=False,
        )  # fmt: skip
        os.close(follower)
        drawn = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        os.close(leader)
    assert done.returncode == 0 and done.stdout.split() == [b"7856672"]
    text = drawn.decode(errors="replace")
    assert "COMPLETED" in text and "100.0% of 10.0M samples" in text, text[-400:]


@pytest.mark.parametrize("refused", [False, True], ids=["admitted", "refused"])
def test_a_call_shows_its_admission_as_a_phase_and_a_refusal_after_it_as_failed(
    refused: bool,
) -> None:
    # Issue 38, item 4: a search showed nothing for its first 3.1 of 3.8 s (its admission).
    # The admission here waits until the display has shown that phase: no clock decides.
    from aner_coord.cli.progress import describe
    from aner_coord.handle import ADMITTING, Reporter

    seen: list[StatusSnapshot] = []
    shown = threading.Event()

    def callback(snapshot: StatusSnapshot) -> None:
        seen.append(snapshot)
        shown.set()

    reporter = Reporter(callback)
    expect = pytest.raises(RequestError) if refused else contextlib.nullcontext()
    with expect, reporter.admitting("search"):
        assert shown.wait(60), "the admission phase was never shown"
        if refused:
            raise RequestError("refused")
    if not refused:
        reporter.close()
    assert (seen[0].state, seen[0].phase, seen[0].total_work) == (JobState.STARTING, ADMITTING, 0)
    assert describe(seen[0]) == f"STARTING [{ADMITTING}]"
    assert [s.state for s in seen] == [JobState.STARTING, *([JobState.FAILED] if refused else [])]
