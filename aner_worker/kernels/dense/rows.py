"""Rows and statistics of the "dense" kernel (`kernel`): where rows come from, and one
chunk's computation.

Where rows come from, by the data set's name in the parameters:
- a teacher set (`aner-dataset/teacher/v1`) is generated here, row by row;
- file data is a staged blob (`encode_blob`: a small header, X as binary64, y as int64,
  little-endian) named by its SHA256. Local threads share the coordinator's in-memory copy
  (`share`); a worker process assembles it from its block cache (`stage`). The one store of
  a process's data sets, for the Dense kernel and the search kernel's fits alike.

One chunk is one call of `chunk_stats` on one thread with BLAS held to one thread, so its bits
do not depend on who computed it. The frozen parameters of a pass are decoded (and, in
float32, rounded) once per pass and process (`frozen`), never per chunk.
"""

from __future__ import annotations

import functools
import hashlib
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from aner_worker.kernels.dense.data import TEACHER_ID, ArrayDataset, Dataset, TeacherDataset
from aner_worker.kernels.dense.network import (
    DEFAULT_PRECISION,
    Model,
    chunk_stats,
    evaluate,
    moment_sums,
    prepare,
)
from aner_worker.kernels.dense.params import EVALUATE, MOMENTS, TRAIN, DenseParams, DenseStats
from aner_worker.kernels.dense.streams import role_codes

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]

_MAGIC = b"aner-dense-data/v1\n"
_F8, _I8 = np.dtype("<f8"), np.dtype("<i8")


def floats(data: bytes) -> Floats:
    out: Floats = np.frombuffer(data, dtype=_F8)
    return out


def to_bytes(array: npt.NDArray[Any], dtype: np.dtype[Any] = _F8) -> bytes:
    return np.ascontiguousarray(array, dtype=dtype).tobytes()


def as_view(array: npt.NDArray[Any]) -> memoryview:
    """The bytes of a binary64 result array, without a copy (it must not be reused)."""
    contiguous: Any = np.ascontiguousarray(array, dtype=_F8)  # a buffer (numpy's stubs say not)
    return memoryview(contiguous).cast("B")


_NONE = memoryview(b"")


# ---------------------------------------------------------------------------------------
# Staged blobs


def encode_blob(x: Floats, y: Ints) -> bytes:
    """The staged form of file data: header, X (n x d binary64), y (n int64)."""
    n, d = x.shape
    header = _MAGIC + np.array([n, d], dtype=_I8).tobytes()
    return header + to_bytes(x) + to_bytes(y, _I8)


def blob_digest(x: Floats, y: Ints) -> str:
    """SHA256 hex of `encode_blob(x, y)`, without building it."""
    n, d = x.shape
    digest = hashlib.sha256(_MAGIC + np.array([n, d], dtype=_I8).tobytes())
    digest.update(np.ascontiguousarray(x, dtype=_F8).data)
    digest.update(np.ascontiguousarray(y, dtype=_I8).data)
    return digest.hexdigest()


def decode_blob(blob: bytes) -> ArrayDataset:
    head = len(_MAGIC) + 16
    if blob[: len(_MAGIC)] != _MAGIC or len(blob) < head:
        raise ValueError("staged data is not an aner-dense-data/v1 blob")
    n, d = (int(v) for v in np.frombuffer(blob[len(_MAGIC) : head], dtype=_I8))
    if n < 1 or d < 1 or len(blob) != head + 8 * n * d + 8 * n:
        raise ValueError(f"staged data has {len(blob)} bytes, not those of {n} x {d} rows")
    x = np.frombuffer(blob, dtype=_F8, count=n * d, offset=head).reshape(n, d)
    y = np.frombuffer(blob, dtype=_I8, count=n, offset=head + 8 * n * d)
    if int(y.min()) < 0:
        raise ValueError("staged data has a negative class index")
    classes = np.arange(int(y.max()) + 1, dtype=np.int64)  # only their count matters here
    return ArrayDataset(x, y, classes, "sha256:" + hashlib.sha256(blob).hexdigest())


# ---------------------------------------------------------------------------------------
# Where rows come from

_lock = threading.Lock()
# Local threads: the coordinator's own data set, for as long as its job holds it.
_shared: weakref.WeakValueDictionary[str, Dataset] = weakref.WeakValueDictionary()
# Worker processes: staged data sets, the latest few.
_kept: dict[str, Dataset] = {}
_KEEP = 2


def share(name: str, dataset: Dataset) -> None:
    """Let local threads read `dataset` under `name` while the caller holds it."""
    with _lock:
        _shared[name] = dataset


def keep(name: str, dataset: Dataset) -> None:
    """Hold a staged data set for the tasks of this process."""
    with _lock:
        _kept.pop(name, None)
        _kept[name] = dataset
        while len(_kept) > _KEEP:
            del _kept[next(iter(_kept))]


def stage(name: str, blob: bytes) -> None:
    """A staged blob, assembled by the worker from its blocks: check and keep it."""
    if hashlib.sha256(blob).hexdigest() != name:
        raise ValueError(f"staged data does not hash to its name {name}")
    keep(name, decode_blob(blob))


