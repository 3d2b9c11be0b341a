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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

from aner_coord.jobdir.status import (
    JobState,
    StagingRecord,
    TrainingPosition,
    WorkerAccount,
    WorkerLoss,
)
from aner_coord.requests import ComputationRequest
from aner_worker.kernels.base import Kernel


def readable(value: float) -> str:
    """A loss or a metric as a person reads it: six decimals in the usual range, else six
    significant digits with an exponent (never the 300 digits of 1e300 in fixed point)."""
    if value == 0 or 1e-4 <= abs(value) < 1e6:
        return f"{value:.6f}"
    return f"{value:.6g}"


class Diverged(Exception):
    """The computation's numbers left the finite range: a property of the request (a rate
    too large, say), not of any worker."""


# The kind of every pass of a computation whose passes all cost alike (`PassSpec.kind`).
ONE_KIND = "pass"


@dataclass(frozen=True)
class PassSpec:
    """One pass: `items` items cut into chunks, and the frozen parameters its tasks use.
    `kind` says what its items cost alike with (`Segment`): progress weighs each kind's
    items by their measured cost (`aner_coord.job.pace`)."""

    items: int
    params: Any  # the kernel's params Struct
    label: str
    kind: str = ONE_KIND


@dataclass(frozen=True)
class Segment:
    """`items` items of passes of one `kind`, a stretch of a job's planned work in order."""

    kind: str
    items: int


@dataclass(frozen=True)
class Admitted:
    """What admission learned about a request's computation.

    A computation whose passes all have `items` items leaves the rest at their defaults. One
    whose passes differ (Dense: normalisation, training steps, validation, test) states its
    planned work (the items of every pass) and its largest pass, and whether the work is an
    upper bound (early stopping may end it sooner); one whose `items` passes are optimizer
    steps sets `steps`, so that a plan leaving worker slots idle during them is reported."""

    items: int  # per pass (samples or rows); a training step's for Dense
    passes: int  # at most
    identity: str  # the stream or fixture identity of docs/contracts.md, sections 1 and 2
    describe: dict[str, Any]  # the request as the manifest records it
    work: int | None = None  # items of every planned pass (None: items * passes)
    largest_pass: int | None = None  # items of the largest pass (None: items)
    upper_bound: bool = False  # `work` is at most what runs: the job may end sooner
    steps: bool = False  # the `items` passes are steps: each should keep every slot busy
    load_s: float = 0.0  # seconds admission spent loading the kernels (a process's first job)
    # Items a task when the execution names none, where the request decides it (replicates
    # run whole on a slot); None: the computation's `default_chunk`.
    chunk: int | None = None
    # Rough seconds an item takes, where the request decides it (a Dense replicate is a whole
    # fit, seconds, not a row's microseconds); None: the computation's `seconds_per_item`.
    seconds_per_item: float | None = None
    # Why an execution may not name a chunk (each item a whole fit, its chunks fixed); None:
    # it may. `unit`: what an item is, where the request decides it (None: the computation's).
    chunk_refused: str | None = None
    unit: str | None = None
    # The planned work in the order it runs, by kind of pass, where passes differ in what an
    # item costs (empty: `planned_work` items of one kind), and each kind's cost per item
    # relative to the others before any is measured (a kind not named: 1).
    plan: tuple[Segment, ...] = ()
    prior_costs: Mapping[str, float] = field(default_factory=dict)

    @property
    def planned_work(self) -> int:
        return self.work if self.work is not None else self.items * self.passes

    @property
    def segments(self) -> tuple[Segment, ...]:
        """The planned work in order, by kind: `plan`, or all of it of one kind."""
        return self.plan or (Segment(ONE_KIND, self.planned_work),)

    @property
    def largest(self) -> int:
        return self.largest_pass if self.largest_pass is not None else self.items


@dataclass(frozen=True)
class Accounting:
    """How a completed job was carried out, for its result."""

    seconds: float
    workers: tuple[WorkerAccount, ...]
    execution: dict[str, Any]
    losses: tuple[WorkerLoss, ...] = ()
    staging: tuple[StagingRecord, ...] = ()
    ready_s: float | None = None  # of `seconds`, those before the first worker was ready
    load_s: float = 0.0  # seconds admission spent loading kernels, before the job (`Admitted`)


