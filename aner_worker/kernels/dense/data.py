"""Data sources of ``aner-dense/v1`` (docs/contracts.md, section 9): CSV, NPZ, digits and the
teacher set.

A ``Dataset`` answers ``rows(positions)`` with the float64 features and class indices of any
rows, by global position, so a task needs to carry only positions. File data (CSV, NPZ and
scikit-learn's bundled handwritten digits) are parsed once into memory; the procedural
teacher set ``aner-dataset/teacher/v1`` is generated for the requested rows on demand by a
numba kernel, so 10**8 rows are never materialised.

Errors in a user's file are ``DataError`` (a ``ValueError``): one line that names the file,
the line and the column, ready for the command line to print.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import importlib.util
import io
import re
import sys
from abc import ABC, abstractmethod
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit

from aner_worker.kernels.dense.delimiters import delimiter_of, separated
from aner_worker.kernels.dense.labels import (
    Classes,
    LabelError,
    classes_of_array,
    classes_of_texts,
)
from aner_worker.kernels.dense.streams import signed, words
from aner_worker.kernels.dense.values import NotExact, as_float64
from aner_worker.kernels.identities import SEED_LIMIT
from aner_worker.kernels.philox import philox_block
from aner_worker.npzfile import MAX_FILE_BYTES, UnsafeFile, npz_arrays, read_user_file

# Limits of a data file: its bytes before parsing (`npzfile.MAX_FILE_BYTES`), and its
# features in memory as binary64 (an NPZ member's declared shape is checked against the
# second before it is decompressed).
MAX_DATA_BYTES = 4 << 30

TEACHER_ID = "aner-dataset/teacher/v1"
DIGITS = "digits"

TEACHER_HIDDEN = 32
TEACHER_MAX_FEATURES = 256
# Not a contract's limit: it keeps `r * d` word indices far inside int64 and matches the largest
# procedural set the project promises to handle, 10**8 rows with room to spare.
TEACHER_MAX_ROWS = 10**12
FEATURE_STREAM, HIDDEN_STREAM, OUTPUT_STREAM, NOISE_STREAM, FLIP_STREAM = 3, 4, 5, 6, 7
NOISE_RATE = 0.05

_SHIFT = np.uint64(11)
_TWO_M52 = 2.0**-52
_TWO_M53 = 2.0**-53

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]


class DataError(ValueError):
    """A data set that cannot be used as given; the message is one line for the user."""


class Dataset(ABC):
    """Rows by global position, their class indices and what identifies the data."""

    identity: str
    n_rows: int
    n_features: int
    classes: Classes
    # The features' names, in column order, where the data has them (a CSV's header).
    feature_names: tuple[str, ...] | None = None

    @property
    def n_classes(self) -> int:
        return int(self.classes.size)

    @abstractmethod
    def rows(self, positions: Ints) -> tuple[Floats, Ints]:
        """``(X[positions], y[positions])``: float64 ``(m, d)`` features and class indices."""

    def _positions(self, positions: Ints) -> Ints:
        pos = np.ascontiguousarray(positions, dtype=np.int64)
        if pos.ndim != 1:
            raise ValueError(f"positions must be 1-D, got shape {pos.shape}")
        if pos.size and (int(pos.min()) < 0 or int(pos.max()) >= self.n_rows):
            raise IndexError(f"row positions must lie in [0, {self.n_rows})")
        return pos


class ArrayDataset(Dataset):
    """A data set held in memory: a file's rows after parsing."""

    def __init__(
        self,
        x: Floats,
        y: Ints,
        classes: Classes,
        identity: str,
        feature_names: tuple[str, ...] | None = None,  # a CSV's header, label left out
    ) -> None:
        if x.ndim != 2 or y.shape != (x.shape[0],):
            raise ValueError(f"X must be (n, d) and y (n,), got {x.shape} and {y.shape}")
        self.x = np.ascontiguousarray(x, dtype=np.float64)
        self.y = np.ascontiguousarray(y, dtype=np.int64)
        self.classes = classes
        self.identity = identity
        self.n_rows, self.n_features = (int(s) for s in self.x.shape)
        self.feature_names = feature_names

    def rows(self, positions: Ints) -> tuple[Floats, Ints]:
        pos = self._positions(positions)
        return self.x[pos], self.y[pos]


