"""Dense classifier training `aner-dense/v1` (SPEC section 9): the computation the registry
names, admission (the data loaded once, every limit) and the start of a run (`run.DenseRun`).
"""

from __future__ import annotations

import math
import os
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from aner_coord.computations.base import Admitted
from aner_coord.computations.dense.request import PRECISIONS, DenseRequest
from aner_coord.computations.dense.run import FRACTIONS, MODEL_ID, DenseRun
from aner_coord.computations.dense.summary import summarize
from aner_coord.errors import AdmissionError, RequestError
from aner_coord.limits import check_int, check_positive, check_seed
from aner_worker.kernels.dense.data import (
    ArrayDataset,
    DataError,
    Dataset,
    TeacherDataset,
    open_dataset,
)
from aner_worker.kernels.dense.kernel import DenseKernel
from aner_worker.kernels.dense.network import parameter_count
from aner_worker.kernels.dense.plan import (
    PlanError,
    assign_roles,
    layer_sizes,
    steps_per_epoch,
)

# Rows a task unless the execution says otherwise; the parameters depend on it (the order
# of the gradient sums), never on the workers.
DEFAULT_CHUNK_ROWS = 256

# Admission limits (SPEC section 3 asks for limits with clear errors).
MAX_FILE_BYTES = 2 << 30  # a data file, before parsing
MAX_DATA_BYTES = 4 << 30  # its features in memory, as binary64
MAX_TEACHER_ROWS = 200_000_000
MAX_LAYER = 4096  # features, hidden units or classes
MAX_HIDDEN_LAYERS = 16
MAX_PARAMS = 4_000_000  # 32 MB of binary64 per pass's frozen parameters
MAX_BATCH = 1_000_000
MAX_EPOCHS = 10_000

Floats = npt.NDArray[np.float64]


# -- loading data ------------------------------------------------------------------------
_loaded: dict[tuple[Any, ...], Dataset] = {}


def _file_key(request: DenseRequest) -> tuple[Any, ...]:
    assert request.data is not None
    if request.data == "digits":
        return ("digits", request.label)
    try:
        info = os.stat(request.data)
    except OSError as exc:
        raise RequestError(
            f"{{data}}: cannot read {request.data}: {exc.strerror or exc}", "data"
        ) from None
    if info.st_size > MAX_FILE_BYTES:
        raise AdmissionError(
            f"{request.data} has {info.st_size:,} bytes; the limit is {MAX_FILE_BYTES:,}: "
            "train on a smaller file ({data})",
            "data",
        )
    return ("file", os.path.abspath(request.data), request.label, info.st_mtime_ns, info.st_size)


def load_dataset(request: DenseRequest) -> Dataset:
    """The request's data set, parsed once per file version and kept for the job's run."""
    try:
        if request.teacher is not None:
            rows, features, classes = request.teacher
            if rows > MAX_TEACHER_ROWS:
                raise AdmissionError(
                    f"{{teacher}} asks for {rows:,} rows; the limit is {MAX_TEACHER_ROWS:,}",
                    "teacher",
                )
            return TeacherDataset(rows, features, classes, request.seed)
        key = _file_key(request)
        found = _loaded.get(key)
        if found is None:
            assert request.data is not None
            found = open_dataset(request.data, request.label)
            _loaded.clear()  # one data set at a time: a parsed file may be large
            _loaded[key] = found
        return found
    except DataError as exc:
        raise RequestError(str(exc)) from None


def _check_hidden(hidden: object) -> tuple[int, ...]:
    if not isinstance(hidden, tuple | list):
        raise RequestError(f"{{hidden}} must be a list of layer sizes, got {hidden!r}", "hidden")
    if len(hidden) > MAX_HIDDEN_LAYERS:
        raise AdmissionError(
            f"{{hidden}} has {len(hidden)} layers; the limit is {MAX_HIDDEN_LAYERS}", "hidden"
        )
    sizes = tuple(check_positive("hidden", h) for h in hidden)
    if any(h > MAX_LAYER for h in sizes):
        raise AdmissionError(
            f"{{hidden}} has a layer of {max(sizes):,} units; the limit is {MAX_LAYER:,}", "hidden"
        )
    return sizes


