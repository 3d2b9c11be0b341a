"""A trained ``aner-dense/v1`` model and its ``model.npz`` file (docs/contracts.md, section 9,
Files).

The file holds ``W1, b1, ..., W(L+1), b(L+1)``, ``mean``, ``std``, ``classes`` and ``meta``
(a JSON string: layer sizes, data identity, seed, epoch of the model, the compute precision
it was trained in, which `predict` computes in too, and the feature names, in column order,
that `predict` maps a CSV's columns by). It is written without pickles, atomically
(temporary file in the same directory, fsync, rename, fsync of the directory), owner-only,
so a reader never sees half a model.

It is read as untrusted input (`load_model`): a regular file of bounded size, members checked
before they are decompressed (`aner_worker.npzfile`), a meta that is a JSON object of this schema,
layer sizes within the training limits, no member but those, `complete` a boolean where present,
every array of its exact shape and finite, `std` at least `MIN_STD`, classes distinct numbers or
text. Anything else is a `ModelFileError`, one line naming the file. A file of an older aner still
reads: without feature names its `features` is None and `predict` says that columns are then taken
by position; its whole-number float classes come back as integers, as they did.
"""

from __future__ import annotations

import io
import itertools
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from aner_coord.computations.dense.inputs import ModelRows, accuracy, rows_for
from aner_coord.computations.dense.options import MAX_HIDDEN_LAYERS, MAX_LAYER, MAX_PARAMS
from aner_coord.computations.dense.request import MODEL_ID
from aner_coord.computations.dense.suspect import MIN_STD
from aner_coord.errors import RequestError
from aner_worker.kernels.base import PRECISIONS
from aner_worker.kernels.dense.labels import Classes
from aner_worker.kernels.dense.network import (
    DEFAULT_PRECISION,
    NotFinite,
    layer_shapes,
    predict,
    predict_proba,
)
from aner_worker.kernels.dense.plan import Normalisation
from aner_worker.npzfile import UnsafeFile, npz_arrays, read_user_file

Floats = npt.NDArray[np.float64]

# Bounds of a model that training could have made (the admission limits of `options`).
MAX_LAYERS = MAX_HIDDEN_LAYERS + 2  # input, hidden layers, output
MAX_MODEL_BYTES = 256 << 20  # the parameters, classes and meta of the largest such model


class ModelFileError(ValueError):
    """A ``model.npz`` that cannot be read back as a model; one line naming the file."""


# A row within this many training standard deviations of the mean cannot overflow the
# network of a sound model; beyond it, the row is the likelier culprit.
FAR_OUT_STD = 1e6


class NotEvaluable(RequestError):
    """A row whose forward pass leaves the finite numbers (`network.NotFinite`), so that it
    has no probabilities and no class: refused, never answered with NaN or a class by
    accident. `row` and `column` (the model's feature furthest from the training mean, at
    `distance` standard deviations, inf where that overflows) say where; `model_fault`
    says whose fault it is: the model's when every feature of the row lies within
    `FAR_OUT_STD` (its parameters are out of range), else the row's. The message is the
    API's; `aner parallel predict` words the same facts for its file."""

    def __init__(
        self, message: str, row: int, column: int, distance: float, model_fault: bool
    ) -> None:
        super().__init__(message)
        self.row = row
        self.column = column
        self.distance = distance
        self.model_fault = model_fault


def _far(distance: float) -> str:
    if np.isfinite(distance):
        return f"lies {distance:.3g} training standard deviations from the mean"
    return "lies so far from the training mean that its normalised value overflows binary64"


