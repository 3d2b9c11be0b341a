"""The Python API's rows and labels, converted by one rule (docs/contracts.md, section 9,
Values and Feature names): `dense_fit`, `DenseClassifier`, `cross_validate` and `search` take
their X through `feature_rows`, and every `predict`, `predict_proba` and `score` (of a fit, a
search, the estimator or a loaded model) through `rows_for`, so the paths cannot drift.

- X is a frame (anything with `columns`), converted column by column, or anything numpy
  makes an array of; values convert to binary64 exactly or are refused
  (`aner_worker.kernels.dense.values`). Sparse and masked input is refused, and so are a
  shape other than (rows, features), an empty one, and a frame's column names that are a
  mix of strings and others or name a column twice.
- The words are scikit-learn's `check_array`'s where aner does what it does ("Input X
  contains NaN", "Complex data not supported", "Found array with 0 sample(s)", a TypeError
  for an object that is no number, "X has 3 features, but ... is expecting 4 features as
  input"), and each names the first cell concerned. aner differs where `check_array`
  would round: an object array's text, `Fraction` and `Decimal` are refused, not converted.
- Labels given to `score` are checked by `score_labels`; training labels become classes in
  `arrays` (`aner_worker.kernels.dense.labels`).

Every refusal is a `RequestError` (a ValueError), one line; a value of the wrong type is an
`InputTypeError`, also a TypeError, as scikit-learn raises one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from aner_coord.errors import RequestError
from aner_worker.kernels.dense.values import Floats, NotExact, as_float64


class InputTypeError(RequestError, TypeError):
    """Input of a type aner does not take (a sparse matrix, an object that is no number,
    column names of mixed types): a TypeError, as scikit-learn's for the same input."""


@dataclass(frozen=True)
class Rows:
    """Rows as binary64 and their frame's column names (None: positions)."""

    values: Floats
    names: tuple[str, ...] | None


# The objects an object array may hold, and what it may not (section 9's table).
_OBJECTS = (
    "an argument must be a real number (bool, int or float): aner does not convert a string, "
    "Fraction or Decimal, which it would round to a number; convert X yourself"
)


def feature_rows(
    x: Any, what: str = "X", *, min_rows: int = 1, limit_bytes: int | None = None
) -> Rows:
    """`x` as binary64 rows under the rule above, with its column names when it is a frame
    whose columns are all named by strings (as scikit-learn's `feature_names_in_`; other
    column labels, such as a frame made from an array, are positions). `min_rows`: 2 for
    training data (a train and a validation row), 1 for rows to predict."""
    if hasattr(x, "tocsr") or hasattr(x, "toarray"):
        raise InputTypeError(
            f"Sparse data was passed for {what}, but dense data is required: give {what}.toarray()"
        )
    if isinstance(x, np.ma.MaskedArray):
        raise RequestError(
            f"{what}= is a masked array: fill its masked cells ({what}.filled(value)) or drop "
            "those rows; aner does not read a mask"
        )
    columns = getattr(x, "columns", None)
    if columns is None:
        raw = _array(x, what)
        if raw.ndim != 2:
            raise RequestError(
                f"Expected a 2-D array of rows x features for {what}, got shape {raw.shape}: "
                f"Reshape your data with {what}.reshape(-1, 1) for a single feature or "
                f"{what}.reshape(1, -1) for one row"
            )
        _check_shape(raw.shape, what, min_rows, limit_bytes)
        try:
            return Rows(np.ascontiguousarray(as_float64(raw)), None)
        except NotExact as exc:
            raise _refusal(exc, what, exc.cell) from None
    labels = list(columns)
    names = names_of(x, what)
    shape = (len(x), len(labels))
    _check_shape(shape, what, min_rows, limit_bytes)
    out = np.empty(shape, dtype=np.float64)
    for j, label in enumerate(labels):
        column = x[label]
        isna = getattr(column, "isna", None)
        if isna is not None:  # pandas: a missing value of any dtype, pd.NA included
            missing = np.asarray(isna(), dtype=bool)
            if missing.any():
                row = int(np.argmax(missing))
                gap = NotExact("is a missing value", (row, j), "missing")
                raise _refusal(gap, what, (row, j), label)
        raw = _array(column, what)
        if raw.shape != (shape[0],):
            raise RequestError(f"{what}= column {label!r} has shape {raw.shape}, not ({shape[0]},)")
        try:
            out[:, j] = as_float64(raw)
        except NotExact as exc:
            cell = None if exc.cell is None else (exc.cell[0], j)
            raise _refusal(exc, what, cell, label) from None
    return Rows(out, names)


def names_of(x: Any, what: str = "X") -> tuple[str, ...] | None:
    """A frame's column names, as scikit-learn's `feature_names_in_` takes them: all
    strings (kept), none (positions: None, as for anything but a frame), never a mix; a
    name given twice is refused."""
    columns = getattr(x, "columns", None)
    if columns is None:
        return None
    labels = list(columns)
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
        raise InputTypeError(
            f"Feature names are only supported if all input features have string names, but "
            f"{what}= has column names of types {kinds}: name every column by a string "
            f"({what}.columns = {what}.columns.astype(str)) or none"
        )
    return tuple(labels)


@dataclass(frozen=True)
class ModelRows:
    """Rows in a model's feature order, and where each of the model's columns is in the
    caller's X (its position and, for a frame, its name), for a message naming a cell."""

    values: Floats
    positions: list[int]
    labels: list[str] | None

    def cell(self, row: int, column: int, what: str = "X") -> str:
        """The caller's cell of row `row` and the model's column `column`: `X[4, 1]`, with
        the column's name for a frame."""
        named = "" if self.labels is None else f" (column {self.labels[column]!r})"
        return f"{what}[{row}, {self.positions[column]}]{named}"


