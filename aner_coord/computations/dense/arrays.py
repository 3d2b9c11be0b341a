"""In-memory data for the API (`dense_fit(X, y)`): numpy arrays as a Dense data set.

An in-memory data set is identified like a file, by a SHA256, here of a canonical encoding
of what training reads: `aner-arrays/v1`, the shape, X as little-endian binary64 in row
order, the classes as a JSON list of their labels (as `predict` writes them) and each
row's class index as little-endian int64. The same values give the same identity however
they were typed (a list, a float32 or a Fortran-ordered array), and the request names the
data as `array:sha256:<hex>`.

The arrays are held in this process (`register`, a small registry of the latest sets) for
the request that names them; a worker process receives them staged like file data. A job
directory (`output=`) records their identity but not the arrays, so such a job cannot be
resumed from the command line: `resume` refuses it in one line (the data is not there).
Labels follow docs/contracts.md, section 9: numeric when every label is a finite number (then whole
numbers come back from `predict` as integers), else strings, sorted.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import OrderedDict
from typing import Any

import numpy as np
import numpy.typing as npt

from aner_coord.errors import RequestError
from aner_worker.kernels.dense.data import ArrayDataset, label_strings

PREFIX = "array:"
KEPT = 4  # in-memory data sets a process keeps for the requests that name them
_held: OrderedDict[str, ArrayDataset] = OrderedDict()


def is_array_data(data: str | None) -> bool:
    return data is not None and data.startswith(PREFIX)


def register(x: Any, y: Any, *, limit_bytes: int) -> str:
    """Check `x` and `y`, keep them as a data set and return the name a request gives it."""
    dataset = dataset_of(x, y, limit_bytes)
    name = PREFIX + dataset.identity
    _held[name] = dataset
    _held.move_to_end(name)
    while len(_held) > KEPT:
        _held.popitem(last=False)
    return name


def held(name: str) -> ArrayDataset:
    found = _held.get(name)
    if found is None:
        raise RequestError(
            f"{{data}} {name[:80]}: in-memory arrays that this process does not hold (an "
            "earlier session's): give the arrays again, as X and y",
            "data",
        )
    return found


def dataset_of(x: Any, y: Any, limit_bytes: int) -> ArrayDataset:
    features = _features(x, limit_bytes)
    labels = _labels(y, features.shape[0])
    classes, index = _classes(labels)
    identity = "sha256:" + _digest(features, classes, index)
    return ArrayDataset(features, index, classes, identity)


def _features(x: Any, limit_bytes: int) -> npt.NDArray[np.float64]:
    try:
        raw = np.asarray(x)
    except (TypeError, ValueError) as exc:
        raise RequestError(f"X= must be a 2-D array of numbers ({exc})") from None
    if raw.ndim != 2 or 0 in raw.shape:
        raise RequestError(f"X= must be a 2-D array (rows, features), got shape {raw.shape}")
    if raw.dtype.kind not in "biuf":
        raise RequestError(f"X= must hold real numbers, not {raw.dtype}")
    if raw.shape[0] * raw.shape[1] * 8 > limit_bytes:
        raise RequestError(
            f"X= of shape {raw.shape} takes more than {limit_bytes:,} bytes as binary64"
        )
    out = np.ascontiguousarray(raw, dtype=np.float64)
    finite = np.isfinite(out)
    if not finite.all():
        r, j = (int(v) for v in np.argwhere(~finite)[0])
        raise RequestError(f"X= has a value that is not a finite number at X[{r}, {j}]")
    return out


def _labels(y: Any, n: int) -> npt.NDArray[Any]:
    try:
        labels = np.asarray(y)
    except (TypeError, ValueError) as exc:
        raise RequestError(f"y= must be a 1-D array of labels ({exc})") from None
    if labels.shape != (n,):
        raise RequestError(f"y= must hold one label per row of X ({n}), got shape {labels.shape}")
    if labels.dtype.kind not in "biufUSO":
        raise RequestError(f"y= must hold numbers or strings, not {labels.dtype}")
    return labels


def _classes(labels: npt.NDArray[Any]) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64]]:
    """Sorted distinct labels and each row's class index: numeric when every label is a
    finite number (docs/contracts.md, section 9), else as strings."""
    numbers = _numbers(labels)
    if numbers is not None:
        classes, index = np.unique(numbers, return_inverse=True)
    else:
        classes, index = np.unique(labels.astype(np.str_), return_inverse=True)
    if classes.size < 2:
        raise RequestError(f"y= needs at least two classes, found {classes.size}")
    return classes, index.astype(np.int64).reshape(-1)


def _numbers(labels: npt.NDArray[Any]) -> npt.NDArray[np.float64] | None:
    if labels.dtype.kind in "biuf":
        values = labels.astype(np.float64)
        return values if np.isfinite(values).all() else None
    try:
        values = np.array([float(v) for v in labels.astype(np.str_)], dtype=np.float64)
    except ValueError:
        return None
    return values if all(math.isfinite(v) for v in values) else None


def _digest(
    x: npt.NDArray[np.float64], classes: npt.NDArray[Any], index: npt.NDArray[np.int64]
) -> str:
    digest = hashlib.sha256(f"aner-arrays/v1 {x.shape[0]} {x.shape[1]}\n".encode())
    digest.update(np.ascontiguousarray(x, dtype="<f8").data)
    digest.update(json.dumps(label_strings(classes)).encode() + b"\n")
    digest.update(np.ascontiguousarray(index, dtype="<i8").data)
    return digest.hexdigest()
