"""The per-user index of this host's job directories, behind `aner parallel jobs`
(docs/contracts.md, section 13).

`jobs/` in aner's runtime directory (`aner_worker.leases.runtime_dir`, owner-only) holds
one small file per job, named by the job's id (`ledger.job_id`, 12 hex digits), holding the
absolute path of its directory. A coordinator registers its job once the directory exists
(and again when it resumes); registering is best effort: a job never fails because its
index entry could not be written (a warning is logged).

A reader trusts nothing it finds there: a name that is not an id, an entry that is not a
small regular file holding one absolute path, a directory that is gone or whose manifest
names another job (a directory deleted and made again at the same path) is skipped, and
an entry whose directory is gone is removed. The runtime directory is per boot where it is
`$XDG_RUNTIME_DIR`, so the index lists recent jobs, not a history.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from aner_coord.jobdir.directory import MANIFEST, JobDir, JobDirError, JobFileError, read_json
from aner_coord.jobdir.ledger import job_id
from aner_worker.files import FileRefused, read_regular, replace_in
from aner_worker.leases import LeaseError, checked_dir, private_dir

INDEX = "jobs"
ENTRY_BYTES = 4096
_ID = re.compile(r"[0-9a-f]{12}")

log = logging.getLogger("aner.index")


@dataclass(frozen=True)
class Entry:
    """One registered job: its id, its directory and when it was registered (Unix time)."""

    job: str
    directory: Path
    registered: float


def register(directory: Path, key: bytes) -> None:
    """Put the job of identity `key` in `directory` in the index, and in the durable queue
    that outlives a reboot (`enqueue`; both best effort)."""
    enqueue(directory, key)
    data = os.fsencode(str(directory.absolute())) + b"\n"
    try:
        index = private_dir(INDEX)
        fd = os.open(index, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            replace_in(fd, job_id(key), data)
        finally:
            os.close(fd)
    except (LeaseError, OSError) as exc:
        log.warning("job %s is not in the job index (`aner parallel jobs`): %s", directory, exc)


def index_dir() -> Path:
    """The index's directory, checked; LeaseError naming it when it is not safe to use."""
    return private_dir(INDEX)


def entries(index: Path) -> list[Entry]:
    """The index's entries whose job directory still holds that job, oldest first; entries
    of deleted directories are removed."""
    found: list[Entry] = []
    fd = os.open(index, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in sorted(os.listdir(fd)):
            if not _ID.fullmatch(name):
                continue
            entry = _read(fd, name)
            if entry is not None:
                found.append(entry)
    finally:
        os.close(fd)
    return sorted(found, key=lambda e: (e.registered, e.job))


def _read(index: int, name: str) -> Entry | None:
    try:
        data = read_regular(name, ENTRY_BYTES, dir_fd=index)
        registered = os.stat(name, dir_fd=index, follow_symlinks=False).st_mtime
    except (OSError, FileRefused):
        return None
    text = data.decode("utf-8", "replace").rstrip("\n")
    if not text.startswith("/") or "\n" in text or "\0" in text:
        return None
    directory = Path(text)
    if not _holds(directory, name):
        if not os.path.lexists(directory):
            _forget(index, name)
        return None
    return Entry(name, directory, registered)


def _holds(directory: Path, job: str) -> bool:
    """Whether `directory` is a job directory whose manifest names the job `job`."""
    try:
        with JobDir.open(directory, own=True) as opened:
            manifest = read_json(opened, MANIFEST)
    except (OSError, JobDirError, JobFileError, FileRefused):
        return False
    return isinstance(manifest, dict) and str(manifest.get("job", ""))[:12] == job


def _forget(index: int, name: str) -> None:
    # Another reader may have removed it first, or the index is not writable: harmless.
    with contextlib.suppress(OSError):
        os.unlink(name, dir_fd=index)


# --------------------------------------------------------------------------- the durable queue
# (docs/contracts.md, section 13, "After a reboot"). The index above lives in the runtime
# directory, which is per boot: after a reboot it is gone, and with it every trace of the
# jobs that were QUEUED or RUNNING. So each job is also registered in `queue/` of aner's
# state directory (`state_dir`), once, when it first starts (the entry's time is the job's
# place in the queue), read by the index's rules (`entries`); a reader removes the entries
# of jobs that have ended (`forget`).

STATE_ENV = "ANER_STATE_DIR"
QUEUE = "queue"


def state_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    given = env.get(STATE_ENV)
    if given:
        return Path(given).absolute()
    state = env.get("XDG_STATE_HOME")
    base = Path(state) if state and os.path.isabs(state) else Path.home() / ".local" / "state"
    return base / "aner"


def queue_dir(*, create: bool) -> Path | None:
    """The queue's directory, checked (made first with `create`; None when it does not
    exist and `create` is false). LeaseError naming a directory that is not safe."""
    path = state_dir() / QUEUE
    if not create and not path.is_dir():
        return None
    base = state_dir()
    if create:
        base.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    for directory in (base, path):
        checked_dir(directory)
    return path


def enqueue(directory: Path, key: bytes) -> None:
    """Put the job of identity `key` in `directory` in the durable queue, once (best
    effort: a resumed job keeps its first place)."""
    data = os.fsencode(str(directory.absolute())) + b"\n"
    try:
        queue = queue_dir(create=True)
        assert queue is not None
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(queue / job_id(key), flags, 0o600)
        except FileExistsError:
            return
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
    except (LeaseError, OSError) as exc:
        log.warning("job %s is not in the durable queue (after a reboot): %s", directory, exc)


def queued() -> list[Entry]:
    """The durable queue's entries whose directory still holds their job, oldest first."""
    try:
        queue = queue_dir(create=False)
    except LeaseError:
        return []
    return [] if queue is None else entries(queue)


def forget(job: str) -> None:
    """Remove job `job`'s entry (it has ended)."""
    try:
        queue = queue_dir(create=False)
    except LeaseError:
        return
    if queue is not None:
        with contextlib.suppress(OSError):
            os.unlink(queue / job)
