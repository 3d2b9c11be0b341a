"""`aner parallel train` and `aner parallel predict`: thin shells over the Dense computation.

`train` parses its flags into a `DenseRequest` and runs it like every other job (foreground
or `--background`, `status`, `cancel`). `predict` reads a job directory's `model.npz` and a
CSV or NPZ file of feature rows and writes, for each row, the predicted label and the class
probabilities (CSV), with the model's own normalisation.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from aner_coord.cli.arguments import (
    add_execution_arguments,
    add_request_arguments,
    request_from_arguments,
)
from aner_coord.errors import EXIT_OK, RequestError
from aner_coord.requests import JobRequest

if TYPE_CHECKING:  # numpy and the job machinery load only when a command runs
    import numpy as np
    import numpy.typing as npt

    Floats = npt.NDArray[np.float64]


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    from aner_coord.computations.dense.computation import DEFAULT_CHUNK_ROWS
    from aner_coord.computations.dense.request import DenseRequest

    add_request_arguments(p, DenseRequest)
    add_execution_arguments(p, "rows", DEFAULT_CHUNK_ROWS, "; the parameters depend on it")


def add_predict_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, metavar="JOBDIR", help="a train job's directory")
    p.add_argument("--data", required=True, metavar="FILE", help="CSV or NPZ feature rows")
    p.add_argument("--output", metavar="FILE", help="CSV to write (default: standard output)")


def train_request(args: argparse.Namespace) -> JobRequest:
    from aner_coord.cli.jobs import job_request
    from aner_coord.computations.dense.request import DenseRequest

    return job_request(args, request_from_arguments(args, DenseRequest, "train"))


def train_command(args: argparse.Namespace) -> int:
    from aner_coord.admission import admit
    from aner_coord.cli.jobs import run_foreground

    job = admit(train_request(args))
    if not args.quiet:
        for note in job.notes:  # also in status.json, for `status`
            print(f"aner: note: {note}", file=sys.stderr)
    if args.background:
        from aner_coord.cli.background import submit

        return submit(job, quiet=args.quiet)
    return run_foreground(job, quiet=args.quiet)


# -- predict -------------------------------------------------------------------------------


def read_features(path: str, d: int, label: str | None) -> Floats:
    import numpy as np

    """Feature rows of a CSV (header; `d` columns, or `d + 1` with the label, which is
    dropped: `label`, else the last) or an NPZ (array `X`). Errors name line and column."""
    from aner_worker.kernels.dense.data import DataError

    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise RequestError(f"--data {path}: cannot read: {exc.strerror or exc}") from None
    if path.lower().endswith(".npz"):
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as archive:
                x = np.asarray(archive["X"], dtype=np.float64)
        except (KeyError, ValueError, OSError, EOFError) as exc:
            raise RequestError(f"--data {path}: not an NPZ file with an array X ({exc})") from None
        if x.ndim != 2 or x.shape[1] != d or not np.isfinite(x).all():
            raise RequestError(f"--data {path}: X must be finite numbers of shape (n, {d})")
        return x
    try:
        reader = csv.reader(io.StringIO(data.decode("utf-8").removeprefix("\ufeff"), newline=""))
        header = [h.strip() for h in next(reader, [])]
        if len(header) == d:
            drop = None
        elif len(header) == d + 1:
            drop = len(header) - 1 if label is None else header.index(label)
        else:
            raise DataError(f"line 1: {len(header)} columns; the model takes {d} features")
        rows: list[list[float]] = []
        for fields in reader:
            if not fields:
                continue
            line = reader.line_num
            if len(fields) != len(header):
                raise DataError(f"line {line}: expected {len(header)} values, found {len(fields)}")
            row = []
            for col, text in enumerate(fields):
                if col == drop:
                    continue
                try:
                    value = float(text)
                except ValueError:
                    value = float("nan")
                if not np.isfinite(value):
                    raise DataError(
                        f"line {line}, column {col + 1} ({header[col]!r}): "
                        f"not a finite number: {text[:40]!r}"
                    )
                row.append(value)
            rows.append(row)
    except UnicodeDecodeError:
        raise RequestError(f"--data {path}: not valid UTF-8") from None
    except (DataError, csv.Error) as exc:
        raise RequestError(f"--data {path}: {exc}") from None
    except ValueError:
        raise RequestError(f"--data {path}: no label column named {label!r}") from None
    if not rows:
        raise RequestError(f"--data {path}: no data rows after the header")
    return np.array(rows, dtype=np.float64)


def predict_command(args: argparse.Namespace) -> int:
    return predict(args.model, args.data, args.output)


def predict(model_dir: str, data: str, output: str | None) -> int:
    import numpy as np

    from aner_coord.computations.dense.model import ModelFileError, load_model
    from aner_worker.kernels.dense.data import label_strings

    path = Path(model_dir) / "model.npz"
    if not path.is_file():
        raise RequestError(f"--model {model_dir}: no model.npz (is it a completed train job?)")
    try:
        model, meta = load_model(path)
    except ModelFileError as exc:
        raise RequestError(str(exc)) from None
    x = read_features(data, model.sizes[0], meta.get("label"))
    proba = model.predict_proba(x)
    labels = label_strings(model.classes)
    index = np.argmax(proba, axis=1)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["predicted", *(f"p_{name}" for name in labels)])
    for i, row in zip(index, proba, strict=True):
        writer.writerow([labels[int(i)], *(repr(float(p)) for p in row)])
    if output is None:
        sys.stdout.write(out.getvalue())
    else:
        try:
            Path(output).write_text(out.getvalue())
        except OSError as exc:
            raise RequestError(f"--output {output}: cannot write: {exc.strerror}") from None
    return EXIT_OK
