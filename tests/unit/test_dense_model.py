"""model.npz of aner-dense/v1: written atomically, owner-only, read back to the same bits."""

from __future__ import annotations

import dataclasses
import json
import stat
from pathlib import Path

import numpy as np
import pytest

from aner_coord.computations.dense.model import (
    DenseModel,
    ModelFileError,
    NotEvaluable,
    encode_model,
    load_model,
)
from aner_coord.computations.dense.request import MODEL_ID
from aner_coord.computations.dense.single import train_single
from aner_worker.files import write_atomically
from aner_worker.kernels.dense.data import TeacherDataset, parse_csv
from aner_worker.kernels.dense.network import predict_proba
from aner_worker.kernels.dense.plan import Normalisation, init_params


def test_roundtrip_predicts_the_same(tmp_path: Path) -> None:
    data = TeacherDataset(800, 5, 3, 6)
    fit = train_single(data, seed=6, hidden=(9,), batch=64, epochs=3)
    path = tmp_path / "model.npz"
    meta = {"data": data.identity, "seed": 6, "epoch": fit.best_epoch}
    write_atomically(path, encode_model(fit.model, meta))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["model.npz"]
    model, meta = load_model(path)
    assert meta == {
        "schema": "aner-dense/v1",
        "layer_sizes": [5, 9, 3],
        "precision": "float64",
        "features_named": True,
        "classes_typed": True,
        "data": data.identity,
        "seed": 6,
        "epoch": fit.best_epoch,
    }
    with np.load(path, allow_pickle=False) as archive:
        assert sorted(archive.files) == sorted(
            ["W1", "b1", "W2", "b2", "mean", "std", "classes", "meta"]
        )
    for a, b in zip(model.params, fit.model.params, strict=True):
        assert np.array_equal(a, b)
    x, _ = data.rows(np.arange(100, dtype=np.int64))
    assert np.array_equal(model.predict_proba(x), fit.model.predict_proba(x))
    assert np.array_equal(model.predict(x), fit.model.predict(x))


def test_a_float32_model_predicts_in_float32_and_an_older_file_in_float64(
    tmp_path: Path,
) -> None:
    data = TeacherDataset(800, 5, 3, 6)
    fit = train_single(data, seed=6, hidden=(9,), batch=64, epochs=2, precision="float32")
    assert fit.model.precision == "float32"
    path = tmp_path / "model.npz"
    write_atomically(path, encode_model(fit.model, {"seed": 6}))
    model, meta = load_model(path)
    assert meta["precision"] == model.precision == "float32"
    x, _ = data.rows(np.arange(300, dtype=np.int64))
    n = model.normalisation
    expected = predict_proba(model.params, n.mean, n.std, x, "float32")
    assert np.array_equal(model.predict_proba(x), expected)
    # float32 probabilities are float32 numbers widened: not those of float64.
    as64 = predict_proba(model.params, n.mean, n.std, x, "float64")
    assert not np.array_equal(expected, as64)
    assert np.max(np.abs(expected - as64)) < 1e-5
    assert np.array_equal(expected.astype(np.float32).astype(np.float64), expected)
    # A file without a precision (written before there was a choice) is float64.
    older = dataclasses.replace(model, precision="float64")
    arrays = dict(np.load(path, allow_pickle=False))
    stored = json.loads(str(arrays["meta"]))
    del stored["precision"]
    arrays["meta"] = np.array(json.dumps(stored))
    np.savez(tmp_path / "old.npz", allow_pickle=False, **arrays)
    old, old_meta = load_model(tmp_path / "old.npz")
    assert "precision" not in old_meta and old.precision == "float64"
    assert np.array_equal(old.predict_proba(x), older.predict_proba(x))
    stored["precision"] = "float16"
    arrays["meta"] = np.array(json.dumps(stored))
    np.savez(tmp_path / "bad.npz", allow_pickle=False, **arrays)
    with pytest.raises(ModelFileError, match="precision 'float16'"):
        load_model(tmp_path / "bad.npz")


def test_string_classes_come_back_as_labels(tmp_path: Path) -> None:
    data = parse_csv(b"a,b,kind\n1,2,cat\n3,4,dog\n5,6,ant\n", "mem")
    sizes = [2, 3]
    model = DenseModel(
        sizes, init_params(1, sizes), Normalisation(np.zeros(2), np.ones(2)), data.classes
    )
    write_atomically(tmp_path / "m.npz", encode_model(model, {}))
    loaded, _ = load_model(tmp_path / "m.npz")
    assert loaded.classes.tolist() == ["ant", "cat", "dog"]
    assert set(loaded.predict(np.array([[1.0, 2.0], [9.0, -9.0]])).tolist()) <= {
        "ant",
        "cat",
        "dog",
    }


def test_bad_model_files(tmp_path: Path) -> None:
    (tmp_path / "junk.npz").write_bytes(b"junk")
    with pytest.raises(ModelFileError, match="not an NPZ archive"):
        load_model(tmp_path / "junk.npz")
    np.savez(
        tmp_path / "partial.npz",
        W1=np.zeros((2, 2)),
        meta=np.array('{"schema": "aner-dense/v1", "layer_sizes": [2, 2]}'),
    )
    with pytest.raises(ModelFileError, match="missing 'b1'"):
        load_model(tmp_path / "partial.npz")
    np.savez(tmp_path / "other.npz", meta=np.array('{"schema": "x"}'))
    with pytest.raises(ModelFileError, match="schema 'x'"):
        load_model(tmp_path / "other.npz")


