"""A job's timeline in the Trace Event format (`--chrome FILE`), which Perfetto
(ui.perfetto.dev) and chrome://tracing open: one process per worker with a thread per slot,
one for the coordinator; a complete event (`"ph": "X"`) per task and per phase.

Times are microseconds from the first segment's zero, so a resumed job's segments follow
one another on one axis (each placed by its wall-clock start).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aner_coord.timeline.analysis import SegmentView, interval, lanes

COORDINATOR_PID = 0


def trace(views: Sequence[SegmentView]) -> dict[str, Any]:
    """The trace document: `traceEvents` and the time unit."""
    events: list[dict[str, Any]] = [
        _meta("process_name", COORDINATOR_PID, 0, "coordinator"),
        _meta("thread_name", COORDINATOR_PID, 0, "coordinator"),
    ]
    pids: dict[str, int] = {}
    origin = views[0].segment.wall if views else 0.0
    for view in views:
        shift = view.segment.wall - origin
        for phase in view.phase_lines:
            events.append(
                _span(
                    phase.name,
                    "coordinator",
                    COORDINATOR_PID,
                    0,
                    shift + phase.begin,
                    max(phase.end - phase.begin, 0.0),
                    {"pass_id": phase.pass_id, "busy_s": phase.busy_s, "pieces": phase.pieces},
                )
            )
        for worker in view.workers:
            pid = pids.get(worker.identity)
            if pid is None:
                pid = pids[worker.identity] = len(pids) + 1
                events.append(_meta("process_name", pid, 0, worker.identity))
                for slot in range(worker.slots):
                    events.append(_meta("thread_name", pid, slot, f"slot {slot + 1}"))
            for task, lane in zip(worker.tasks, lanes(worker.tasks, worker.slots), strict=True):
                span = interval(task)
                if span is None:  # lost before it answered: an instant at its dispatch
                    events.append(
                        {
                            "name": f"task {task.task_id} lost",
                            "cat": "lost",
                            "ph": "i",
                            "s": "t",
                            "pid": pid,
                            "tid": lane,
                            "ts": _us(shift + task.dispatched),
                        }
                    )
                    continue
                args = {
                    "pass_id": task.pass_id,
                    "start": task.start,
                    "count": task.count,
                    "outcome": task.outcome,
                    "dispatched_s": task.dispatched,
                    "received_s": task.received,
                    "queued_s": task.queued_s,
                    "link_s": task.link_s,
                    "bytes_out": task.bytes_out,
                    "bytes_in": task.bytes_in,
                    "clock_error_s": task.clock_error_s,
                    "clock_mapped": span.mapped,
                }
                events.append(
                    _span(
                        f"task {task.task_id}",
                        task.outcome,
                        pid,
                        lane,
                        shift + span.begin,
                        span.end - span.begin,
                        args,
                    )
                )
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


def _span(
    name: str, cat: str, pid: int, tid: int, begin_s: float, length_s: float, args: dict[str, Any]
) -> dict[str, Any]:
    return {
        "name": name,
        "cat": cat,
        "ph": "X",
        "pid": pid,
        "tid": tid,
        "ts": _us(begin_s),
        "dur": _us(length_s),
        "args": {k: v for k, v in args.items() if v is not None},
    }


def _meta(kind: str, pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}
