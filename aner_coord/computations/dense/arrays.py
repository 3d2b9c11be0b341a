"""In-memory data for the API (`dense_fit(X, y)`): numpy arrays as a Dense data set.

X is converted by the API's one rule (`inputs.feature_rows`): a frame's string column names
become the model's feature names, which `predict` then maps a frame's columns by; values
convert to binary64 exactly or are refused. Labels become classes in their own type
(`aner_worker.kernels.dense.labels`); a refusal is one line naming the cell.

An in-memory data set is identified like a file, by a SHA256, here of a canonical encoding
of what training reads and the model keeps: `aner-arrays/v2`, the shape, X as
little-endian binary64 in row order, a JSON object of the classes' labels (as `predict`
writes them), their dtype and the feature names, and each row's class index as
little-endian int64. The same values give the same identity however they were typed (a
list, a float32 or a Fortran-ordered array), and the request names the data as
`array:sha256:<hex>`.

The arrays are held in this process (`register`, a small registry of the latest sets) for
the request that names them; a worker process receives them staged like file data. A job
directory (`output=`) records their identity but not the arrays, so such a job cannot be
resumed from the command line: `resume` refuses it in one line (the data is not there).
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from typing import Any

import numpy as np
import numpy.typing as npt

from aner_coord.computations.dense.inputs import Rows, feature_rows
from aner_coord.errors import RequestError
from aner_worker.kernels.dense.data import ArrayDataset
from aner_worker.kernels.dense.labels import Classes, LabelError, classes_of_array, label_strings

PREFIX = "array:"
KEPT = 4  # in-memory data sets a process keeps for the requests that name them
_held: OrderedDict[str, ArrayDataset] = OrderedDict()


def is_array_data(data: str | None) -> bool:
    return data is not None and data.startswith(PREFIX)


def register(x: Any, y: Any, *, limit_bytes: int) -> str:
    """Check `x` (or take `Rows` already converted) and `y`, keep them as a data set and
    return the name a request gives it."""
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
    rows = x if isinstance(x, Rows) else feature_rows(x, "X", min_rows=2, limit_bytes=limit_bytes)
    features, names = rows.values, rows.names
    classes, index = _classes(y, features.shape[0])
    identity = "sha256:" + _digest(features, classes, index, names)
    return ArrayDataset(features, index, classes, identity, names)


def _classes(y: Any, n: int) -> tuple[Classes, npt.NDArray[np.int64]]:
    """Sorted distinct labels in their own type and each row's class index (`labels`)."""
    if isinstance(y, np.ma.MaskedArray):
        raise RequestError("y= is a masked array: drop the rows of its masked labels")
    isna = getattr(y, "isna", None)
    if isna is not None:  # pandas: pd.NA of a nullable dtype becomes NaN in numpy
        missing = np.asarray(isna(), dtype=bool).reshape(-1)
        if missing.any():
            raise RequestError(f"y[{int(np.argmax(missing))}] is a missing label: drop the row")
    try:
        labels = np.asarray(y)
    except (TypeError, ValueError) as exc:
        raise RequestError(f"y= must be a 1-D array of labels ({exc})") from None
    if labels.shape != (n,):
        raise RequestError(f"y= must hold one label per row of X ({n}), got shape {labels.shape}")
    try:
        return classes_of_array(labels)
    except LabelError as exc:
        at = "y=" if exc.position is None else f"y[{exc.position}]"
        raise RequestError(f"{at} {exc.reason}") from None


def _digest(
    x: npt.NDArray[np.float64],
    classes: Classes,
    index: npt.NDArray[np.int64],
    names: tuple[str, ...] | None,
) -> str:
    digest = hashlib.sha256(f"aner-arrays/v2 {x.shape[0]} {x.shape[1]}\n".encode())
    digest.update(np.ascontiguousarray(x, dtype="<f8").data)
    described = {
        "classes": label_strings(classes),
        "dtype": classes.dtype.str,
        "features": None if names is None else list(names),
    }
    digest.update(json.dumps(described).encode() + b"\n")
    digest.update(np.ascontiguousarray(index, dtype="<i8").data)
    return digest.hexdigest()
