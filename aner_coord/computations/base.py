"""The computation interface: what every workload implements, and nothing else.

A computation has two halves. Its kernel (`aner_worker.kernels`) computes the statistics of
an item range under frozen parameters, wherever a worker runs. Its coordinator half, here,
is pure and synchronous:

- `admit(request)` checks the parameters and says how many items a pass has, how many
  passes at most, and what the job is (identity strings for the manifest);
- `start(request)` builds a fresh `Run`, the per-execution state (never shared between
  two executions of the same request);
- the job machine asks the run for each pass (`next_pass`: its items and frozen
  parameters), hands it each result to `check` and then `accept` into the result's chunk
  slot, and calls `commit` at the barrier when every chunk of the pass is accepted;
- `result()` gives the scientific result once `next_pass` returns None.

Nothing here knows workers, transports or files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

from aner_coord.jobdir.status import JobState, StagingRecord, WorkerAccount, WorkerLoss
from aner_coord.requests import ComputationRequest
from aner_worker.kernels.base import Kernel


class Diverged(Exception):
    """The computation's numbers left the finite range: a property of the request (a rate
    too large, say), not of any worker."""


@dataclass(frozen=True)
class PassSpec:
    """One pass: `items` items cut into chunks, and the frozen parameters its tasks use."""

    items: int
    params: Any  # the kernel's params Struct
    label: str


@dataclass(frozen=True)
class Admitted:
    """What admission learned about a request's computation."""

    items: int  # per pass (samples or rows)
    passes: int  # at most
    identity: str  # the stream or fixture identity of SPEC sections 1 and 2
    describe: dict[str, Any]  # the request as the manifest records it


@dataclass(frozen=True)
class Accounting:
    """How a completed job was carried out, for its result."""

    seconds: float
    workers: tuple[WorkerAccount, ...]
    execution: dict[str, Any]
    losses: tuple[WorkerLoss, ...] = ()
    staging: tuple[StagingRecord, ...] = ()


class Run(Protocol):
    # A run whose chunk statistics are large (Dense gradient sums) sets this False: the
    # ledger then records committed passes only, and a resumed job recomputes its work.
    # (A class attribute; runs that do not set it keep their chunks in the ledger.)

    def next_pass(self) -> PassSpec | None:
        """The next pass to compute, or None when the computation is complete."""
        ...

    def check(self, chunk: int, start: int, count: int, stats: Any) -> str | None:
        """None if `stats` can be the statistics of items [start, start + count), else why
        not. May raise Diverged for non-finite statistics."""
        ...

    def accept(self, chunk: int, stats: Any) -> None: ...

    def commit(self) -> None:
        """Every chunk of the current pass is accepted: apply it (the barrier)."""
        ...

    def same(self, a: Any, b: Any) -> bool:
        """Whether two computations of one task agree (for audits)."""
        ...

    @property
    def committed_steps(self) -> int | None: ...

    def result(self, accounting: Accounting) -> Any: ...


# -- optional parts of a run ---------------------------------------------------------------


@dataclass(frozen=True)
class StagePlan:
    """File data that worker processes must hold before the first task: a data set named by
    the SHA256 of its bytes, as blocks named by theirs (in order)."""

    dataset: str
    blocks: tuple[tuple[str, memoryview], ...] = field(repr=False)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.blocks)

    @property
    def size(self) -> int:
        return sum(len(data) for _, data in self.blocks)


@runtime_checkable
class StagesData(Protocol):
    """A run whose kernel reads file data: worker processes receive it once per job."""

    def staging(self) -> StagePlan | None: ...


@runtime_checkable
class DeclaresPrecision(Protocol):
    """A run computed in a declared precision (Dense: float64 or float32): every worker of
    its group must offer it at the handshake, or is refused before any task."""

    @property
    def precision(self) -> str: ...


@runtime_checkable
class WritesFiles(Protocol):
    """A run that leaves files in its job directory (a model, say) however the job ended:
    their names and bytes; the job directory writes them, before `result.json`."""

    def files(self, state: JobState) -> dict[str, bytes]: ...


class Computation(Protocol):
    kind: ClassVar[str]
    unit: ClassVar[str]

    @property
    def request_type(self) -> type[ComputationRequest]: ...

    @property
    def kernel(self) -> Kernel: ...

    # Rough seconds per item on one core, used only to size in-flight windows.
    seconds_per_item: ClassVar[float]
    # Items a task when the execution names no chunk: a property of the computation (a
    # Dense step must be cut finer than a Monte Carlo pass to keep several workers busy).
    default_chunk: ClassVar[int]

    def admit(self, request: Any) -> Admitted: ...

    def start(self, request: Any, chunk: int) -> Run: ...

    def summarize(self, result: dict[str, Any]) -> list[str]:
        """Lines for `status` of a completed job, from its `result.json`."""
        ...
