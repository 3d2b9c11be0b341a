"""Jobs a reboot interrupted (docs/contracts.md, section 13, "After a reboot"): `aner parallel
jobs` lists, beside the job index's entries, the durable queue's (`aner_coord.jobdir.index`),
so that jobs that were QUEUED or RUNNING when the host went down are still listed, as
interrupted; `--resume-interrupted` resumes each, in the background and in its queue order,
exactly as `aner parallel resume --job DIR --background` does (one process per job, so one
job's refusal never stops the others).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aner_coord.errors import EXIT_FAILED, EXIT_OK
from aner_coord.jobdir.status import JobState

Row = dict[str, Any]
# Recorded states of a job whose coordinator was still at work: an offline job recorded so
# was interrupted. (A job that had ended is not.)
_AT_WORK = (JobState.QUEUED.value, JobState.RUNNING.value)


def listed(rows: list[Row], row_of: Callable[[str, Path, float], Row]) -> list[Row]:
    """`rows` (the job index's) with the durable queue's jobs the index has lost, each job
    once, in queue order (when it first started), interrupted ones marked; the queue's
    entries of ended jobs are forgotten."""
    from aner_coord.jobdir.index import forget, queued

    by_id = {row["id"]: row for row in rows}
    for entry in queued():
        row = by_id.get(entry.job) or row_of(entry.job, entry.directory, entry.registered)
        row["registered"] = min(row["registered"], entry.registered)
        by_id[entry.job] = row
        if row["recorded"] is not None and row["recorded"] not in _AT_WORK:
            forget(entry.job)
    out = sorted(by_id.values(), key=lambda r: (r["registered"], r["id"]))
    for row in out:
        row["interrupted"] = (
            row["state"] == JobState.COORDINATOR_OFFLINE.value and row["recorded"] in _AT_WORK
        )
        if row["interrupted"] and row["note"] is None:
            row["note"] = (
                f"interrupted ({row['recorded']} when its coordinator went): "
                "`aner parallel jobs --resume-interrupted` resumes it"
            )
    return out


def resume_interrupted(rows: list[Row]) -> int:
    """Resume every interrupted job of `rows`, in order; 0 if each was resumed (or there
    were none), 3 if any was not (each said in one line)."""
    todo = [row for row in rows if row["interrupted"]]
    if not todo:
        print("no interrupted jobs of yours on this host")
        return EXIT_OK
    failed = 0
    for row in todo:
        argv = [sys.executable, "-m", "aner_coord", "parallel", "resume", "--job"]
        done = subprocess.run(
            [*argv, row["directory"], "--background", "--quiet"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode == 0:
            print(f"resumed job {row['id']} ({row['directory']})")
            continue
        failed += 1
        why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        print(f"job {row['id']} ({row['directory']}) was not resumed: {why}", file=sys.stderr)
    return EXIT_FAILED if failed else EXIT_OK
