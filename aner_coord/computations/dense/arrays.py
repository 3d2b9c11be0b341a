"""In-memory data for the API (`dense_fit(X, y)`): numpy arrays as a Dense data set.

X may be a frame (a pandas DataFrame, or anything with `columns`): its string column names
become the model's feature names, which `predict` then maps a frame's columns by. Values
convert to binary64 exactly or are refused (`aner_worker.kernels.dense.values`), labels
become classes in their own type (`aner_worker.kernels.dense.labels`); a refusal is one
line naming the cell.

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

from aner_coord.errors import RequestError
from aner_worker.kernels.dense.data import ArrayDataset
from aner_worker.kernels.dense.labels import Classes, LabelError, classes_of_array, label_strings
from aner_worker.kernels.dense.values import Floats, NotExact, as_float64

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
    features, names = frame_values(x, "X", limit_bytes)
    classes, index = _classes(y, features.shape[0])
    identity = "sha256:" + _digest(features, classes, index, names)
    return ArrayDataset(features, index, classes, identity, names)


def frame_values(
    x: Any, what: str, limit_bytes: int | None = None
) -> tuple[Floats, tuple[str, ...] | None]:
    """`x` (an array, or a frame: anything with `columns`) as float64 rows under
    `values.as_float64`'s rule, and its column names when it is a frame whose columns
    are all named by strings (as scikit-learn's `feature_names_in_`; other column labels,
    such as a frame made from an array, are positions). RequestError naming the cell."""
    if isinstance(x, np.ma.MaskedArray):
        raise RequestError(
            f"{what}= is a masked array: fill its masked cells ({what}.filled(value)) or drop "
            "those rows; aner does not read a mask"
        )
    columns = getattr(x, "columns", None)
    if columns is None:
        raw = _array(x, what)
        if raw.ndim != 2 or 0 in raw.shape:
            raise RequestError(
                f"{what}= must be a 2-D array (rows, features), got shape {raw.shape}"
            )
        _check_size(raw.shape, what, limit_bytes)
        return _converted(raw, what), None
    labels = list(columns)
    names = _names(labels, what)
    shape = (len(x), len(labels))
    if 0 in shape:
        raise RequestError(f"{what}= must have rows and columns, got shape {shape}")
    _check_size(shape, what, limit_bytes)
    out = np.empty(shape, dtype=np.float64)
    for j, label in enumerate(labels):
        column = x[label]
        shown = f"{what}[{{}}, {j}] (column {label!r})"
        isna = getattr(column, "isna", None)
        if isna is not None:  # pandas: a missing value of any dtype, pd.NA included
            missing = np.asarray(isna(), dtype=bool)
            if missing.any():
                row = int(np.argmax(missing))
                raise RequestError(
                    f"{shown.format(row)} is a missing value: fill or drop it (aner takes "
                    "finite numbers only)"
                )
        raw = _array(column, what)
        if raw.shape != (shape[0],):
            raise RequestError(f"{what}= column {label!r} has shape {raw.shape}, not ({shape[0]},)")
        try:
            out[:, j] = as_float64(raw)
        except NotExact as exc:
            where = what if exc.cell is None else shown.format(exc.cell[0])
            raise RequestError(f"{where} {exc.reason}") from None
    return out, names


def _array(x: Any, what: str) -> npt.NDArray[Any]:
    try:
        return np.asarray(x)
    except (TypeError, ValueError) as exc:
        raise RequestError(f"{what}= must be an array of numbers ({exc})") from None


def _names(labels: list[Any], what: str) -> tuple[str, ...] | None:
    """A frame's column names: all strings (kept), none (positions), never a mix."""
    seen: set[Any] = set()
    for label in labels:
        if label in seen:
            raise RequestError(f"{what}= has two columns named {str(label)[:80]!r}: name each once")
        seen.add(label)
    strings = [isinstance(label, str) for label in labels]
    if not any(strings):
        return None
    if not all(strings):
        kinds = sorted({type(label).__name__ for label in labels})
        raise RequestError(
            f"{what}= has column names of types {kinds}: name every column by a string, "
            "or none (feature names are kept only when all are strings, as in scikit-learn)"
        )
    return tuple(labels)


def _check_size(shape: tuple[int, ...], what: str, limit_bytes: int | None) -> None:
    if limit_bytes is not None and shape[0] * shape[1] * 8 > limit_bytes:
        raise RequestError(
            f"{what}= of shape {shape} takes more than {limit_bytes:,} bytes as binary64"
        )


def _converted(raw: npt.NDArray[Any], what: str) -> Floats:
    try:
        return np.ascontiguousarray(as_float64(raw))
    except NotExact as exc:
        where = what if exc.cell is None else "{}[{}, {}]".format(what, *exc.cell)
        raise RequestError(f"{where} {exc.reason}") from None


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


def rows_for(x: Any, d: int, features: tuple[str, ...] | None, named: bool) -> Floats:
    """The rows given to a model's `predict`, `predict_proba` or `score`, as float64 in the
    model's feature order. A frame with string column names is mapped by name to a model
    trained on named features (a frame's or a CSV header's): the same names in any order,
    refused in one line if one is missing or unknown. Anything else is taken by position:
    a plain array, a frame without names, or a frame given to a model trained on a plain
    array (whose features have no names of the user's; scikit-learn warns there, aner
    does not)."""
    values, names = frame_values(x, "X")
    if names is not None and named and features is not None:
        unseen = [name for name in names if name not in features]
        missing = [name for name in features if name not in names]
        if unseen or missing:
            parts = [
                f"{what}: {_shown(found)}"
                for what, found in (
                    ("unseen at fit time", unseen),
                    ("seen at fit time, yet now missing", missing),
                )
                if found
            ]
            raise RequestError(
                "The feature names should match those that were passed during fit; "
                + "; ".join(parts)
            )
        values = np.ascontiguousarray(values[:, [names.index(name) for name in features]])
    if values.shape[1] != d:
        raise RequestError(f"X has {values.shape[1]} features, but the model takes {d}")
    return values


def _shown(names: list[str]) -> str:
    shown = ", ".join(repr(name[:40]) for name in names[:8])
    return shown + (f" and {len(names) - 8} more" if len(names) > 8 else "")
