"""The checkpoint of a Dense training: a `TrainingSnapshot`
(`aner_worker.kernels.dense.training`) as an uncompressed `.npz` of named arrays, schema
`aner-dense-checkpoint/1`.

What it holds: the canonical binary64 parameters and the best model so far, the optimizer
(its name, step count and Adam's two moments), the position (phase of the next pass, epoch,
steps committed in the epoch and in all, rows processed, the epoch's loss sum so far), the
early-stopping state, the normalisation, the history of finished epochs, the time to the
target accuracy and the test metrics once measured. The data order of an epoch is not kept:
it is derived from the seed and the epoch again.

Reading trusts nothing: only the members this schema names, each no larger than the
training's own shapes allow before it is read (`limit`), no pickled objects, every array of
the dtype and shape the training has; `Training.restore` then checks that the snapshot fits
the request. Any mismatch is a ValueError that names it.
"""

from __future__ import annotations

import io
import math
import zipfile
from typing import Any

import numpy as np
import numpy.typing as npt

from aner_worker.kernels.dense.training import Training, TrainingSnapshot

SCHEMA = "aner-dense-checkpoint/1"
_HEADER_BYTES = 1024  # an .npy header and its zip entry, generously
_SCALARS = (
    "epoch",
    "step",
    "committed",
    "rows_processed",
    "optimizer_t",
    "best_epoch",
    "since_best",
)
_FLOATS = ("epoch_loss", "elapsed", "best_loss")

Array = npt.NDArray[Any]


def encode(snap: TrainingSnapshot) -> bytes:
    """The `.npz` bytes of `snap` (deterministic for one snapshot but for its `elapsed`)."""
    arrays: dict[str, Array] = {
        "schema": np.array(SCHEMA),
        "phase": np.array(snap.phase),
        "optimizer": np.array(snap.optimizer),
        **{name: np.array(getattr(snap, name), dtype="<i8") for name in _SCALARS},
        **{name: np.array(getattr(snap, name), dtype="<f8") for name in _FLOATS},
        "flat": snap.flat,
        "best_flat": snap.best_flat,
        "moment1": snap.moment1,
        "moment2": snap.moment2,
        "mean": _optional(snap.mean),
        "std": _optional(snap.std),
        "history": snap.history,
        "time_to_target": _optional(snap.time_to_target),
        "test": _optional(snap.test),
    }
    out = io.BytesIO()
    np.savez(out, allow_pickle=False, **arrays)
    return out.getvalue()


def _optional(value: Any) -> Array:
    """An empty array for None, else the value as a 1-d binary64 array."""
    if value is None:
        return np.empty(0, dtype="<f8")
    return np.atleast_1d(np.asarray(value, dtype="<f8"))


def limit(training: Training) -> int:
    """The most bytes a checkpoint of `training` can have: its arrays at their largest."""
    n = training.flat.size
    floats = 4 * n + 2 * training.sizes[0] + 5 * training.options.epochs + 3 + 16
    return 8 * floats + _HEADER_BYTES * (len(_SCALARS) + len(_FLOATS) + 14)


def decode(data: bytes, training: Training) -> TrainingSnapshot:
    """The snapshot in checkpoint bytes `data` of `training`; ValueError naming what is
    wrong. (`training.restore` checks that it fits.)"""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            sizes = {info.filename: info.file_size for info in archive.infolist()}
    except zipfile.BadZipFile as exc:
        raise ValueError(f"not an .npz file ({exc})") from None
    bound = 8 * (training.flat.size + 5 * training.options.epochs) + 2 * _HEADER_BYTES
    for name, size in sizes.items():
        if size > bound:
            raise ValueError(f"its member {name} has {size:,} bytes, more than this model's")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"its arrays cannot be read ({exc})") from None
    if str(arrays.get("schema", "")) != SCHEMA:
        raise ValueError(f"it is not an {SCHEMA} file")
    try:
        return _snapshot(arrays)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"it lacks or mistypes {exc}") from None


def _snapshot(arrays: dict[str, Array]) -> TrainingSnapshot:
    def floats(name: str) -> npt.NDArray[np.float64]:
        array = arrays[name]
        if array.dtype != np.dtype("<f8") or array.ndim != (2 if name == "history" else 1):
            raise TypeError(f"{name} ({array.dtype}, {array.ndim} dimensions)")
        return np.ascontiguousarray(array)

    def scalar(name: str, kind: type) -> Any:
        array = arrays[name]
        if array.shape != () or array.dtype.kind != ("i" if kind is int else "f"):
            raise TypeError(f"{name} ({array.dtype}, shape {array.shape})")
        return kind(array)

    mean, std, ttt, test = (floats(n) for n in ("mean", "std", "time_to_target", "test"))
    if ttt.size > 1 or test.size not in (0, 2) or mean.size != std.size:
        raise TypeError("an optional value of the wrong size")
    return TrainingSnapshot(
        phase=str(arrays["phase"]),
        optimizer=str(arrays["optimizer"]),
        **{name: scalar(name, int) for name in _SCALARS},
        **{name: scalar(name, float) for name in _FLOATS},
        flat=floats("flat"),
        best_flat=floats("best_flat"),
        moment1=floats("moment1"),
        moment2=floats("moment2"),
        mean=mean if mean.size else None,
        std=std if std.size else None,
        history=floats("history"),
        time_to_target=float(ttt[0]) if ttt.size else None,
        test=(float(test[0]), float(test[1])) if test.size else None,
    )


def finite(snap: TrainingSnapshot) -> bool:
    """Whether the parameters and optimizer state are finite (a committed state is)."""
    arrays = (snap.flat, snap.best_flat, snap.moment1, snap.moment2)
    return all(bool(np.isfinite(a).all()) for a in arrays) and math.isfinite(snap.epoch_loss)
