"""Argument types and the execution flags every job command shares (run, regression,
train): how numbers are written on the command line, and how `--workers`, `--chunk` and
`--cluster` become the request's execution. Light on purpose: `aner parallel status`
builds the same parser.
"""

from __future__ import annotations

import argparse
import re

from aner_coord.errors import RequestError
from aner_coord.requests import ClusterExecution, Execution, LocalExecution

_INTEGER = re.compile(r"[0-9]+|[0-9]{1,3}(,[0-9]{3})+|[0-9]{1,3}(_[0-9]{3})+|[0-9]+[eE]\+?[0-9]+")


def count(text: str) -> int:
    """An exact non-negative integer: 1000000, 1,000,000, 1_000_000 or 1e6."""
    text = text.strip()
    if not _INTEGER.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"expected a whole number such as 1000000, 1,000,000 or 1e6; got {text!r}"
        )
    if "e" in text.lower():
        mantissa, exponent = re.split("[eE]", text)
        value: int = int(mantissa) * 10 ** int(exponent)
        return value
    return int(text.replace(",", "").replace("_", ""))


def number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def fraction(text: str) -> float:
    value = number(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1], got {text!r}")
    return value


def add_execution_arguments(
    p: argparse.ArgumentParser, what: str, default_chunk: int, chunk_note: str = ""
) -> None:
    """Where a job runs and what becomes of it: shared by run, regression and train."""
    p.add_argument(
        "--workers", type=count, default=0, help="local workers (0: automatic, see inventory)"
    )
    p.add_argument(
        "--chunk",
        type=count,
        default=default_chunk,
        help=f"{what} per task (default {default_chunk}){chunk_note}",
    )
    p.add_argument("--cluster", metavar="FILE", help="run on the workers of this cluster file")
    p.add_argument("--output", metavar="DIR", help="job directory to create (must not exist)")
    p.add_argument(
        "--retries",
        type=count,
        default=0,
        metavar="N",
        help="lost workers to survive: their chunks go to the others (default 0)",
    )
    p.add_argument("--background", action="store_true", help="detach; watch with `status`")
    p.add_argument("--quiet", action="store_true", help="print nothing on success")


def execution_from_args(args: argparse.Namespace) -> Execution:
    if args.cluster is not None:
        if args.workers:
            raise RequestError("--workers applies to local runs; a cluster file sets slots")
        return ClusterExecution(config=args.cluster, chunk=args.chunk)
    return LocalExecution(workers=args.workers, chunk=args.chunk)
