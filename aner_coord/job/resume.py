"""`aner parallel resume --job DIR`: continue a job whose coordinator is gone, or that failed
or was cancelled, from its ledger (SPEC section 11).

`prepare_resume` checks, in this order, and refuses with one line and exit 2: the directory
is a job directory of ours; no coordinator holds its lock (which it then takes); the job has
not COMPLETED; the manifest's source fingerprint is the installed one (a different `aner`
could compute different numbers); the request still admits (its cluster file, say). The
ledger then says which chunks were accepted and which passes committed: the new coordinator
replays them through a fresh run and recomputes only the rest, so the result is the one an
uninterrupted run gives.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import msgspec

from aner_coord import jobdir
from aner_coord.admission import Job, admit
from aner_coord.errors import RequestError
from aner_coord.job.execute import REQUEST, Resumption
from aner_coord.jobdir import ledger
from aner_coord.jobdir.manifest import decode_manifest
from aner_coord.jobdir.status import JobState
from aner_coord.requests import JobRequest, with_absolute_paths
from aner_coord.specfile import decode_request


def prepare_resume(path: str | Path, *, expect: JobRequest | None = None) -> tuple[Job, Resumption]:
    """Check and lock the job at `path` for a new coordinator (RequestError, exit 2). With
    `expect`, the directory must hold that very request (`run --resume`)."""
    target = Path(path)
    try:
        directory = jobdir.JobDir.open(target, own=True)
    except FileNotFoundError:
        raise RequestError(f"no job directory at {target}: check the --job path") from None
    except OSError as exc:
        raise RequestError(f"cannot open job directory {target}: {exc.strerror}") from None
    lock: jobdir.JobLock | None = None
    try:
        if not directory.exists(jobdir.MANIFEST):
            raise RequestError(f"{target} is not an aner job directory (no {jobdir.MANIFEST})")
        lock = jobdir.JobLock(directory)
        try:
            lock.acquire()
        except RequestError:
            lock = None
            raise RequestError(
                f"job {target} has a live coordinator (it holds the lock): nothing to resume; "
                f"follow it with `aner parallel status --job {target} --watch`"
            ) from None
        job, resumption = _check(target, directory, lock, expect)
        return job, resumption
    except BaseException:
        if lock is not None:
            lock.release()
        directory.close()
        raise


def _check(
    target: Path, directory: jobdir.JobDir, lock: jobdir.JobLock, expect: JobRequest | None
) -> tuple[Job, Resumption]:
    from aner_worker.contract import source_fingerprint

    try:
        manifest = decode_manifest(directory.read_bytes(jobdir.MANIFEST))
        request = decode_request(directory.read_bytes(REQUEST), fmt="json", source=str(target))
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise RequestError(
            f"job {target} cannot be resumed: its files are unreadable: {exc}"
        ) from None
    if expect is not None and with_absolute_paths(
        msgspec.structs.replace(expect, output=None)
    ) != with_absolute_paths(msgspec.structs.replace(request, output=None)):
        raise RequestError(
            f"{target} holds a different job than this request: give --output a new directory"
        )
    try:
        status = jobdir.read_status(directory)
        last_seq = status.seq
        completed = status.state is JobState.COMPLETED and directory.exists(jobdir.RESULT)
    except FileNotFoundError:
        last_seq, completed = 0, False
    if completed:
        raise RequestError(f"job {target} has COMPLETED: nothing to resume (see {jobdir.RESULT})")
    installed = source_fingerprint()
    if manifest.source_fingerprint != installed:
        raise RequestError(
            f"job {target} was started by a different aner (source fingerprint "
            f"{manifest.source_fingerprint}, installed {installed}): resume it with that "
            "version, or start it again with a new --output"
        )
    job = dataclasses.replace(admit(msgspec.structs.replace(request, output=None)), output=target)
    recovered = ledger.read_ledger(directory)
    recovered.resumes += 1
    return job, Resumption(directory, lock, recovered, last_seq)