@dataclass(frozen=True)
class DenseModel:
    """Parameters with the normalisation, classes and feature names they were trained with."""

    sizes: list[int]
    params: list[Floats]
    normalisation: Normalisation
    classes: Classes
    features: tuple[str, ...] | None = None  # column names, in order (None: not recorded)
    precision: str = "float64"  # the compute precision it was trained in, and predicts in
    # Whether the features were named by the user (a frame's columns, a CSV's header), not
    # x0, x1, ... for a plain array: only then are a frame's columns mapped by name.
    named: bool = True
    # False for a model of an older aner, which stored integer labels as floats.
    typed_classes: bool = True

    def rows(self, x: Any) -> ModelRows:
        """Rows `x` (an array, or a frame mapped by name: `inputs.rows_for`) as float64
        in the model's feature order; RequestError naming a bad cell or name."""
        return rows_for(x, self.sizes[0], self.features, self.named)

    def not_evaluable(self, rows: ModelRows, row: int) -> NotEvaluable:
        """Why row `row` of `rows` has no finite outputs (`NotEvaluable`)."""
        n = self.normalisation
        with np.errstate(all="ignore"):
            z = np.abs((rows.values[row] - n.mean) / n.std)
        column = int(np.argmax(np.where(np.isnan(z), np.inf, z)))
        distance = float(z[column])
        cell = rows.cell(row, column)
        if distance > FAR_OUT_STD or not np.isfinite(distance):
            message = (
                f"{cell} {_far(distance)}, beyond what the model can evaluate: row {row}'s "
                "outputs would not be finite numbers (NaN probabilities, a class by accident); "
                "give rows within the range of the training data"
            )
            return NotEvaluable(message, row, column, distance, False)
        message = (
            f"the model's outputs for row {row} of X are not finite numbers, though its "
            f"features lie within {distance:.3g} training standard deviations of the mean "
            f"(the furthest: {cell}): the model's parameters are out of range"
        )
        return NotEvaluable(message, row, column, distance, True)

    @property
    def feature_names_in(self) -> tuple[str, ...] | None:
        """The feature names the user gave at fit (None for a plain array's)."""
        return self.features if self.named else None

    def predict_proba(self, x: Any) -> Floats:
        """Class probabilities of raw feature rows, the model's own normalisation applied,
        computed in the model's precision."""
        n, rows = self.normalisation, self.rows(x)
        try:
            return predict_proba(self.params, n.mean, n.std, rows.values, self.precision)
        except NotFinite as exc:
            raise self.not_evaluable(rows, exc.row) from None

    def predict(self, x: Any) -> npt.NDArray[np.generic]:
        """Labels (not indices) of raw feature rows ``x``, in the classes' own type (as
        the training labels were typed); computed in the model's precision."""
        n, rows = self.normalisation, self.rows(x)
        try:
            index = predict(self.params, n.mean, n.std, rows.values, self.precision)
        except NotFinite as exc:
            raise self.not_evaluable(rows, exc.row) from None
        out: npt.NDArray[np.generic] = self.labels[index]
        return out

    def score(self, x: Any, y: Any) -> float:
        """Accuracy of `predict(x)` against the labels `y` (as scikit-learn's `score`)."""
        return accuracy(self.predict(x), y)

    def __repr__(self) -> str:
        # The parameters stay out: a notebook shows a line, not megabytes of weights.
        classes = ", ".join(map(str, self.labels[:10].tolist()))
        more = f", ... ({len(self.classes)})" if len(self.classes) > 10 else ""
        return (
            f"DenseModel(layers {'-'.join(map(str, self.sizes))}, classes [{classes}{more}], "
            f"{self.precision})"
        )

    @property
    def labels(self) -> npt.NDArray[np.generic]:
        """The classes as the training labels were typed (an older model's whole-number
        floats as integers, as it gave them)."""
        classes = self.classes
        if classes.dtype.kind != "f" or self.typed_classes:
            return classes
        values = classes.astype(np.float64)
        if np.all(values == np.round(values)) and np.all(np.abs(values) < 2**53):
            return values.astype(np.int64)
        return classes


def encode_model(model: DenseModel, meta: dict[str, Any]) -> bytes:
    """The bytes of ``model.npz``; ``meta`` gains ``schema``, ``layer_sizes`` and the
    feature names (when the model has them)."""
    arrays: dict[str, npt.NDArray[Any]] = {}
    for index, p in enumerate(model.params):
        arrays[f"{'W' if index % 2 == 0 else 'b'}{index // 2 + 1}"] = p
    arrays["mean"] = model.normalisation.mean
    arrays["std"] = model.normalisation.std
    arrays["classes"] = model.classes
    full_meta = {
        "schema": MODEL_ID,
        "layer_sizes": list(model.sizes),
        "precision": model.precision,
        "features_named": model.named,
        "classes_typed": True,
        **meta,
    }
    if model.features is not None:
        full_meta["features"] = list(model.features)
    arrays["meta"] = np.array(json.dumps(full_meta, sort_keys=True))
    buffer = io.BytesIO()
    # Object arrays (and so pickles) are refused on the way in as on the way out.
    np.savez(buffer, allow_pickle=False, **arrays)
    return buffer.getvalue()


def load_model(path: Any) -> tuple[DenseModel, dict[str, Any]]:
    """Read ``model.npz`` back, checking everything (see the module docstring): the model
    and its ``meta``."""
    where = str(path)
    try:
        contents = npz_arrays(read_user_file(where, MAX_MODEL_BYTES, where), where, MAX_MODEL_BYTES)
    except UnsafeFile as exc:
        raise ModelFileError(f"{exc} (not a readable model file)") from None
    meta = _meta(contents, where)
    sizes = _sizes(meta, where)
    expected = {"mean", "std", "classes", "meta"} | {
        f"{kind}{layer}" for layer in range(1, len(sizes)) for kind in "Wb"
    }
    extra = sorted(set(contents) - expected)
    if extra:
        raise ModelFileError(f"{where}: unexpected member {extra[0][:40]!r} (aner writes none)")
    complete = meta.get("complete", True)  # a model of an older aner says nothing
    if not isinstance(complete, bool):
        raise ModelFileError(f"{where}: complete must be true or false, got {str(complete)[:20]!r}")
    params = [
        _floats(contents, f"{'W' if i % 2 == 0 else 'b'}{i // 2 + 1}", shape, where)
        for i, shape in enumerate(layer_shapes(sizes))
    ]
    mean = _floats(contents, "mean", (sizes[0],), where)
    std = _floats(contents, "std", (sizes[0],), where)
    if not np.all(std >= MIN_STD):
        raise ModelFileError(
            f"{where}: std has a value below 2**-511 ({float(np.min(std)):.3g}), which training "
            "never writes (a constant feature's is stored as 1)"
        )
    classes = _classes(contents, sizes[-1], where)
    features = _features(meta, sizes[0], where)
    generated = tuple(f"x{j}" for j in range(sizes[0]))
    named = meta.get("features_named", features != generated)
    typed = meta.get("classes_typed", False)
    if not isinstance(named, bool) or not isinstance(typed, bool):
        raise ModelFileError(f"{where}: features_named and classes_typed must be true or false")
    # A model written before precisions were declared was trained in float64.
    precision = meta.get("precision", DEFAULT_PRECISION)
    if precision not in PRECISIONS:
        raise ModelFileError(
            f"{where}: precision {precision!r}, expected one of {', '.join(PRECISIONS)}"
        )
    model = DenseModel(
        sizes,
        params,
        Normalisation(mean, std),
        classes,
        features=features,
        precision=precision,
        named=named,
        typed_classes=typed,
    )
    return model, meta


