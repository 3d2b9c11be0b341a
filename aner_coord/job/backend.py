"""What a backend is: it carries out the machine's instructions on real workers and reports
what happened through one callable, `deliver(event)`, which is safe to call from any
thread (the coordinator hands every event to the event loop).

`ThreadBackend` (`threads`) runs local workers as threads of this process; `ProcessBackend`
(`processes`) runs a configured group of worker processes. Every failure becomes an event:
no job ever waits for a chunk that will not come.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from aner_coord.job.events import Event
from aner_coord.job.timing import TaskTimes
from aner_coord.jobdir.status import StagingRecord
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
