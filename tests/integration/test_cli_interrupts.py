"""Ctrl-C at any instant of a foreground `aner parallel run`: a real `aner` process, a real
SIGINT. The outcome is the job's: exit 4 with a CANCELLED status.json, or, once the job has
completed, exit 0 with COMPLETED; never a traceback, never 130 (`aner_coord.interrupts`)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from support import (
    ANER,
    advance_until,
    finish,
    interrupted_at,
    reap,
    started_aner,
    status_where,
)

from aner_coord.jobdir.status import JobState

POINTS = 20


def run_argv(job: Path) -> list[str]:
    return [
        ANER, "parallel", "run", "--samples", "100000", "--seed", "1", "--workers", "1",
        "--output", str(job),
    ]  # fmt: skip


def check_consistent(job: Path, code: int, err: str) -> JobState:
    """The exit status says what status.json says; one line of stderr, no traceback."""
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    state = JobState(json.loads((job / "status.json").read_bytes())["state"])
    if code == 0:
        assert state is JobState.COMPLETED and (job / "result.json").exists(), err
    else:
        assert code == 4, err
        assert state is JobState.CANCELLED and not (job / "result.json").exists(), err
        assert err.count("\n") == 1 and "job cancelled" in err, err
    return state


def test_a_sigint_during_start_up_cancels_the_job(tmp_path: Path) -> None:
    job = tmp_path / "job"
    proc, _ = started_aner(run_argv(job))
    try:
        # Stopped at its first lines (before any import of the command line), interrupted,
        # and let go: the interrupt waits for the job's cancel handler.
        os.kill(proc.pid, signal.SIGSTOP)
        os.kill(proc.pid, signal.SIGINT)
        os.kill(proc.pid, signal.SIGCONT)
        code, _, err = finish(proc, 300)
    finally:
        reap(proc)
    assert check_consistent(job, code, err) is JobState.CANCELLED


def test_a_sigint_after_the_job_completed_exits_0(tmp_path: Path) -> None:
    job = tmp_path / "job"
    proc, _ = started_aner(run_argv(job))
    try:
        os.kill(proc.pid, signal.SIGSTOP)
        advance_until(
            proc.pid, status_where(job, lambda s: s.state is JobState.COMPLETED), "completion"
        )
        os.kill(proc.pid, signal.SIGINT)
        os.kill(proc.pid, signal.SIGCONT)
        code, out, err = finish(proc, 300)
    finally:
        reap(proc)
    assert check_consistent(job, code, err) is JobState.COMPLETED
    assert "3.1" in out


@pytest.mark.slow
def test_a_sigint_anywhere_in_a_run_is_honoured_as_its_status_says(tmp_path: Path) -> None:
    code, _, err, whole = interrupted_at(run_argv(tmp_path / "measured"), None)
    assert code == 0, err
    states = []
    for i in range(POINTS):
        job = tmp_path / f"job-{i}"
        code, _, err, _ = interrupted_at(run_argv(job), whole * (i + 0.5) / POINTS)
        states.append(check_consistent(job, code, err))
    # The first point falls in the first 2.5% of a run: that one is surely cancelled.
    assert states[0] is JobState.CANCELLED
