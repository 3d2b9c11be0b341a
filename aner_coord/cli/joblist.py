"""`aner parallel jobs`: this user's jobs on this host, from the job index and its durable
queue (`aner_coord.jobdir.index`; the queue outlives a reboot; docs/contracts.md, section
13): queued, running, offline, interrupted and finished, each observed as `status` observes
it; `--resume-interrupted` resumes the interrupted ones (`aner_coord.cli.interrupted`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import msgspec

from aner_coord.errors import AnerError, RequestError


def add_jobs_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="one JSON object, a list of jobs")
    p.add_argument(
        "--resume-interrupted",
        action="store_true",
        help="resume, in the background and in their queue order, every job that was queued "
        "or running when its coordinator went (a reboot): what deploy/aner-resume.service runs",
    )


def jobs_command(args: argparse.Namespace) -> int:
    from aner_coord.cli.interrupted import listed, resume_interrupted
    from aner_coord.jobdir.index import entries, index_dir
    from aner_worker.leases import LeaseError

    try:
        index = index_dir()
    except LeaseError as exc:
        raise RequestError(str(exc)) from None
    places = _queue_places()

    def row_of(job: str, directory: Path, registered: float) -> dict[str, Any]:
        return _row(job, directory, registered, places)

    rows = listed([row_of(e.job, e.directory, e.registered) for e in entries(index)], row_of)
    if args.resume_interrupted:
        return resume_interrupted(rows)
    if args.json:
        document = {"schema": "aner-jobs/1", "jobs": rows}
        sys.stdout.buffer.write(msgspec.json.format(msgspec.json.encode(document)) + b"\n")
        return 0
    if not rows:
        print("no jobs of yours on this host (jobs register when they start)")
        return 0
    print(f"{'ID':<12}  {'KIND':<12}  {'STATE':<19}  {'DONE':>6}  {'WORKERS':>7}  DIRECTORY")
    for row in rows:
        done = "-" if row["percent"] is None else f"{row['percent']:.1f}%"
        workers = "-" if row["workers"] is None else str(row["workers"])
        print(
            f"{row['id']:<12}  {row['kind']:<12}  {row['state']:<19}  {done:>6}  {workers:>7}  "
            f"{row['directory']}"
        )
        if row["queued_behind"]:
            print(f"{'':<12}  behind job(s) {', '.join(row['queued_behind'])}")
        if row["position"] is not None:
            print(f"{'':<12}  number {row['position']} in this host's queue for CPU slots")
        if row["note"]:
            print(f"{'':<12}  {row['note']}")
    return 0


def _queue_places() -> dict[str, int]:
    """Each waiting job's place in this host's queue for CPU slots (1: the next to start),
    from the lease table's tickets; none where leases are off or the table cannot be used."""
    from aner_coord import posix
    from aner_worker.inventory import current
    from aner_worker.leases import LeaseError, LeaseTable, leases_enabled

    if not leases_enabled() or posix.missing() is not None:
        return {}
    try:
        queue = LeaseTable(current().effective_cpus).queue()
    except (LeaseError, OSError):
        return {}
    places: dict[str, int] = {}
    for holder in (h for _, h in queue if h.job):
        places.setdefault(holder.job, len(places) + 1)
    return places


def _row(job: str, directory: Path, registered: float, places: dict[str, int]) -> dict[str, Any]:
    """One job as the listing shows it; a job that cannot be observed now (no status yet,
    a file that is not one) is listed with the reason instead of its state."""
    from aner_coord.cli.monitor import observe
    from aner_coord.cli.progress import percent

    row: dict[str, Any] = {
        "id": job,
        "directory": str(directory),
        "registered": registered,
        "kind": "-",
        "state": "UNKNOWN",
        "percent": None,
        "workers": None,
        "queued_behind": [],
        "position": None,
        "note": None,
        "recorded": None,  # the state status.json records (`state` is the observed one)
        "interrupted": False,  # QUEUED or RUNNING when its coordinator went (a reboot)
    }
    try:
        obs = observe(directory)
    except (AnerError, OSError) as exc:
        row["note"] = str(exc)
        return row
    snap = obs.snapshot
    row.update(
        kind=snap.kind,
        state=obs.state.value,
        recorded=snap.state.value,
        percent=percent(snap),
        workers=len(snap.workers) if snap.workers else None,
        queued_behind=[h.job for h in snap.queued_behind if h.job],
        position=places.get(job) if obs.state.value == "QUEUED" else None,
    )
    return row
