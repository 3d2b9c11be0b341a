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

    from aner_coord.computations.dense.model import DenseModel

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

    from aner_coord.computations.dense.model import check_probabilities
    from aner_worker.kernels.dense.labels import label_strings

    proba = model.predict_proba(x)
    bad = check_probabilities(proba)
    if bad is not None:
        _blame(model, x[bad], bad, data, model_dir)
    labels = label_strings(model.classes)
    index = np.argmax(proba, axis=1)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["predicted", *(f"p_{name}" for name in labels)])
    for i, row in zip(index, proba, strict=True):
        writer.writerow([labels[int(i)], *(repr(float(p)) for p in row)])
    return out.getvalue()


# A row within this many training standard deviations of the mean cannot overflow the
# network of a sound model; beyond it, the row is the likelier culprit.
FAR_OUT_STD = 1e6


def _blame(model: DenseModel, row: Floats, index: int, data: str, model_dir: str) -> None:
    """A row's probabilities are not finite numbers: the row's fault if its features lie
    far outside the training data, else the model's (its parameters are out of range)."""
    import numpy as np

    with np.errstate(over="ignore", invalid="ignore"):  # an inf is the answer, not a warning
        z = float(np.max(np.abs((row - model.normalisation.mean) / model.normalisation.std)))
    if z > FAR_OUT_STD:
        raise RequestError(
            f"--data {data}: row {index + 1} gives probabilities that are not finite numbers: "
            f"its features lie up to {z:.3g} training standard deviations from the mean, "
            "beyond what this model can evaluate; nothing was written"
        )
    raise RequestError(
        f"--model {model_dir}: model.npz gives probabilities that are not finite numbers for "
        f"row {index + 1} of the data, {z:.3g} standard deviations from the training mean: its "
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
