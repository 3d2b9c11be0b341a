"""`aner parallel train` and `aner parallel predict`: thin shells over the Dense computation.

`train` parses its flags into a `DenseRequest` and runs it like every other job (foreground
or `--background`, `status`, `cancel`); a plan whose steps leave worker slots idle is noted
on stderr at the start. `predict` reads a job directory's `model.npz` and a CSV or NPZ file
of feature rows (`computations.dense.features`: a CSV's columns by the model's feature
names) and writes, for each row, the predicted label and the class probabilities (CSV),
with the model's own normalisation.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aner_coord.cli.arguments import (
    add_execution_arguments,
    add_request_arguments,
    request_from_arguments,
    show_needed,
)
from aner_coord.errors import EXIT_OK, RequestError
from aner_coord.requests import JobRequest

if TYPE_CHECKING:  # numpy and the job machinery load only when a command runs
    import numpy as np
    import numpy.typing as npt

    from aner_coord.computations.dense.model import DenseModel, NotEvaluable

    Floats = npt.NDArray[np.float64]


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    from aner_coord.computations.dense.request import DenseRequest
    from aner_worker.kernels.dense.params import DEFAULT_CHUNK_ROWS

    needed = add_request_arguments(p, DenseRequest)
    add_execution_arguments(p, "rows", DEFAULT_CHUNK_ROWS, "; the parameters depend on it")
    show_needed(p, *needed, "--output")


def add_predict_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, metavar="JOBDIR", help="a train job's directory")
    p.add_argument("--data", required=True, metavar="FILE", help="CSV or NPZ feature rows")
    p.add_argument(
        "--output", metavar="FILE", help="a new CSV file to write (default: standard output)"
    )
    p.add_argument(
        "--allow-incomplete",
        action="store_true",
        help="predict with the model a cancelled or failed job left (refused by default)",
    )


def train_request(args: argparse.Namespace) -> JobRequest:
    from aner_coord.cli.jobs import job_request
    from aner_coord.computations.dense.request import DenseRequest

    return job_request(args, request_from_arguments(args, DenseRequest, "train"))


def train_command(args: argparse.Namespace) -> int:
    from aner_coord.cli.jobs import start

    return start(train_request(args), args=args)


# -- predict -------------------------------------------------------------------------------


def predict_command(args: argparse.Namespace) -> int:
    return predict(args.model, args.data, args.output, allow_incomplete=args.allow_incomplete)


def predict(
    model_dir: str, data: str, output: str | None, *, allow_incomplete: bool = False
) -> int:
    """`aner parallel predict`: for each row of `data`, the predicted label and the class
    probabilities (CSV) with the model's own normalisation, to `output` (a new file) or
    standard output. Refuses, in one line and before writing anything: an output that
    exists, a model file that is not a sound model, an incomplete model (a cancelled or
    failed job's) unless `allow_incomplete`, rows that do not match the model's features,
    and rows whose probabilities would not be finite numbers."""
    if output is not None and os.path.lexists(output):
        raise RequestError(f"--output {output} exists: give a new file name")
    model, meta = _load(model_dir, allow_incomplete)
    from aner_coord.computations.dense.features import FeatureError, read_rows

    try:
        x = read_rows(data, model, meta.get("label"))
    except FeatureError as exc:
        raise RequestError(str(exc)) from None
    if model.features is None:
        print(
            f"aner: note: {model_dir}/model.npz records no feature names (an older aner): "
            "the columns of --data are taken by position",
            file=sys.stderr,
        )
    text = _predictions(model, x, data, model_dir)
    if output is None:
        return _print(text)
    _write_new(output, text)
    return EXIT_OK


def _load(model_dir: str, allow_incomplete: bool) -> tuple[DenseModel, dict[str, Any]]:
    from aner_coord.computations.dense.saved import read_saved

    if not Path(model_dir).is_dir():
        raise RequestError(f"--model {model_dir}: not a job directory")
    hint = "give --allow-incomplete to use it"
    return read_saved(model_dir, "--model", allow_incomplete=allow_incomplete, incomplete_hint=hint)


def _predictions(model: DenseModel, x: Floats, data: str, model_dir: str) -> str:
    import numpy as np

    from aner_coord.computations.dense.model import NotEvaluable
    from aner_worker.kernels.dense.labels import label_strings

    try:
        proba = model.predict_proba(x)
    except NotEvaluable as exc:
        raise _blamed(exc, model, data, model_dir) from None
    labels = label_strings(model.classes)
    index = np.argmax(proba, axis=1)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["predicted", *(f"p_{name}" for name in labels)])
    for i, row in zip(index, proba, strict=True):
        writer.writerow([labels[int(i)], *(repr(float(p)) for p in row)])
    return out.getvalue()


def _blamed(exc: NotEvaluable, model: DenseModel, data: str, model_dir: str) -> RequestError:
    """The model's refusal of a row (`NotEvaluable`, the API's rule) in the command's words:
    the row of the file (from 1) and the column's name, or the model's fault."""
    feature = f"x{exc.column}" if model.features is None else model.features[exc.column]
    far = (
        f"{exc.distance:.3g} training standard deviations from the mean"
        if exc.distance != float("inf")
        else "so far from the training mean that its normalised value overflows binary64"
    )
    if not exc.model_fault:
        return RequestError(
            f"--data {data}: row {exc.row + 1} gives probabilities that are not finite "
            f"numbers: its feature {feature!r} lies {far}, beyond what this model can "
            "evaluate; nothing was written"
        )
    return RequestError(
        f"--model {model_dir}: model.npz gives probabilities that are not finite numbers for "
        f"row {exc.row + 1} of the data, whose furthest feature {feature!r} lies {far}: its "
        "parameters are out of range; nothing was written"
    )


def _print(text: str) -> int:
    """To standard output; a reader that closes the pipe early (`| head -1`) ends it
    quietly with the command's own status."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return EXIT_OK


def _write_new(output: str, text: str) -> None:
    """`output`, which must not exist, complete or not at all: a temporary file beside it,
    linked to its name (which fails if that name was taken meanwhile)."""
    import tempfile

    target = Path(output)
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent or ".", prefix=f".{target.name}.")
    except OSError as exc:
        raise RequestError(f"--output {output}: cannot write: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.link(tmp, target)
    except FileExistsError:
        raise RequestError(f"--output {output} exists: give a new file name") from None
    except OSError as exc:
        raise RequestError(f"--output {output}: cannot write: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
