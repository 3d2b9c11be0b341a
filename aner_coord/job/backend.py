"""What a backend is: it carries out the machine's instructions on real workers and reports
what happened through one callable, `deliver(event)`, which is safe to call from any
thread (the coordinator hands every event to the event loop).

`ThreadBackend` (`threads`) runs local workers as threads of this process; `ProcessBackend`
(`processes`) runs a configured group of worker processes. Every failure becomes an event:
no job ever waits for a chunk that will not come.

Backends are chosen by name, as kernels, computations and transports are: `BACKENDS`
declares each by the `module:Class` path of its maker, imported when a job first names it
(a job of local threads never loads the process machinery), and a maker builds its backend
from the job's `BackendPlan`. The coordinator builds none of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aner_coord.clusterfile import WorkerRecord
from aner_coord.computations.base import StagePlan
from aner_coord.job.events import Event
from aner_coord.job.pool import WorkerPool
from aner_coord.job.timing import TaskTimes
from aner_coord.jobdir.status import StagingRecord
from aner_worker.kernels.base import Kernel
from aner_worker.registry import LazyRegistry
from protocol import (
    Task,
)

Deliver = Callable[[Event], None]


class Backend(Protocol):
    task_exception: BaseException | None
    timing: TaskTimes

    @property
    def staging(self) -> Sequence[StagingRecord]:
        """What was staged to each worker (nothing for local threads: they read the data
        in this process)."""
        ...

    def start(self, deliver: Deliver) -> None: ...
    def begin_pass(self, pass_id: int, params: Any) -> None: ...
    def send(self, worker: str, task: Task) -> None: ...
    # Write what `send` queued now: tasks sent outside the backend's own callbacks (after an
    # audit) would otherwise wait for the next frame a worker sends.
    def flush_soon(self) -> None: ...
    def drop(self, worker: str) -> None: ...
    def request_stop(self, reason: str) -> None: ...
    async def wait_stopped(self) -> None: ...
    async def close(self) -> None: ...


@dataclass(frozen=True)
class BackendPlan:
    """What a backend is built from: the job's workers, its kernel and what it sends ahead."""

    slots: Sequence[str]  # local threads' names (a job of threads)
    records: Sequence[WorkerRecord] | None  # the cluster file's records (a group), else None
    kernel: Kernel
    seconds_per_task: float
    stage: StagePlan | None = None  # file data staged to worker processes once per job
    pool: WorkerPool | None = None  # a session's kept workers
    precision: str | None = None  # the compute precision each worker must offer
    task_timeout: float | None = None  # --task-timeout: seconds a task may compute
    uneven_tasks: bool = False  # tasks whose cost does not follow their items (a search's)


class MakesBackend(Protocol):
    def make(self, plan: BackendPlan) -> Backend: ...


BACKENDS: LazyRegistry[MakesBackend] = LazyRegistry("backend")
BACKENDS.declare("threads", "aner_coord.job.threads:Threads")
BACKENDS.declare("processes", "aner_coord.job.processes:Processes")


def backend_for(plan: BackendPlan) -> Backend:
    """The backend of `plan`: worker processes for a group's records, else local threads."""
    return BACKENDS["threads" if plan.records is None else "processes"].make(plan)
