"""The data of a search: section 9's data sets, and a CSV's group column (docs/contracts.md, section
12).

Without a group or split column the data set is Dense's own (`dense.data.open_dataset`: a
CSV, an NPZ or the digits; or the teacher set). With one, the CSV is read as Dense reads it
with that column set aside (`dense.columns`): it is not a feature. A column needs a CSV.

The class index of every row is needed for stratified folds, so a teacher set's labels are
generated here, by blocks of rows; a search's data set has at most `MAX_SEARCH_ROWS` rows
(every row's fold byte travels with each pass's parameters, in one frame).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from aner_coord.computations.dense import arrays, splits
from aner_coord.computations.dense.columns import load_csv_columns
from aner_coord.computations.dense.computation import check_data_file
from aner_coord.errors import AdmissionError, RequestError
from aner_worker.kernels.dense.data import (
    DataError,
    Dataset,
    TeacherDataset,
    open_dataset,
)

MAX_SEARCH_ROWS = 1 << 24  # 16 MiB of fold bytes per pass's parameters
_BLOCK = 1 << 16

Ints = npt.NDArray[np.int64]


@dataclass(frozen=True)
class SearchData:
    dataset: Dataset
    labels: Ints  # every row's class index


def load(
    data: str | None,
    label: str | None,
    teacher: tuple[int, int, int] | None,
    group: str | None,
    seed: int,
    split: str | None = None,
    delimiter: str | None = None,
) -> SearchData:
    """The search's rows; RequestError naming `{data}`, `{teacher}`, `{group}` or
    `{split_column}`. A group or split column is set aside (`dense.columns`)."""
    named = splits.columns_named(data, group, split)
    try:
        if teacher is not None:
            rows, features, classes = teacher
            _check_rows(rows, "teacher")
            dataset: Dataset = TeacherDataset(rows, features, classes, seed)
            return SearchData(dataset, teacher_labels(dataset))
        assert data is not None
        if arrays.is_array_data(data):  # X and y given to the API
            held = arrays.held(data)
            return SearchData(held, held.y)
        _check_file(data)
        array = (
            load_csv_columns(data, label, named, delimiter)[0]
            if named
            else open_dataset(data, label, delimiter)
        )
        _check_rows(array.n_rows, "data")  # its size: check_dataset, as train's
        return SearchData(array, array.y)
    except DataError as exc:
        raise RequestError(f"{{data}}: {exc}", "data") from None


def precheck(
    data: str | None,
    label: str | None,
    teacher: tuple[int, int, int] | None,
    group: str | None,
    seed: int,
    split: str | None = None,
) -> Dataset | None:
    """`load`'s checks that need no rows: the columns named, a teacher set's shape (the set
    itself, which makes its weights and never its rows, is returned) or a file's kind and
    size; None for data that only reading it can check."""
    splits.columns_named(data, group, split)
    try:
        if teacher is not None:
            rows, features, classes = teacher
            _check_rows(rows, "teacher")
            return TeacherDataset(rows, features, classes, seed)
    except DataError as exc:
        raise RequestError(f"{{data}}: {exc}", "data") from None
    assert data is not None
    if not arrays.is_array_data(data):
        _check_file(data)
    return None


def teacher_labels(dataset: Dataset) -> Ints:
    labels = np.empty(dataset.n_rows, dtype=np.int64)
    for start in range(0, dataset.n_rows, _BLOCK):
        stop = min(dataset.n_rows, start + _BLOCK)
        labels[start:stop] = dataset.rows(np.arange(start, stop, dtype=np.int64))[1]
    return labels


def _check_rows(rows: int, field: str) -> None:
    if rows > MAX_SEARCH_ROWS:
        raise AdmissionError(
            f"{{{field}}} has {rows:,} rows; a search takes at most {MAX_SEARCH_ROWS:,} "
            "(every row's fold travels with the fits' parameters)",
            field,
        )


def _check_file(path: str) -> None:
    if path != "digits":
        check_data_file(path)
