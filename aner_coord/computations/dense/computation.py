"""Dense classifier training `aner-dense/v1` (docs/contracts.md, section 9): the computation the
registry names, admission (the data loaded once, every limit; `precheck`, the checks that
need no rows) and the start of a run (`run.DenseRun`).
"""

from __future__ import annotations

import os
import time
from typing import Any, ClassVar

import msgspec
import numpy as np
import numpy.typing as npt

from aner_coord.computations.base import Admitted
from aner_coord.computations.dense import arrays, splits, suspect
from aner_coord.computations.dense.columns import load_csv_columns
from aner_coord.computations.dense.options import (
    CHECKS,
    MAX_BATCH,
    MAX_LAYER,
    MAX_PARAMS,
    check_delimiter,
    check_option,
)
from aner_coord.computations.dense.request import MODEL_ID, DenseRequest
from aner_coord.computations.dense.run import (
    PRIOR_COSTS,
    DenseRun,
    feature_names,
    training_plan,
)
from aner_coord.computations.dense.summary import summarize
from aner_coord.errors import AdmissionError, RequestError
from aner_coord.limits import check_seed
from aner_worker.files import FileRefused, stat_regular
from aner_worker.kernels.dense.data import (
    MAX_DATA_BYTES,
    ArrayDataset,
    DataError,
    Dataset,
    TeacherDataset,
    open_dataset,
)
from aner_worker.kernels.dense.kernel import DenseKernel
from aner_worker.kernels.dense.network import parameter_count
from aner_worker.kernels.dense.params import DEFAULT_CHUNK_ROWS
from aner_worker.kernels.dense.plan import Roles, batch_used, layer_sizes, steps_per_epoch
from aner_worker.npzfile import MAX_FILE_BYTES

# Under groups or a split of your own a role's row positions travel with each of its passes
# (8 bytes a row, beside up to 32 MB of parameters in one frame): 16 MiB of them at most.
MAX_CARRIED_ROWS = 1 << 21

Floats = npt.NDArray[np.float64]


# -- loading data ------------------------------------------------------------------------
_loaded: dict[tuple[Any, ...], Dataset] = {}


def check_data_file(path: str) -> os.stat_result:
    """The `fstat` of the user's data file `path`, a regular file within MAX_FILE_BYTES
    (a FIFO or a device is refused, not trusted); RequestError naming `{data}`."""
    try:
        info = stat_regular(path)
    except FileRefused as exc:
        raise RequestError(f"{{data}}: cannot read {path}: it is {exc}", "data") from None
    except OSError as exc:
        raise RequestError(f"{{data}}: cannot read {path}: {exc.strerror or exc}", "data") from None
    if info.st_size > MAX_FILE_BYTES:
        raise AdmissionError(
            f"{path} has {info.st_size:,} bytes; the limit is {MAX_FILE_BYTES:,}: "
            "train on a smaller file ({data})",
            "data",
        )
    return info


def _file_key(request: DenseRequest) -> tuple[Any, ...]:
    assert request.data is not None
    if request.data == "digits":
        return ("digits", request.label)
    info = check_data_file(request.data)
    named = tuple(sorted(_columns(request).items()))
    where = os.path.abspath(request.data)
    return ("file", where, request.label, request.delimiter, info.st_mtime_ns, info.st_size, named)


def _columns(request: DenseRequest) -> dict[str, str]:
    return splits.columns_named(request.data, request.group, request.split_column)


def load_dataset(request: DenseRequest, *, admitted: bool = False) -> Dataset:
    """The request's data set, parsed once per file version and kept for the job's run.

    With `admitted` (a run starting), the data set that admission parsed for this file is
    taken as it is, without looking at the file again: the data a job trains on is then
    the very bytes whose SHA256 its manifest records, even if the file changed meanwhile."""
    if admitted and request.data is not None and request.data != "digits":
        where = (os.path.abspath(request.data), request.label, request.delimiter)
        named = tuple(sorted(_columns(request).items()))
        kept = next(
            (d for key, d in _loaded.items() if key[1:4] == where and key[-1] == named), None
        )
        if kept is not None:
            return kept
    try:
        _columns(request)  # a column named for data that has none is refused
        if request.teacher is not None:
            rows, features, classes = request.teacher
            return TeacherDataset(rows, features, classes, request.seed)
        if arrays.is_array_data(request.data):
            assert request.data is not None
            if request.label is not None:
                raise RequestError("{label} does not apply to arrays (labels are y)", "label")
            return arrays.held(request.data)
        key = _file_key(request)
        found = _loaded.get(key)
        if found is None:
            assert request.data is not None
            columns = _columns(request)
            if columns:  # the group and split columns are set aside, not features
                found = load_csv_columns(
                    request.data, request.label, columns, check_delimiter(request.delimiter)
                )[0]
            else:
                found = open_dataset(
                    request.data, request.label, check_delimiter(request.delimiter)
                )
            _loaded.clear()  # one data set at a time: a parsed file may be large
            _loaded[key] = found
        return found
    except DataError as exc:
        raise RequestError(str(exc)) from None


