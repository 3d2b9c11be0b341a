"""Data sources of aner-dense/v1: CSV and NPZ parsing and errors, digits, the teacher set.

The teacher reference below is written from docs/contracts.md, section 9 alone, with words
taken straight from ``numpy.random.Philox``; it shares no code with ``aner_worker``.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import subprocess
import sys
from importlib.machinery import ModuleSpec
from pathlib import Path

import numpy as np
import pytest
from dense_reference import s_of
from dense_reference import teacher as reference_teacher
from dense_reference import u_of as _u
from dense_reference import words as _raw
from hypothesis import given, settings
from hypothesis import strategies as st

from aner_worker.kernels.dense.data import (
    DataError,
    TeacherDataset,
    digits_path,
    load_csv,
    load_digits,
    load_npz,
    open_dataset,
    parse_csv,
)
from aner_worker.kernels.dense.labels import label_strings

# --------------------------------------------------------------------------- teacher


@pytest.mark.parametrize(
    ("n", "d", "k", "seed"),
    [(500, 7, 3, 42), (300, 64, 10, 2**64 - 1), (64, 1, 2, 0), (40, 256, 5, 9)],
)
def test_teacher_equals_reference_bitwise(n: int, d: int, k: int, seed: int) -> None:
    data = TeacherDataset(n, d, k, seed)
    x, y = data.rows(np.arange(n, dtype=np.int64))
    ref_x, ref_y = reference_teacher(n, d, k, seed)
    assert np.array_equal(x, ref_x)
    assert np.array_equal(y, ref_y)
    assert data.n_classes == k and data.classes.tolist() == list(range(k))


def test_teacher_labels_use_noise_and_several_classes() -> None:
    n, d, k, seed = 4000, 16, 4, 11
    _, y = TeacherDataset(n, d, k, seed).rows(np.arange(n, dtype=np.int64))
    noisy = _u(_raw(seed, 6, n)) < 0.05
    # About 5 % of rows take the noise label; the clean labels span more than one class.
    assert 0.03 < noisy.mean() < 0.07
    assert len(set(y[~noisy].tolist())) > 1


@settings(max_examples=60, deadline=None)
@given(
    positions=st.lists(st.integers(0, 299), min_size=1, max_size=40),
    d=st.integers(1, 9),
)
def test_teacher_rows_by_position_match_full_generation(positions: list[int], d: int) -> None:
    n, k, seed = 300, 3, 5
    data = TeacherDataset(n, d, k, seed)
    full_x, full_y = data.rows(np.arange(n, dtype=np.int64))
    pos = np.array(positions, dtype=np.int64)
    x, y = data.rows(pos)
    assert np.array_equal(x, full_x[pos])
    assert np.array_equal(y, full_y[pos])


def test_teacher_far_rows_without_materialising() -> None:
    # Row 10**8 - 1 of a 10**8-row set: generated alone, equal to the reference words there.
    n, d, k, seed = 10**8, 8, 3, 1
    r = n - 1
    x, y = TeacherDataset(n, d, k, seed).rows(np.array([r], dtype=np.int64))
    first_word = r * d
    gen = np.random.Philox(key=seed + (3 << 64), counter=(first_word // 4 - 1) % 2**256)
    words = gen.random_raw(first_word % 4 + d)[first_word % 4 :]
    assert np.array_equal(x[0], s_of(words))
    assert 0 <= y[0] < k


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 4, 2, 1), "teacher rows must be in"),
        ((10, 257, 2, 1), "teacher features must be in 1..256"),
        ((10, 4, 1, 1), "teacher classes must be at least 2"),
        ((10, 4, 2, -1), "seed must satisfy"),
        ((10.0, 4, 2, 1), "teacher rows must be an integer"),
    ],
)
def test_teacher_refuses_bad_shapes(args: tuple[int, int, int, int], message: str) -> None:
    with pytest.raises(DataError, match=message):
        TeacherDataset(*args)


def test_rows_refuses_positions_out_of_range() -> None:
    data = TeacherDataset(10, 3, 2, 1)
    with pytest.raises(IndexError, match=r"\[0, 10\)"):
        data.rows(np.array([3, 10], dtype=np.int64))


# --------------------------------------------------------------------------- CSV


def _write(tmp_path: Path, text: str | bytes, name: str = "data.csv") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def test_csv_reads_rows_classes_and_identity(tmp_path: Path) -> None:
    text = "a,b,label\n1,2.5,10\n-3,4e1,9\n0.5,0,10\n"
    path = _write(tmp_path, text)
    data = load_csv(path)
    assert data.identity == "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    assert data.x.tolist() == [[1.0, 2.5], [-3.0, 40.0], [0.5, 0.0]]
    # Numeric labels sort numerically: 9 before 10.
    assert data.classes.tolist() == [9.0, 10.0]
    assert data.y.tolist() == [1, 0, 1]
    x, y = data.rows(np.array([2, 0], dtype=np.int64))
    assert x.tolist() == [[0.5, 0.0], [1.0, 2.5]] and y.tolist() == [1, 1]


def test_csv_label_by_name_or_number_and_string_classes(tmp_path: Path) -> None:
    path = _write(tmp_path, "kind,x1,x2\ncat,1,2\ndog,3,4\nant,5,6\ncat,7,8\n")
    by_name = load_csv(path, label="kind")
    by_number = load_csv(path, label="0")
    for data in (by_name, by_number):
        assert data.classes.tolist() == ["ant", "cat", "dog"]
        assert data.y.tolist() == [1, 2, 0, 1]
        assert data.x.tolist() == [[1, 2], [3, 4], [5, 6], [7, 8]]
    # "1" and "1.0" are one class when every label is a number.
    numeric = parse_csv(b"x,y\n1,1\n2,1.0\n3,2\n", "mem")
    assert numeric.classes.tolist() == [1.0, 2.0] and numeric.y.tolist() == [0, 0, 1]


def test_csv_accepts_byte_order_mark_and_quoted_fields(tmp_path: Path) -> None:
    path = _write(tmp_path, b'\xef\xbb\xbf"f 1",label\n"1.5",a\n2,"b"\n')
    data = load_csv(path, label="label")
    assert data.x.tolist() == [[1.5], [2.0]] and data.classes.tolist() == ["a", "b"]


@pytest.mark.parametrize(
    ("text", "label", "message"),
    [
        ("a,b,y\n1,2,0\n3,x,1\n", None, r"line 3, column 2 \('b'\): not a number: 'x'"),
        ("a,b,y\n1,2,0\n3,,1\n", None, r"line 3, column 2 \('b'\): missing value"),
        ("a,b,y\n1,nan,0\n3,4,1\n", None, r"line 2, column 2 \('b'\): not a finite number: 'nan'$"),
        ("y,a,b\n0,1,2\n1,3,-inf\n", "y", r"line 3, column 3 \('b'\): not a finite number: '-inf'"),
        (
            "a,b,y\n1,2,0\n3,4\n",
            None,
            r"line 3: expected 3 comma-separated values \(the header's delimiter\), found 2",
        ),
        ("a,b,y\n1,2,0\n3,4,\n", None, r"line 3, column 3 \('y'\): missing label"),
        ("a,b,y\n1,2,0\n3,4,0\n", None, "needs at least two classes, found 1"),
        ("a,b,y\n", None, "no data rows after the header"),
        ("", None, "empty file; expected a header row"),
        ("a,b,y\n1,2,0\n", "z", "no column named 'z' in the header"),
        ("a,b,y\n1,2,0\n", "7", "label column 7 out of range"),
        ("y\n1\n", None, "line 1: need a label and at least one feature column"),
    ],
)
def test_csv_errors_name_line_and_column(
    tmp_path: Path, text: str, label: str | None, message: str
) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(DataError, match=message) as info:
        load_csv(path, label)
    text_of_error = str(info.value)
    assert text_of_error.startswith(f"{path}: ")
    assert "\n" not in text_of_error
    assert isinstance(info.value, ValueError)


def test_csv_error_for_invalid_utf8_names_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, b"a,y\n1,0\n2,\xff\n")
    with pytest.raises(DataError, match=r"line 3: not valid UTF-8"):
        load_csv(path)


def test_missing_file_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="cannot read"):
        open_dataset(str(tmp_path / "absent.csv"))


# --------------------------------------------------------------------------- NPZ


def test_npz_reads_numeric_and_string_labels(tmp_path: Path) -> None:
    x = np.arange(12, dtype=np.int32).reshape(4, 3)
    np.savez(tmp_path / "a.npz", X=x, y=np.array([2.0, -1.0, 2.0, 7.0]))
    np.savez(tmp_path / "b.npz", X=x.astype(np.float32), y=np.array(["b", "a", "b", "c"]))
    a = open_dataset(str(tmp_path / "a.npz"))
    assert a.x.dtype == np.float64 and a.x.tolist() == x.tolist()
    assert a.classes.tolist() == [-1.0, 2.0, 7.0] and a.y.tolist() == [1, 0, 1, 2]
    assert a.identity == "sha256:" + hashlib.sha256((tmp_path / "a.npz").read_bytes()).hexdigest()
    b = load_npz(tmp_path / "b.npz")
    assert b.classes.tolist() == ["a", "b", "c"] and b.y.tolist() == [1, 0, 1, 2]


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"X": np.zeros((3, 2))}, "missing array 'y'"),
        ({"X": np.zeros(3), "y": np.arange(3)}, "X must be 2-D"),
        ({"X": np.zeros((3, 2)), "y": np.arange(4)}, "one label per row of X"),
        (
            {"X": np.array([[1.0, 2.0], [3.0, np.inf]]), "y": np.arange(2)},
            r"X\[1, 1\] is not a finite number \(inf\)",
        ),
        ({"X": np.zeros((2, 2)), "y": np.array([0.0, np.nan])}, r"y\[1\] is nan, a missing"),
        ({"X": np.array([["a", "b"]]), "y": np.arange(1)}, "X holds text, not numbers"),
        ({"X": np.zeros((3, 2)), "y": np.zeros(3)}, "needs at least two classes, found 1"),
    ],
)
def test_npz_errors(tmp_path: Path, arrays: dict[str, np.ndarray], message: str) -> None:
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    with pytest.raises(DataError, match=message):
        load_npz(path)


def test_npz_refuses_object_arrays_and_garbage(tmp_path: Path) -> None:
    np.savez(tmp_path / "obj.npz", X=np.zeros((2, 1)), y=np.array([1, "a"], dtype=object))
    with pytest.raises(DataError, match="arrays of object are not read"):
        load_npz(tmp_path / "obj.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(DataError, match="not an NPZ archive"):
        load_npz(tmp_path / "junk.npz")
    with pytest.raises(DataError, match="--label does not apply to NPZ"):
        open_dataset(str(tmp_path / "junk.npz"), label="y")


# --------------------------------------------------------------------------- digits


def test_digits_loads_1797_by_64_with_10_classes() -> None:
    data = load_digits()
    assert (data.n_rows, data.n_features, data.n_classes) == (1797, 64, 10)
    assert data.classes.tolist() == [float(c) for c in range(10)]
    assert data.identity == "sha256:" + hashlib.sha256(digits_path().read_bytes()).hexdigest()
    # Pixel intensities are 0..16; the first image is a 0 (scikit-learn's own first row).
    assert data.x.min() == 0.0 and data.x.max() == 16.0
    first = gzip.decompress(digits_path().read_bytes()).split(b"\n")[0].split(b",")
    assert data.x[0].tolist() == [float(v) for v in first[:64]] and data.y[0] == 0
    assert np.bincount(data.y).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    assert open_dataset("digits").identity == data.identity


def test_digits_does_not_import_sklearn() -> None:
    code = (
        "import sys\n"
        "from aner_worker.kernels.dense.data import load_digits\n"
        "d = load_digits()\n"
        "print(d.n_rows, any(m == 'sklearn' or m.startswith('sklearn.') for m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1797", "False"]


def test_digits_without_sklearn_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def hide_sklearn(name: str, package: str | None = None) -> ModuleSpec | None:
        return None if name == "sklearn" else real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", hide_sklearn)
    with pytest.raises(DataError, match=r"needs scikit-learn") as caught:
        load_digits()
    # The command that installs it where this aner runs, whatever the shell's `pip` is.
    assert str(caught.value).endswith(f"{sys.executable} -m pip install scikit-learn")


def test_label_strings_read_as_written() -> None:
    numeric = parse_csv(b"x,y\n1,-2\n2,3.0\n3,10\n4,1e20\n", "mem")
    assert label_strings(numeric.classes) == ["-2", "3", "10", "1e+20"]
    text = parse_csv(b"x,y\n1,b\n2,a\n3,1\n", "mem")
    assert label_strings(text.classes) == ["1", "a", "b"]


@pytest.mark.parametrize(
    ("delimiter", "name"), [(";", "semicolon"), ("\t", "tab"), ("|", "vertical bar")]
)
def test_a_csv_is_read_with_the_delimiter_its_header_holds(delimiter: str, name: str) -> None:
    # Issue 38, item 6: semicolon- and tab-separated files, as spreadsheets write them.
    from aner_worker.kernels.dense.data import parse_csv

    rows = [["a", '"b,1"', "label"], ["1.5", "2", "x"], ["3", "-4e1", "y"]]
    text = "\n".join(delimiter.join(r) for r in rows) + "\n"
    parsed = parse_csv(text.encode(), "f.csv")
    assert parsed.feature_names == ("a", "b,1") and parsed.x.tolist() == [[1.5, 2.0], [3.0, -40.0]]
    assert parsed.y.tolist() == [0, 1]
    short = text + delimiter.join(["5", "6"]) + "\n"
    with pytest.raises(DataError, match=f"line 4: expected 3 {name}-separated values"):
        parse_csv(short.encode(), "f.csv")


def test_a_decimal_comma_is_named_and_a_delimiter_option_checked() -> None:
    from aner_coord.computations.dense.options import check_delimiter
    from aner_coord.errors import RequestError
    from aner_worker.kernels.dense.data import parse_csv
    from aner_worker.kernels.dense.delimiters import delimiter_of

    with pytest.raises(DataError, match=r"not a number: '1,5' \(a decimal comma: write decimal"):
        parse_csv(b"a;b;label\n1,5;2;0\n", "f.csv")
    # Given, the delimiter is taken as it is: the header is then one column.
    with pytest.raises(DataError, match="line 1: need a label and at least one feature column"):
        parse_csv(b"a;b;label\n1;2;0\n", "f.csv", delimiter=",")
    assert delimiter_of('"x;y",b,c\n1;2;3\n') == ","  # the quoted semicolon is no delimiter
    assert delimiter_of("just_a_name\n") == ","
    assert check_delimiter("tab") == "\t" and check_delimiter(";") == ";"
    for bad in ("ab", "x", "7", '"', "\n", "."):
        with pytest.raises(RequestError, match="delimiter"):
            check_delimiter(bad)
