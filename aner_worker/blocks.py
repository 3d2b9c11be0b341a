"""The worker's cache of staged data blocks, under the user's cache directory.

A block is named by the SHA256 of its bytes and stored as a file of that name in
`$XDG_CACHE_HOME/aner/blocks` (else `~/.cache/aner/blocks`), created owner-only (`0700`, files
`0600`). A block is trusted only if its bytes still hash to its name, so a damaged file counts
as missing and is sent again. Writes are atomic (temporary file, fsync, rename), so a worker
killed mid-write leaves no half block behind a valid name.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from aner_worker.files import write_atomically

# One block of a staged data set: a frame carries one, well inside the frame limit.
BLOCK_BYTES = 4 << 20


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or ""
    root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"
    return root / "aner" / "blocks"


def split(blob: bytes | memoryview, size: int = BLOCK_BYTES) -> list[tuple[str, memoryview]]:
    """`(sha256 hex, bytes)` of each block of `blob`, in order, the last the remainder."""
    view = memoryview(blob)
    return [
        (hashlib.sha256(view[start : start + size]).hexdigest(), view[start : start + size])
        for start in range(0, len(view), size)
    ]


class BlockCache:
    def __init__(self, root: Path | None = None) -> None:
        self.root = root if root is not None else cache_dir()

    def _ensure(self) -> None:
        # Parents as the user's umask makes them; aner's own directories owner-only.
        self.root.parent.parent.mkdir(parents=True, exist_ok=True)
        for directory in (self.root.parent, self.root):
            directory.mkdir(mode=0o700, exist_ok=True)
            os.chmod(directory, 0o700)

    def get(self, digest: str) -> bytes | None:
        """The block's bytes if cached and intact, else None."""
        try:
            data = (self.root / digest).read_bytes()
        except OSError:
            return None
        return data if hashlib.sha256(data).hexdigest() == digest else None

    def put(self, digest: str, data: bytes) -> None:
        self._ensure()
        write_atomically(self.root / digest, data)
