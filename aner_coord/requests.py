"""The one request type: what to compute, where, and where to keep the job's files.

A `JobRequest` comes from the command line, a TOML spec file (systemd units), a background
coordinator's argument or the Python API, and goes unchanged to `admission.admit()`, the
one place that checks it. It is plain data: the computation's parameters (a tagged Struct
per computation, registered in `aner_coord.computations`) and an execution policy, which
alone holds the chunk size.

    output = "aner-jobs/pi"          # optional; must not exist
    audit = 0.0                      # fraction of chunks the coordinator recomputes
    retries = 0                      # lost workers the job survives
    task_timeout = 600.0             # optional: seconds a task may compute

    [computation]
    kind = "monte-carlo"
    samples = 2_000_000_000
    seed = 1

    [execution]
    kind = "local"                   # or "cluster", with config = "PATH" (and strict_bits)
    workers = 0                      # 0: the automatic policy (see `inventory`)
    backend = "auto"                 # or "threads", "processes" (docs/contracts.md, 3)
    chunk = 4_000_000                # optional: the computation's default
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import msgspec
from msgspec import Meta


class _Data(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    pass


# How local workers run (`aner_coord.localplan`): "auto" chooses by the job's kernel.
LocalBackend = Literal["auto", "threads", "processes"]


class LocalExecution(_Data, frozen=True, tag_field="kind", tag="local"):
    """`workers` local workers (0: the automatic policy), `chunk` items a task (None: the
    computation's own default, see `Computation.default_chunk`); `backend`: threads of this
    process, local worker processes, or "auto", the one its kernel runs fastest on
    (`aner_coord.localplan`)."""

    workers: int = 0
    chunk: int | None = None
    backend: LocalBackend = "auto"


class ClusterExecution(_Data, frozen=True, tag_field="kind", tag="cluster"):
    """The workers of the cluster file at `config` (docs/contracts.md, section 5), `chunk` items a
    task (None: the computation's own default). With `strict_bits`, a computation whose bits
    depend on the BLAS kernel set (Dense, search) refuses, before any work, a group whose
    workers report different ones (`aner_coord.kernelsets`)."""

    config: str
    chunk: int | None = None
    strict_bits: bool = False


Execution = LocalExecution | ClusterExecution


# The replicates option of the sampling computations (Monte Carlo, the simulation kit),
# stated once: each replicate is a whole run of --samples samples.
SampleReplicates = Annotated[
    int,
    Meta(
        description="independent replicates of --samples samples each, with seeds derived "
        "from --seed (docs/contracts.md, section 16)"
    ),
]


class ComputationRequest(_Data, frozen=True, tag_field="kind"):
    """Base of each computation's parameters; subclasses are tagged with their kind.

    A computation's options are declared once, as the fields of its request type: the API,
    the command line (`aner_coord.cli.arguments.add_request_arguments`) and spec files take
    them from there. A field's `Meta(description=...)` is its help; `extra` may give the
    command line a `metavar`, `choices`, a `dest` (where a field's name is taken in the
    parsed arguments), `expected` (what a refused value of a whole-number flag should be),
    or `path=True` (made absolute: a background coordinator starts in
    `/`)."""

    seed: Annotated[
        int,
        Meta(
            description="seed in [0, 2**64)",
            extra={"expected": "a seed, a whole number from 0 to 2**64 - 1 (such as 42)"},
        ),
    ]


class JobRequest(_Data, frozen=True):
    computation: ComputationRequest
    execution: Execution = LocalExecution()
    output: str | None = None
    audit: float = 0.0
    retries: int = 0  # lost workers the job survives (docs/contracts.md, section 11)
    # Seconds a task may compute before its worker counts as lost (docs/contracts.md,
    # section 6); None: a multiple of the tasks measured so far.
    task_timeout: float | None = None
    # A job directory this job runs after: it starts once that job completes, and fails
    # if that one fails or is cancelled (docs/contracts.md, section 13).
    after: str | None = None


def with_absolute_paths(request: JobRequest) -> JobRequest:
    """The request with every path absolute, for a coordinator that starts elsewhere (a
    detached one starts in `/`, a resumed one wherever the user is)."""
    execution = request.execution
    if isinstance(execution, ClusterExecution):
        config = Path(execution.config).expanduser().absolute()
        execution = msgspec.structs.replace(execution, config=str(config))
    output = None if request.output is None else str(Path(request.output).absolute())
    after = None if request.after is None else str(Path(request.after).absolute())
    return msgspec.structs.replace(request, output=output, execution=execution, after=after)


def encode_request(request: JobRequest) -> bytes:
    return msgspec.json.encode(request)
