"""`--json` of the job commands (`run`, `regression`, `train`, `cv`, `search`, `resume`,
`cancel`): one JSON document on stdout, schema `aner-job-outcome/1` (docs/contracts.md,
section 8), and nothing else there. Progress, notes and refusals stay on stderr.

The document says what became of the job: its directory, its state, the exit status the
command returns and why (`reason`), and, for a completed job, the result's summary lines
and the path of `result.json`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from aner_coord.jobdir import RESULT

SCHEMA = "aner-job-outcome/1"


def document(
    command: str,
    job: Path | None,
    state: str,
    exit_status: int,
    reason: str,
    summary: str = "",
) -> dict[str, object]:
    """The outcome of one job command. `state` is the job's (`COMPLETED`, `FAILED`,
    `CANCELLED`, ..., or `SUBMITTED` for one handed to a background coordinator)."""
    where = None if job is None else Path(job).absolute()
    completed = state == "COMPLETED" and where is not None
    return {
        "schema": SCHEMA,
        "command": command,
        "job": None if where is None else str(where),
        "state": state,
        "exit_status": exit_status,
        "reason": reason,
        "summary": summary.splitlines(),
        "result": str(where / RESULT) if completed and where is not None else None,
    }


def emit(doc: dict[str, object]) -> None:
    """The document, alone on stdout (one line, then a newline)."""
    sys.stdout.write(json.dumps(doc, allow_nan=False) + "\n")
    sys.stdout.flush()
