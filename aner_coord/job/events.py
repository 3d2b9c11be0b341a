"""What the job machine hears: events, each a fact about something that happened.

The shell (`aner_coord.job.coordinator` and the backends) reports each one to
`JobMachine.handle`, which answers with instructions (`aner_coord.job.instructions`).
Named as what happened; `Event` is their union, over which the machine dispatches
exhaustively (mypy flags an event it does not handle).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class WorkerReady:
    worker: str
    window: int


@dataclass(frozen=True)
class WindowChanged:
    worker: str
    window: int


@dataclass(frozen=True)
class ResultReceived:
    worker: str
    task_id: int
    stats: Any  # the kernel's statistics Struct


@dataclass(frozen=True)
class TaskError:
    worker: str
    task_id: int
    reason: str


@dataclass(frozen=True)
class AuditFailed:
    worker: str
    task_id: int
    detail: str


@dataclass(frozen=True)
class WorkerLost:
    worker: str
    phase: str
    detail: str
    at: float = 0.0  # Unix time the shell noticed, for the record


@dataclass(frozen=True)
class ShellFailed:
    """Something outside the workers failed (the job directory, an observer, a bug in
    the shell): `where` names it."""

    where: str
    detail: str


@dataclass(frozen=True)
class CancelRequested:
    reason: str


@dataclass(frozen=True)
class WorkersStopped:
    pass


Event = (
    WorkerReady
    | WindowChanged
    | ResultReceived
    | TaskError
    | AuditFailed
    | WorkerLost
    | ShellFailed
    | CancelRequested
    | WorkersStopped
)
