"""A trained ``aner-dense/v1`` model and its ``model.npz`` file (SPEC section 9, Files).

The file holds ``W1, b1, ..., W(L+1), b(L+1)``, ``mean``, ``std``, ``classes`` and ``meta``
(a JSON string: layer sizes, data identity, seed, epoch of the model, and the compute
precision it was trained in, which `predict` computes in too). It is written without
pickles, atomically (temporary file in the same directory, fsync, rename, fsync of the
directory), owner-only, so a reader never sees half a model; it is read with pickles refused.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from aner_worker.kernels.dense.network import (
    DEFAULT_PRECISION,
    PRECISIONS,
    layer_shapes,
    predict,
    predict_proba,
)
from aner_worker.kernels.dense.plan import Normalisation

Floats = npt.NDArray[np.float64]
Classes = npt.NDArray[np.float64] | npt.NDArray[np.str_]

MODEL_SCHEMA = "aner-dense/v1"


class ModelFileError(ValueError):
    """A ``model.npz`` that cannot be read back as a model; one line naming the file."""


@dataclass(frozen=True)
class DenseModel:
    """Parameters with the normalisation and classes they were trained with."""

    sizes: list[int]
    params: list[Floats]
    normalisation: Normalisation
    classes: Classes
    precision: str = "float64"  # the compute precision it was trained in, and predicts in

    def predict_proba(self, x: Floats) -> Floats:
        """Class probabilities of raw feature rows, the model's own normalisation applied,
        computed in the model's precision."""
        n = self.normalisation
        rows = np.asarray(x, dtype=np.float64)
        return predict_proba(self.params, n.mean, n.std, rows, self.precision)

    def predict(self, x: Floats) -> npt.NDArray[np.generic]:
        """Labels (not indices) of raw feature rows ``x``, in the model's precision."""
        n = self.normalisation
        rows = np.asarray(x, dtype=np.float64)
        index = predict(self.params, n.mean, n.std, rows, self.precision)
        out: npt.NDArray[np.generic] = self.classes[index]
        return out


def encode_model(model: DenseModel, meta: dict[str, Any]) -> bytes:
    """The bytes of ``model.npz``; ``meta`` gains ``schema`` and ``layer_sizes``."""
    arrays: dict[str, npt.NDArray[Any]] = {}
    for index, p in enumerate(model.params):
        arrays[f"{'W' if index % 2 == 0 else 'b'}{index // 2 + 1}"] = p
    arrays["mean"] = model.normalisation.mean
    arrays["std"] = model.normalisation.std
    arrays["classes"] = model.classes
    full_meta = {
        "schema": MODEL_SCHEMA,
        "layer_sizes": list(model.sizes),
        "precision": model.precision,
        **meta,
    }
    arrays["meta"] = np.array(json.dumps(full_meta, sort_keys=True))
    buffer = io.BytesIO()
    # Object arrays (and so pickles) are refused on the way in as on the way out.
    np.savez(buffer, allow_pickle=False, **arrays)
    return buffer.getvalue()


def load_model(path: Path) -> tuple[DenseModel, dict[str, Any]]:
    """Read ``model.npz`` back: the model and its ``meta``."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            contents = {name: archive[name] for name in archive.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise ModelFileError(f"{path}: not a readable model file ({exc})") from None
    try:
        meta = json.loads(str(contents["meta"]))
        if meta.get("schema") != MODEL_SCHEMA:
            raise ModelFileError(f"{path}: schema {meta.get('schema')!r}, expected {MODEL_SCHEMA}")
        sizes = [int(s) for s in meta["layer_sizes"]]
        params: list[Floats] = []
        for index, shape in enumerate(layer_shapes(sizes)):
            name = f"{'W' if index % 2 == 0 else 'b'}{index // 2 + 1}"
            array = np.asarray(contents[name], dtype=np.float64)
            if array.shape != shape:
                raise ModelFileError(f"{path}: {name} has shape {array.shape}, expected {shape}")
            params.append(array)
        norm = Normalisation(
            mean=np.asarray(contents["mean"], dtype=np.float64),
            std=np.asarray(contents["std"], dtype=np.float64),
        )
        classes: Classes = contents["classes"]
        # A model written before precisions were declared was trained in float64.
        precision = meta.get("precision", DEFAULT_PRECISION)
        if precision not in PRECISIONS:
            raise ModelFileError(
                f"{path}: precision {precision!r}, expected one of {', '.join(PRECISIONS)}"
            )
    except KeyError as exc:
        raise ModelFileError(f"{path}: missing {exc.args[0]!r}") from None
    if norm.mean.shape != (sizes[0],) or norm.std.shape != (sizes[0],):
        raise ModelFileError(f"{path}: mean and std must have {sizes[0]} entries")
    if classes.shape != (sizes[-1],):
        raise ModelFileError(f"{path}: {classes.size} classes for {sizes[-1]} outputs")
    return DenseModel(sizes, params, norm, classes, precision), meta
