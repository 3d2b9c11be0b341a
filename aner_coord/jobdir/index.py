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
from dataclasses import dataclass
from pathlib import Path

from aner_coord.jobdir.directory import MANIFEST, JobDir, JobDirError, JobFileError, read_json
from aner_coord.jobdir.ledger import job_id
from aner_worker.files import FileRefused, read_regular, replace_in
from aner_worker.leases import LeaseError, private_dir

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
    """Put the job of identity `key` in `directory` in the index (best effort)."""
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
