"""Frames, dtypes and labels through the API and the command line (issue 24, items 3 and 4):
a DataFrame's column names kept and mapped by name at predict, every dtype converted exactly
(bitwise the fit of the same values as float64) or refused in one line, labels in their own
type, continuous targets, missing labels and index columns refused, tampered models refused
by predict."""

from __future__ import annotations

import csv
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from support import run_aner
from test_dense_api import params

from aner_coord import parallel
from aner_coord.computations.dense.model import ModelFileError, load_model
from aner_coord.errors import RequestError

ONE = parallel.local(workers=1)
SMALL = {"seed": 3, "hidden": 4, "epochs": 1, "batch": 32, "execution": ONE}


@pytest.fixture(scope="module")
def iris() -> tuple[pd.DataFrame, np.ndarray]:
    from sklearn.datasets import load_iris

    data = load_iris(as_frame=True)
    return data.data, data.target_names[data.target]


@pytest.fixture(scope="module")
def iris_fit(iris: tuple[pd.DataFrame, np.ndarray]) -> Any:
    frame, y = iris
    return parallel.dense_fit(frame, y, seed=1, hidden=16, epochs=60, batch=16, execution=ONE)


def small_data(n: int = 90) -> tuple[np.ndarray, np.ndarray]:
    """Small integers (every dtype holds them exactly) and two classes."""
    rng = np.random.default_rng(5)
    x = rng.integers(0, 100, size=(n, 3))
    return x, (x[:, 0] + x[:, 1] > 100).astype(np.int64)


def with_cell(x: Any, cell: Any, value: Any) -> Any:
    x[cell] = value
    return x


def nullable(x: np.ndarray) -> pd.DataFrame:
    """A frame with a pandas nullable integer column holding one pd.NA."""
    frame = pd.DataFrame(x, columns=["a", "b", "c"]).astype({"b": "Int64"})
    frame.loc[6, "b"] = pd.NA
    return frame


# -- frames and feature names --------------------------------------------------------------


def test_a_frame_is_predicted_by_column_name_in_any_order(
    iris: tuple[pd.DataFrame, np.ndarray], iris_fit: Any
) -> None:
    frame, y = iris
    assert iris_fit.model.features == tuple(frame.columns)
    assert iris_fit.model.feature_names_in == tuple(frame.columns)
    expected = iris_fit.predict(frame)
    assert iris_fit.score(frame, y) > 0.8  # the model learnt something to map
    reversed_frame = frame[frame.columns[::-1]]
    assert np.array_equal(iris_fit.predict(reversed_frame), expected)
    assert np.array_equal(iris_fit.predict_proba(reversed_frame), iris_fit.predict_proba(frame))
    assert iris_fit.score(reversed_frame, y) == iris_fit.score(frame, y)
    # A plain array is taken by position, in the order of fit.
    assert np.array_equal(iris_fit.predict(frame.to_numpy()), expected)


def test_a_missing_or_unknown_column_is_refused_in_scikit_learns_words(
    iris: tuple[pd.DataFrame, np.ndarray], iris_fit: Any
) -> None:
    frame, _ = iris
    with pytest.raises(RequestError) as caught:
        iris_fit.predict(frame.drop(columns="petal width (cm)").assign(colour=1.0))
    message = str(caught.value)
    assert message.startswith("The feature names should match those that were passed during fit")
    assert "unseen at fit time: 'colour'" in message
    assert "seen at fit time, yet now missing: 'petal width (cm)'" in message
    assert "\n" not in message
    with pytest.raises(RequestError, match="yet now missing: 'sepal length"):
        iris_fit.predict_proba(frame.iloc[:, 1:])