def check_moments(dataset: Dataset, rows: Any, where: str) -> None:
    """Refuse features whose normalisation over `rows` would overflow (`suspect`), naming the
    column: a training's rows, or a search's pool (a fit normalises over a subset of it,
    whose deviations are smaller)."""
    if not isinstance(dataset, ArrayDataset):
        return  # a teacher set's features lie in [-1, 1)
    names = feature_names(dataset) or [f"x{j}" for j in range(dataset.n_features)]
    problem = suspect.overflowing_feature(dataset.x, rows, names)
    problem = problem or suspect.underflowing_feature(dataset.x, rows, names)
    if problem is not None:
        if arrays.is_array_data(where):  # the caller's X, not the identity it was given
            raise RequestError(f"X: {problem}")
        raise RequestError(f"{{data}} {where}: {problem}", "data")


_kernels_loaded = False
# The rule and roles admission gave a request's rows, for the run that a job starts next in
# this process (`Dense.start` takes them, once, for the same request and data): 10**8 rows
# are assigned once, not twice. An admission that no start follows leaves them here until
# the next one replaces them.
_admitted_roles: list[tuple[DenseRequest, Dataset, splits.Rule, Roles]] = []


def _load_kernels(kernel: DenseKernel) -> float:
    """Load (compile, or read from numba's cache) the kernels admission and the job use, the
    first time this process admits a Dense job: the seconds it took, reported apart from
    the job's compute (`DenseResult.load_s`); 0.0 once they are loaded."""
    global _kernels_loaded
    if _kernels_loaded:
        return 0.0
    began = time.perf_counter()
    kernel.warm_up()
    _kernels_loaded = True
    return time.perf_counter() - began


def _check_options(request: DenseRequest) -> dict[str, Any]:
    """The options that need no data, each through its one check (`options.check_option`)."""
    check_seed(request.seed)
    if (request.data is None) == (request.teacher is None):
        raise RequestError(
            "give either {data} FILE or {teacher} ROWS,FEATURES,CLASSES (exactly one)",
            "data",
            "teacher",
        )
    return {
        name: check_option(name, getattr(request, name))
        for name in CHECKS
        if hasattr(request, name) and getattr(request, name) is not None
    }


def check_dataset(dataset: Dataset, where: str | None) -> None:
    """The data's size within the limits: its bytes in memory, its features and classes."""
    if isinstance(dataset, ArrayDataset):
        in_memory = dataset.n_rows * dataset.n_features * 8
        if in_memory > MAX_DATA_BYTES:
            raise AdmissionError(
                f"{where}: {dataset.n_rows:,} x {dataset.n_features:,} features "
                f"take {in_memory:,} bytes; the limit is {MAX_DATA_BYTES:,} ({{data}})",
                "data",
            )
    for what, size in (("features", dataset.n_features), ("classes", dataset.n_classes)):
        if size > MAX_LAYER:
            raise AdmissionError(f"the data has {size:,} {what}; the limit is {MAX_LAYER:,}")


def check_parameters(sizes: list[int], where: str = "{hidden}") -> int:
    """The parameter count of layer `sizes`, within MAX_PARAMS (`where` names the layers)."""
    n_params = parameter_count(sizes)
    if n_params > MAX_PARAMS:
        raise AdmissionError(
            f"{where}: layer sizes {sizes} make {n_params:,} parameters; the limit is "
            f"{MAX_PARAMS:,}: use smaller layers",
            "hidden",
        )
    return n_params


def _source(request: DenseRequest, dataset: Dataset) -> dict[str, Any]:
    """Where the data came from, for the manifest (never a path: a file's base name)."""
    if request.teacher is not None:
        return {"teacher": list(request.teacher)}
    if arrays.is_array_data(request.data):
        return {"arrays": dataset.identity}
    return {"file": os.path.basename(request.data or ""), "label": request.label}


