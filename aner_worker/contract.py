"""This installation's source-contract fingerprint (the rule is `protocol.fingerprint`'s):
every source file of the contract packages, found next to this package and read as bytes."""

from __future__ import annotations

import functools
import os
from pathlib import Path

from protocol import CONTRACT_PACKAGES, fingerprint_sources

_ROOT = Path(__file__).resolve().parent.parent


def installed_sources(root: Path = _ROOT) -> list[str]:
    """Every file below the contract packages of `root`, as '/'-separated relative paths."""
    found: list[str] = []
    for package in CONTRACT_PACKAGES:
        for directory, folders, files in os.walk(root / package):
            folders[:] = [f for f in folders if f != "__pycache__"]
            relative = Path(directory).relative_to(root).as_posix()
            found.extend(f"{relative}/{name}" for name in files)
    return found


def fingerprint_of(root: Path) -> str:
    """The fingerprint of the installation whose packages stand in `root`."""
    return fingerprint_sources(installed_sources(root), lambda name: (root / name).read_bytes())


@functools.cache
def source_fingerprint() -> str:
    return fingerprint_of(_ROOT)