def _meta(contents: dict[str, npt.NDArray[Any]], where: str) -> dict[str, Any]:
    raw = contents.get("meta")
    if raw is None:
        raise ModelFileError(f"{where}: missing 'meta'")
    if raw.dtype.kind != "U" or raw.shape != ():
        raise ModelFileError(f"{where}: meta must be one JSON string, got {raw.dtype} {raw.shape}")
    try:
        meta = json.loads(str(raw))
    except (ValueError, RecursionError) as exc:
        raise ModelFileError(f"{where}: meta is not JSON ({str(exc)[:80]})") from None
    if not isinstance(meta, dict):
        raise ModelFileError(f"{where}: meta must be a JSON object, got {type(meta).__name__}")
    if meta.get("schema") != MODEL_ID:
        shown = str(meta.get("schema"))[:40]
        raise ModelFileError(f"{where}: schema {shown!r}, expected {MODEL_ID}")
    return meta


def _sizes(meta: dict[str, Any], where: str) -> list[int]:
    sizes = meta.get("layer_sizes")
    if (
        not isinstance(sizes, list)
        or not 2 <= len(sizes) <= MAX_LAYERS
        or not all(type(s) is int and 1 <= s <= MAX_LAYER for s in sizes)
    ):
        raise ModelFileError(
            f"{where}: layer_sizes must be 2 to {MAX_LAYERS} whole numbers in 1..{MAX_LAYER}, "
            f"got {str(sizes)[:60]}"
        )
    if sum(a * b + b for a, b in itertools.pairwise(sizes)) > MAX_PARAMS:
        raise ModelFileError(f"{where}: layer sizes {sizes} make more than {MAX_PARAMS:,} weights")
    return sizes


def _floats(
    contents: dict[str, npt.NDArray[Any]], name: str, shape: tuple[int, ...], where: str
) -> Floats:
    array = contents.get(name)
    if array is None:
        raise ModelFileError(f"{where}: missing {name!r}")
    if array.dtype.kind not in "fiu":
        raise ModelFileError(f"{where}: {name} holds {array.dtype}, not numbers")
    if array.shape != shape:
        raise ModelFileError(f"{where}: {name} has shape {array.shape}, expected {shape}")
    values = np.array(array, dtype=np.float64)
    if not np.isfinite(values).all():
        raise ModelFileError(f"{where}: {name} has a value that is not a finite number")
    out: Floats = values
    return out


def _classes(contents: dict[str, npt.NDArray[Any]], k: int, where: str) -> Classes:
    """Distinct labels of a type training writes: bool, integers, floats (finite) or text."""
    classes = contents.get("classes")
    if classes is None:
        raise ModelFileError(f"{where}: missing 'classes'")
    if classes.shape != (k,):
        raise ModelFileError(f"{where}: {classes.size} classes for {k} outputs")
    if classes.dtype.kind not in "biufU":
        raise ModelFileError(f"{where}: classes holds {classes.dtype}, not numbers or text")
    out: Classes = np.array(classes)
    if out.dtype.kind == "f" and not np.isfinite(out).all():
        raise ModelFileError(f"{where}: classes has a value that is not a finite number")
    if np.unique(out).size != k:
        raise ModelFileError(
            f"{where}: classes names a label twice ({k} outputs, {np.unique(out).size} distinct "
            "labels), which training never writes"
        )
    return out


def _features(meta: dict[str, Any], d: int, where: str) -> tuple[str, ...] | None:
    names = meta.get("features")
    if names is None:
        return None  # an older model: columns by position
    if (
        not isinstance(names, list)
        or len(names) != d
        or not all(isinstance(n, str) for n in names)
        or len(set(names)) != d
    ):
        raise ModelFileError(f"{where}: features must be {d} distinct column names")
    return tuple(names)
