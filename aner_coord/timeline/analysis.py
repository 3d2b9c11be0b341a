"""What a job's timeline says: per worker, per coordinator phase, and where the rest went.

`analyse(lines)` takes the lines of `timeline.jsonl` (`aner_coord.jobdir.timeline`) and gives
one `SegmentView` per coordinator that ran the job. A worker's `compute_s`, `transfer_s` and
`wait_s` are recomputed from its task lines with the very rule that status and the result
use (`aner_coord.job.timing.costs`), so the two agree. `summary_lines` is the text a person
reads in ten seconds; `to_json` the same as data.

A task's interval is when a slot computed it: `started`..`ended` where the worker's clock
was mapped, else the `busy_s` just before its receipt (an upper bound on its end).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aner_coord.job.timeline import PHASES
from aner_coord.job.timing import TaskRecord, WorkerSums, costs
from aner_coord.jobdir.timeline import Line, PhaseLine, Segment, TaskLine, Truncated

# A task counts as a straggler when it took more than this many times its pass's median.
STRAGGLER_FACTOR = 2.0
LONGEST_SHOWN = 3


@dataclass(frozen=True)
class Interval:
    """A task's compute interval on its segment's clock, and whether it was measured."""

    begin: float
    end: float
    mapped: bool


def interval(task: TaskLine) -> Interval | None:
    """When a slot computed `task` (None: it never answered)."""
    if task.started is not None and task.ended is not None:
        return Interval(task.started, task.ended, True)
    if task.received is None or task.busy_s is None:
        return None
    return Interval(task.received - task.busy_s, task.received, False)


def lanes(tasks: Sequence[TaskLine], slots: int) -> list[int]:
    """A slot lane for each task (in the order given), greedily: the first lane free at
    its start, else the one that frees first (clocks mapped within their uncertainty)."""
    free = [float("-inf")] * max(1, slots)
    out = [0] * len(tasks)
    spans = [(interval(t), i) for i, t in enumerate(tasks)]
    for span, i in sorted(spans, key=lambda s: s[0].begin if s[0] else 0.0):
        if span is None:
            continue
        lane = next((k for k, end in enumerate(free) if end <= span.begin), None)
        if lane is None:
            lane = min(range(len(free)), key=free.__getitem__)
        free[lane] = span.end
        out[i] = lane
    return out


@dataclass
class WorkerView:
    identity: str
    slots: int
    tasks: list[TaskLine] = field(default_factory=list)
    compute_s: float | None = None
    transfer_s: float | None = None
    wait_s: float | None = None
    busy_share: float | None = None  # compute_s / (slots * wall_s)
    median_task_s: float | None = None
    longest_gap_s: float = 0.0  # the longest stretch with none of its slots computing
    longest_gap_at: float | None = None
    stragglers: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)


@dataclass
class SegmentView:
    segment: Segment
    wall_s: float
    workers: list[WorkerView]
    phases: dict[str, tuple[float, int]]  # name -> (seconds, pieces)
    phase_lines: list[PhaseLine]
    longest: list[TaskLine]
    first_task_s: float | None  # the first task's dispatch
    last_end_s: float | None  # the last task's receipt
    uncovered_s: float  # between them: no worker computing and no coordinator phase
    max_clock_error_s: float | None
    truncated: bool


def analyse(lines: Iterable[Line]) -> list[SegmentView]:
    """One view per segment, in file order."""
    segments: list[Segment] = []
    tasks: dict[int, list[TaskLine]] = {}
    phases: dict[int, list[PhaseLine]] = {}
    truncated: set[int] = set()
    for line in lines:
        match line:
            case Segment():
                segments.append(line)
            case TaskLine():
                tasks.setdefault(line.segment, []).append(line)
            case PhaseLine():
                phases.setdefault(line.segment, []).append(line)
            case Truncated():
                truncated.add(line.segment)
            case _:
                pass  # `sampling`: the lines that follow are a sample
    return [
        _segment(s, tasks.get(s.segment, []), phases.get(s.segment, []), s.segment in truncated)
        for s in segments
    ]


def _segment(
    segment: Segment, tasks: list[TaskLine], phases: list[PhaseLine], truncated: bool
) -> SegmentView:
    ends = [t.received for t in tasks if t.received is not None]
    ends += [p.end for p in phases]
    wall_s = max([0.0, *ends])
    received = [t.received for t in tasks if t.received is not None]
    span = (max(received) if received else segment.start) - segment.start
    link = segment.backend == "processes"
    by_worker = {name: WorkerView(name, slots) for name, slots in segment.workers.items()}
    for task in tasks:
        view = by_worker.setdefault(task.worker, WorkerView(task.worker, 1))
        view.tasks.append(task)
    medians = _pass_medians(tasks)
    for view in by_worker.values():
        _worker(view, span, wall_s, link, medians)
    spent: dict[str, tuple[float, int]] = {}
    for p in phases:
        seconds, pieces = spent.get(p.name, (0.0, 0))
        spent[p.name] = (seconds + _phase_seconds(p), pieces + p.pieces)
    answered = [t for t in tasks if t.busy_s is not None]
    longest = sorted(answered, key=lambda t: -(t.busy_s or 0.0))[:LONGEST_SHOWN]
    first = min((t.dispatched for t in tasks), default=None)
    covered = [(i.begin, i.end) for t in tasks if (i := interval(t)) is not None]
    covered += [(p.begin, p.end) for p in phases if p.busy_s is None]
    last = max(received, default=None)
    uncovered = 0.0
    if first is not None and last is not None:
        uncovered = max(0.0, (last - first) - _union(covered, first, last))
    errors = [t.clock_error_s for t in tasks if t.clock_error_s is not None]
    return SegmentView(
        segment,
        wall_s,
        list(by_worker.values()),
        spent,
        phases,
        longest,
        first,
        last,
        uncovered,
        max(errors) if errors else None,
        truncated,
    )


def coordinator_busy_share(views: Sequence[SegmentView]) -> float | None:
    """The share of the job's wall time the coordinator spent in its phases (their measured
    seconds: a reduce of many short pieces counts its pieces, not their span); None for a
    job of no measured time."""
    wall = sum(v.wall_s for v in views)
    if wall <= 0:
        return None
    return sum(_phase_seconds(p) for v in views for p in v.phase_lines) / wall


def _phase_seconds(p: PhaseLine) -> float:
    return p.busy_s if p.busy_s is not None else max(0.0, p.end - p.begin)


def _pass_medians(tasks: Sequence[TaskLine]) -> dict[int, float]:
    by_pass: dict[int, list[float]] = {}
    for t in tasks:
        if t.busy_s is not None and t.outcome != "duplicate":
            by_pass.setdefault(t.pass_id, []).append(t.busy_s)
    return {p: statistics.median(v) for p, v in by_pass.items()}


def _worker(
    view: WorkerView, span: float, wall_s: float, link: bool, medians: dict[int, float]
) -> None:
    sums = WorkerSums()
    for task in sorted(
        (t for t in view.tasks if t.received is not None), key=lambda t: t.received or 0.0
    ):
        sums.add(_record(task))
    cost = costs(sums, view.slots, span, link=link)
    view.compute_s, view.transfer_s, view.wait_s = cost.compute_s, cost.transfer_s, cost.wait_s
    if cost.compute_s is not None and wall_s > 0:
        view.busy_share = cost.compute_s / (view.slots * wall_s)
    times = [t.busy_s for t in view.tasks if t.busy_s is not None]
    view.median_task_s = statistics.median(times) if times else None
    for t in view.tasks:
        view.outcomes[t.outcome] = view.outcomes.get(t.outcome, 0) + 1
        median = medians.get(t.pass_id)
        if t.busy_s is not None and median and t.busy_s > STRAGGLER_FACTOR * median:
            view.stragglers += 1
    spans = sorted((i.begin, i.end) for t in view.tasks if (i := interval(t)) is not None)
    reach = None
    for begin, end in spans:
        if reach is not None and begin - reach > view.longest_gap_s:
            view.longest_gap_s, view.longest_gap_at = begin - reach, reach
        reach = end if reach is None else max(reach, end)


def _record(task: TaskLine) -> TaskRecord:
    return TaskRecord(
        task.worker,
        task.pass_id,
        task.task_id,
        task.start,
        task.count,
        task.dispatched,
        received=task.received,
        busy_s=task.busy_s,
        link_s=task.link_s,
        outcome=task.outcome,
    )


def _union(spans: list[tuple[float, float]], lo: float, hi: float) -> float:
    total, reach = 0.0, lo
    for begin, end in sorted(spans):
        begin, end = max(begin, reach), min(end, hi)
        if end > begin:
            total += end - begin
            reach = end
    return total


# -- output ------------------------------------------------------------------------------
def _s(value: float | None) -> str:
    if value is None:
        return "N/A"
    if value < 1.0:
        return f"{value * 1000:.1f} ms"
    return f"{value:.2f} s"


def _pct(value: float | None) -> str:
    return "N/A" if value is None else f"{100 * value:.0f}%"


def summary_lines(views: Sequence[SegmentView]) -> list[str]:
    """The text a person reads in ten seconds: per segment, its workers, the coordinator's
    phases, the longest tasks and stragglers, and where the rest of the wall time went."""
    out: list[str] = []
    for view in views:
        seg = view.segment
        n = sum(len(w.tasks) for w in view.workers)
        kind = "resumed coordinator" if seg.segment else "coordinator"
        out.append(
            f"segment {seg.segment} ({kind}): {seg.computation} on {seg.backend}, "
            f"{_s(view.wall_s)} of wall time, {n:,} tasks"
            + (
                f", worker clocks within {_s(view.max_clock_error_s)}"
                if view.max_clock_error_s
                else ""
            )
        )
        out.append(
            f"  {'worker':<16} {'busy':>5} {'compute':>10} {'transfer':>10} {'wait':>10} "
            f"{'tasks':>7} {'median task':>11}  longest idle gap"
        )
        for w in view.workers:
            gap = (
                f"{_s(w.longest_gap_s)} at {w.longest_gap_at:.2f} s"
                if w.longest_gap_at is not None
                else "none"
            )
            odd = {k: v for k, v in w.outcomes.items() if k != "accepted"}
            extra = "".join(f", {v} {k}" for k, v in sorted(odd.items()))
            straggle = f", {w.stragglers} straggler(s)" if w.stragglers else ""
            out.append(
                f"  {w.identity:<16} {_pct(w.busy_share):>5} {_s(w.compute_s):>10} "
                f"{_s(w.transfer_s):>10} {_s(w.wait_s):>10} {len(w.tasks):>7,} "
                f"{_s(w.median_task_s):>11}  {gap}{straggle}{extra}"
            )
        if view.longest:
            shown = "; ".join(
                f"task {t.task_id} on {t.worker} (pass {t.pass_id}) {_s(t.busy_s)}"
                for t in view.longest
            )
            out.append(f"  longest    {shown}")
        stragglers = sum(w.stragglers for w in view.workers)
        out.append(
            f"  stragglers {stragglers} task(s) over {STRAGGLER_FACTOR:g}x their pass's median"
        )
        parts = []
        for name in (*PHASES, *sorted(set(view.phases) - set(PHASES))):
            if name in view.phases:
                seconds, pieces = view.phases[name]
                share = seconds / view.wall_s if view.wall_s else 0.0
                parts.append(f"{name} {_s(seconds)} ({100 * share:.1f}%, {pieces:,}x)")
        out.append("  coordinator " + ("; ".join(parts) if parts else "no phases recorded"))
        if view.first_task_s is not None and view.last_end_s is not None:
            after = max(0.0, view.wall_s - view.last_end_s)
            out.append(
                f"  rest       {_s(view.first_task_s)} before the first task (start-up), "
                f"{_s(view.uncovered_s)} between tasks with no worker computing and no "
                f"coordinator phase, {_s(after)} after the last result"
            )
        if view.truncated:
            out.append("  note       the timeline reached its size bound: the rest is not recorded")
    return out


def to_json(views: Sequence[SegmentView]) -> dict[str, Any]:
    """The summary as data (`--json`)."""
    segments = []
    for view in views:
        seg = view.segment
        segments.append(
            {
                "segment": seg.segment,
                "wall": seg.wall,
                "computation": seg.computation,
                "backend": seg.backend,
                "wall_s": view.wall_s,
                "max_clock_error_s": view.max_clock_error_s,
                "truncated": view.truncated,
                "workers": [
                    {
                        "identity": w.identity,
                        "slots": w.slots,
                        "tasks": len(w.tasks),
                        "outcomes": w.outcomes,
                        "busy_share": w.busy_share,
                        "compute_s": w.compute_s,
                        "transfer_s": w.transfer_s,
                        "wait_s": w.wait_s,
                        "median_task_s": w.median_task_s,
                        "longest_gap_s": w.longest_gap_s,
                        "longest_gap_at": w.longest_gap_at,
                        "stragglers": w.stragglers,
                    }
                    for w in view.workers
                ],
                "phases": {
                    name: {
                        "seconds": seconds,
                        "share": seconds / view.wall_s if view.wall_s else None,
                        "pieces": pieces,
                    }
                    for name, (seconds, pieces) in view.phases.items()
                },
                "longest": [
                    {
                        "worker": t.worker,
                        "pass_id": t.pass_id,
                        "task_id": t.task_id,
                        "busy_s": t.busy_s,
                    }
                    for t in view.longest
                ],
                "rest": {
                    "before_first_task_s": view.first_task_s,
                    "uncovered_s": view.uncovered_s,
                    "after_last_result_s": (
                        None if view.last_end_s is None else max(0.0, view.wall_s - view.last_end_s)
                    ),
                },
            }
        )
    return {"schema": "aner-timeline-summary/1", "segments": segments}


def recent_busy(lines: Iterable[Line], window_s: float) -> dict[str, float]:
    """Each worker's share of slot time spent computing over the last `window_s` seconds of
    the latest segment in `lines` (a file's tail: `status --watch`)."""
    slots: dict[str, int] = {}
    tasks: list[TaskLine] = []
    latest = -1
    for line in lines:
        if isinstance(line, Segment) and line.segment >= latest:
            latest, slots, tasks = line.segment, dict(line.workers), []
        elif isinstance(line, TaskLine):
            if line.segment > latest:
                latest, slots, tasks = line.segment, {}, []
            if line.segment == latest:
                tasks.append(line)
    spans = [(t.worker, i) for t in tasks if (i := interval(t)) is not None]
    if not spans:
        return {}
    now = max(i.end for _, i in spans)
    window_s = min(window_s, now - min(i.begin for _, i in spans)) or window_s
    lo = now - window_s
    busy: dict[str, float] = {}
    for worker, i in spans:
        overlap = min(i.end, now) - max(i.begin, lo)
        if overlap > 0:
            busy[worker] = busy.get(worker, 0.0) + overlap
    names = sorted({w for w, _ in spans} | set(slots))
    return {w: min(1.0, busy.get(w, 0.0) / (slots.get(w, 1) * window_s)) for w in names}
