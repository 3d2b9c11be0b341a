"""What a Dense training job asks for (docs/contracts.md, section 9): its options, declared once
here. The API (`parallel.dense_fit`), the command line (`aner parallel train`) and spec files take
them from this type; each field's description is its help.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from aner_coord.requests import ComputationRequest
from aner_worker.kernels.base import PRECISIONS
from aner_worker.kernels.dense.params import OPTIMIZERS

# The identity of what a Dense job computes: the manifest's, the result's and model.npz's.
MODEL_ID = "aner-dense/v1"


class DenseRequest(ComputationRequest, frozen=True, tag="dense"):
    """A Dense classifier trained on `data` (a CSV or NPZ path, or "digits") or on the
    procedural `teacher` set (rows, features, classes), docs/contracts.md, section 9."""

    data: Annotated[
        str | None,
        Meta(description="CSV or NPZ file, or `digits`", extra={"metavar": "FILE", "path": True}),
    ] = None
    label: Annotated[
        str | None,
        Meta(description="label column of a CSV (default: the last)", extra={"metavar": "COL"}),
    ] = None
    delimiter: Annotated[
        str | None,
        Meta(
            description="the CSV's delimiter: one character, or `tab` (default: the one its "
            "header line holds most: comma, semicolon, tab or |)",
            extra={"metavar": "CHAR"},
        ),
    ] = None
    group: Annotated[
        str | None,
        Meta(
            description="group column of a CSV: all of a group's rows take one role (and, in "
            "cv and search, one fold); that column is not a feature",
            extra={"metavar": "COL", "dest": "group_column"},
        ),
    ] = None
    split_column: Annotated[
        str | None,
        Meta(
            description="a CSV column holding each row's role (train, validation or test), a "
            "split you made; that column is not a feature",
            extra={"metavar": "COL"},
        ),
    ] = None
    test_fraction: Annotated[
        float | None,
        Meta(
            description="fraction of rows (or groups) held out for the test, in [0, 1); 0: no "
            "test (default 0.15)",
            extra={"metavar": "F"},
        ),
    ] = None
    validation_fraction: Annotated[
        float | None,
        Meta(
            description="fraction of rows (or groups) that validate, in (0, 1) (default 0.15)",
            extra={"metavar": "F"},
        ),
    ] = None
    teacher: Annotated[
        tuple[int, int, int] | None,
        Meta(
            description="the procedural teacher set instead of a file",
            extra={"metavar": "ROWS,FEATURES,CLASSES"},
        ),
    ] = None
    hidden: Annotated[tuple[int, ...], Meta(description="hidden layer sizes")] = (64, 64)
    batch: Annotated[
        int,
        Meta(
            description="rows of a global batch (one optimizer step); the smaller of this and "
            "the training rows is used, and recorded"
        ),
    ] = 256
    epochs: Annotated[int, Meta(description="at most this many epochs")] = 100
    optimizer: Annotated[str, Meta(description="the optimizer", extra={"choices": OPTIMIZERS})] = (
        "adam"
    )
    lr: Annotated[float, Meta(description="learning rate")] = 1e-3
    patience: Annotated[
        int, Meta(description="stop after this many epochs without a lower validation loss")
    ] = 5
    target_accuracy: Annotated[
        float | None,
        Meta(description="record the time to this validation accuracy", extra={"metavar": "A"}),
    ] = None
    precision: Annotated[
        str,
        Meta(
            description="compute precision of the chunks; sums, optimizer and parameters stay "
            "float64 (float32: about twice as fast on wide layers, bitwise reproducible for one "
            "chunk size, within about 1e-4 of float64)",
            extra={"choices": PRECISIONS},
        ),
    ] = "float64"
    replicates: Annotated[
        int,
        Meta(
            description="independent trainings (in cv and search: fits of every candidate on "
            "every fold), each with a training seed derived from --seed, on the same data "
            "and roles (docs/contracts.md, section 16)",
            extra={"metavar": "N"},
        ),
    ] = 1
