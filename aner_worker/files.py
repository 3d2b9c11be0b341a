"""Files replaced whole, so that a reader (or a crash) sees the old content or the new,
never a part: the block cache of a worker, the configuration registry.

The job directory has its own writer (`aner_coord.jobdir`), which works through a held
directory descriptor so that a swapped directory cannot redirect it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` with `data`, owner-only: a temporary file beside it is written,
    fsynced and renamed over it, then the directory is fsynced. A failure leaves `path` as
    it was and no temporary file behind."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:  # mkstemp made it 0o600
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
