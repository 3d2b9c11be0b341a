"""Live progress on a terminal (rich), and the plain final summary.

rich does the terminal work (redraw, width) better than hand-written ANSI codes; it is used
only when stderr is a terminal and the user did not ask for --quiet. The words (work done of
the planned work, a training's epoch and step, rates in k/M units, the ETA and whether it is
an upper bound) are written here once, for the bar, `status`, `--watch`, `cancel` and the log.
"""

from __future__ import annotations

import math
from typing import Any

from aner_coord.jobdir.status import JobState, StatusSnapshot, WorkerAccount


def format_eta(seconds: float | None, *, upper_bound: bool = False) -> str:
    """`ETA 1:02:03`, `ETA 0:42`, `ETA --` when unknown; never negative. An upper bound
    (early stopping may end the job sooner) reads `ETA at most 0:42`."""
    return f"ETA {eta_text(seconds, upper_bound=upper_bound)}"


def eta_text(seconds: float | None, *, upper_bound: bool = False) -> str:
    if seconds is None:
        return "--"
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
    return f"at most {text}" if upper_bound else text


def si(value: float) -> str:
    """A count in readable units: 950, 35.2k, 1.25M, 3.10G."""
    for factor, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= factor:
            digits = 1 if value / factor >= 10 else 2
            return f"{value / factor:.{digits}f}{suffix}"
    return f"{value:.0f}"


def rate_text(snapshot: StatusSnapshot) -> str:
    """`35.2k rows/s`, `12.5M samples/s`, `-- rows/s` before anything is measured."""
    rate = snapshot.throughput
    return f"{si(rate) if rate else '--'} {snapshot.unit}/s"


def percent(snapshot: StatusSnapshot) -> float:
    """Work done, in percent of the planned work weighted by its cost (`fraction`): never
    above 100, and 100 only for a completed job (rounding never shows an unfinished one as
    done)."""
    if snapshot.state is JobState.COMPLETED:
        return 100.0
    return min(99.9, math.floor(1000.0 * snapshot.fraction) / 10)


def items_percent(snapshot: StatusSnapshot) -> float:
    """The items done in percent of the planned items, rounded as `percent` is."""
    if snapshot.state is JobState.COMPLETED:
        return 100.0
    total = snapshot.total_work
    return min(99.9, math.floor(1000.0 * snapshot.accepted / total) / 10) if total else 0.0


def work_text(snapshot: StatusSnapshot) -> str:
    """`12,345 of 50,000 rows (24.6%)`; `of at most` while early stopping may end it sooner.
    Where the planned cost done differs from the items done (a Dense training's evaluated
    rows cost less than its training rows), both are given, each labelled:
    `70,228 of 340,418 rows (20.6% of the rows, 1.4% of the cost)`."""
    bound = "at most " if snapshot.work_upper_bound else ""
    by_cost, by_items = percent(snapshot), items_percent(snapshot)
    shown = (
        f"{by_cost:.1f}%"
        if by_cost == by_items
        else f"{by_items:.1f}% of the {snapshot.unit}, {by_cost:.1f}% of the cost"
    )
    return f"{snapshot.accepted:,} of {bound}{snapshot.total_work:,} {snapshot.unit} ({shown})"


def position_text(snapshot: StatusSnapshot, *, short: bool = False) -> str | None:
    """`epoch 3 of 100, step 2 of 5, validation accuracy 0.9123` for a training job (its
    last epoch's accuracy once one has ended); None for a job that reports no position."""
    at = snapshot.position
    if at is None:
        return None
    if short:
        text = f"epoch {at.epoch}/{at.epochs} step {at.step}/{at.steps}"
        if at.validation_accuracy is not None:
            text += f" val {at.validation_accuracy:.3f}"
        return text
    text = f"epoch {at.epoch} of {at.epochs}, step {at.step} of {at.steps}"
    if at.validation_accuracy is not None:
        text += f", validation accuracy {at.validation_accuracy:.4f}"
    return text


