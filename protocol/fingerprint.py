"""The source-contract fingerprint: SHA256 over a fixed, ordered list of source files.

Two peers with the same fingerprint run the same protocol, worker loop and kernels, so they
produce the same numbers. The list and the hashing rule live here; reading the files is the
caller's job (this package does no I/O).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

# Paths relative to the directory that holds the packages. Order is part of the contract.
CONTRACT_FILES: tuple[str, ...] = (
    "protocol/version.py",
    "protocol/messages.py",
    "protocol/framing.py",
    "protocol/fingerprint.py",
    "protocol/connection.py",
    "aner_worker/worker.py",
    "aner_worker/kernels.py",
    "aner_worker/philox.py",
    "aner_worker/fixture.py",
)


def fingerprint_sources(read: Callable[[str], bytes]) -> str:
    """Hash each contract file as `name NUL length NUL bytes`, in CONTRACT_FILES order."""
    digest = hashlib.sha256()
    for name in CONTRACT_FILES:
        content = read(name)
        digest.update(name.encode() + b"\0" + str(len(content)).encode() + b"\0")
        digest.update(content)
    return "sha256:" + digest.hexdigest()