def test_non_finite_rows_at_predict_are_refused_naming_row_and_column(
    iris: tuple[pd.DataFrame, np.ndarray], iris_fit: Any
) -> None:
    with pytest.raises(RequestError, match=r"^Input X contains NaN: X\[0, 0\] is not a finite"):
        iris_fit.predict(np.full((2, 4), np.nan))
    frame = iris[0].copy()
    frame.iloc[7, 2] = np.nan
    with pytest.raises(RequestError, match=r"NaN: X\[7, 2\] \(column 'petal length \(cm\)'\) is a"):
        iris_fit.predict(frame)
    rows = iris[0].to_numpy().copy()
    rows[3, 1] = np.inf
    with pytest.raises(RequestError, match=r"infinity: X\[3, 1\] is not a finite number \(inf\)"):
        iris_fit.score(rows, iris[1])


def test_a_model_fitted_on_an_array_takes_a_frame_by_position() -> None:
    x, y = small_data()
    fit = parallel.dense_fit(x, y, **SMALL)
    assert fit.model.features == ("x0", "x1", "x2") and fit.model.feature_names_in is None
    frame = pd.DataFrame(x, columns=["c", "b", "a"])
    assert np.array_equal(fit.predict(frame), fit.predict(x))
    with pytest.raises(
        RequestError, match="X has 2 features, but DenseModel is expecting 3 features"
    ):
        fit.predict(x[:, :2])


def test_frame_column_names_that_are_not_all_strings() -> None:
    x, y = small_data()
    unnamed = parallel.dense_fit(pd.DataFrame(x), y, **SMALL)  # columns 0, 1, 2: positions
    assert unnamed.model.feature_names_in is None
    with pytest.raises(RequestError, match=r"X= has column names of types \['int', 'str'\]"):
        parallel.dense_fit(pd.DataFrame(x, columns=["a", 1, "c"]), y, **SMALL)


# -- dtypes ----------------------------------------------------------------------------------

DTYPES = [
    "bool", "float16", "float32", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64",
]  # fmt: skip


@pytest.fixture(scope="module")
def float64_fit(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    x, y = small_data()
    job = tmp_path_factory.mktemp("float64") / "job"
    return parallel.dense_fit(x.astype(np.float64), y, output=job, **SMALL), job


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_fits_bitwise_as_its_values_in_float64(
    dtype: str, float64_fit: tuple[Any, Path], tmp_path: Path
) -> None:
    x, y = small_data()
    reference, reference_job = float64_fit
    if dtype == "bool":  # bool holds 0 and 1 only: its reference is its own values
        x = x % 2
        reference_job = tmp_path / "reference"
        reference = parallel.dense_fit(x.astype(np.float64), y, output=reference_job, **SMALL)
    fit = parallel.dense_fit(x.astype(dtype), y, output=tmp_path / "job", **SMALL)
    assert fit.data == reference.data
    for a, b in zip(params(tmp_path / "job"), params(reference_job), strict=True):
        assert np.array_equal(a, b)
    assert np.array_equal(fit.predict(x.astype(dtype)), reference.predict(x.astype(np.float64)))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda x: np.where(x == x[4, 1], 2**64 - 1, x).astype(np.uint64),
            r"^X\[4, 1\] is 18446744073709551615, which binary64 cannot hold exactly",
        ),
        (
            lambda x: np.ma.masked_array(x, mask=x > 90),
            r"^X= is a masked array: fill its masked cells",
        ),
        (lambda x: x.astype(complex), r"^Complex data not supported: X holds complex numbers"),
        (lambda x: x.astype(str), r"^X holds text, not numbers"),
        (
            lambda x: with_cell(x.astype(object), (1, 2), "a"),
            r"^X\[1, 2\] is 'a', a str, not a real number",
        ),
        (
            nullable,
            r"^Input X contains NaN: X\[6, 1\] \(column 'b'\) is a missing value",
        ),
        (
            lambda x: x * 1e-300,
            r"feature 'x0' \(column 1 of the features\) varies by only 9.\d+e-299: the squares "
            "of its deviations underflow binary64",
        ),
    ],
)
def test_features_aner_cannot_take_exactly_are_refused_in_one_line(make: Any, message: str) -> None:
    x, y = small_data()
    with pytest.raises(RequestError, match=message) as caught:
        parallel.dense_fit(make(x), y, **SMALL)
    assert "\n" not in str(caught.value)