class Run(Protocol):
    # Whether the ledger keeps each accepted chunk's statistics (a resumed job then
    # recomputes only the chunks it lacks). A run whose chunk statistics are large (Dense
    # gradient sums) says False: the ledger then records committed passes only, and a
    # resumed job recomputes its work (from its last checkpoint, for a run that
    # `Checkpoints`).
    durable_chunks: ClassVar[bool]

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
class NamesWorkers(Protocol):
    """A run that keeps who computed each result (a model search's `fits.csv` names each
    fit's worker). The job machine hands it every result with the identity of the worker it
    arrived from, before checking it; what it returns is what is checked, accepted and
    recorded in the ledger, so the name is the coordinator's knowledge, not a worker's claim,
    and a resumed job still has it."""

    def received_from(self, stats: Any, worker: str) -> Any: ...


@runtime_checkable
class ReportsProgress(Protocol):
    """A run that says more of its progress than items and passes: `status.json`'s
    `detail`, from the chunks outstanding on each worker (oldest first) and the slots of the
    workers still in the job. A `detail["eta_s"]` that is not None stands for the job's ETA."""

    def progress(self, outstanding: Mapping[str, Sequence[int]], slots: int) -> dict[str, Any]: ...


@runtime_checkable
class ReportsPosition(Protocol):
    """A run that can say where it stands in terms its user knows (epoch e of E, step s of
    S, the latest validation accuracy), for status and progress displays."""

    def position(self) -> TrainingPosition | None: ...


@runtime_checkable
class ExplainsDifference(Protocol):
    """A run whose statistics are too large to quote in an audit's message: it summarises
    how two of them differ, and may accept a worker on another platform within a stated
    tolerance (`same` stays bitwise)."""

    # `close`'s tolerance: the largest difference relative to a statistic's magnitude.
    @property
    def tolerance(self) -> float: ...

    def difference(self, worker: Any, own: Any) -> str: ...

    def close(self, worker: Any, own: Any) -> bool: ...

    # The largest difference of any statistic relative to its magnitude, as `close` judges
    # it (inf where a count or shape differs): what an audit measures of another platform.
    def deviation(self, worker: Any, own: Any) -> float: ...


@runtime_checkable
class DeclaresPrecision(Protocol):
    """A run computed in a declared precision (Dense: float64 or float32): every worker of
    its group must offer it at the handshake, or is refused before any task."""

    @property
    def precision(self) -> str: ...


@runtime_checkable
class MakesTiny(Protocol):
    """A computation that says how to make a request of the same shape at a tiny size, for
    probes (Dense: a teacher set of the data's shape, which needs no staging)."""

    def tiny(self, request: Any, rows: int) -> Any: ...


@runtime_checkable
class ChecksChunk(Protocol):
    """A computation whose reduction needs its chunks cut in a certain way (a simulation's
    at block boundaries): why `chunk` items a task cannot be used for `request`, or None."""

    def check_chunk(self, request: Any, chunk: int) -> str | None: ...


@runtime_checkable
class Prechecks(Protocol):
    """A computation whose admission does work in proportion to its data's rows (Dense and
    search: the data read or a teacher set's labels generated, every row's role or fold):
    `precheck` makes every check of `admit` that needs none of it (the options, the data
    file's kind and size, a teacher set's shape, the layers), for a command that hands the
    job to a detached coordinator, which admits it whole (`admission.precheck`)."""

    def precheck(self, request: Any) -> None: ...


@runtime_checkable
class UnevenTasks(Protocol):
    """A computation whose tasks' cost does not follow their items (a search's fits differ
    by candidate, a thousandfold between the smallest and largest layers): the tasks measured
    before one say nothing of its cost, so its default deadline is the ceiling
    (`aner_coord.job.liveness.Deadline`; docs/contracts.md, section 6)."""

    uneven_tasks: ClassVar[bool]


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


@runtime_checkable
class ChoosesKernel(Protocol):
    """A computation some of whose requests run on a kernel other than its own (Dense
    replicates are whole fits, on the search kernel)."""

    def kernel_for(self, request: Any) -> Kernel: ...


def kernel_of(computation: Computation, request: Any) -> Kernel:
    """The kernel that computes `request`'s tasks."""
    if isinstance(computation, ChoosesKernel):
        return computation.kernel_for(request)
    return computation.kernel


@runtime_checkable
class Checkpoints(Protocol):
    """A run whose committed state a later coordinator can continue from (Dense: the
    parameters, optimizer, position, early stopping and best model; its ledger keeps no
    chunks). `checkpoint` gives that state, between passes, as bytes; `restore`, on a fresh
    run before its first pass, continues from such bytes (ValueError, naming what, for bytes
    that are not a checkpoint of this request); `checkpoint_limit` bounds their size from
    the request's own shapes. `steps_recovered` counts the committed steps restored."""

    steps_recovered: int

    def checkpoint(self) -> bytes: ...

    def checkpoint_limit(self) -> int: ...

    def restore(self, data: bytes) -> None: ...
