"""The rules of staging a data set, shared by both ends of a connection: what names a data
set and its blocks, what a Missing may ask for, and one data set's progress (named, asked
for, moved). The connections (`protocol.connection`) apply them to the frames they see.
"""

from __future__ import annotations

import hashlib
import re

# A staged data set has at most this many blocks (of a few MiB each).
MAX_STAGE_BLOCKS = 16_384
_DIGEST = re.compile(r"[0-9a-f]{64}")


def sha256_hex(data: bytes | memoryview) -> str:
    """The name of a staged block or data set: SHA256 of its bytes, lowercase hex."""
    return hashlib.sha256(data).hexdigest()


class StagingProgress:
    """One data set being staged: its blocks, those named missing, and those moved."""

    def __init__(self, dataset: str, blocks: tuple[str, ...]) -> None:
        self.dataset = dataset
        self.blocks = blocks
        self.wanted: set[str] | None = None  # None until Missing
        self.moved: set[str] = set()

    @property
    def complete(self) -> bool:
        return self.wanted is not None and self.moved == self.wanted


def check_stage(dataset: str, blocks: tuple[str, ...]) -> str | None:
    if not _DIGEST.fullmatch(dataset):
        return f"data set name {dataset[:80]!r} is not a SHA256 hex digest"
    if not 0 < len(blocks) <= MAX_STAGE_BLOCKS:
        return f"{len(blocks)} blocks; a data set has 1 to {MAX_STAGE_BLOCKS}"
    for digest in blocks:
        if not _DIGEST.fullmatch(digest):
            return f"block name {digest[:80]!r} is not a SHA256 hex digest"
    return None


def check_wanted(staging: StagingProgress, blocks: tuple[str, ...]) -> str | None:
    if len(set(blocks)) != len(blocks):
        return "names a block twice"
    unknown = set(blocks) - set(staging.blocks)
    if unknown:
        return f"names block {sorted(unknown)[0]}, which is not part of data set {staging.dataset}"
    return None
