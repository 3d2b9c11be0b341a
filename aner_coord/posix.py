"""What needs a POSIX system, and the one-line refusal where it is missing (Windows).

Local computation (`parallel.local`, threads in this process, with `output=` or without)
needs nothing of POSIX. Two things do, and are refused before anything starts elsewhere:

- **job directories** (`output=` / `--output`, and so `--background`, `status`, `cancel`,
  `resume`): one live coordinator per job is held with `flock`, and every file is reached
  through a directory descriptor without following links (`openat`, `O_NOFOLLOW`), which is
  what keeps a job directory safe from symlink races. A Windows port would need a
  `msvcrt.locking` lock and a directory layer without descriptors; until then a job
  directory is refused in one line rather than run with weaker guarantees;
- **worker groups** (`cluster(...)`: local pipes, SSH, Slurm): worker processes are
  signalled, reaped and kept in their coordinator's process group the POSIX way.

The test is by capability, not by name: `fcntl` must be importable (it is on every POSIX
system and on no other).
"""

from __future__ import annotations

import functools
import importlib
import os
import sys

from aner_coord.errors import RequestError


@functools.cache
def missing() -> str | None:
    """Why this is not a POSIX system aner can use, or None when it is."""
    if os.name != "posix":
        return f"this is {sys.platform}"
    try:
        importlib.import_module("fcntl")
    except ImportError:
        return "the fcntl module is not available"
    return None


def require(what: str, *arguments: str) -> None:
    """Refuse `what` (a phrase that may name request arguments as `{name}`) where POSIX is
    missing: RequestError, exit 2, nothing started."""
    reason = missing()
    if reason is not None:
        raise RequestError(
            f"{what} need a POSIX system such as Linux or macOS ({reason}); local "
            "computation without a job directory works here",
            *arguments,
        )
