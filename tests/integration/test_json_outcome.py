"""`--json` of every job command (issue 38, item 5; docs/contracts.md, section 8): `run`,
`regression`, `train`, `cv`, `search` and `cancel` print one `aner-job-outcome/1` document
and nothing else on stdout, with the exit status they return without it (`resume --json`
is in tests/integration/test_resume.py, on a cancelled job). Real subprocesses, real job
directories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support import Coordinators, run_aner, status_of, wait_status

from aner_coord.jobdir.status import JobState

ONE = ["--workers", "1"]
COMMANDS = {
    "run": ["run", "--samples", "100000", "--seed", "42"],
    "regression": ["regression", "--samples", "10000", "--steps", "3", "--rate", "0.5",
                   "--seed", "1"],
    "train": ["train", "--teacher", "300,4,2", "--seed", "1", "--hidden", "4", "--epochs", "2"],
    "cv": ["cv", "--teacher", "300,4,2", "--seed", "1", "--hidden", "4", "--epochs", "2",
           "--folds", "2"],
}  # fmt: skip
SEARCH = "teacher = [300, 4, 2]\nseed = 1\nfolds = 2\nhidden = [4]\nepochs = 2\n"
SEARCH += "[grid]\nlr = [0.01, 0.001]\n"


def document(stdout: str) -> dict[str, Any]:
    """The one document stdout holds: a single line of JSON."""
    lines = stdout.splitlines()
    assert len(lines) == 1, stdout
    out: dict[str, Any] = json.loads(lines[0])
    assert out["schema"] == "aner-job-outcome/1"
    return out


@pytest.mark.parametrize("command", [*COMMANDS, "search"])
def test_a_job_command_prints_one_document_of_its_outcome(command: str, tmp_path: Path) -> None:
    job = tmp_path / "job"
    if command == "search":
        spec = tmp_path / "search.toml"
        spec.write_text(SEARCH)
        argv = ["search", "--spec", str(spec)]
    else:
        argv = COMMANDS[command]
    done = run_aner("parallel", *argv, *ONE, "--output", str(job), "--json", timeout=300)
    assert done.returncode == 0, done.stderr
    doc = document(done.stdout)
    assert (doc["command"], doc["state"], doc["exit_status"]) == (command, "COMPLETED", 0)
    assert doc["job"] == str(job.absolute()) and doc["reason"] == "completed"
    assert doc["result"] == str(job.absolute() / "result.json") and Path(doc["result"]).is_file()
    assert doc["summary"] and all(isinstance(line, str) and line for line in doc["summary"])
    # cancel --json of the completed job: nothing to cancel, the job's own exit status.
    cancel = run_aner("parallel", "cancel", "--job", str(job), "--json")
    assert cancel.returncode == 0, cancel.stderr
    ended = document(cancel.stdout)
    assert (ended["command"], ended["state"], ended["exit_status"]) == ("cancel", "COMPLETED", 0)
    assert ended["reason"].endswith("has already ended: COMPLETED; nothing to cancel")


def test_a_refusal_prints_no_document_and_background_says_submitted(
    tmp_path: Path, coordinators: Coordinators
) -> None:
    refused = run_aner("parallel", *COMMANDS["train"], "--hidden", "0", "--output",
                       str(tmp_path / "no"), "--json")  # fmt: skip
    assert refused.returncode == 2 and refused.stdout == ""
    assert len(refused.stderr.splitlines()) == 1
    job = tmp_path / "bg"
    started = run_aner("parallel", *COMMANDS["run"], *ONE, "--output", str(job), "--background",
                       "--json")  # fmt: skip
    assert started.returncode == 0, started.stderr
    coordinators.add(status_of(job).pid)
    doc = document(started.stdout)
    assert (doc["state"], doc["job"], doc["result"]) == ("SUBMITTED", str(job.absolute()), None)
    wait_status(job, lambda s: s.state is JobState.COMPLETED, 120, "the background job")
