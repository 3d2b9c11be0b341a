"""The code a job's numbers come from: the SHA256 of every source file whose code computes a
number its result holds, which the manifest records (`sources`) and `resume` holds the
installation to, naming the first file that differs.

The rule decides, not a hand-kept list of files: every file of the source contract
(`protocol.fingerprint`: `protocol/` and `aner_worker/`, the kernels a worker runs and the
coordinator runs in its own threads), every `.py` file below the trees of `RESULT_TREES`
(each computation's coordinator half, which reduces the workers' sums, applies the updates,
aggregates the folds and makes the result) and the modules of `RESULT_MODULES`, which those
import and which compute numbers too (reading a user's data, writing the result). What else
a computation imports from `aner_coord` only orchestrates; tests/unit/test_result_sources.py
keeps that true by refusing an import that is in neither list.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from aner_worker.contract import installed_sources
from protocol import contract_files

RESULT_TREES: tuple[str, ...] = ("aner_coord/computations",)
RESULT_MODULES: tuple[str, ...] = ("aner_coord/userfiles.py", "aner_coord/jobdir/results.py")

_ROOT = Path(__file__).resolve().parent.parent.parent


def result_files(root: Path = _ROOT) -> tuple[str, ...]:
    """The files of the installation in `root` whose code computes a result's numbers, as
    '/'-separated relative paths, sorted."""
    found = set(contract_files(installed_sources(root)))
    for tree in RESULT_TREES:
        for directory, folders, files in os.walk(root / tree):
            folders[:] = [f for f in folders if f != "__pycache__"]
            relative = Path(directory).relative_to(root).as_posix()
            found.update(f"{relative}/{name}" for name in files if name.endswith(".py"))
    found.update(RESULT_MODULES)
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