# -- labels ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        (lambda y: y + 0.5, r"^y\[0\] Unknown label type: continuous"),
        (lambda y: np.where(np.arange(y.size) == 9, np.nan, y), r"^y\[9\] is nan, a missing label"),
        (
            lambda y: with_cell(pd.Series(y, dtype="Int64"), 4, pd.NA),
            r"^y\[4\] is a missing label",
        ),
        (lambda y: with_cell(y.astype(object), 3, "one"), r"^y\[3\] Mix of label input types"),
        (lambda y: np.ma.masked_array(y, mask=y == 1), "y= is a masked array"),
    ],
)
def test_labels_that_are_not_classes_are_refused_in_one_line(labels: Any, message: str) -> None:
    x, y = small_data()
    with pytest.raises(RequestError, match=message):
        parallel.dense_fit(x, labels(y), **SMALL)
    with pytest.raises(RequestError, match=message):
        parallel.cross_validate(x, labels(y), folds=2, **SMALL)


@pytest.mark.parametrize(
    "labels",
    [
        np.array([2**53, 2**53 + 1], dtype=np.int64),  # one class as float64, two here
        np.array([False, True]),
        np.array([-1.0, 3.0], dtype=np.float32),
        np.array([7, 250], dtype=np.uint8),
        np.array(["no", "yes"], dtype=object),
    ],
)
def test_labels_come_back_in_their_own_type(labels: np.ndarray) -> None:
    x, y = small_data()
    fit = parallel.dense_fit(x, labels[y], **SMALL)
    assert fit.model.classes.tolist() == labels.tolist()
    predicted = fit.predict(x)
    if labels.dtype == object:
        assert predicted.dtype.kind == "U"
    else:
        assert predicted.dtype == labels.dtype
    assert set(predicted.tolist()) <= set(labels.tolist())
    assert fit.score(x, labels[y]) == np.mean(predicted == labels[y])


def test_int64_labels_beyond_2_53_are_two_classes_in_search_too() -> None:
    x, y = small_data()
    labels = np.array([2**53, 2**53 + 1], dtype=np.int64)[y]
    cv = parallel.cross_validate(x, labels, folds=2, **SMALL)
    assert cv.model.classes.tolist() == [2**53, 2**53 + 1]
    assert set(cv.predict(x).tolist()) <= {2**53, 2**53 + 1}


# -- the command line ------------------------------------------------------------------------


def write_csv(path: Path, header: list[str], rows: list[list[Any]]) -> Path:
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def measurement_csv(tmp_path: Path) -> Path:
    x, _ = small_data()
    rows = [[*map(int, r), f"{0.1 * r[0] + 0.37:.2f}"] for r in x]
    return write_csv(tmp_path / "measured.csv", ["a", "b", "c", "weight"], rows)


def refused(done: Any, *parts: str) -> None:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    for part in parts:
        assert part in lines[0], lines[0]


def test_the_command_line_refuses_a_continuous_label(tmp_path: Path) -> None:
    data = measurement_csv(tmp_path)
    common = ["--data", str(data), "--seed", "1"]
    for command in (["train"], ["cv", "--folds", "2"]):
        done = run_aner("parallel", *command, *common, "--output", str(tmp_path / "job"))
        refused(done, "line 2, label column 'weight'", "Unknown label type: continuous")
        assert not (tmp_path / "job").exists()
    spec = tmp_path / "search.toml"
    spec.write_text(f'data = "{data}"\nseed = 1\nfolds = 2\n[grid]\nlr = [1e-3, 3e-3]\n')
    done = run_aner("parallel", "search", "--spec", str(spec), "--output", str(tmp_path / "job"))
    refused(done, "Unknown label type: continuous")