class Dense:
    kind: ClassVar[str] = "dense"
    unit: ClassVar[str] = "rows"
    request_type: ClassVar[type[DenseRequest]] = DenseRequest
    kernel: ClassVar[DenseKernel] = DenseKernel()
    seconds_per_item: ClassVar[float] = 2e-6
    default_chunk: ClassVar[int] = DEFAULT_CHUNK_ROWS

    def admit(self, request: DenseRequest) -> Admitted:
        options = _check_options(request)
        seed = request.seed
        load_s = _load_kernels(self.kernel)
        dataset = load_dataset(request)
        check_dataset(dataset, request.data)
        sizes = layer_sizes(dataset.n_features, options["hidden"], dataset.n_classes)
        n_params = check_parameters(sizes)
        rule, roles = splits.roles_for(request, dataset)
        check_moments(dataset, roles.train, str(request.data))
        _admitted_roles[:] = [(request, dataset, rule, roles)]
        counts = roles.counts()
        if (rule.groups is not None or rule.given is not None) and max(
            counts.values()
        ) > MAX_CARRIED_ROWS:
            raise AdmissionError(
                f"a role of {max(counts.values()):,} rows; with {{group}} or {{split_column}} "
                f"a role has at most {MAX_CARRIED_ROWS:,} (its rows travel with each pass)",
                "group",
                "split_column",
            )
        n_train = counts["train"]
        batch, epochs = batch_used(options["batch"], n_train), options["epochs"]
        steps = steps_per_epoch(n_train, batch)
        return Admitted(
            items=batch,
            passes=1 + epochs * (steps + 1) + (1 if counts["test"] else 0),
            identity=MODEL_ID,
            # normalisation, every epoch's steps and validation, the test
            work=n_train + epochs * (n_train + counts["validation"]) + counts["test"],
            largest_pass=max(counts.values()),
            upper_bound=epochs > request.patience,  # early stopping may end it sooner
            steps=True,
            plan=training_plan(n_train, counts["validation"], counts["test"], epochs),
            prior_costs=PRIOR_COSTS,
            load_s=load_s,
            describe={
                "data": dataset.identity,
                **_source(request, dataset),
                "seed": seed,
                "layer_sizes": sizes,
                "parameters": n_params,
                "batch": batch,
                "epochs": epochs,
                "steps_per_epoch": steps,
                "optimizer": request.optimizer,
                "precision": request.precision,
                "lr": options["lr"],
                "patience": request.patience,
                "target_accuracy": options.get("target_accuracy"),
                **rule.describe(),
                "roles": roles.counts(),
                "roles_sha256": roles.sha256,
            },
        )

    def precheck(self, request: DenseRequest) -> None:
        """`admit`'s checks that need no rows (`Prechecks`): the options and the split's
        (without the rows it assigns), a data file's kind and size (it is read by the
        coordinator that admits the job whole), a teacher set's shape and layers within the
        limits (its weights are made, never its rows)."""
        options = _check_options(request)
        _columns(request)
        splits.rule_of(
            request.test_fraction,
            request.validation_fraction,
            None if request.group is None else [],
            None if request.split_column is None else [],
        )
        if request.teacher is not None:
            dataset = load_dataset(request)
            check_dataset(dataset, None)
            check_parameters(layer_sizes(dataset.n_features, options["hidden"], dataset.n_classes))
        elif request.data != "digits" and not arrays.is_array_data(request.data):
            assert request.data is not None
            check_data_file(request.data)

    def start(self, request: DenseRequest, chunk: int) -> DenseRun:
        dataset = load_dataset(request, admitted=True)
        kept = _admitted_roles.pop() if _admitted_roles else None
        if kept is not None and kept[0] == request and kept[1].identity == dataset.identity:
            return DenseRun(request, chunk, dataset, (kept[2], kept[3]))
        return DenseRun(request, chunk, dataset)

    def summarize(self, result: dict[str, Any]) -> list[str]:
        return summarize(result)

    def tiny(self, request: DenseRequest, rows: int) -> DenseRequest:
        """A small request of the same shape for probes: a teacher set of `rows` rows (at
        least 200) with the data's features and classes (nothing to stage), one epoch of
        one step."""
        dataset = load_dataset(request)
        teacher = (max(200, rows), min(dataset.n_features, 256), dataset.n_classes)
        return msgspec.structs.replace(
            request,
            data=None,
            label=None,
            group=None,  # a teacher set has no columns: its roles are by row
            split_column=None,
            test_fraction=None,
            validation_fraction=None,
            teacher=teacher,
            epochs=1,
            batch=MAX_BATCH,
        )
