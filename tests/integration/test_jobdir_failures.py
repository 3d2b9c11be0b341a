"""A failing machine: a full disk, a job directory deleted mid-run, an output the OS refuses.

Each ends with one clear line and a documented exit code (3 for a job that fails, 2 for an
output that cannot be created), never a traceback; a run that could not start leaves no
half-made directory behind.

The full disk is real: a 64 KiB-class tmpfs mounted in tmp_path (needs root, or
CAP_SYS_ADMIN), filled by a file that keeps taking whatever space is freed. Where mounting
is refused, RLIMIT_FSIZE gives the same kind of failure without privileges: a write past the
limit fails with EFBIG ("File too large"; Python ignores SIGXFSZ, so it is an error, not a
signal), which exercises the same path as ENOSPC.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from support import (
    ANER,
    CHUNK,
    LONG,
    finish,
    run_aner,
    spawned,
    status_of,
    wait_for,
    wait_running,
)

from aner_coord import jobdir
from aner_coord.jobdir.status import JobState

# --------------------------------------------------------------------------- helpers


@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    mount = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mount.returncode != 0:
        reason = mount.stderr.strip()
        pytest.skip(f"cannot mount a tmpfs here ({reason}): the RLIMIT_FSIZE test covers it")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


class Filler:
    """A file that takes every byte the filesystem will give, now and whenever some is freed."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def take(self) -> bool:
        """Write until the disk is full; True once a write was refused."""
        block = b"\0" * 4096
        while True:
            try:
                os.write(self._fd, block)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                return True

    def close(self) -> None:
        os.close(self._fd)


def start_run(
    job: Path, *extra: str, preexec: Callable[[], None] | None = None
) -> AbstractContextManager[subprocess.Popen[str]]:
    argv = [
        ANER, "parallel", "run", "--samples", LONG, "--seed", "1", "--workers", "1",
        "--chunk", CHUNK, "--output", str(job), *extra,
    ]  # fmt: skip
    return spawned(argv, preexec_fn=preexec)


def wait_started(job: Path) -> None:
    # Generous: a loaded machine takes its time to start a job.
    wait_for(lambda: (job / "status.json").exists(), 120, "the first status")
    wait_running(job, timeout=120)


def one_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


# --------------------------------------------------------------------------- a full disk


