"""The feature rows `predict` is given, read for a model: a CSV's columns mapped by name, or
an NPZ's array `X`, as untrusted input (`aner_worker.npzfile`).

- A CSV (UTF-8, a header row): each of the model's features is the column of that name;
  columns the model does not know (a label, an id) are ignored; a missing feature is refused
  naming it. A model of an older aner records no names: its columns are then taken by
  position (exactly `d` columns, or `d + 1` with the label the model was trained with).
- An NPZ: array `X` of shape `(n, d)`, by position (an array has no names), converted to
  binary64 exactly or refused (`aner_worker.kernels.dense.values`).

Every value must be a finite number; errors name the file, the line and the column. Every
refusal is a `FeatureError`: one line, naming the file.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from aner_coord.computations.dense.model import DenseModel
from aner_worker.kernels.dense.delimiters import delimiter_of
from aner_worker.kernels.dense.values import NotExact, as_float64
from aner_worker.npzfile import MAX_FILE_BYTES, UnsafeFile, npz_arrays, read_user_file

Floats = npt.NDArray[np.float64]

MAX_VALUES = (4 << 30) // 8  # feature values as binary64 in memory, as for training data


class FeatureError(ValueError):
    """Rows that cannot be predicted as given; one line naming the file."""


def read_rows(path: str, model: DenseModel, label: str | None) -> Floats:
    """The `(n, d)` feature rows of the file at `path`, in the model's feature order."""
    where = f"--data {path}"
    try:
        data = read_user_file(path, MAX_FILE_BYTES, where)
        if path.lower().endswith(".npz"):
            return _npz_rows(
                npz_arrays(data, where, MAX_FILE_BYTES, MAX_VALUES), model.sizes[0], where
            )
    except UnsafeFile as exc:
        raise FeatureError(str(exc)) from None
    return _csv_rows(data, model, label, where)


def _npz_rows(arrays: dict[str, npt.NDArray[np.generic]], d: int, where: str) -> Floats:
    x = arrays.get("X")
    if x is None:
        raise FeatureError(f"{where}: no array X (the feature rows)")
    if x.ndim != 2 or x.shape[1] != d or x.shape[0] == 0:
        raise FeatureError(f"{where}: X has shape {x.shape}; the model takes (rows, {d})")
    try:
        return as_float64(x)  # exactly, as training takes an NPZ's X
    except NotExact as exc:
        at = "X" if exc.cell is None else "X[{}, {}]".format(*exc.cell)
        raise FeatureError(f"{where}: {at} {exc.reason}") from None


def _csv_rows(data: bytes, model: DenseModel, label: str | None, where: str) -> Floats:
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise FeatureError(f"{where}: line {line}: not valid UTF-8") from None
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter_of(text))
    try:
        header = [name.strip() for name in next(reader, [])]
        if not header:
            raise FeatureError(f"{where}: empty file; expected a header row")
        columns = _columns(header, model, label, where)
        rows = list(_values(reader, header, columns, where))
    except csv.Error as exc:
        raise FeatureError(f"{where}: line {reader.line_num}: {exc}") from None
    if not rows:
        raise FeatureError(f"{where}: no data rows after the header")
    return np.array(rows, dtype=np.float64)


def _columns(header: list[str], model: DenseModel, label: str | None, where: str) -> list[int]:
    """The header position of each of the model's features, in the model's order."""
    d = model.sizes[0]
    if model.features is None:  # an older model: by position, as it was written
        if len(header) == d:
            return list(range(d))
        if len(header) == d + 1:
            drop = header.index(label) if label in header else d
            return [c for c in range(d + 1) if c != drop]
        raise FeatureError(
            f"{where}: {len(header)} columns; the model (which records no feature names) "
            f"takes {d} features by position"
        )
    columns = []
    for name in model.features:
        found = [c for c, h in enumerate(header) if h == name]
        if not found:
            shown = ", ".join(model.features[:8]) + (", ..." if d > 8 else "")
            raise FeatureError(f"{where}: no column named {name!r} (the model's features: {shown})")
        if len(found) > 1:
            raise FeatureError(f"{where}: the header names {name!r} {len(found)} times")
        columns.append(found[0])
    return columns


def _values(
    reader: Any, header: Sequence[str], columns: Sequence[int], where: str
) -> Iterator[list[float]]:
    """Each data row's values of `columns`, checked (`reader` is a `csv.reader`)."""
    for fields in reader:
        line = reader.line_num
        if not fields:
            continue
        if len(fields) != len(header):
            raise FeatureError(
                f"{where}: line {line}: expected {len(header)} values, found {len(fields)}"
            )
        row = []
        for col in columns:
            text = fields[col]
            try:
                value = float(text)
            except ValueError:
                value = float("nan")
            if not np.isfinite(value):
                raise FeatureError(
                    f"{where}: line {line}, column {col + 1} ({header[col]!r}): "
                    f"not a finite number: {text[:40]!r}"
                )
            row.append(value)
        yield row
