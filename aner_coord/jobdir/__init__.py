"""The job directory of docs/contracts.md, section 7: where the bytes of a job reach the disk, and
the files' own types.

- `directory`: `JobDir`, one descriptor of the directory through which every file is
  written (atomically) and read (regular files only, bounded); the file names and their
  read limits; `JobDirError` (a write failed, exit 3), `JobFileError` (a file cannot be
  read as one, exit 2);
- `writer`: `StatusWriter`, which writes `status.json` from a thread of its own;
- `lock`: the coordinator's `flock` (`JobLock`) and the monitors' probe of it;
- `watch`: watching for changes (monitors) and for `cancel-request` (coordinators);
- `ledger`: accepted chunks and committed passes, durable before a status reports them;
- `jobkey`: the user's job key, which keys the MACs of the ledger's records;
- `timeline`: `timeline.jsonl`, where the job's time went (bounded; written and read);
- `status`, `manifest`, `results`: the job files as msgspec Structs;
- `sources`: the SHA256 of every source file of aner's packages, which the manifest records;
- `index`: the per-user index of this host's job directories, behind `aner parallel jobs`,
  and their durable queue, which outlives a reboot.
"""

from aner_coord.jobdir.directory import (
    CANCEL_REQUEST,
    CHECKPOINT,
    ERROR_DETAIL,
    LEDGER,
    LOCK,
    LOG,
    MANIFEST,
    MODEL,
    READ_LIMITS,
    REQUEST,
    RESULT,
    STATUS,
    TIMELINE,
    JobDir,
    JobDirError,
    JobFileError,
    check_new_output,
    read_json,
    read_status,
)
from aner_coord.jobdir.lock import JobLock, foreign_holder, lock_is_held
from aner_coord.jobdir.watch import cancel_requests, watch_job_dir
from aner_coord.jobdir.writer import StatusWriter

__all__ = [
    "CANCEL_REQUEST",
    "CHECKPOINT",
    "ERROR_DETAIL",
    "LEDGER",
    "LOCK",
    "LOG",
    "MANIFEST",
    "MODEL",
    "READ_LIMITS",
    "REQUEST",
    "RESULT",
    "STATUS",
    "TIMELINE",
    "JobDir",
    "JobDirError",
    "JobFileError",
    "JobLock",
    "StatusWriter",
    "cancel_requests",
    "check_new_output",
    "foreign_holder",
    "lock_is_held",
    "read_json",
    "read_status",
    "watch_job_dir",
]
