"""The source-contract fingerprint: SHA256 over every source file a worker could execute.

Two peers with the same fingerprint run the same protocol, worker process and kernels, so they
produce the same numbers. The rule, not a hand-kept list, decides what is hashed: every
Python source file (`.py`) of the packages in CONTRACT_PACKAGES, by its path relative to the
directory that holds them ('/'-separated), in sorted order. A file added to `aner_worker/`
joins the contract by being there; a comment changed anywhere in it changes the fingerprint.

This module states the rule and hashes what it is given; finding and reading the files is the
caller's job (this package does no I/O): `aner_worker.contract` does it for an installation.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable

# The packages whose every source file is part of the contract. The coordinator's own package
# is not: it only orchestrates, and every number it reduces comes from code listed here.
CONTRACT_PACKAGES: tuple[str, ...] = ("protocol", "aner_worker")


def contract_files(paths: Iterable[str]) -> tuple[str, ...]:
    """The paths among `paths` that belong to the contract, in the order they are hashed:
    `.py` files whose first component is a contract package, outside `__pycache__`, sorted."""
    chosen = set()
    for path in paths:
        parts = path.split("/")
        if (
            len(parts) >= 2
            and parts[0] in CONTRACT_PACKAGES
            and path.endswith(".py")
            and "__pycache__" not in parts
        ):
            chosen.add(path)
    return tuple(sorted(chosen))


def fingerprint_sources(names: Iterable[str], read: Callable[[str], bytes]) -> str:
    """Hash each file of `contract_files(names)` as `name NUL length NUL bytes`, in order."""
    digest = hashlib.sha256()
    for name in contract_files(names):
        content = read(name)
        digest.update(name.encode() + b"\0" + str(len(content)).encode() + b"\0")
        digest.update(content)
    return "sha256:" + digest.hexdigest()