def test_a_disk_filling_up_mid_run_fails_the_job_with_one_line(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", "1m") as disk:
        job = disk / "job"
        filler = Filler(disk / "filler")
        try:
            with start_run(job) as proc:
                wait_started(job)
                # Keep taking freed space: each status replacement frees the old file's page.
                wait_for(lambda: filler.take() and proc.poll() is not None, 60, "the run to fail")
                code, out, err = finish(proc, timeout=60)
        finally:
            filler.close()
        assert code == 3, err
        assert out == ""
        line = one_line(err)
        # Which write meets the full disk first, the status's or the ledger's, is the
        # moment's: either way one line naming that file.
        assert line in {
            f"aner: job failed (job directory {job}): writing the job directory failed: "
            f"cannot write {job / name}: No space left on device"
            for name in ("status.json", "ledger")
        }, line
        # What was written before stays whole; no temp file is left behind.
        assert status_of(job).state is JobState.RUNNING
        assert sorted(os.listdir(job)) == [
            "ledger", "request.json", "run-manifest.json", "status.json", "timeline.jsonl"
        ]  # fmt: skip


def test_a_full_disk_at_start_leaves_no_directory(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", "256k") as disk:
        filler = Filler(disk / "filler")
        try:
            filler.take()
            done = run_aner(
                "parallel", "run", "--samples", "100000", "--seed", "1",
                "--output", str(disk / "job"),
            )  # fmt: skip
        finally:
            filler.close()
        assert done.returncode == 3, done.stderr
        line = one_line(done.stderr)
        assert line.startswith(f"aner: cannot write {disk / 'job'}/")
        assert line.endswith(": No space left on device")
        assert os.listdir(disk) == ["filler"]


PAGE = 4096


def pages(path: Path) -> int:
    return -(-path.stat().st_size // PAGE)


@pytest.mark.parametrize("background", [False, True], ids=["foreground", "background"])
@pytest.mark.parametrize(("extra", "name"), [(0, "ledger"), (1, "status.json")])
def test_a_first_status_the_disk_refuses_leaves_no_directory_and_names_the_file(
    tmp_path: Path, extra: int, name: str, background: bool
) -> None:
    """A tmpfs of a few pages: the lock (a page), the manifest and the request fit, measured
    on a run of the same request; then the ledger's first record (a page) or, one page
    more, the first status does not. The run never started: one line naming the file and
    the system's reason, exit 3, no directory, no class name (the status writer was once
    reported as "StatusWriter failed")."""
    argv = ("parallel", "run", "--samples", "100000", "--seed", "1", "--workers", "1")
    measured = tmp_path / "measured" / "job"
    measured.parent.mkdir()
    assert run_aner(*argv, "--output", str(measured)).returncode == 0
    fit = 1 + pages(measured / jobdir.MANIFEST) + pages(measured / "request.json") + extra
    with tmpfs(tmp_path / "disk", f"{fit * PAGE // 1024}k") as disk:
        job = disk / "job"
        done = run_aner(
            *argv, "--output", str(job), *(["--background"] if background else []),
        )  # fmt: skip
        assert done.returncode == 3, done.stderr
        assert one_line(done.stderr) == (
            f"aner: cannot write {job / name}: No space left on device"
        )
        assert done.stdout == ""
        assert os.listdir(disk) == []


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (256, 256))


def test_a_file_size_limit_at_start_fails_cleanly_and_leaves_no_directory(
    tmp_path: Path,
) -> None:
    """Unprivileged: the manifest (over 256 bytes) cannot be written (EFBIG)."""
    job = tmp_path / "job"
    with start_run(job, preexec=_limit_file_size) as proc:
        code, out, err = finish(proc, timeout=60)
    assert code == 3, err
    assert out == ""
    assert one_line(err) == f"aner: cannot write {job / 'run-manifest.json'}: File too large"
    assert os.listdir(tmp_path) == []


# --------------------------------------------------------------------------- deleted


def _delete(job: Path) -> bool:
    # The coordinator may be creating a temp file at that moment: try until it is gone.
    shutil.rmtree(job, ignore_errors=True)
    return not os.path.lexists(job)


def test_a_job_directory_deleted_mid_run_fails_the_job_with_one_line(tmp_path: Path) -> None:
    job = tmp_path / "job"
    with start_run(job) as proc:
        wait_started(job)
        wait_for(lambda: _delete(job), 30, "the job directory to be deleted")
        code, out, err = finish(proc, timeout=60)
    assert code == 3, err
    assert out == ""
    assert one_line(err) == (
        f"aner: job failed (job directory {job}): writing the job directory failed: "
        f"cannot write {job / 'status.json'}: the job directory was deleted"
    )
    assert not os.path.lexists(job)


# --------------------------------------------------------------------------- refused


@pytest.mark.parametrize(
    "output",
    ["/proc/aner-test-job", "/sys/aner-test-job", "/sys/kernel/aner-test-job", "x" * 300],
)
def test_an_output_the_os_refuses_is_one_line_and_exit_2(tmp_path: Path, output: str) -> None:
    path = output if output.startswith("/") else str(tmp_path / output)
    for background in ((), ("--background",)):
        done = run_aner(
            "parallel", "run", "--samples", "1000", "--seed", "1", "--output", path, *background
        )  # fmt: skip
        assert done.returncode == 2, (background, done.stderr)
        line = one_line(done.stderr)
        assert line.startswith("aner: cannot "), line
        # The path, or where it is longer than a refusal echoes whole (a word of over 200
        # characters), its two ends.
        assert path in line or (path[:60] in line and path[-30:] in line), line
        assert len(line) <= 500
        assert not os.path.lexists(path)


def test_a_write_into_a_deleted_directory_names_the_cause(tmp_path: Path) -> None:
    """A JobDir whose directory is deleted knows it, and a write says so (the `status
    --watch` counterpart lives in test_monitor_edges.py)."""
    directory = jobdir.JobDir.create(tmp_path / "job")
    with directory:
        directory.write_json(jobdir.MANIFEST, {})
        shutil.rmtree(tmp_path / "job")
        assert directory.gone()
        with pytest.raises(jobdir.JobDirError) as caught:
            directory.write_json(jobdir.STATUS, {})
    assert str(caught.value) == (
        f"cannot write {tmp_path / 'job' / 'status.json'}: the job directory was deleted"
    )
    assert caught.value.exit_code == 3
