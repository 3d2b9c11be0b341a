"""The data sets that search fits read, by the name their parameters give.

- a teacher set (`aner-dataset/teacher/v1`) is generated where it is used;
- file data travels as Dense's staged blob (`dense.rows.encode_blob`), named by its SHA256:
  a worker process assembles it from its block cache once per job (`stage`), and local
  threads read the coordinator's own copy in place (`share`) for as long as its run holds it.
"""

from __future__ import annotations

import functools
import hashlib
import threading
import weakref

from aner_worker.kernels.dense.data import TEACHER_ID, Dataset, TeacherDataset
from aner_worker.kernels.dense.rows import decode_blob

_lock = threading.Lock()
# Local threads: the coordinator's own data set, while its run holds it.
_shared: weakref.WeakValueDictionary[str, Dataset] = weakref.WeakValueDictionary()
# Worker processes: staged data sets, the latest few.
_kept: dict[str, Dataset] = {}
_KEEP = 2


def share(name: str, dataset: Dataset) -> None:
    """Let local threads read `dataset` under `name` while the caller holds it."""
    with _lock:
        _shared[name] = dataset


def stage(name: str, blob: bytes) -> None:
    """A staged blob, assembled by the worker from its blocks: check and keep it."""
    if hashlib.sha256(blob).hexdigest() != name:
        raise ValueError(f"staged data does not hash to its name {name}")
    dataset = decode_blob(blob)
    with _lock:
        _kept.pop(name, None)
        _kept[name] = dataset
        while len(_kept) > _KEEP:
            del _kept[next(iter(_kept))]


def has(name: str) -> bool:
    with _lock:
        return name in _kept or name in _shared


@functools.lru_cache(maxsize=4)
def _teacher(rows: int, features: int, classes: int, seed: int) -> TeacherDataset:
    return TeacherDataset(rows, features, classes, seed)


def dataset_named(name: str, teacher: tuple[int, ...], seed: int) -> Dataset:
    if name.startswith(TEACHER_ID):
        rows, features, classes = teacher
        return _teacher(rows, features, classes, seed)
    with _lock:
        found = _kept.get(name) or _shared.get(name)
    if found is None:
        raise LookupError(f"data set {name} was never staged on this worker")
    return found
