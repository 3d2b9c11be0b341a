"""The code a job's numbers come from: the SHA256 of every source file of the installation's
own packages, which the manifest records (`sources`) and `resume` holds the installation to,
naming the first file that differs.

No rule can tell which of aner's modules compute, replay or aggregate a number: the ledger
replays accepted chunks, the job machine decides which ones count, the chunk plan cuts the
ranges, the computations reduce and write. So nothing is chosen: every `.py` file below the
packages of `PACKAGES` that stand in the installation's directory, `__pycache__` left out.
That is every module the coordinator or a worker can import from aner, the top-level `aner`
package included (in a source tree it lies in `aner_coord/aner/`; an installed wheel puts it
beside the others). Python and the libraries aner imports are not covered.

183 files, 1.4 MB: hashed once per process (`installed_result_sources`), about 3 ms, when a
job begins and when it is resumed (1.6 ms for the 89 files the rule of schema 4 named).
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

# The packages aner installs (pyproject.toml, `packages.find`); one that is not there (`aner`
# in a source tree, where it is part of `aner_coord`) has no files to add.
PACKAGES: tuple[str, ...] = ("protocol", "aner_worker", "aner_coord", "aner")

_ROOT = Path(__file__).resolve().parent.parent.parent


def result_files(root: Path = _ROOT) -> tuple[str, ...]:
    """Every `.py` file of the packages of the installation in `root`, as '/'-separated
    relative paths, sorted."""
    found: set[str] = set()
    for package in PACKAGES:
        for directory, folders, files in os.walk(root / package):
            folders[:] = [f for f in folders if f != "__pycache__"]
            relative = Path(directory).relative_to(root).as_posix()
            found.update(f"{relative}/{name}" for name in files if name.endswith(".py"))
    return tuple(sorted(found))


def sources_of(root: Path) -> dict[str, str]:
    """`result_files(root)`, each with the SHA256 of its bytes ("sha256:...")."""
    return {
        name: "sha256:" + hashlib.sha256((root / name).read_bytes()).hexdigest()
        for name in result_files(root)
    }


@functools.cache
def installed_result_sources() -> dict[str, str]:
    return sources_of(_ROOT)


def first_difference(recorded: Mapping[str, str], installed: Mapping[str, str]) -> str | None:
    """How the first file (in path order) that differs between two `sources` differs, in a
    few words, or None when they are the same."""
    for name in sorted(recorded.keys() | installed.keys()):
        was, now = recorded.get(name), installed.get(name)
        if was == now:
            continue
        if was is None:
            return f"{name} is installed now but took no part when it began"
        if now is None:
            return f"{name} took part when it began but is not installed now"
        return f"{name} differs ({was} when it began, {now} installed)"
    return None
