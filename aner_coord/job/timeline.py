"""A job's timeline as the coordinator makes it: task records and its own phases, turned
into the lines of `timeline.jsonl` (`aner_coord.jobdir.timeline`).

Times become seconds from the segment's zero (the coordinator's start, on its monotonic
clock), recorded with the wall-clock time of that zero. Task records come from the
backend's `TaskTimes` (its `sink`), on whatever thread closed them; phases from the
coordinator's event loop. Both only append to the writer's memory: the status writer's
thread writes them to the file.

Phases (`PHASES`): `reduce` (the job machine taking a result that does not end its pass:
checking it and adding it in, as Dense sums gradients in chunk order), `update` (the one
that ends a pass: the last reduce, the commit (an optimizer step, a search's aggregation)
and the next pass's parameters), `broadcast` (the parameters encoded for the workers),
`checkpoint` (a checkpoint written), `status` (a status snapshot built and handed to its
observers).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

from aner_coord.job.timing import TaskRecord
from aner_coord.jobdir.timeline import TIMELINE_SCHEMA, PhaseLine, Segment, TaskLine, TimelineWriter

PHASES = ("reduce", "update", "broadcast", "checkpoint", "status")


class JobTimeline:
    """One coordinator's segment of a job's timeline."""

    def __init__(
        self,
        writer: TimelineWriter,
        *,
        zero: float,
        computation: str,
        backend: str,
        workers: Mapping[str, int],
        backend_start: float,
    ) -> None:
        self._writer = writer
        self._zero = zero
        self._segment = writer.segment
        self._phases = 0  # a phase's sampling key (see the writer's bound)
        # The pass's reduce so far: first begin, last end, seconds, pieces.
        self._reduce: tuple[float, float, float, int] | None = None
        wall = time.time() - (time.monotonic() - zero)
        writer.add(
            Segment(
                TIMELINE_SCHEMA,
                self._segment,
                round(wall, 6),
                computation,
                backend,
                dict(workers),
                start=backend_start - zero,
                pid=os.getpid(),
            )
        )

    def task(self, record: TaskRecord) -> None:
        """A finished (or lost) task's record."""
        zero = self._zero
        line = TaskLine(
            self._segment,
            record.worker,
            record.pass_id,
            record.task_id,
            record.start,
            record.count,
            record.dispatched - zero,
            started=None if record.started is None else record.started - zero,
            ended=None if record.ended is None else record.ended - zero,
            received=None if record.received is None else record.received - zero,
            busy_s=record.busy_s,
            queued_s=record.queued_s,
            link_s=record.link_s,
            bytes_out=record.bytes_out,
            bytes_in=record.bytes_in,
            outcome=record.outcome,
            clock_error_s=record.clock_error_s,
        )
        routine = record.outcome == "accepted"
        self._writer.add(line, record.task_id if routine else None)

    def phase(
        self,
        name: str,
        begin: float,
        end: float,
        pass_id: int = -1,
        *,
        busy_s: float | None = None,
        pieces: int = 1,
    ) -> None:
        """The coordinator spent `begin`..`end` (its monotonic clock) on `name`."""
        self._phases += 1
        zero = self._zero
        line = PhaseLine(
            self._segment, name, begin - zero, end - zero, pass_id, busy_s=busy_s, pieces=pieces
        )
        self._writer.add(line, self._phases)

    def result(self, begin: float, end: float, pass_id: int, *, ends_pass: bool) -> None:
        """The job machine took a result from `begin` to `end`: a piece of the pass's
        reduce, or, for the result that ends the pass, its update (the reduce so far is
        written then)."""
        if ends_pass:
            self.end_reduce(pass_id)
            self.phase("update", begin, end, pass_id)
            return
        if self._reduce is None:
            self._reduce = (begin, end, end - begin, 1)
        else:
            first, _, seconds, pieces = self._reduce
            self._reduce = (first, end, seconds + end - begin, pieces + 1)

    def end_reduce(self, pass_id: int) -> None:
        """Write the pass's reduce, if it had one (at its end, or the job's)."""
        if self._reduce is not None:
            first, last, seconds, pieces = self._reduce
            self._reduce = None
            self.phase("reduce", first, last, pass_id, busy_s=seconds, pieces=pieces)