def _check_lr(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RequestError(f"{{lr}} must be a finite number, got {value!r}", "lr")
    if value <= 0:
        raise RequestError(f"{{lr}} must be positive, got {value}", "lr")
    return float(value)


def _check_precision(value: object) -> None:
    if value not in PRECISIONS:
        raise RequestError(
            f"{{precision}} must be {' or '.join(PRECISIONS)}, got {value!r}", "precision"
        )


class Dense:
    kind: ClassVar[str] = "dense"
    unit: ClassVar[str] = "rows"
    request_type: ClassVar[type[DenseRequest]] = DenseRequest
    kernel: ClassVar[DenseKernel] = DenseKernel()
    seconds_per_item: ClassVar[float] = 2e-6
    default_chunk: ClassVar[int] = DEFAULT_CHUNK_ROWS

    def admit(self, request: DenseRequest) -> Admitted:
        seed = check_seed(request.seed)
        if (request.data is None) == (request.teacher is None):
            raise RequestError(
                "give either {data} FILE or {teacher} ROWS,FEATURES,CLASSES (exactly one)",
                "data",
                "teacher",
            )
        hidden = _check_hidden(request.hidden)
        batch = check_positive("batch", request.batch)
        if batch > MAX_BATCH:
            raise AdmissionError(f"{{batch}} is {batch:,}; the limit is {MAX_BATCH:,}", "batch")
        epochs = check_positive("epochs", request.epochs)
        if epochs > MAX_EPOCHS:
            raise AdmissionError(f"{{epochs}} is {epochs}; the limit is {MAX_EPOCHS}", "epochs")
        check_positive("patience", request.patience)
        if request.optimizer not in ("adam", "sgd"):
            raise RequestError(
                f"{{optimizer}} must be adam or sgd, got {request.optimizer!r}", "optimizer"
            )
        _check_precision(request.precision)
        lr = _check_lr(request.lr)
        target = request.target_accuracy
        if target is not None and (
            isinstance(target, bool) or not isinstance(target, int | float) or not 0 < target <= 1
        ):
            raise RequestError(
                f"{{target_accuracy}} must be in (0, 1], got {target!r}", "target_accuracy"
            )
        if request.teacher is not None:
            if len(request.teacher) != 3:
                raise RequestError("{teacher} must be ROWS,FEATURES,CLASSES", "teacher")
            for value in request.teacher:
                check_int("teacher", value)
        dataset = load_dataset(request)
        if isinstance(dataset, ArrayDataset):
            in_memory = dataset.n_rows * dataset.n_features * 8
            if in_memory > MAX_DATA_BYTES:
                raise AdmissionError(
                    f"{request.data}: {dataset.n_rows:,} x {dataset.n_features:,} features "
                    f"take {in_memory:,} bytes; the limit is {MAX_DATA_BYTES:,} ({{data}})",
                    "data",
                )
        for what, size in (("features", dataset.n_features), ("classes", dataset.n_classes)):
            if size > MAX_LAYER:
                raise AdmissionError(f"the data has {size:,} {what}; the limit is {MAX_LAYER:,}")
        sizes = layer_sizes(dataset.n_features, hidden, dataset.n_classes)
        n_params = parameter_count(sizes)
        if n_params > MAX_PARAMS:
            raise AdmissionError(
                f"layer sizes {sizes} make {n_params:,} parameters; the limit is "
                f"{MAX_PARAMS:,}: use smaller {{hidden}} layers",
                "hidden",
            )
        try:
            roles = assign_roles(seed, dataset.n_rows, *FRACTIONS)
        except PlanError as exc:
            raise RequestError(str(exc)) from None
        n_train = int(roles.train.size)
        steps = steps_per_epoch(n_train, batch)
        source = (
            {"teacher": list(request.teacher)}
            if request.teacher is not None
            else {"file": os.path.basename(request.data or ""), "label": request.label}
        )
        return Admitted(
            items=min(batch, n_train),
            passes=1 + epochs * (steps + 1) + 1,
            identity=MODEL_ID,
            describe={
                "data": dataset.identity,
                **source,
                "seed": seed,
                "layer_sizes": sizes,
                "parameters": n_params,
                "batch": batch,
                "epochs": epochs,
                "steps_per_epoch": steps,
                "optimizer": request.optimizer,
                "precision": request.precision,
                "lr": lr,
                "patience": request.patience,
                "target_accuracy": target,
                "roles": roles.counts(),
                "roles_sha256": roles.sha256,
            },
        )

    def start(self, request: DenseRequest, chunk: int) -> DenseRun:
        return DenseRun(request, chunk, load_dataset(request))

    def summarize(self, result: dict[str, Any]) -> list[str]:
        return summarize(result)
