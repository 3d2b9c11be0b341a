"""The data of a search: section 9's data sets, and a CSV's group column (docs/contracts.md, section
12).

Without a group column the data set is Dense's own (`dense.data.open_dataset`: a CSV, an
NPZ or the digits; or the teacher set). With one, the CSV is read as Dense reads it with the
group column set aside: its cells become the rows' group labels (the text with surrounding
blanks removed) and it is not a feature. Errors name the file, line and column as Dense's
do; the group column must differ from the label column, and a group needs a CSV.

The class index of every row is needed for stratified folds, so a teacher set's labels are
generated here, by blocks of rows; a search's data set has at most `MAX_SEARCH_ROWS` rows
(every row's fold byte travels with each pass's parameters, in one frame).
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from aner_coord.computations.dense import arrays
from aner_coord.errors import AdmissionError, RequestError
from aner_worker.files import FileRefused, stat_regular
from aner_worker.kernels.dense.data import (
    MAX_DATA_BYTES,
    MAX_FILE_BYTES,
    ArrayDataset,
    DataError,
    Dataset,
    TeacherDataset,
    open_dataset,
    parse_csv,
)
from aner_worker.npzfile import UnsafeFile, read_user_file

MAX_SEARCH_ROWS = 1 << 24  # 16 MiB of fold bytes per pass's parameters
_BLOCK = 1 << 16

Ints = npt.NDArray[np.int64]


@dataclass(frozen=True)
class SearchData:
    dataset: Dataset
    labels: Ints  # every row's class index
    groups: list[str] | None  # every row's group label, with a group column


def load(
    data: str | None,
    label: str | None,
    teacher: tuple[int, int, int] | None,
    group: str | None,
    seed: int,
) -> SearchData:
    """The search's rows; RequestError naming `{data}`, `{teacher}` or `{group}`."""
    try:
        if teacher is not None:
            if group is not None:
                raise RequestError(
                    "{group} needs a CSV file: the teacher set has no columns", "group"
                )
            rows, features, classes = teacher
            _check_rows(rows, "teacher")
            dataset: Dataset = TeacherDataset(rows, features, classes, seed)
            return SearchData(dataset, teacher_labels(dataset), None)
        assert data is not None
        if arrays.is_array_data(data):  # X and y given to the API
            if group is not None:
                raise RequestError(
                    "{group} needs a CSV file: arrays have no named columns", "group"
                )
            held = arrays.held(data)
            return SearchData(held, held.y, None)
        _check_file(data)
        if group is None:
            array = open_dataset(data, label)
            _check_array(array, data)
            return SearchData(array, array.y, None)
        if data == "digits" or data.lower().endswith(".npz"):
            raise RequestError(
                f"{{group}} needs a CSV file: {os.path.basename(data)} has no named columns",
                "group",
            )
        array, groups = load_grouped_csv(data, label, group)
        _check_array(array, data)
        return SearchData(array, array.y, groups)
    except DataError as exc:
        raise RequestError(f"{{data}}: {exc}", "data") from None


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
    if path == "digits":
        return
    try:
        size = stat_regular(path).st_size  # a FIFO or a device is refused, not trusted
    except FileRefused as exc:
        raise RequestError(f"{{data}}: cannot read {path}: it is {exc}", "data") from None
    except OSError as exc:
        raise RequestError(f"{{data}}: cannot read {path}: {exc.strerror or exc}", "data") from None
    if size > MAX_FILE_BYTES:
        raise AdmissionError(
            f"{path} has {size:,} bytes; the limit is {MAX_FILE_BYTES:,} ({{data}})", "data"
        )


def _check_array(array: ArrayDataset, path: str) -> None:
    _check_rows(array.n_rows, "data")
    in_memory = array.n_rows * array.n_features * 8
    if in_memory > MAX_DATA_BYTES:
        raise AdmissionError(
            f"{path}: {array.n_rows:,} x {array.n_features:,} features take {in_memory:,} "
            f"bytes; the limit is {MAX_DATA_BYTES:,} ({{data}})",
            "data",
        )


def _column(name: str, header: list[str], where: str, what: str) -> int:
    matches = [i for i, h in enumerate(header) if h == name]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise DataError(f"{where}: {what} column {name!r} appears {len(matches)} times")
    try:
        index = int(name)
    except ValueError:
        raise DataError(f"{where}: no column named {name!r} in the header") from None
    if not -len(header) <= index < len(header):
        raise DataError(
            f"{where}: {what} column {index} out of range; the header has {len(header)}"
        )
    return index % len(header)


def load_grouped_csv(path: str, label: str | None, group: str) -> tuple[ArrayDataset, list[str]]:
    """A CSV's rows without its group column, and each row's group label."""
    try:
        data = read_user_file(path, MAX_FILE_BYTES, path)
    except UnsafeFile as exc:
        raise DataError(str(exc)) from None
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        parse_csv(data, path, label)  # says where, as Dense does
        raise
    header, rows = _rows(text, path)
    group_col = _column(group.strip(), header, path, "group")
    label_col = len(header) - 1 if label is None else _column(label, header, path, "label")
    if group_col == label_col:
        raise DataError(
            f"{path}: the group column {header[group_col]!r} is also the label column: "
            "name the label with --label (label = ...)"
        )
    if len(header) < 3:
        raise DataError(f"{path}: needs a feature column besides the label and the group")
    groups: list[str] = []
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for line, fields in rows:
        if fields and len(fields) == len(header):
            name = fields[group_col].strip()
            if not name:
                raise DataError(
                    f"{path}: line {line}, column {group_col + 1} ({header[group_col]!r}): "
                    "missing group"
                )
            groups.append(name)
            fields = [*fields[:group_col], "0", *fields[group_col + 1 :]]
        writer.writerow(fields)  # a blank or malformed line stays, for Dense to report
    # The group column, zero everywhere, is parsed as a feature and then taken out, so that
    # every line and column number in Dense's messages is the file's own.
    name = header[label_col]
    by = name if header.count(name) == 1 else str(label_col)  # a name Dense finds again
    parsed = parse_csv(out.getvalue().encode("utf-8"), path, by)
    feature = group_col if group_col < label_col else group_col - 1
    x = np.delete(parsed.x, feature, axis=1)
    identity = "sha256:" + hashlib.sha256(data).hexdigest()
    names = parsed.feature_names
    features = None if names is None else names[:feature] + names[feature + 1 :]
    return ArrayDataset(x, parsed.y, parsed.classes, identity, features), groups


def _rows(text: str, where: str) -> tuple[list[str], list[tuple[int, list[str]]]]:
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        if header is None:
            raise DataError(f"{where}: empty file; expected a header row")
        return [h.strip() for h in header], [(reader.line_num, fields) for fields in reader]
    except csv.Error as exc:
        raise DataError(f"{where}: line {reader.line_num}: {exc}") from None
