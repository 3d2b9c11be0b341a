"""PNG charts of an experiment, with matplotlib's Agg backend (the optional `charts` extra;
only `aner parallel scaling` and `aner parallel timeline --png` import this module, the
latter for `new_figure` and `save_png`).

- `speedup.png`: local speedup against workers, one line per chunk, the ideal line, and
  min:max whiskers (the reference median over each trial's extremes);
- `cases.png`: every case's median time as a bar with min:max whiskers, cluster cases in
  their own colour, and the predicted time as a marker;
- `training.png`: validation accuracy against wall time per plan, when the computation
  records a per-epoch history (Dense training).
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

if TYPE_CHECKING:
    from aner_coord.scaling.experiment import Experiment
    from aner_coord.scaling.records import CaseSummary

DPI = 120
TITLE_CHARACTERS = 56  # a title line that fits a 6-inch figure at matplotlib's title size


def title(ax: Any, what: str, experiment: Experiment) -> None:
    """`what` the chart shows, then the experiment's name, wrapped to the figure's width:
    an experiment's name is the user's and may be long, and it does not say what a chart
    shows (a chart titled by a name alone can claim what it does not draw)."""
    lines = textwrap.wrap(what, TITLE_CHARACTERS)
    lines += textwrap.wrap(f"experiment: {experiment.name}", TITLE_CHARACTERS)
    ax.set_title("\n".join(lines), fontsize="medium")


def draw(
    experiment: Experiment,
    summaries: list[CaseSummary],
    records: list[dict[str, Any]],
    output: Path,
) -> list[str]:
    """Draw every chart the data supports into `output`; the file names written."""
    written = []
    for name, chart in (
        ("speedup.png", _speedup),
        ("cases.png", _cases),
        ("training.png", _training),
    ):
        figure = chart(experiment, summaries, records)
        if figure is None:
            continue
        save_png(figure, output / name)
        written.append(name)
    return written


def new_figure(width: float, height: float) -> tuple[Any, Any]:
    """A figure and its one axes, on the Agg backend."""
    return plt.subplots(figsize=(width, height))


def save_png(figure: Any, target: Path | BinaryIO) -> None:
    """Write `figure` as a PNG (an owner-only file at a path, or into a binary stream) and
    free it."""
    figure.savefig(target, dpi=DPI, bbox_inches="tight", format="png")
    plt.close(figure)
    if isinstance(target, Path):
        target.chmod(0o600)


def _speedup(
    experiment: Experiment, summaries: list[CaseSummary], records: list[dict[str, Any]]
) -> Any:
    ref = next(s for s in summaries if s.case.name == experiment.reference)
    local = [s for s in summaries if s.case.local and s.median is not None]
    if ref.median is None or not local:
        return None
    figure, ax = plt.subplots(figsize=(6, 4.5))
    chunks = sorted({s.case.chunk for s in local})
    for chunk in chunks:
        points = sorted((s for s in local if s.case.chunk == chunk), key=lambda s: s.case.slots)
        xs = [s.case.slots for s in points]
        ys = [ref.median / (s.median or 1.0) for s in points]
        low = [y - ref.median / (s.max or 1.0) for y, s in zip(ys, points, strict=True)]
        high = [ref.median / (s.min or 1.0) - y for y, s in zip(ys, points, strict=True)]
        ax.errorbar(xs, ys, yerr=[low, high], marker="o", capsize=4, label=f"chunk {chunk:,}")
    top = max(s.case.slots for s in local)
    ax.plot([1, top], [1, top], linestyle="--", color="grey", label="ideal")
    ax.set_xlabel("local workers (count)")
    ax.set_ylabel(f"speedup over {ref.case.name} (x)")
    title(ax, "Measured local speedup against workers (median, min:max)", experiment)
    ax.set_xticks(sorted({s.case.slots for s in local}))
    ax.grid(True, alpha=0.3)
    ax.legend()
    return figure


def _cases(
    experiment: Experiment, summaries: list[CaseSummary], records: list[dict[str, Any]]
) -> Any:
    timed = [s for s in summaries if s.median is not None]
    if not timed:
        return None
    figure, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(timed) + 2), 4.5))
    xs = list(range(len(timed)))
    medians = [s.median or 0.0 for s in timed]
    low = [m - (s.min or m) for m, s in zip(medians, timed, strict=True)]
    high = [(s.max or m) - m for m, s in zip(medians, timed, strict=True)]
    colours = ["tab:blue" if s.case.local else "tab:orange" for s in timed]
    ax.bar(xs, medians, yerr=[low, high], capsize=4, color=colours)
    predicted = [(x, s.predicted_s) for x, s in zip(xs, timed, strict=True) if s.predicted_s]
    if predicted:
        ax.scatter(
            [p[0] for p in predicted],
            [p[1] for p in predicted],
            marker="D",
            color="black",
            zorder=3,
            label="predicted by `plan`",
        )
        ax.legend()
    ax.set_xticks(xs, [s.case.name for s in timed], rotation=30, ha="right")
    ax.set_ylabel("wall time, s (median, min:max)")
    title(ax, "Wall time per case (median, min:max; blue local, orange cluster)", experiment)
    ax.grid(True, axis="y", alpha=0.3)
    return figure


def _training(
    experiment: Experiment, summaries: list[CaseSummary], records: list[dict[str, Any]]
) -> Any:
    curves: dict[str, list[tuple[float, float]]] = {}
    for r in records:
        history = r.get("history")
        if r["warmup"] or not r["ok"] or not history or r["case"] in curves:
            continue
        points = []
        for epoch in history:
            # An epoch's `seconds` count from the job's start (result.json's history).
            accuracy = _field(epoch, ("validation_accuracy",))
            seconds = _field(epoch, ("seconds",))
            if accuracy is None or seconds is None:
                break
            points.append((seconds, accuracy))
        if points:
            curves[r["case"]] = points
    if not curves:
        return None
    figure, ax = plt.subplots(figsize=(6, 4.5))
    for case, points in curves.items():
        ax.plot([p[0] for p in points], [p[1] for p in points], marker=".", label=case)
    ax.set_xlabel("time since the job started (s)")
    ax.set_ylabel("validation accuracy (fraction)")
    title(ax, "Validation accuracy against wall time, per case", experiment)
    ax.grid(True, alpha=0.3)
    ax.legend()
    return figure


def _field(entry: dict[str, Any], names: tuple[str, ...]) -> float | None:
    for name in names:
        value = entry.get(name)
        if isinstance(value, int | float):
            return float(value)
    return None
