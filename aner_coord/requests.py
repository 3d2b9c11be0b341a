"""The one request type: what to compute, where, and where to keep the job's files.

A `JobRequest` comes from the command line, a TOML spec file (systemd units), a background
coordinator's argument or the Python API, and goes unchanged to `admission.admit()`, the
one place that checks it. It is plain data: the computation's parameters (a tagged Struct
per computation, registered in `aner_coord.computations`) and an execution policy, which
alone holds the chunk size.

    output = "aner-jobs/pi"          # optional; must not exist
    audit = 0.0                      # fraction of chunks the coordinator recomputes
    retries = 0                      # lost workers the job survives

    [computation]
    kind = "monte-carlo"
    samples = 2_000_000_000
    seed = 1

    [execution]
    kind = "local"                   # or "cluster", with config = "PATH"
    workers = 0                      # 0: the automatic policy (see `inventory`)
    chunk = 4_000_000
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from aner_coord.errors import RequestError
from aner_coord.limits import DEFAULT_CHUNK


class _Data(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    pass


class LocalExecution(_Data, frozen=True, tag_field="kind", tag="local"):
    """`workers` threads of this process (0: the automatic policy), `chunk` items a task."""

    workers: int = 0
    chunk: int = DEFAULT_CHUNK


class ClusterExecution(_Data, frozen=True, tag_field="kind", tag="cluster"):
    """The workers of the cluster file at `config` (SPEC section 5), `chunk` items a task."""

    config: str
    chunk: int = DEFAULT_CHUNK


Execution = LocalExecution | ClusterExecution


class ComputationRequest(_Data, frozen=True, tag_field="kind"):
    """Base of each computation's parameters; subclasses are tagged with their kind."""

    seed: int


class MonteCarloRequest(ComputationRequest, frozen=True, tag="monte-carlo"):
    samples: int


class RegressionRequest(ComputationRequest, frozen=True, tag="regression"):
    samples: int  # rows
    steps: int
    rate: float


class DenseRequest(ComputationRequest, frozen=True, tag="dense"):
    """A Dense classifier trained on `data` (a CSV or NPZ path, or "digits") or on the
    procedural `teacher` set (rows, features, classes), SPEC section 9."""

    data: str | None = None
    label: str | None = None
    teacher: tuple[int, int, int] | None = None
    hidden: tuple[int, ...] = (64, 64)
    batch: int = 256
    epochs: int = 100
    optimizer: str = "adam"
    lr: float = 1e-3
    patience: int = 5
    target_accuracy: float | None = None


class JobRequest(_Data, frozen=True):
    computation: ComputationRequest
    execution: Execution = LocalExecution()
    output: str | None = None
    audit: float = 0.0
    retries: int = 0  # lost workers the job survives (SPEC section 11)


class _Placement(_Data, frozen=True):
    """A request file's fields besides its computation, which is decoded by kind."""

    execution: Execution = LocalExecution()
    output: str | None = None
    audit: float = 0.0
    retries: int = 0


def decode_request(data: bytes, *, fmt: str, source: str) -> JobRequest:
    """A request from TOML or JSON bytes; unknown keys and kinds are refused."""
    from aner_coord.computations import request_types

    decode = msgspec.toml.decode if fmt == "toml" else msgspec.json.decode
    try:
        raw: dict[str, Any] = decode(data, type=dict[str, Any])
        computation = raw.pop("computation", None)
        if computation is None:
            raise RequestError(f"{source}: missing [computation]")
        union: Any = request_types()
        rest = msgspec.convert(raw, type=_Placement)
        return JobRequest(
            computation=msgspec.convert(computation, type=union),
            execution=rest.execution,
            output=rest.output,
            audit=rest.audit,
            retries=rest.retries,
        )
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise RequestError(f"{source}: {exc}") from None


def with_absolute_paths(request: JobRequest) -> JobRequest:
    """The request with every path absolute, for a coordinator that starts elsewhere (a
    detached one starts in `/`, a resumed one wherever the user is)."""
    execution = request.execution
    if isinstance(execution, ClusterExecution):
        config = Path(execution.config).expanduser().absolute()
        execution = msgspec.structs.replace(execution, config=str(config))
    output = None if request.output is None else str(Path(request.output).absolute())
    return msgspec.structs.replace(request, output=output, execution=execution)


def encode_request(request: JobRequest) -> bytes:
    return msgspec.json.encode(request)
