"""What the job machine says: instructions, each an imperative the shell carries out.

`JobMachine` returns them from `start` and `handle`; `aner_coord.job.coordinator` carries
them out in order and is the only reader. Progress leaves the machine only inside
`WriteStatus`. `Instruction` is their union, over which the coordinator dispatches
exhaustively (mypy flags an instruction it does not carry out).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aner_coord.jobdir.status import JobState, TrainingPosition, WorkerAccount, WorkerLoss
from protocol import Task


@dataclass(frozen=True)
class BeginPass:
    pass_id: int
    params: Any  # the kernel's params Struct, frozen for every task of the pass


@dataclass(frozen=True)
class SendTask:
    worker: str
    task: Task
    audit: bool = False


@dataclass(frozen=True)
class StopWorkers:
    reason: str


@dataclass(frozen=True)
class Progress:
    """Everything a status snapshot says about the job's work (the shell adds the times)."""

    state: JobState
    passes: int
    pass_index: int  # passes completed
    phase: str
    requested: int  # items of the current pass
    accepted: int  # items accepted over all passes
    accepted_in_pass: int
    chunks_total: int
    chunks_done: int
    in_flight: int
    workers: tuple[WorkerAccount, ...]
    error: str | None
    committed_steps: int | None
    losses: tuple[WorkerLoss, ...] = ()
    recovered: int = 0  # items taken from the ledger of an earlier coordinator
    # Items of `accepted` that this coordinator accepted itself, by kind of pass.
    live: Mapping[str, int] = field(default_factory=dict)
    detail: dict[str, Any] | None = None  # the run's own account (`ReportsProgress`)
    position: TrainingPosition | None = None  # where a training stands (`ReportsPosition`)


@dataclass(frozen=True)
class WriteStatus:
    """Progress changed; `urgent` when the state did (write now, whatever the rate)."""

    progress: Progress
    urgent: bool


@dataclass(frozen=True)
class JobEnded:
    state: JobState


@dataclass(frozen=True)
class DropWorker:
    """The job goes on without this worker (retries): stop it, accept nothing more from it."""

    worker: str
    reason: str


@dataclass(frozen=True)
class RecordAccepted:
    """Append to the ledger: chunk `chunk` of pass `pass_id` was accepted with `stats`."""

    pass_id: int
    chunk: int
    stats: Any


@dataclass(frozen=True)
class RecordCommitted:
    pass_id: int


@dataclass(frozen=True)
class RecordLoss:
    loss: WorkerLoss


Instruction = (
    BeginPass
    | SendTask
    | StopWorkers
    | DropWorker
    | RecordAccepted
    | RecordCommitted
    | RecordLoss
    | WriteStatus
    | JobEnded
)