def queue_text(snapshot: StatusSnapshot) -> str | None:
    """`waiting for CPU slots held by job 3f2a9c41d07e (monte-carlo, pid 4242, 2 slot(s))`
    for a QUEUED job: the jobs holding the CPU slots it waits for, or the job it runs after
    (named with 0 slots), `waiting for job ... to complete` (docs/contracts.md, section 13);
    None otherwise."""
    if snapshot.state is not JobState.QUEUED:
        return None
    behind = snapshot.queued_behind
    if behind and all(h.slots == 0 for h in behind):  # the job it runs after (`--after`)
        return (
            "waiting for "
            + "; ".join(f"job {h.job} ({h.kind}, pid {h.pid})" for h in behind)
            + " to complete"
        )
    names = [
        f"job {h.job} ({h.kind}, pid {h.pid}, {h.slots} slot(s))"
        if h.job
        else f"a {h.kind or 'process'} (pid {h.pid}, {h.slots} slot(s))"
        for h in snapshot.queued_behind
    ]
    return "waiting for CPU slots held by " + ("; ".join(names) or "another process")


def _where(snapshot: StatusSnapshot, *, short: bool = False) -> str | None:
    queued = queue_text(snapshot)
    if queued is not None:
        return queued
    position = position_text(snapshot, short=short)
    if position is not None:
        return position
    # A call still admitting its job has no work planned: its phase is all there is to say.
    return snapshot.phase if snapshot.passes > 1 or not snapshot.passes else None


def pacing_text(worker: WorkerAccount) -> str:
    """A worker group's in-flight window and the estimates that sized it, if reported."""
    if worker.window is None:
        return ""
    estimates = []
    if worker.rtt_s is not None:
        estimates.append(f"round trip {worker.rtt_s * 1000:.1f} ms")
    if worker.task_s is not None:
        estimates.append(f"{worker.task_s * 1000:.1f} ms per task")
    return f", window {worker.window}" + (f" ({', '.join(estimates)})" if estimates else "")


def describe(snapshot: StatusSnapshot) -> str:
    """One line: state, where it stands, work done of planned, rate, ETA."""
    where = _where(snapshot)
    phase = f" [{where}]" if where else ""
    if not snapshot.passes:  # still admitting: nothing planned to count yet
        return f"{snapshot.state.value}{phase}"
    eta = format_eta(snapshot.eta_s, upper_bound=snapshot.work_upper_bound)
    return f"{snapshot.state.value}{phase} {work_text(snapshot)}, {rate_text(snapshot)}, {eta}"


def compact(snapshot: StatusSnapshot) -> str:
    """The live line's detail, short enough for an 80-column terminal beside the bar."""
    where = _where(snapshot, short=True)
    if not snapshot.passes:  # still admitting: nothing planned to count yet
        return where or ""
    phase = f"{where}, " if where else ""
    bound = "<=" if snapshot.work_upper_bound else ""
    eta = format_eta(snapshot.eta_s, upper_bound=snapshot.work_upper_bound)
    by_cost = percent(snapshot)
    if by_cost == items_percent(snapshot):
        done = f"{by_cost:5.1f}% of {bound}{si(snapshot.total_work)} {snapshot.unit}"
    else:  # the percent is of the cost, not of the items: say so, and give the items
        done = (
            f"{by_cost:5.1f}% of the cost, {si(snapshot.accepted)} of {bound}"
            f"{si(snapshot.total_work)} {snapshot.unit}"
        )
    return f"{phase}{done}, {si(snapshot.throughput) if snapshot.throughput else '--'}/s, {eta}"


class LiveProgress:
    """Observer drawing a progress bar on stderr while the job runs; `transient`: gone
    once stopped (the CLI's, which prints its summary instead), else left as it ended."""

    def __init__(self, *, transient: bool = True) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(bar_width=16),
            TextColumn("{task.fields[detail]}"),
            console=Console(stderr=True),
            transient=transient,
        )
        self._task: Any = None

    def __enter__(self) -> LiveProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def __call__(self, snapshot: StatusSnapshot) -> None:
        total = snapshot.total_work
        if self._task is None:
            self._task = self._progress.add_task(snapshot.state.value, total=total, detail="")
        self._progress.update(
            self._task,
            total=total,
            completed=round(snapshot.fraction * total),
            description=snapshot.state.value,
            detail=compact(snapshot),
        )
