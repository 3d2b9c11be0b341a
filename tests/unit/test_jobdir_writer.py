"""StatusWriter: writes on a thread of its own, coalesces to the latest snapshot, writes a
state change at once, holds COMPLETED back until the result is on disk, flushes on close,
and never lets a write error vanish."""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
from support import wait_for

from aner_coord import jobdir
from aner_coord.jobdir.status import STATUS_SCHEMA, JobState, StatusSnapshot, decode_status

FOREVER = 3600.0  # a rate limit no test outlives: only state changes and flushes write


def snap(seq: int, state: JobState = JobState.RUNNING) -> StatusSnapshot:
    return StatusSnapshot(
        schema=STATUS_SCHEMA, seq=seq, state=state, kind="monte-carlo", pid=1, created_at=1.0,
        updated_at=1.0 + seq, elapsed_s=float(seq), requested=1000, passes=1, pass_index=0,
        phase="sampling", accepted=seq, accepted_in_pass=seq, chunks_total=1000,
        chunks_done=seq, in_flight=1, throughput=None, eta_s=None, workers=[],
    )  # fmt: skip


def on_disk(job: Path) -> StatusSnapshot:
    return decode_status((job / jobdir.STATUS).read_bytes())


class Recorder:
    """Wraps a JobDir's write_bytes to note which thread wrote which seq."""

    def __init__(self, directory: jobdir.JobDir, monkeypatch: pytest.MonkeyPatch) -> None:
        self.writes: list[tuple[str, int]] = []
        real: Callable[[str, bytes], None] = directory.write_bytes

        def write_bytes(name: str, data: bytes) -> None:
            real(name, data)
            self.writes.append((threading.current_thread().name, decode_status(data).seq))

        monkeypatch.setattr(directory, "write_bytes", write_bytes)


def test_writes_run_on_the_writer_thread_and_coalesce_to_the_latest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with jobdir.JobDir.create(tmp_path / "job") as directory:
        recorder = Recorder(directory, monkeypatch)
        writer = jobdir.StatusWriter(directory, min_interval_s=FOREVER)
        writer(snap(1, "STARTING"))
        # The first status is on disk when the call returns: a job is ready only then.
        assert on_disk(directory.path).seq == 1
        for seq in range(2, 201):
            writer(snap(seq))
        writer.close()
        assert on_disk(directory.path).seq == 200
    threads = [name for name, _ in recorder.writes]
    seqs = [seq for _, seq in recorder.writes]
    assert threads[0] == threading.current_thread().name
    assert set(threads[1:]) == {"aner-status-writer"}
    # One write for the state change, one for the flush at close (or one if the change was
    # picked up last): 199 snapshots coalesced.
    assert 2 <= len(seqs) <= 3, seqs
    assert seqs == sorted(set(seqs)) and seqs[-1] == 200


def test_a_state_change_is_written_at_once_despite_the_rate_limit(tmp_path: Path) -> None:
    with jobdir.JobDir.create(tmp_path / "job") as directory:
        writer = jobdir.StatusWriter(directory, min_interval_s=FOREVER)
        writer(snap(1))
        writer(snap(2))  # same state: waits for the interval
        writer(snap(3, JobState.CANCELLING))
        wait_for(lambda: on_disk(directory.path).state is JobState.CANCELLING, 10, "CANCELLING")
        assert on_disk(directory.path).seq == 3
        writer(snap(4, JobState.CANCELLING))
        writer.flush()  # a flush does not wait for the interval
        assert on_disk(directory.path).seq == 4
        writer.close()


def test_completed_waits_for_commit_and_close_writes_it(tmp_path: Path) -> None:
    with jobdir.JobDir.create(tmp_path / "job") as directory:
        writer = jobdir.StatusWriter(directory)
        writer(snap(1))
        writer(snap(2, JobState.COMPLETED))
        writer(snap(3, JobState.COMPLETED))
        writer.flush()
        assert on_disk(directory.path).state is JobState.RUNNING
        writer.commit_completed()
        writer.close()
        written = on_disk(directory.path)
        assert (written.state, written.seq) == (JobState.COMPLETED, 3)


def test_a_write_error_on_the_thread_is_reported_and_raised_once(tmp_path: Path) -> None:
    errors: list[jobdir.JobDirError] = []
    job = tmp_path / "job"
    with jobdir.JobDir.create(job) as directory:
        writer = jobdir.StatusWriter(directory, on_error=errors.append)
        writer(snap(1))
        shutil.rmtree(job)
        writer(snap(2, "CANCELLING"))
        wait_for(lambda: errors, 10, "the writer thread's error")
        expected = f"cannot write {job / 'status.json'}: the job directory was deleted"
        assert [str(e) for e in errors] == [expected]
        with pytest.raises(jobdir.JobDirError, match="the job directory was deleted"):
            writer(snap(3, "CANCELLED"))
        writer.close()  # already raised: close does not raise it again


def test_close_raises_an_error_nobody_has_seen(tmp_path: Path) -> None:
    job = tmp_path / "job"
    with jobdir.JobDir.create(job) as directory:
        writer = jobdir.StatusWriter(directory)
        writer(snap(1))
        shutil.rmtree(job)
        writer(snap(2, "FAILED"))
        with pytest.raises(jobdir.JobDirError, match="the job directory was deleted"):
            writer.close()


def test_aclose_flushes_from_the_event_loop(tmp_path: Path) -> None:
    with jobdir.JobDir.create(tmp_path / "job") as directory:
        writer = jobdir.StatusWriter(directory, min_interval_s=FOREVER)

        async def run() -> None:
            writer(snap(1))
            writer(snap(2))  # held by the rate limit until the close
            await writer.aclose()

        asyncio.run(run())
        assert on_disk(directory.path).seq == 2


def test_a_writer_by_path_still_works(tmp_path: Path) -> None:
    """The old call (a path) opens the directory itself, refusing a symlink."""
    job = tmp_path / "job"
    job.mkdir()
    writer = jobdir.StatusWriter(job)
    writer(snap(1))
    writer(msgspec.structs.replace(snap(2), state="CANCELLED"))
    writer.close()
    assert on_disk(job).state is JobState.CANCELLED
    (tmp_path / "link").symlink_to(job)
    with pytest.raises(NotADirectoryError):  # O_DIRECTORY | O_NOFOLLOW on a link
        jobdir.StatusWriter(tmp_path / "link")


def test_status_shows_elapsed_since_submission_and_since_start() -> None:
    from aner_coord.cli.monitor import elapsed_text

    queued = msgspec.structs.replace(
        snap(11, JobState.QUEUED), created_at=100.0, submitted_at=100.0, updated_at=111.2
    )
    assert elapsed_text(queued) == "11.2 s since submission (not started)"
    running = msgspec.structs.replace(
        snap(2), created_at=111.5, submitted_at=100.0, updated_at=113.4,
        elapsed_s=1.9,
    )  # fmt: skip
    assert elapsed_text(running) == "13.4 s since submission, 1.9 s since start"
    older = msgspec.structs.replace(running, submitted_at=None)  # an older writer's file
    assert elapsed_text(older) == "1.9 s since submission, 1.9 s since start"
