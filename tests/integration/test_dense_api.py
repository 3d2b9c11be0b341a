"""The Dense API as a scientific Python user expects it (issue 16, item 6): `dense_fit(X, y)`
on numpy arrays, numpy scalars where counts and seeds go, `hidden=64` as one layer, the rows
of each role on the result, predictions in the classes' own type, `score(X, y)`, and the
kernel load reported apart from the compute."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support import write_pipe_pair

from aner_coord import parallel
from aner_coord.admission import admit
from aner_coord.computations.dense.request import DenseRequest
from aner_coord.errors import RequestError
from aner_coord.requests import JobRequest


def blobs(n: int = 900, d: int = 5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    y = np.where(x[:, 0] + 0.5 * x[:, 1] > 0, 7, 2)  # whole-number classes, not 0..k-1
    return x, y


def params(job: Path) -> list[np.ndarray]:
    with np.load(job / "model.npz", allow_pickle=False) as archive:
        return [archive[name] for name in sorted(archive.files) if name[0] in "Wb"]


def test_arrays_in_labels_out_in_their_own_type(tmp_path: Path) -> None:
    x, y = blobs()
    fit = parallel.dense_fit(
        x, y, seed=np.uint64(3), hidden=np.int64(16), epochs=np.int32(8), batch=np.int16(128),
        output=tmp_path / "job", execution=parallel.local(workers=2),
    )  # fmt: skip
    assert fit.layer_sizes == [5, 16, 2]  # hidden=16: one layer
    predicted = fit.predict(x)
    assert predicted.dtype == np.int64 and set(predicted.tolist()) <= {2, 7}
    assert fit.score(x, y) == float(np.mean(predicted == y))
    assert fit.score(x[fit.test_rows], y[fit.test_rows]) == fit.test_accuracy
    rows = np.concatenate([fit.train_rows, fit.validation_rows, fit.test_rows])
    assert np.array_equal(np.sort(rows), np.arange(900))
    assert {k: len(getattr(fit, f"{k}_rows")) for k in fit.roles} == fit.roles
    manifest = json.loads((tmp_path / "job" / "run-manifest.json").read_text())
    assert manifest["request"]["arrays"] == fit.data and fit.data.startswith("sha256:")
    # Strings come back as strings.
    names = np.where(y == 7, "seven", "two")
    words = parallel.dense_fit(X=x, y=names, seed=3, hidden=16, epochs=2)
    assert words.predict(x[:4]).dtype.kind == "U"
    assert 0.0 <= words.score(x, names) <= 1.0


def test_the_same_values_are_the_same_data_wherever_they_are_computed(tmp_path: Path) -> None:
    x, y = blobs(seed=1)
    local = parallel.dense_fit(
        x, y, seed=1, hidden=8, epochs=2, output=tmp_path / "local",
        execution=parallel.local(workers=1),
    )  # fmt: skip
    # A list of lists, Fortran order, labels as Python ints: the same values, the same
    # identity (labels as text are other classes: strings, which predict gives back).
    group = parallel.cluster(write_pipe_pair(tmp_path / "cluster"))
    staged = parallel.dense_fit(
        np.asfortranarray(x).tolist(), [int(v) for v in y], seed=1, hidden=8, epochs=2,
        output=tmp_path / "staged", execution=group,
    )  # fmt: skip
    assert staged.data == local.data
    assert staged.staging and all(r.state in ("cold", "cached") for r in staged.staging)
    for a, b in zip(params(tmp_path / "local"), params(tmp_path / "staged"), strict=True):
        assert np.array_equal(a, b)
    other = parallel.dense_fit(x[::-1], y[::-1], seed=1, hidden=8, epochs=1)
    assert other.data != local.data


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda x, y: parallel.dense_fit(x, seed=1), "takes arrays as X and y together"),
        (lambda x, y: parallel.dense_fit(x, y[:9], seed=1), "y= must hold one label per row"),
        (lambda x, y: parallel.dense_fit(x[:, 0], y, seed=1), "Expected a 2-D array of rows"),
        (
            lambda x, y: parallel.dense_fit(x.astype(complex), y, seed=1),
            "Complex data not supported",
        ),
        (lambda x, y: parallel.dense_fit(x, y, seed=1, teacher=(9, 2, 2)), "give exactly one"),
        (lambda x, y: parallel.dense_fit(x, y, seed=1, hidden="64"), "hidden= must be a list"),
        (lambda x, y: parallel.dense_fit(x, y, seed=1.5), "seed= must be an integer, got 1.5"),
        (lambda x, y: parallel.dense_fit(x, np.zeros(900), seed=1), "at least two classes"),
    ],
)
def test_a_wrong_argument_is_a_request_error_naming_it(call: object, message: str) -> None:
    x, y = blobs()
    with pytest.raises(RequestError, match=message.replace("(", r"\(")):
        call(x, y)  # type: ignore[operator]


def test_arrays_this_process_does_not_hold_are_refused_in_one_line() -> None:
    request = DenseRequest(seed=1, data="array:sha256:" + "0" * 64)
    with pytest.raises(RequestError) as info:
        admit(JobRequest(computation=request))
    assert "in-memory arrays that this process does not hold" in str(info.value)
    assert "give the arrays again, as X and y" in str(info.value)


def test_the_first_calls_kernel_load_is_reported_apart() -> None:
    # A fresh process: its first fit loads the kernels, which `seconds` leaves out.
    code = (
        "from aner_coord import parallel\n"
        "a = parallel.dense_fit(teacher=(600, 5, 3), seed=1, hidden=8, epochs=2)\n"
        "b = parallel.dense_fit(teacher=(600, 5, 3), seed=1, hidden=8, epochs=2)\n"
        "print(a.load_s, a.seconds, b.load_s, b.seconds)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    first_load, first, second_load, second = (float(v) for v in done.stdout.split())
    assert first_load > 0 and first > 0 and second_load >= 0 and second > 0
    # Loading happened once: the second call's load is the start of its threads alone,
    # never again the kernels' (which the first call's admission timed).
    assert second_load < first_load


def test_cross_validation_and_search_take_arrays_as_dense_fit_does(tmp_path: Path) -> None:
    """`cross_validate(X, y)` and `search(X, y, grid=...)`: the fits of arrays are the fits of
    the same rows read from a file, bit for bit (only the data's identity differs), on
    local threads and on a pipe group that gets the arrays staged."""
    x, y = blobs(n=600, seed=4)
    data = tmp_path / "blobs.npz"
    np.savez(data, X=x, y=y)
    options = {"seed": 2, "folds": 3, "epochs": 3, "batch": 64}
    from_file = parallel.cross_validate(data=str(data), hidden=8, **options)
    from_arrays = parallel.cross_validate(x, y, hidden=np.int64(8), **options)
    metrics = ("validation_loss", "validation_accuracy", "best_epoch")

    def fits(result: object) -> list[tuple[object, ...]]:
        return [tuple(r[m] for m in metrics) for r in result.records()]  # type: ignore[attr-defined]

    assert fits(from_arrays) == fits(from_file) and len(fits(from_file)) == 3
    assert from_arrays.test_accuracy == from_file.test_accuracy
    assert np.array_equal(from_arrays.predict(x), from_file.predict(x))
    group = parallel.cluster(write_pipe_pair(tmp_path / "cluster"))
    searched = parallel.search(
        X=x.tolist(), y=y, grid={"hidden": [[8], [4]]}, execution=group, **options
    )
    assert fits(searched)[:3] == fits(from_file) and searched.result.selected in (0, 1)
    with pytest.raises(RequestError, match="takes arrays as X and y together"):
        parallel.search(x, grid={"lr": [1e-3]}, seed=1)
    with pytest.raises(RequestError, match="give exactly one"):
        parallel.cross_validate(x, y, data="digits", seed=1)
    with pytest.raises(RequestError, match="needs a CSV file: arrays have no named columns"):
        parallel.cross_validate(x, y, seed=1, group="site")
