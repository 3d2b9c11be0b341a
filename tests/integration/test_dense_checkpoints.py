"""A Dense training stopped by SIGKILL, SIGTERM, SIGHUP or `aner parallel cancel` resumes
from its last checkpoint to the bits of an uninterrupted run (issue 20 item 3;
`aner_coord.job.checkpoints`).

Real detached coordinators, real signals. What is compared with the uninterrupted run:
every array of `model.npz` (parameters, normalisation, classes, meta) bitwise, and every
field of `result.json` but the run's own account (`seconds`, `load_s`, `workers`,
`staging`, `losses`, `execution`, `steps_recovered`) and the epochs' `seconds`. A
checkpoint that is damaged, not a regular file or too large is refused in one line (exit 2),
the directory left as it was.
"""

from __future__ import annotations

import asyncio
import fcntl
import io
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from suite_env import child_env
from support import (
    ANER,
    Coordinators,
    advance_until,
    finish,
    process_gone,
    result_of,
    run_aner,
    spawned,
    status_of,
    status_where,
    wait_for,
)

from aner_coord.job.coordinator import STATUS_INTERVAL_S, JobReport
from aner_coord.job.execute import execute
from aner_coord.job.pace import Pace, prefix
from aner_coord.job.resume import prepare_resume
from aner_coord.jobdir.status import JobState, StatusSnapshot
from aner_coord.runner import run_sync

# 40,000 teacher rows: 28,136 training rows, 440 steps of 64 rows an epoch, 12 epochs
# (5,280 steps). Long enough (about 2.6 s on an idle machine) that the job cannot end between
# `--background` returning and the test's SIGSTOP, and that the `stopped` fixture, which has
# no checkpoint to wait for before it stops the job (none is due), sees a status (written at
# most every 0.5 s) RUNNING with committed steps long before the end.
PLAN = (
    "parallel", "train", "--teacher", "40000,16,4", "--hidden", "32,32", "--batch", "64",
    "--epochs", "12", "--patience", "100", "--seed", "3", "--workers", "1", "--quiet",
)  # fmt: skip
ACCOUNT = {"seconds", "load_s", "workers", "staging", "losses", "execution", "steps_recovered"}


def _env(**settings: str) -> dict[str, str]:
    return child_env(**settings)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    job = tmp_path_factory.mktemp("whole") / "job"
    done = run_aner(*PLAN, "--output", str(job), timeout=600)
    assert done.returncode == 0, done.stderr
    return job


def _numbers(job: Path) -> dict[str, Any]:
    result = {k: v for k, v in result_of(job).items() if k not in ACCOUNT}
    for record in result["history"]:
        del record["seconds"]
    return result


def assert_same_bits(job: Path, reference: Path) -> None:
    assert _numbers(job) == _numbers(reference)
    with np.load(job / "model.npz") as a, np.load(reference / "model.npz") as b:
        assert sorted(a.files) == sorted(b.files)
        for name in a.files:
            assert a[name].dtype == b[name].dtype and np.array_equal(a[name], b[name]), name


def _checkpoint_in_second_epoch(job: Path) -> Callable[[], int | None]:
    """A check: the committed steps of the job's checkpoint once it was taken mid-epoch in
    the second epoch (the file is written at the pass barrier, before any status)."""

    def check() -> int | None:
        try:
            data = (job / "checkpoint.npz").read_bytes()
        except FileNotFoundError:
            return None
        with np.load(io.BytesIO(data)) as kept:
            phase, epoch, step = str(kept["phase"]), int(kept["epoch"]), int(kept["step"])
            committed = int(kept["committed"])
        return committed if (phase, epoch) == ("training step", 1) and step > 0 else None

    return check


def _start(job: Path, coordinators: Coordinators, **settings: str) -> int:
    """Start the plan in the background and stop its coordinator (SIGSTOP) at once."""
    done = run_aner(*PLAN, "--output", str(job), "--background", env=_env(**settings))
    assert done.returncode == 0, done.stderr
    pid = coordinators.add(status_of(job).pid)
    os.kill(pid, signal.SIGSTOP)
    return pid


def _resume(job: Path) -> dict[str, Any]:
    done = run_aner("parallel", "resume", "--job", str(job), "--quiet", timeout=600)
    assert done.returncode == 0, done.stderr
    final = status_of(job)
    assert final.state is JobState.COMPLETED
    result = result_of(job)
    assert result["steps_recovered"] == final.steps_recovered
    return result


