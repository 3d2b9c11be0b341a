"""A job's timeline as a Gantt chart (`--png FILE`): one lane per worker slot and one for
the coordinator, tasks coloured by outcome and the coordinator's phases by name, a time axis
in seconds from the job's start. Drawn with the scaling charts' matplotlib set-up
(`aner_coord.scaling.charts`, the optional `charts` extra).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aner_coord.job.timeline import PHASES
from aner_coord.scaling.charts import new_figure, save_png
from aner_coord.timeline.analysis import SegmentView, coordinator_busy_share, interval, lanes

TASK_COLOURS = {
    "accepted": "#4c72b0",
    "retried": "#dd8452",
    "duplicate": "#8172b3",
}
PHASE_COLOURS = dict(
    zip(PHASES, ("#55a868", "#c44e52", "#937860", "#da8bc3", "#8c8c8c"), strict=True)
)
LOST_COLOUR = "#c44e52"
BAR = 0.8


@dataclass
class _Marks:
    """What the chart draws, gathered: bars by (lane, outcome), phases, lost tasks."""

    bars: dict[tuple[int, str], list[tuple[float, float]]] = field(default_factory=dict)
    phases: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    reduce: list[tuple[float, float]] = field(default_factory=list)
    lost: list[tuple[float, int]] = field(default_factory=list)
    segments: list[float] = field(default_factory=list)  # where a resumed segment begins


def _lanes(views: Sequence[SegmentView]) -> tuple[dict[tuple[str, int], int], list[str]]:
    """Lane numbers: 0 the coordinator, then each worker's slots; and their labels."""
    lane_of: dict[tuple[str, int], int] = {}
    labels = ["coordinator"]
    for view in views:
        for worker in view.workers:
            for slot in range(worker.slots):
                if (worker.identity, slot) not in lane_of:
                    lane_of[(worker.identity, slot)] = len(labels)
                    one = worker.slots == 1
                    labels.append(worker.identity if one else f"{worker.identity} #{slot + 1}")
    return lane_of, labels


def _marks(views: Sequence[SegmentView], lane_of: dict[tuple[str, int], int]) -> _Marks:
    marks = _Marks()
    origin = views[0].segment.wall if views else 0.0
    for view in views:
        shift = view.segment.wall - origin
        if view.segment.segment:
            marks.segments.append(shift)
        for phase in view.phase_lines:
            span = (shift + phase.begin, max(phase.end - phase.begin, 1e-6))
            if phase.busy_s is not None:  # many short pieces: their span, drawn light
                marks.reduce.append(span)
            else:
                marks.phases.setdefault(phase.name, []).append(span)
        for worker in view.workers:
            for task, slot in zip(worker.tasks, lanes(worker.tasks, worker.slots), strict=True):
                lane = lane_of[(worker.identity, slot)]
                got = interval(task)
                if got is None:
                    marks.lost.append((shift + task.dispatched, lane))
                    continue
                marks.bars.setdefault((lane, task.outcome), []).append(
                    (shift + got.begin, max(got.end - got.begin, 1e-6))
                )
    return marks


def draw(views: Sequence[SegmentView]) -> bytes:
    """The chart of `views`, as PNG bytes."""
    out = io.BytesIO()
    save_png(chart(views), out)
    return out.getvalue()


def chart(views: Sequence[SegmentView]) -> Any:
    """The chart of `views`, a matplotlib figure (`draw` saves it; a test reads it). The
    coordinator's lane says its measured busy share: a reduce of many short pieces is drawn
    as their span, lightly, which alone would read as a coordinator always busy."""
    lane_of, labels = _lanes(views)
    busy = coordinator_busy_share(views)
    if busy is not None:
        labels[0] = f"coordinator (busy {busy:.1%})"
    marks = _marks(views, lane_of)
    figure, ax = new_figure(10.0, min(12.0, 1.6 + 0.35 * len(labels)))
    for at in marks.segments:
        ax.axvline(at, color="black", linestyle="--", linewidth=0.8)
    handles: dict[str, Any] = {}
    for (lane, outcome), spans in sorted(marks.bars.items()):
        colour = TASK_COLOURS.get(outcome, TASK_COLOURS["accepted"])
        handles[f"task ({outcome})"] = ax.broken_barh(
            spans, (lane - BAR / 2, BAR), facecolors=colour, linewidth=0
        )
    if marks.reduce:
        handles["reduce (span of its pieces)"] = ax.broken_barh(
            marks.reduce,
            (-BAR / 2, BAR),
            facecolors=PHASE_COLOURS["reduce"],
            alpha=0.35,
            linewidth=0,
        )
    for name, spans in sorted(marks.phases.items()):
        colour = PHASE_COLOURS.get(name, "#333333")
        handles[name] = ax.broken_barh(spans, (-BAR / 2, BAR), facecolors=colour, linewidth=0)
    if marks.lost:
        handles["task lost"] = ax.scatter(
            [x for x, _ in marks.lost],
            [y for _, y in marks.lost],
            marker="x",
            color=LOST_COLOUR,
            zorder=3,
        )
    ax.set_yticks(range(len(labels)), labels)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.set_xlabel("time from the job's start (s)")
    ax.set_ylabel("coordinator and worker slots")
    kinds = sorted({v.segment.computation for v in views})
    backends = sorted({v.segment.backend for v in views})
    tasks = sum(len(w.tasks) for v in views for w in v.workers)
    ax.set_title(f"Job timeline: {', '.join(kinds)} on {', '.join(backends)}, {tasks:,} tasks")
    ax.grid(axis="x", alpha=0.3)
    if handles:
        ax.legend(
            list(handles.values()),
            list(handles),
            loc="upper center",
            bbox_to_anchor=(0.5, -0.18),
            ncol=min(4, len(handles)),
            fontsize="small",
            frameon=False,
        )
    return figure