# ---------------------------------------------------------------------------------------
# Labels (`labels`: classes in the labels' own type)


def _classes_of(
    texts: Sequence[str], lines: Sequence[int], column: str, where: str
) -> tuple[Classes, Ints]:
    """A CSV's classes and each row's class index; a refusal names the line."""
    try:
        return classes_of_texts(texts)
    except LabelError as exc:
        if exc.position is None:
            raise DataError(f"{where}: {exc.reason}") from None
        # "Unknown label type: ..." reads whole; the others say what the label is.
        said = exc.reason if exc.reason[0].isupper() else f"the label {exc.reason}"
        raise DataError(
            f"{where}: line {lines[exc.position]}, label column {column}: {said}"
        ) from None


def _classes_of_array(y: npt.NDArray[np.generic], where: str) -> tuple[Classes, Ints]:
    try:
        return classes_of_array(y)
    except LabelError as exc:
        at = "y" if exc.position is None else f"y[{exc.position}]"
        raise DataError(f"{where}: {at} {exc.reason}") from None


# ---------------------------------------------------------------------------------------
# CSV


def _resolve_label(label: str | None, header: list[str], where: str) -> int:
    if label is None:
        return len(header) - 1
    matches = [i for i, name in enumerate(header) if name == label]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise DataError(
            f"{where}: label column {label!r} appears {len(matches)} times in the header"
        )
    try:
        index = int(label)
    except ValueError:
        shown = ", ".join(repr(h) for h in header[:8]) + (", ..." if len(header) > 8 else "")
        raise DataError(f"{where}: no column named {label!r} in the header ({shown})") from None
    if not -len(header) <= index < len(header):
        raise DataError(f"{where}: label column {index} out of range; the header has {len(header)}")
    return index % len(header)


def _bad_value(text: str, delimiter: str = ",") -> str:
    if not text.strip():
        return "missing value"
    hint = ""
    if delimiter != "," and re.fullmatch(r"\s*[-+]?[0-9]*,[0-9]+\s*", text):
        hint = " (a decimal comma: write decimal points)"
    return f"not a number: {text[:40]!r}{hint}"


def parse_csv(
    data: bytes, where: str, label: str | None = None, delimiter: str | None = None
) -> ArrayDataset:
    """Parse CSV bytes: a header row, values separated by `delimiter` (None: the one the
    header line shows, `delimiter_of`), numeric finite features.

    ``label`` is a header name or a column number (0-based, negative from the end); the
    default is the last column. ``where`` prefixes every error (the file name).
    """
    identity = "sha256:" + hashlib.sha256(data).hexdigest()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DataError(f"{where}: line {line}: not valid UTF-8 ({exc.reason})") from None
    # A byte-order mark is how some spreadsheet programs say UTF-8; it is not part of a name.
    text = text.removeprefix("\ufeff")
    delimiter = delimiter or delimiter_of(text)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        header = _header(reader, where)
        n_cols = len(header)
        label_col = _resolve_label(label, header, where)
        features = array("d")
        labels: list[str] = []
        lines: list[int] = []
        for fields in reader:
            line = reader.line_num
            if not fields:
                continue
            if len(fields) != n_cols:
                raise DataError(
                    f"{where}: line {line}: expected {n_cols} {separated(delimiter)} values "
                    f"(the header's delimiter), found {len(fields)}"
                )
            text_label = fields[label_col].strip()
            if not text_label:
                raise DataError(
                    f"{where}: line {line}, column {label_col + 1} "
                    f"({header[label_col]!r}): missing label"
                )
            row = fields[:label_col] + fields[label_col + 1 :]
            try:
                features.extend(map(float, row))
            except ValueError:
                _raise_bad_row(row, line, label_col, header, where, delimiter)
            labels.append(text_label)
            lines.append(line)
    except csv.Error as exc:
        raise DataError(f"{where}: line {reader.line_num}: {exc}") from None
    if not labels:
        raise DataError(f"{where}: no data rows after the header")
    x = np.frombuffer(features, dtype=np.float64).reshape(len(labels), n_cols - 1).copy()
    finite = np.isfinite(x)
    if not finite.all():
        r, j = (int(v) for v in np.argwhere(~finite)[0])
        col = j if j < label_col else j + 1
        raise DataError(  # the value as a cell says it ('nan'), not numpy's repr
            f"{where}: line {lines[r]}, column {col + 1} ({header[col]!r}): "
            f"not a finite number: {str(float(x[r, j]))!r}"
        )
    classes, y = _classes_of(labels, lines, repr(header[label_col]), where)
    names = tuple(header[:label_col] + header[label_col + 1 :])
    return ArrayDataset(x, y, classes, identity, names)


