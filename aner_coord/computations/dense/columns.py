"""A CSV's columns that are not features: the group column (`group`) and the split column
(`split_column`) of docs/contracts.md, sections 9 and 12.

The CSV is read as Dense reads it with those columns set aside: their cells become each row's
text (surrounding blanks removed) and they are not features. Errors name the file, line and
column as Dense's do; each such column must differ from the label column and from the other.
"""

from __future__ import annotations

import csv
import hashlib
import io
import weakref

import numpy as np

from aner_worker.kernels.dense.data import (
    ArrayDataset,
    DataError,
    Dataset,
    parse_csv,
)
from aner_worker.kernels.dense.delimiters import delimiter_of
from aner_worker.npzfile import MAX_FILE_BYTES, UnsafeFile, read_user_file

# Each data set read here keeps its columns' texts for as long as it lives.
_texts: weakref.WeakKeyDictionary[Dataset, dict[str, list[str]]] = weakref.WeakKeyDictionary()


def texts(dataset: Dataset) -> dict[str, list[str]]:
    """The set-aside columns' texts of a data set `load_csv_columns` read (else none)."""
    return _texts.get(dataset, {})


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


def load_csv_columns(
    path: str, label: str | None, columns: dict[str, str], delimiter: str | None = None
) -> tuple[ArrayDataset, dict[str, list[str]]]:
    """A CSV's rows without the `columns` (what each is, e.g. "group", to its name), and
    each such column's text per row."""
    try:
        data = read_user_file(path, MAX_FILE_BYTES, path)
    except UnsafeFile as exc:
        raise DataError(str(exc)) from None
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        parse_csv(data, path, label)  # says where, as Dense does
        raise
    delimiter = delimiter or delimiter_of(text)
    header, rows = _rows(text, path, delimiter)
    label_col = len(header) - 1 if label is None else _column(label, header, path, "label")
    taken: dict[str, int] = {}
    for what, name in columns.items():
        col = _column(name.strip(), header, path, what)
        if col == label_col:
            raise DataError(
                f"{path}: the {what} column {header[col]!r} is also the label column: "
                "name the label with --label (label = ...)"
            )
        if col in taken.values():
            raise DataError(f"{path}: the {what} column {header[col]!r} is taken twice")
        taken[what] = col
    if len(header) < 2 + len(taken):
        raise DataError(
            f"{path}: needs a feature column besides the label and the {' and '.join(taken)}"
        )
    found: dict[str, list[str]] = {what: [] for what in taken}
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n", delimiter=delimiter)
    writer.writerow(header)
    for line, fields in rows:
        if fields and len(fields) == len(header):
            fields = list(fields)
            for what, col in taken.items():
                cell = fields[col].strip()
                if not cell:
                    raise DataError(
                        f"{path}: line {line}, column {col + 1} ({header[col]!r}): missing {what}"
                    )
                found[what].append(cell)
                fields[col] = "0"
        writer.writerow(fields)  # a blank or malformed line stays, for Dense to report
    # The columns, zero everywhere, are parsed as features and then taken out, so that every
    # line and column number in Dense's messages is the file's own.
    name = header[label_col]
    by = name if header.count(name) == 1 else str(label_col)  # a name Dense finds again
    parsed = parse_csv(out.getvalue().encode("utf-8"), path, by, delimiter)
    features = sorted(col if col < label_col else col - 1 for col in taken.values())
    x = np.delete(parsed.x, features, axis=1)
    identity = "sha256:" + hashlib.sha256(data).hexdigest()
    names = parsed.feature_names
    kept = None if names is None else tuple(n for j, n in enumerate(names) if j not in features)
    dataset = ArrayDataset(x, parsed.y, parsed.classes, identity, kept)
    _texts[dataset] = found
    return dataset, found


def _rows(text: str, where: str, delimiter: str) -> tuple[list[str], list[tuple[int, list[str]]]]:
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        header = next(reader, None)
        if header is None:
            raise DataError(f"{where}: empty file; expected a header row")
        return [h.strip() for h in header], [(reader.line_num, fields) for fields in reader]
    except csv.Error as exc:
        raise DataError(f"{where}: line {reader.line_num}: {exc}") from None