def has(name: str) -> bool:
    with _lock:
        return name in _kept or name in _shared


@functools.lru_cache(maxsize=4)
def _teacher(rows: int, features: int, classes: int, seed: int) -> TeacherDataset:
    return TeacherDataset(rows, features, classes, seed)


def dataset_named(name: str, teacher: Sequence[int], seed: int) -> Dataset:
    """The data set a task's parameters name (a Dense chunk's and a search fit's alike): the
    teacher set of shape `teacher`, or a shared or staged data set."""
    if name.startswith(TEACHER_ID):
        rows, features, classes = teacher
        return _teacher(rows, features, classes, seed)
    with _lock:
        found = _kept.get(name) or _shared.get(name)
    if found is None:
        raise LookupError(f"data set {name} was never staged on this worker")
    return found


@functools.lru_cache(maxsize=8)
def role_positions(seed: int, n_rows: int, fractions: tuple[float, float], role: int) -> Ints:
    """Ascending positions of the rows of `role` (docs/contracts.md, section 9, Roles)."""
    codes = role_codes(seed, n_rows, fractions[0], fractions[1])
    out: Ints = np.flatnonzero(codes == role).astype(np.int64)
    out.flags.writeable = False
    return out


def _positions(params: DenseParams, dataset: Dataset, start: int, count: int) -> Ints:
    if params.step == TRAIN or params.positions:
        # A batch's positions, or a role's where the roles are not a function of the seed
        # (groups, a split the user made): docs/contracts.md, section 9, Roles.
        pool = np.frombuffer(params.positions, dtype=_I8)
    else:
        pool = role_positions(params.seed, dataset.n_rows, params.fractions, params.role)
    if not 0 <= start < start + count <= pool.size:
        raise IndexError(f"range [{start}, +{count}) outside the pass's {pool.size} rows")
    out: Ints = pool[start : start + count]
    return out


def compute(params: DenseParams, start: int, count: int) -> DenseStats:
    """The statistics of items [start, start + count) of a pass: one chunk, one thread."""
    dataset = dataset_named(params.data, params.teacher, params.seed)
    positions = _positions(params, dataset, start, count)
    return statistics(params.step, dataset, positions, frozen(params))


@dataclass(frozen=True, eq=False)
class Frozen:
    """What a pass holds fixed, decoded from its parameters: the model in the pass's compute
    precision (None for the normalisation pass) and the normalisation."""

    model: Model | None
    mean: Floats
    std: Floats


_last_pass: tuple[DenseParams, Frozen] | None = None


def frozen(params: DenseParams) -> Frozen:
    """The frozen parameters of `params`' pass, decoded once per pass and process.

    Every task of a pass holds the same `DenseParams` object (local threads share the
    coordinator's; a worker process decodes a pass's Params once), so the last pass's
    decoding is kept by the object's identity: the float32 copy of the parameters is made
    once per pass, not per chunk. A new pass, or another job's, is a new object.
    """
    global _last_pass
    with _lock:
        last = _last_pass
    if last is not None and last[0] is params:
        return last[1]
    model = None
    if params.step != MOMENTS:
        model = prepare(floats(params.params), params.sizes, params.precision)
    made = Frozen(model, floats(params.mean), floats(params.std))
    with _lock:
        _last_pass = (params, made)
    return made


def statistics(step: str, dataset: Dataset, positions: Ints, pass_: Frozen) -> DenseStats:
    """One chunk's statistics over the rows at `positions`: what a task computes, and what
    an in-process training (`fit`) computes for the same chunk, with the same bits."""
    x, y = dataset.rows(positions)
    count = int(positions.size)
    if step == MOMENTS:
        total, m2 = moment_sums(x)
        return DenseStats(as_view(total), as_view(m2), 0.0, 0, count)
    if pass_.model is None:
        raise ValueError(f"a {step} pass needs parameters")
    if step == TRAIN:
        stats = chunk_stats(pass_.model, pass_.mean, pass_.std, x, y)
        grad = as_view(stats.grad)  # a fresh array of this chunk's, never a workspace buffer
        return DenseStats(grad, _NONE, stats.loss_sum, stats.correct, stats.valid)
    if step == EVALUATE:
        loss_sum, correct = evaluate(pass_.model, pass_.mean, pass_.std, x, y)
        return DenseStats(_NONE, _NONE, loss_sum, correct, count)
    raise ValueError(f"unknown dense step {step!r}")


def chunk_statistics(
    step: str,
    dataset: Dataset,
    positions: Ints,
    flat: Floats,
    sizes: Sequence[int],
    mean: Floats,
    std: Floats,
    precision: str = DEFAULT_PRECISION,
) -> DenseStats:
    """`statistics` from plain arrays (the model prepared here, for this one chunk)."""
    model = None if step == MOMENTS else prepare(flat, sizes, precision)
    return statistics(step, dataset, positions, Frozen(model, mean, std))