def _header(reader: Any, where: str) -> list[str]:
    """The header row's names, checked: at least two, each its own, none empty."""
    header = next(reader, None)
    if header is None:
        raise DataError(f"{where}: empty file; expected a header row")
    header = [name.strip() for name in header]
    if len(header) < 2:
        raise DataError(
            f"{where}: line 1: need a label and at least one feature column, separated by a "
            "comma, semicolon, tab or vertical bar (none found in the header; or give "
            "--delimiter)"
        )
    _check_unique(header, where)
    _check_named(header, where)
    return header


def _raise_bad_row(
    row: list[str], line: int, label_col: int, header: list[str], where: str, delimiter: str
) -> None:
    for j, value in enumerate(row):
        try:
            float(value)
        except ValueError:
            col = j if j < label_col else j + 1
            raise DataError(
                f"{where}: line {line}, column {col + 1} ({header[col]!r}): "
                f"{_bad_value(value, delimiter)}"
            ) from None
    raise AssertionError("a row that failed to parse parsed")  # pragma: no cover


def _check_unique(header: list[str], where: str) -> None:
    """Columns are found by name (a model records its features' names and `predict` maps
    a file's columns by them), so a name given twice is ambiguous."""
    seen: dict[str, int] = {}
    for col, name in enumerate(header):
        if name in seen:
            raise DataError(
                f"{where}: line 1: columns {seen[name] + 1} and {col + 1} are both named "
                f"{name[:80]!r}; give every column its own name"
            )
        seen[name] = col


# The name pandas gives a column that had none when it reads such a file back.
_UNNAMED = re.compile(r"Unnamed: [0-9]+")


def _check_named(header: list[str], where: str) -> None:
    """Every column needs a name: features are mapped by name, and an unnamed first column
    is almost always a row index (pandas' `to_csv` writes one unless told `index=False`),
    which would leak the row order, often sorted by class, into the features."""
    for col, name in enumerate(header):
        if not name or _UNNAMED.fullmatch(name):
            what = "has no name" if not name else f"is named {name!r}"
            hint = (
                "a row index, as pandas' to_csv writes by default? Write the file with "
                "index=False, or drop the column"
                if col == 0
                else "give it a name in the header, or drop it"
            )
            raise DataError(f"{where}: line 1: column {col + 1} {what}: {hint}")


def load_csv(
    path: str | Path, label: str | None = None, delimiter: str | None = None
) -> ArrayDataset:
    """Read a CSV file (see ``parse_csv``); identity is the SHA256 of its bytes."""
    return parse_csv(_read(path), str(path), label, delimiter)


# ---------------------------------------------------------------------------------------
# NPZ


