"""The job's lock (`aner_coord.jobdir.lock`): the coordinator that takes it removes what a
killed one left half-written. Before issue 36 a `kill -9` during a checkpoint write left
`.checkpoint.npz.<hex>.tmp` (up to 2.3 MB each) for good, one per such kill, still there
after the job completed."""

from __future__ import annotations

import os
from pathlib import Path

from aner_coord.jobdir import JobDir, JobLock


def test_taking_the_lock_removes_the_temporaries_a_killed_coordinator_left(
    tmp_path: Path,
) -> None:
    job = tmp_path / "job"
    with JobDir.create(job) as directory:
        left = [".checkpoint.npz.0123456789ab.tmp", ".status.json.fedcba987654.tmp"]
        for name in left:
            (job / name).write_bytes(b"\0" * (2 << 20))
        # Kept: a cancel request being written (`cancel` takes no lock), a user's own files,
        # and anything that is not a regular file.
        kept = [".cancel-request.0123456789ab.tmp", "notes.tmp", ".model.npz.xyz.tmp"]
        for name in kept:
            (job / name).write_text("mine\n")
        os.mkdir(job / ".result.json.00000000abcd.tmp")
        lock = JobLock(directory)
        lock.acquire()
        try:
            names = set(os.listdir(job))
        finally:
            lock.release()
    assert not names & set(left)
    assert set(kept) | {".result.json.00000000abcd.tmp"} <= names
