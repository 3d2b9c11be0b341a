"""Live progress on a terminal (rich), and the plain final summary.

rich does the terminal work (redraw, width, ETA formatting) better than hand-written ANSI
codes; it is used only when stderr is a terminal and the user did not ask for --quiet.
"""

from __future__ import annotations

from typing import Any

from aner_coord.jobdir.status import StatusSnapshot


def format_eta(seconds: float | None) -> str:
    if seconds is None:
        return "ETA --"
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"ETA {hours}:{minutes:02d}:{secs:02d}" if hours else f"ETA {minutes}:{secs:02d}"


def describe(snapshot: StatusSnapshot) -> str:
    """One line: state, phase, work done of requested, throughput, ETA."""
    unit = snapshot.unit
    total = snapshot.total_work
    pct = 100.0 * snapshot.accepted / total if total else 0.0
    rate = f"{snapshot.throughput / 1e6:,.1f} M {unit}/s" if snapshot.throughput else f"-- {unit}/s"
    phase = f" [{snapshot.phase}]" if snapshot.passes > 1 else ""
    return (
        f"{snapshot.state.value}{phase} {snapshot.accepted:,} of {total:,} {unit} ({pct:.1f}%), "
        f"{rate}, {format_eta(snapshot.eta_s)}"
    )


def _si(value: float) -> str:
    for factor, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= factor:
            return f"{value / factor:.2f}{suffix}"
    return f"{value:.0f}"


def compact(snapshot: StatusSnapshot) -> str:
    """The live line's detail, short enough for an 80-column terminal beside the bar."""
    unit = snapshot.unit
    total = snapshot.total_work
    pct = 100.0 * snapshot.accepted / total if total else 0.0
    rate = f"{_si(snapshot.throughput)}/s" if snapshot.throughput else "--/s"
    phase = f"{snapshot.phase}, " if snapshot.passes > 1 else ""
    return f"{phase}{pct:5.1f}% of {_si(total)} {unit}, {rate}, {format_eta(snapshot.eta_s)}"


class LiveProgress:
    """Observer drawing a progress bar on stderr while the job runs."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(bar_width=16),
            TextColumn("{task.fields[detail]}"),
            console=Console(stderr=True),
            transient=True,
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
            completed=snapshot.accepted,
            description=snapshot.state.value,
            detail=compact(snapshot),
        )