def rows_for(x: Any, d: int, features: tuple[str, ...] | None, named: bool) -> ModelRows:
    """The rows given to a model's `predict`, `predict_proba` or `score`, as binary64 in the
    model's feature order. A frame with string column names is mapped by name to a model
    trained on named features (a frame's or a CSV header's): the same names in any order,
    refused in one line if one is missing or unknown. Anything else is taken by position:
    a plain array, a frame without names, or a frame given to a model trained on a plain
    array (whose features have no names of the user's)."""
    given = feature_rows(x, "X")
    values, names = given.values, given.names
    positions = list(range(values.shape[1]))
    if names is not None and named and features is not None:
        mismatch = name_mismatch(names, features)
        if mismatch is not None:
            raise RequestError(mismatch)
        positions = [names.index(name) for name in features]
        values = np.ascontiguousarray(values[:, positions])
    if values.shape[1] != d:
        raise RequestError(
            f"X has {values.shape[1]} features, but DenseModel is expecting {d} features as input"
        )
    labels = None if names is None else [names[p] for p in positions]
    return ModelRows(values, positions, labels)


def name_mismatch(names: Sequence[str], features: Sequence[str]) -> str | None:
    """scikit-learn's refusal of a frame whose names differ from those of fit, in one line;
    None when they are the same names (in any order: aner maps them)."""
    unseen = [name for name in names if name not in features]
    missing = [name for name in features if name not in names]
    if not unseen and not missing:
        return None
    parts = [
        f"{heading}: {_shown(found)}"
        for heading, found in (
            ("Feature names unseen at fit time", unseen),
            ("Feature names seen at fit time, yet now missing", missing),
        )
        if found
    ]
    return "The feature names should match those that were passed during fit. " + "; ".join(parts)


def score_labels(y: Any, n: int) -> npt.NDArray[Any]:
    """The labels `score` compares predictions with: one a row, none missing (NaN, None,
    `pd.NA`, a masked cell), which would count as a wrong prediction or be left out."""
    if isinstance(y, np.ma.MaskedArray):
        raise RequestError("y= is a masked array: drop the rows of its masked labels")
    isna = getattr(y, "isna", None)
    if isna is not None:  # pandas: pd.NA of a nullable dtype
        missing = np.asarray(isna(), dtype=bool).reshape(-1)
        if missing.any():
            raise RequestError(f"y[{int(np.argmax(missing))}] is a missing label: drop the row")
    labels = _array(y, "y")
    if labels.shape != (n,):
        raise RequestError(f"y= must hold one label per row of X ({n}), got shape {labels.shape}")
    if labels.dtype.kind == "f":
        bad = ~np.isfinite(labels)
        if bad.any():
            raise RequestError(
                f"Input y contains NaN or infinity: y[{int(np.argmax(bad))}] is a missing label"
            )
    elif labels.dtype.kind == "O":
        for r, value in enumerate(labels.tolist()):
            if value is None or (isinstance(value, float) and value != value):
                raise RequestError(f"Input y contains NaN: y[{r}] is a missing label")
    return labels


def accuracy(predicted: npt.NDArray[Any], y: Any, weights: Any = None) -> float:
    """`score`: the (weighted) share of `predicted` equal to the labels `y`."""
    labels = score_labels(y, predicted.shape[0])
    if predicted.dtype.kind in "US":
        labels = labels.astype(np.str_)
    return float(np.average(predicted == labels, weights=weights))


def _refusal(
    exc: NotExact, what: str, cell: tuple[int, ...] | None, label: Any = None
) -> RequestError:
    """`NotExact` in the API's words, naming the cell (and a frame's column)."""
    column = "" if label is None else f" column {label!r}"
    if cell is None:  # the whole array (or column) for its type
        if exc.reason.startswith("holds complex"):
            return RequestError(f"Complex data not supported: {what}{column} {exc.reason}")
        return RequestError(f"{what}{column} {exc.reason}")
    where = "{}[{}]".format(what, ", ".join(map(str, cell))) + (
        "" if label is None else f" (column {label!r})"
    )
    if exc.kind in ("nan", "missing", "infinity"):
        kind = "infinity" if exc.kind == "infinity" else "NaN"
        return RequestError(
            f"Input {what} contains {kind}: {where} {exc.reason}; fill or drop it (aner takes "
            "finite numbers only)"
        )
    if exc.kind == "element":
        return InputTypeError(f"{where} {exc.reason}: {_OBJECTS}")
    return RequestError(f"{where} {exc.reason}")


def _array(x: Any, what: str) -> npt.NDArray[Any]:
    try:
        return np.asarray(x)
    except (TypeError, ValueError) as exc:
        raise RequestError(f"{what}= must be a rectangular array of numbers ({exc})") from None


def _check_shape(shape: tuple[int, ...], what: str, min_rows: int, limit_bytes: int | None) -> None:
    n, d = shape
    if n < min_rows:
        raise RequestError(
            f"Found array with {n} sample(s) (shape={shape}) while a minimum of {min_rows} is "
            f"required ({what}= needs rows)"
        )
    if d == 0:
        raise RequestError(
            f"Found array with 0 feature(s) (shape={shape}) while a minimum of 1 is required "
            f"({what}= needs features)"
        )
    if limit_bytes is not None and n * d * 8 > limit_bytes:
        raise RequestError(
            f"{what}= of shape {shape} takes more than {limit_bytes:,} bytes as binary64"
        )


def _shown(names: list[str]) -> str:
    shown = ", ".join(repr(name[:40]) for name in names[:8])
    return shown + (f" and {len(names) - 8} more" if len(names) > 8 else "")