def test_sigkill_mid_epoch_resumes_from_the_last_checkpoint_to_the_same_bits(
    tmp_path: Path, uninterrupted: Path, coordinators: Coordinators
) -> None:
    job = tmp_path / "job"
    pid = _start(job, coordinators, ANER_CHECKPOINT_S="0")  # a checkpoint at every pass
    kept = advance_until(pid, _checkpoint_in_second_epoch(job), "a checkpoint mid-epoch 2")
    os.kill(pid, signal.SIGKILL)  # stopped where it stands, killed without a word
    wait_for(lambda: process_gone(pid), 30, "the killed coordinator to go")
    result = _resume(job)
    assert result["steps_recovered"] >= kept > 0
    assert result["steps_recovered"] < result["committed_steps"]
    assert_same_bits(job, uninterrupted)


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """One job per way of stopping it gracefully, with no periodic checkpoint (every hour):
    what they keep is the checkpoint written as they stop."""
    jobs: dict[str, Path] = {}
    coordinators = Coordinators()
    try:
        for how in ("SIGTERM", "SIGHUP", "cancel"):
            job = jobs[how] = tmp_path_factory.mktemp(how) / "job"
            pid = _start(job, coordinators, ANER_CHECKPOINT_S="3600")
            advance_until(
                pid,
                status_where(
                    job, lambda s: s.state is JobState.RUNNING and (s.committed_steps or 0) > 0
                ),
                "committed steps",
            )
            if how == "cancel":
                argv = [ANER, "parallel", "cancel", "--job", str(job)]
                with spawned(argv) as cancel:
                    wait_for((job / "cancel-request").exists, 60, "the cancel request")
                    os.kill(pid, signal.SIGCONT)
                    code, _out, err = finish(cancel, 120)
                    assert code == 4, err
            else:
                os.kill(pid, getattr(signal, how))
                os.kill(pid, signal.SIGCONT)
            wait_for(lambda pid=pid: process_gone(pid), 120, f"the coordinator to end ({how})")
        yield jobs
    finally:
        coordinators.cleanup()


@pytest.mark.parametrize("how", ["SIGTERM", "SIGHUP", "cancel"])
def test_a_stopped_job_keeps_a_checkpoint_and_resumes_to_the_same_bits(
    how: str, stopped: dict[str, Path], uninterrupted: Path, tmp_path: Path
) -> None:
    job = Path(shutil.copytree(stopped[how], tmp_path / "job"))
    status = status_of(job)
    assert status.state is JobState.CANCELLED
    assert status.checkpointed_steps == status.committed_steps
    assert (status.committed_steps or 0) > 0
    shown = run_aner("parallel", "status", "--job", str(job))
    assert f"resumable from its checkpoint of {status.committed_steps:,} committed steps" in (
        shown.stdout
    ), shown.stdout
    result = _resume(job)
    assert result["steps_recovered"] == status.committed_steps
    # It counted committed steps only, which its checkpoint holds: the resume recovers
    # exactly the work its last status reported, and the progress goes on from there.
    assert status_of(job).recovered == status.accepted > 0
    assert_same_bits(job, uninterrupted)
    shown = run_aner("parallel", "status", "--job", str(job))
    recovered = f"{status.committed_steps:,} of them recovered from a checkpoint"
    assert shown.returncode == 0 and recovered in shown.stdout, shown.stdout


def _one_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))


def _link(path: Path) -> None:
    target = path.with_name("elsewhere.npz")
    path.rename(target)
    path.symlink_to(target.name)


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _grow(path: Path) -> None:
    with path.open("ab") as f:
        f.truncate(path.stat().st_size + (64 << 20))


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (_flip, "is not a checkpoint its ledger vouches for"),
        (_link, "symbolic link"),
        (_fifo, "not a regular file"),
        (_grow, "the limit is"),
    ],
    ids=["damaged", "symlink", "fifo", "too-large"],
)
def test_a_checkpoint_resume_cannot_trust_is_refused_in_one_line(
    change: Any, says: str, stopped: dict[str, Path], tmp_path: Path
) -> None:
    job = Path(shutil.copytree(stopped["cancel"], tmp_path / "job"))
    change(job / "checkpoint.npz")
    listing = sorted((p.name, p.lstat().st_size, p.lstat().st_mtime_ns) for p in job.iterdir())
    done = run_aner("parallel", "resume", "--job", str(job), timeout=120)
    assert done.returncode == 2, done.stderr
    line = _one_line(done.stderr)
    assert "checkpoint.npz" in line and says in line, line
    after = sorted((p.name, p.lstat().st_size, p.lstat().st_mtime_ns) for p in job.iterdir())
    assert after == listing
    assert json.loads((job / "status.json").read_text())["state"] == "CANCELLED"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of its own (root only), which the test shrinks to fill and grows to free."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m,mode=0700", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _resize(mount: Path, size: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(mount)], check=True)


