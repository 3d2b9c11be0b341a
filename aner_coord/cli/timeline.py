"""`aner parallel timeline --job DIR`: where a job's time went, from its `timeline.jsonl`
(docs/contracts.md, section 14): a summary to read in ten seconds, or `--json`, and the
files `--png` (a Gantt chart) and `--chrome` (Trace Event format) beside it.

A job directory without a timeline, or one whose timeline is damaged, cut short, not a
regular file or over its bound, is refused in one line (exit 2) before anything is written.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from aner_coord.errors import RequestError

if TYPE_CHECKING:
    from aner_coord.timeline.analysis import SegmentView


def add_timeline_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--job", required=True, metavar="DIR", help="the job directory to read")
    p.add_argument("--json", action="store_true", help="the summary as JSON")
    p.add_argument("--png", metavar="FILE", help="also write a Gantt chart (PNG) to FILE")
    p.add_argument(
        "--chrome",
        metavar="FILE",
        help="also write the timeline in Trace Event format (Perfetto, chrome://tracing)",
    )


def timeline_command(args: argparse.Namespace) -> int:
    return timeline(args.job, as_json=args.json, png=args.png, chrome=args.chrome)


def timeline(
    job: str, *, as_json: bool = False, png: str | None = None, chrome: str | None = None
) -> int:
    """Print the summary of `job`'s timeline; write the chart and trace files asked for."""
    import msgspec

    from aner_coord.cli.monitor import open_job_dir
    from aner_coord.jobdir import TIMELINE
    from aner_coord.jobdir.timeline import read_timeline
    from aner_coord.timeline import analysis
    from aner_coord.timeline import chrome as tracing

    path = Path(job)
    targets = [Path(name) for name in (png, chrome) if name is not None]
    for target in targets:
        _check_target(target)
    with open_job_dir(path) as directory:
        try:
            lines = read_timeline(directory)
        except FileNotFoundError:
            raise RequestError(
                f"{path} has no {TIMELINE}: it was run by an aner without timelines, or its "
                "coordinator never started; run the job again to have one"
            ) from None
    views = analysis.analyse(lines)
    files: dict[Path, bytes] = {}
    if chrome is not None:
        files[Path(chrome)] = msgspec.json.encode(tracing.trace(views))
    if png is not None:
        files[Path(png)] = _chart(views)
    from aner_worker.files import write_atomically

    for target, data in files.items():
        try:
            write_atomically(target, data)
        except OSError as exc:
            raise RequestError(f"cannot write {target}: {exc.strerror or exc}") from None
    if as_json:
        sys.stdout.buffer.write(
            msgspec.json.format(msgspec.json.encode(analysis.to_json(views))) + b"\n"
        )
    else:
        print("\n".join(analysis.summary_lines(views)))
        for target in files:
            print(f"wrote {target}")
    return 0


def _chart(views: Sequence[SegmentView]) -> bytes:
    try:
        from aner_coord.timeline import gantt
    except ImportError:
        raise RequestError("--png needs matplotlib: pip install 'aner[charts]'") from None
    return gantt.draw(views)


def _check_target(target: Path) -> None:
    """An output file's place: a directory that exists, and not a directory itself."""
    if target.is_dir():
        raise RequestError(f"{target} is a directory: give a file name")
    parent = target.parent
    if not parent.is_dir():
        raise RequestError(f"cannot write {target}: no directory {parent}")
