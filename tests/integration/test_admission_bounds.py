"""Every command answers, and every refusal is bounded (issue 25 item 9).

Real commands: a search file whose value or key is 900,000 characters is refused in one line
of at most 500 characters that still says what to change; `status` of a COMPLETED job whose
`result.json` is a FIFO or a directory says so on stderr; `cancel` and `status` of a job
whose lock is held by a process that is not its coordinator (a `flock` command) say so at
once (exit 5) instead of waiting for a coordinator that will never act.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from support import (
    LONG,
    Coordinators,
    process_gone,
    run_aner,
    status_of,
    submit,
    wait_for,
)

from aner_coord.errors import MAX_MESSAGE_CHARS
from aner_coord.jobdir import lock_is_held

HUGE = 900_000


def _one_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[:2000]
    assert len(lines[0]) <= MAX_MESSAGE_CHARS + len("aner: "), len(lines[0])
    return lines[0]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (f'[grid]\nlr = [1e-3]\noptimizer = ["{"x" * HUGE}"]\n', "must be adam or sgd, got 'xxx"),
        (f"{'k' * HUGE} = 1\n[grid]\nlr = [1e-3]\n", "a search file takes seed, data"),
        (f'data = "{"d" * HUGE}.csv"\n[grid]\nlr = [1e-3]\n', ""),
    ],
    ids=["value", "key", "path"],
)
def test_a_huge_search_value_is_refused_in_one_bounded_line(
    tmp_path: Path, body: str, says: str
) -> None:
    spec = tmp_path / "search.toml"
    spec.write_text(
        "seed = 1\nfolds = 2\n" + ("teacher = [1000, 4, 2]\n" if "data" not in body else "") + body
    )
    out = tmp_path / "job"
    done = run_aner("parallel", "search", "--spec", str(spec), "--output", str(out))
    assert done.returncode == 2, done.stderr[:2000]
    line = _one_line(done.stderr)
    assert says in line and "characters ...]" in line, line
    assert not out.exists()


@pytest.fixture(scope="module")
def completed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    job = tmp_path_factory.mktemp("done") / "job"
    done = run_aner(
        "parallel", "run", "--samples", "1000000", "--seed", "7", "--output", str(job), "--quiet"
    )
    assert done.returncode == 0, done.stderr
    return job


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


@pytest.mark.parametrize(
    ("change", "what"), [(_fifo, "a FIFO"), (_directory, "a directory")], ids=["fifo", "dir"]
)
def test_status_of_a_completed_job_whose_result_is_not_a_file_says_so_on_stderr(
    completed: Path, tmp_path: Path, change: Callable[[Path], None], what: str
) -> None:
    job = Path(shutil.copytree(completed, tmp_path / "job"))
    change(job / "result.json")
    for extra in ((), ("--json",)):
        shown = run_aner("parallel", "status", "--job", str(job), *extra)
        assert shown.returncode == 0, shown.stderr  # the recorded state, as before
        line = _one_line(shown.stderr)
        assert f"is COMPLETED but {job / 'result.json'} cannot be read: it is {what}" in line


def test_cancel_of_a_job_whose_lock_another_process_holds_answers_at_once(
    tmp_path: Path, coordinators: Coordinators
) -> None:
    if shutil.which("flock") is None:
        pytest.skip("no flock(1) here")
    job = tmp_path / "job"
    pid = coordinators.add(submit(job, LONG, "--workers", "1", "--quiet"))
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: process_gone(pid), 30, "the killed coordinator to go")
    holder = subprocess.Popen(
        ["flock", str(job / "coordinator.lock"), "sleep", "3600"], stdin=subprocess.DEVNULL
    )
    try:
        wait_for(lambda: lock_is_held(job), 60, "the flock command to hold the lock")
        done = run_aner("parallel", "cancel", "--job", str(job), timeout=120)
        assert done.returncode == 5, done.stdout + done.stderr
        line = _one_line(done.stderr)
        assert "there is no coordinator to cancel" in line, line
        assert f"not by its coordinator (pid {pid}, which no longer runs)" in line, line
        assert not (job / "cancel-request").exists()
        shown = run_aner("parallel", "status", "--job", str(job))
        assert shown.returncode == 5, shown.stdout
        assert "COORDINATOR_OFFLINE" in shown.stdout and f"(pid {pid}," in shown.stdout
        assert status_of(job).pid == pid
    finally:
        holder.kill()  # flock's child, sleep, goes with the lock's last holder below
        holder.wait()