def test_a_checkpoint_the_disk_cannot_hold_fails_the_job_and_resume_continues_to_the_same_bits(
    small_disk: Path, uninterrupted: Path, coordinators: Coordinators
) -> None:
    """Issue 25 item 3: a full disk during a checkpoint leaves FAILED with the reason, never
    overwritten by the pass that was under way, and the last good checkpoint in place."""
    job = small_disk / "job"
    pid = _start(job, coordinators, ANER_CHECKPOINT_S="0")  # a checkpoint at every pass
    advance_until(pid, _checkpoint_in_second_epoch(job), "a checkpoint mid-epoch 2")
    good = (job / "checkpoint.npz").read_bytes()
    disk = os.statvfs(small_disk)
    used = (disk.f_blocks - disk.f_bfree) * disk.f_frsize
    # Room for the next pass's ledger records and status, not for another checkpoint.
    _resize(small_disk, used + len(good) - 4096)
    os.kill(pid, signal.SIGCONT)
    wait_for(lambda: process_gone(pid), 120, "the coordinator to end")
    status = json.loads((job / "status.json").read_text())
    log = (job / "coordinator.log").read_text() if (job / "coordinator.log").exists() else ""
    assert status["state"] == "FAILED", log[-3000:]
    assert "checkpoint.npz" in status["error"], status["error"]
    assert "No space left on device" in status["error"], status["error"]
    shown = run_aner("parallel", "status", "--job", str(job))
    assert shown.returncode == 3, shown.stdout + shown.stderr
    assert "No space left on device" in shown.stdout + shown.stderr, shown.stdout
    assert (job / "checkpoint.npz").read_bytes() == good  # the last good one, in place
    _resize(small_disk, 64 << 20)  # space freed
    result = _resume(job)
    assert result["steps_recovered"] > 0
    assert_same_bits(job, uninterrupted)


def _lock_free(job: Path) -> bool:
    with open(job / "coordinator.lock", "rb") as held:
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(held, fcntl.LOCK_UN)
        return True


def _checkpoint_of_steps(job: Path, steps: int) -> Callable[[], int | None]:
    """A check: the committed items of the job's checkpoint once it holds `steps` steps."""

    def check() -> int | None:
        try:
            data = (job / "checkpoint.npz").read_bytes()
        except FileNotFoundError:
            return None
        with np.load(io.BytesIO(data)) as kept:
            return 1 if int(kept["committed"]) >= steps else None

    return check


def test_a_resumed_job_counts_what_its_checkpoint_holds_from_its_first_status(
    tmp_path: Path, coordinators: Coordinators
) -> None:
    """Issue 27 item 6: killed mid-way and resumed (here, its coordinator in this process,
    every snapshot observed), the job's numerator starts at the checkpoint's work, its total
    stays the plan, and its rate and ETA wait for work of its own. The resumed run is
    cancelled after a few snapshots: the rest is the tests above."""
    job = tmp_path / "job"
    pid = _start(job, coordinators, ANER_CHECKPOINT_S="0")  # a checkpoint at every pass
    advance_until(pid, _checkpoint_of_steps(job, 30), "a checkpoint of 30 steps")
    os.kill(pid, signal.SIGKILL)
    # A zombie's other threads may still hold its files (the lock) a moment longer.
    wait_for(lambda: _lock_free(job), 30, "the killed coordinator to go")
    admitted, resumption = prepare_resume(job)
    assert resumption.checkpoint is not None
    kept = resumption.checkpoint.items
    plan = admitted.admitted.planned_work
    seen: list[StatusSnapshot] = []

    async def resumed() -> JobReport:
        cancel = asyncio.Event()

        def observe(snapshot: StatusSnapshot) -> None:
            seen.append(snapshot)
            if len(seen) >= 6 and snapshot.accepted > kept:
                cancel.set()
            elif not cancel.is_set():
                # Slow: the next pass's snapshot is then due (snapshots are published at most
                # every STATUS_INTERVAL_S), so several are seen whatever the machine's speed.
                time.sleep(STATUS_INTERVAL_S)

        return await execute(admitted, resume=resumption, observers=[observe], cancel=cancel)

    report = run_sync(resumed())
    assert report.state is JobState.CANCELLED
    first = seen[0]
    assert 0 < kept < plan
    assert first.accepted == first.recovered == kept
    assert first.total_work == plan
    pace = Pace(admitted.admitted.segments, admitted.admitted.prior_costs)
    assert first.fraction_done == round(pace.fraction(prefix(admitted.admitted.segments, kept)), 6)
    assert first.eta_s is None and first.throughput is None  # nothing of its own yet
    assert all(s.total_work == plan for s in seen)
    assert seen[-1].accepted > kept
    fractions = [s.fraction for s in seen]
    assert fractions == sorted(fractions)
    print(
        f"checkpoint {kept:,} of {plan:,} rows ({kept / plan:.1%} of the rows, "
        f"{first.fraction:.1%} of the cost); {len(seen)} snapshots"
    )