def load_npz(path: str | Path) -> ArrayDataset:
    """Read arrays ``X`` (2-D, numeric, finite) and ``y`` (1-D, numbers or strings)."""
    where = str(path)
    data = _read(path)
    identity = "sha256:" + hashlib.sha256(data).hexdigest()
    try:
        archive = npz_arrays(data, where, MAX_FILE_BYTES, MAX_DATA_BYTES // 8)
    except UnsafeFile as exc:
        raise DataError(str(exc)) from None
    missing = [name for name in ("X", "y") if name not in archive]
    if missing:
        raise DataError(f"{where}: missing array {missing[0]!r} (need X and y)")
    x_raw, y_raw = archive["X"], archive["y"]
    if x_raw.ndim != 2:
        raise DataError(f"{where}: X must be 2-D, got shape {x_raw.shape}")
    if y_raw.ndim != 1 or y_raw.shape[0] != x_raw.shape[0]:
        raise DataError(
            f"{where}: y must be 1-D with one label per row of X; X has shape {x_raw.shape}, "
            f"y {y_raw.shape}"
        )
    if x_raw.shape[0] == 0 or x_raw.shape[1] == 0:
        raise DataError(f"{where}: X is empty, shape {x_raw.shape}")
    try:
        x = as_float64(x_raw)
    except NotExact as exc:
        at = "X" if exc.cell is None else "X[{}, {}]".format(*exc.cell)
        raise DataError(f"{where}: {at} {exc.reason}") from None
    classes, y = _classes_of_array(y_raw, where)
    return ArrayDataset(x, y, classes, identity)


# ---------------------------------------------------------------------------------------
# digits


def digits_path() -> Path:
    """scikit-learn's bundled ``digits.csv.gz``, found without importing scikit-learn.

    ``find_spec`` of a top-level package locates it without running its ``__init__``;
    importing ``sklearn.datasets`` would cost about a second.
    """
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise DataError(
            "--data digits needs scikit-learn, which ships the data set: install it into aner's "
            f"environment: {sys.executable} -m pip install scikit-learn"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / "digits.csv.gz"
    if not path.is_file():
        raise DataError(f"scikit-learn is installed but its digits data file is missing: {path}")
    return path


def load_digits() -> ArrayDataset:
    """The 1,797 x 64 handwritten digits (8x8 images, values 0..16), 10 classes.

    The file has no header and the label in the last column; its identity is the SHA256
    of the compressed file as installed.
    """
    path = digits_path()
    data = _read(path)
    # The file has no header, so one is supplied rather than special-casing the parser.
    header = ",".join([f"pixel_{i}" for i in range(64)] + ["digit"]).encode()
    body = gzip.decompress(data)
    parsed = parse_csv(header + b"\n" + body, str(path))
    return ArrayDataset(
        parsed.x,
        parsed.y,
        parsed.classes,
        "sha256:" + hashlib.sha256(data).hexdigest(),
        parsed.feature_names,
    )


def open_dataset(
    source: str, label: str | None = None, delimiter: str | None = None
) -> ArrayDataset:
    """``digits``, an ``.npz`` file or a CSV file, as ``--data`` names them."""
    if source == DIGITS:
        if label is not None:
            raise DataError("--label does not apply to --data digits")
        return load_digits()
    if source.lower().endswith(".npz"):
        if label is not None:
            raise DataError(f"{source}: --label does not apply to NPZ files (labels are y)")
        return load_npz(source)
    return load_csv(source, label, delimiter)


def _read(path: str | Path) -> bytes:
    """The file's bytes, if it is a regular file within MAX_FILE_BYTES (never waited on,
    never read past the limit: `npzfile.read_user_file`)."""
    try:
        return read_user_file(str(path), MAX_FILE_BYTES, str(path))
    except UnsafeFile as exc:
        raise DataError(str(exc)) from None


# ---------------------------------------------------------------------------------------
# Teacher set


@njit(inline="always", nogil=True, cache=True)
def _s(w):  # type: ignore[no-untyped-def]
    return np.float64(np.int64(w >> _SHIFT)) * _TWO_M52 - 1.0


@njit(inline="always", nogil=True, cache=True)
def _u(w):  # type: ignore[no-untyped-def]
    return np.float64(np.int64(w >> _SHIFT)) * _TWO_M53


@njit(nogil=True, cache=True)
def _teacher_kernel(seed, positions, hidden_wt, output_wt, x, y):  # type: ignore[no-untyped-def]
    """Features and labels of teacher rows ``positions`` into ``x`` and ``y``; the teacher
    weights come transposed: ``hidden_wt[j, h] = A[h][j]``, ``output_wt[h, c] = C[c][h]``.

    No fastmath: every sum runs in index order from 0.0 with separate multiply and add,
    exactly as docs/contracts.md, section 9 writes it, so any implementation derives the same
    labels. The loops run over the sum's index outside and over the independent sums inside (all
    hidden units, all classes), so each sum still adds its terms in index order while LLVM
    vectorises across sums, which it may not do within one (2-3x the rows per second).
    """
    d = x.shape[1]
    k = output_wt.shape[1]
    n_hidden = hidden_wt.shape[1]
    feature_key = np.uint64(FEATURE_STREAM)
    noise_key = np.uint64(NOISE_STREAM)
    flip_key = np.uint64(FLIP_STREAM)
    a = np.empty(n_hidden)
    z = np.empty(k)
    for i in range(positions.size):
        r = positions[i]
        # Row r reads words r*d .. r*d + d - 1 of stream 3: ceil(d / 4) or one more blocks.
        k_word = r * d
        j = 0
        while j < d:
            w = philox_block(np.uint64(k_word >> 2), seed, feature_key)
            lane = k_word & 3
            while lane < 4 and j < d:
                x[i, j] = _s(w[lane])
                lane += 1
                j += 1
                k_word += 1
        for h in range(n_hidden):
            a[h] = 0.0
        for jj in range(d):
            xv = x[i, jj]
            for h in range(n_hidden):
                a[h] += hidden_wt[jj, h] * xv
        for h in range(n_hidden):
            if not a[h] > 0.0:
                a[h] = 0.0
        for c in range(k):
            z[c] = 0.0
        for h in range(n_hidden):
            ah = a[h]
            for c in range(k):
                z[c] += output_wt[h, c] * ah
        best = 0
        for c in range(1, k):
            # Strictly greater keeps the first index of the largest value.
            if z[c] > z[best]:
                best = c
        lane_r = r & 3
        noise = philox_block(np.uint64(r >> 2), seed, noise_key)
        if _u(noise[lane_r]) < NOISE_RATE:
            flip = philox_block(np.uint64(r >> 2), seed, flip_key)
            best = int(np.floor(_u(flip[lane_r]) * k))
        y[i] = best


class TeacherDataset(Dataset):
    """``aner-dataset/teacher/v1``: rows generated where they are used, never stored."""

    def __init__(self, n_rows: int, n_features: int, n_classes: int, seed: int) -> None:
        for name, value in (("rows", n_rows), ("features", n_features), ("classes", n_classes)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise DataError(f"teacher {name} must be an integer, got {value!r}")
        if not 1 <= n_rows <= TEACHER_MAX_ROWS:
            raise DataError(f"teacher rows must be in 1..{TEACHER_MAX_ROWS}, got {n_rows}")
        if not 1 <= n_features <= TEACHER_MAX_FEATURES:
            raise DataError(
                f"teacher features must be in 1..{TEACHER_MAX_FEATURES}, got {n_features}"
            )
        if n_classes < 2:
            raise DataError(f"teacher classes must be at least 2, got {n_classes}")
        if not 0 <= seed < SEED_LIMIT:
            raise DataError(f"seed must satisfy 0 <= seed < 2**64, got {seed}")
        self.n_rows, self.n_features, self.seed = n_rows, n_features, seed
        self.classes = np.arange(n_classes, dtype=np.int64)
        self.identity = (
            f"{TEACHER_ID}:rows={n_rows},features={n_features},classes={n_classes},seed={seed}"
        )
        self.hidden_w = signed(words(seed, HIDDEN_STREAM, 0, TEACHER_HIDDEN * n_features)).reshape(
            TEACHER_HIDDEN, n_features
        )
        self.output_w = signed(words(seed, OUTPUT_STREAM, 0, n_classes * TEACHER_HIDDEN)).reshape(
            n_classes, TEACHER_HIDDEN
        )
        self._hidden_wt = np.ascontiguousarray(self.hidden_w.T)  # the kernel's layout
        self._output_wt = np.ascontiguousarray(self.output_w.T)

    def rows(self, positions: Ints) -> tuple[Floats, Ints]:
        pos = self._positions(positions)
        x = np.empty((pos.size, self.n_features), dtype=np.float64)
        y = np.empty(pos.size, dtype=np.int64)
        _teacher_kernel(np.uint64(self.seed), pos, self._hidden_wt, self._output_wt, x, y)
        return x, y


def warm_up() -> None:
    """Compile or load from cache the teacher kernel now, not during the first task."""
    TeacherDataset(9, 5, 3, 1).rows(np.arange(9, dtype=np.int64))
