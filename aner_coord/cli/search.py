"""`aner parallel search` and `aner parallel cv`: thin shells over the model search
(docs/contracts.md, section 12), run like every other job (foreground or `--background`, `status`,
`cancel`, `resume`).

`search` reads a search file (`--spec`); everything about the search is in the file, and
the flags say only where it runs and what becomes of it. `cv` takes the flags of `train`
(derived from the request type, so it follows `train`'s options and defaults: `--group`
among them), `--folds`, `--no-refit`; its `--chunk` is, as in `train`, the rows of a chunk,
which the numbers depend on (within each fit: fits go out whole, one per task).
"""

from __future__ import annotations

import argparse

from aner_coord.cli.arguments import (
    add_execution_arguments,
    add_request_arguments,
    request_from_arguments,
    show_needed,
)
from aner_coord.errors import RequestError

# Not flags of `cv`: its one candidate has no grid, and a fit's chunk is `--chunk`, read
# with the execution's flags.
_NOT_DERIVED = ("grid", "chunk")


def add_search_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--spec", required=True, metavar="FILE.toml", help="the search file (see samples/)"
    )
    # A search hands out whole fits, one per task: a fit's rows per chunk are the file's
    # `chunk`, so --chunk is not offered (and refused with that reason).
    add_execution_arguments(p, "fits", None)
    show_needed(p, "--output")


def add_cv_arguments(p: argparse.ArgumentParser) -> None:
    from aner_coord.computations.search.request import SearchRequest
    from aner_worker.kernels.dense.params import DEFAULT_CHUNK_ROWS

    needed = add_request_arguments(p, SearchRequest, skip=_NOT_DERIVED)
    add_execution_arguments(
        p,
        "rows",
        DEFAULT_CHUNK_ROWS,
        chunk_help=f"rows of a chunk within each fit (default {DEFAULT_CHUNK_ROWS}); the "
        "parameters depend on it, as in `train` (fits go out whole, one per task)",
    )
    show_needed(p, *needed, "--output")


def _run(args: argparse.Namespace, request: object) -> int:
    from aner_coord.cli.jobs import job_request, start

    return start(job_request(args, request), args=args)  # type: ignore[arg-type]


def search_command(args: argparse.Namespace) -> int:
    from aner_coord.computations.search.specfile import admitted_search_file

    if args.chunk is not None:
        raise RequestError(
            "--chunk: a search hands out whole fits, one per task; the rows of a chunk "
            "within each fit are the search file's `chunk`"
        )
    if args.output is None:
        raise RequestError("missing --output (see `aner parallel search -h`)")
    # With --background the file is checked without its rows; the coordinator admits it.
    return _run(args, admitted_search_file(args.spec, whole=not args.background))


def cv_request(args: argparse.Namespace) -> object:
    """The request of `aner parallel cv`: a search of one candidate."""
    import msgspec

    from aner_coord.computations.search.request import SearchRequest
    from aner_worker.kernels.dense.params import DEFAULT_CHUNK_ROWS

    options = request_from_arguments(args, SearchRequest, "cv", skip=_NOT_DERIVED)
    chunk = args.chunk if args.chunk is not None else DEFAULT_CHUNK_ROWS
    args.chunk = None  # not the execution's: fits go out whole, one per task
    return msgspec.structs.replace(options, chunk=chunk)


def cv_command(args: argparse.Namespace) -> int:
    return _run(args, cv_request(args))