def test_the_command_line_refuses_a_nan_label_and_a_pandas_index_column(tmp_path: Path) -> None:
    x, y = small_data()
    rows = [[*map(int, r), int(c)] for r, c in zip(x, y, strict=True)]
    rows[5][-1] = "nan"
    data = write_csv(tmp_path / "nan.csv", ["a", "b", "c", "y"], rows)
    done = run_aner(
        "parallel", "train", "--data", str(data), "--seed", "1", "--output", str(tmp_path / "job")
    )
    refused(done, "line 7, label column 'y': the label is 'nan', a missing label (NaN)")
    frame = pd.DataFrame(x, columns=["a", "b", "c"]).assign(y=y)
    frame.to_csv(tmp_path / "indexed.csv")  # pandas writes its row index, unnamed, first
    for command in (["train"], ["cv", "--folds", "2"]):
        done = run_aner(
            "parallel", *command, "--data", str(tmp_path / "indexed.csv"), "--seed", "1",
            "--output", str(tmp_path / "job"),
        )  # fmt: skip
        refused(done, "line 1: column 1 has no name", "index=False")
    frame.to_csv(tmp_path / "plain.csv", index=False)
    done = run_aner(
        "parallel", "train", "--data", str(tmp_path / "plain.csv"), "--seed", "1", "--epochs",
        "1", "--output", str(tmp_path / "job"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    model, _ = load_model(tmp_path / "job" / "model.npz")
    assert model.features == ("a", "b", "c") and model.classes.dtype == np.int64


@pytest.fixture(scope="module")
def small_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    job = tmp_path_factory.mktemp("small") / "job"
    x, y = small_data()
    parallel.dense_fit(pd.DataFrame(x, columns=["a", "b", "c"]), y, output=job, **SMALL)
    write_csv(job.parent / "rows.csv", ["c", "b", "a"], [list(r[::-1]) for r in x[:5]])
    return job


def tampered(small_job: Path, tmp_path: Path, **change: np.ndarray) -> Path:
    job = tmp_path / "tampered"
    job.mkdir()
    with np.load(small_job / "model.npz", allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    arrays.update(change)
    np.savez(job / "model.npz", **arrays)
    return job


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"classes": np.array([1, 1])}, "classes names a label twice"),
        ({"std": np.array([1.0, 5e-324, 1.0])}, "std has a value below 2**-511 (4.94e-324)"),
    ],
)
def test_predict_refuses_a_tampered_model_without_a_raw_warning(
    small_job: Path, tmp_path: Path, change: dict[str, np.ndarray], message: str
) -> None:
    job = tampered(small_job, tmp_path, **change)
    done = run_aner(
        "parallel", "predict", "--model", str(job), "--data", str(small_job.parent / "rows.csv")
    )
    refused(done, message)
    assert "Warning" not in done.stderr and done.stdout == ""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ModelFileError, match=re.escape(message)):
            load_model(job / "model.npz")


def test_predict_maps_a_frames_csv_by_name(small_job: Path) -> None:
    done = run_aner(
        "parallel",
        "predict",
        "--model",
        str(small_job),
        "--data",
        str(small_job.parent / "rows.csv"),
    )
    assert done.returncode == 0, done.stderr
    model, _ = load_model(small_job / "model.npz")
    x, _ = small_data()
    predicted = [line.split(",")[0] for line in done.stdout.splitlines()[1:]]
    assert predicted == [str(v) for v in model.predict(x[:5])]


def test_pandas_is_never_imported_for_arrays() -> None:
    """pandas stays optional: a fit and a predict on plain arrays never import it."""
    program = (
        "import sys, numpy as np\n"
        "from aner_coord import parallel\n"
        "x = np.random.default_rng(1).normal(size=(60, 3)); y = (x[:, 0] > 0).astype(int)\n"
        "fit = parallel.dense_fit(x, y, seed=1, hidden=4, epochs=1,"
        " execution=parallel.local(workers=1))\n"
        "fit.predict(x); fit.score(x, y)\n"
        "print('pandas' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