def test_feature_names_are_recorded_and_an_older_model_still_reads(tmp_path: Path) -> None:
    data = parse_csv(b"height,weight,kind\n1,2,0\n3,4,1\n5,7,1\n", "mem")
    sizes = [2, 2]
    norm = Normalisation(np.zeros(2), np.ones(2))
    named = DenseModel(sizes, init_params(1, sizes), norm, data.classes, ("height", "weight"))
    write_atomically(tmp_path / "new.npz", encode_model(named, {}))
    loaded, meta = load_model(tmp_path / "new.npz")
    assert loaded.features == ("height", "weight") and meta["features"] == ["height", "weight"]
    # A model written before feature names were recorded: readable, by position.
    write_atomically(
        tmp_path / "old.npz", encode_model(DenseModel(sizes, named.params, norm, data.classes), {})
    )
    old, meta = load_model(tmp_path / "old.npz")
    assert old.features is None and "features" not in meta
    # Whole-number classes come back as integers, the type the labels had.
    assert loaded.predict(np.array([[1.0, 2.0]])).dtype == np.int64


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"W1": np.full((2, 2), np.nan)}, "W1 has a value that is not a finite number"),
        ({"std": np.array([1.0, 0.0])}, r"std has a value below 2\*\*-511"),
        ({"std": np.array([1.0, -1.0])}, r"std has a value below 2\*\*-511"),
        ({"W1": np.zeros((3, 2))}, r"W1 has shape \(3, 2\), expected \(2, 2\)"),
        ({"meta": np.array("[1, 2]")}, "meta must be a JSON object, got list"),
        ({"meta": np.array("{nope")}, "meta is not JSON"),
        ({"classes": np.array([0.0, 1.0, 2.0])}, "3 classes for 2 outputs"),
        # both were accepted (issue 36): a flag that is not a boolean, a member nobody wrote
        (
            {
                "meta": np.array(
                    f'{{"schema": "{MODEL_ID}", "layer_sizes": [2, 2], "complete": "yes"}}'
                )
            },
            "complete must be true or false, got 'yes'",
        ),
        ({"W9": np.zeros(2)}, "unexpected member 'W9'"),
    ],
)
def test_a_tampered_model_is_refused_in_one_line(
    tmp_path: Path, change: dict[str, np.ndarray], message: str
) -> None:
    sizes = [2, 2]
    model = DenseModel(
        sizes, init_params(1, sizes), Normalisation(np.zeros(2), np.ones(2)), np.array([0.0, 1.0])
    )
    path = tmp_path / "model.npz"
    write_atomically(path, encode_model(model, {}))
    with np.load(path, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    arrays.update(change)
    np.savez(path, **arrays)
    with pytest.raises(ModelFileError, match=message) as info:
        load_model(path)
    assert str(info.value).startswith(str(path)) and "\n" not in str(info.value)


# -- rows a model cannot evaluate (issue 35, item 4) -------------------------------------


def _small_model(precision: str = "float64") -> DenseModel:
    data = TeacherDataset(400, 4, 3, 2)
    return train_single(data, seed=2, hidden=(6,), batch=64, epochs=1, precision=precision).model


@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_a_row_that_overflows_is_refused_naming_its_row_and_column(precision: str) -> None:
    # 1.79e308 gave NaN probabilities and class 0 without a word (issue 35).
    model = _small_model(precision)
    rows = np.zeros((3, 4))
    rows[2, 1] = 1.79e308
    for method in (model.predict, model.predict_proba, lambda x: model.score(x, [0, 1, 2])):
        with pytest.raises(NotEvaluable, match=r"^X\[2, 1\] lies .* beyond what the model can ev"):
            method(rows)
    # A float32 model's normalised value overflows binary32 long before binary64.
    rows[2, 1] = 1e39
    if precision == "float64":
        assert np.isfinite(model.predict_proba(rows)).all()
    else:
        with pytest.raises(NotEvaluable) as caught:
            model.predict(rows)
        assert (caught.value.row, caught.value.column, caught.value.model_fault) == (2, 1, False)
    assert np.array_equal(model.predict(rows[:2]), model.predict(np.zeros((2, 4))))


def test_a_model_whose_weights_overflow_is_refused_as_the_models_fault() -> None:
    model = _small_model()
    w1, _, w2, b2 = model.params
    # b1 at 1e308 keeps every hidden unit near 1e308 for rows near the mean; W2 overflows.
    huge = dataclasses.replace(model, params=[w1, np.full(6, 1e308), np.full_like(w2, 1e308), b2])
    rows = np.full((2, 4), 0.25)
    with pytest.raises(NotEvaluable, match=r"^the model's outputs for row 0 of X are not finite"):
        huge.predict_proba(rows)
    with pytest.raises(NotEvaluable, match="the model's parameters are out of range"):
        huge.predict(rows)


def test_an_infinite_pre_activation_a_relu_would_hide_is_refused() -> None:
    # The hidden layer's pre-activations are -inf for this row: the ReLU makes them 0 and the
    # logits finite, a prediction of nothing the row holds.
    model = _small_model()
    w1 = np.full_like(model.params[0], -1e300)
    hidden = dataclasses.replace(model, params=[w1, *model.params[1:]])
    n = model.normalisation
    row = (n.mean + 1e10 * n.std)[None, :]  # normalised, 1e10 a feature: -4e310 a unit
    with pytest.raises(NotEvaluable) as caught:
        hidden.predict(row)
    assert caught.value.row == 0 and not caught.value.model_fault
