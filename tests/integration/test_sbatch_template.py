"""deploy/aner-slurm.sbatch outside Slurm's own checks, and the log it writes (issue 25
item 16): without an `aner` on the job's PATH it says so in its log (stderr) and exits 2,
instead of exiting 1 in silence under `set -e`; the log's `status --watch` lines never
repeat a line (a STARTING status rewritten every second wrote 1.4 lines a second)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import msgspec
import pytest
from suite_env import child_env
from support import DEPLOY, TESTS

from aner_coord.cli.monitor import Observation, _PlainLines
from aner_coord.jobdir import JobDir
from aner_coord.jobdir.status import JobState, decode_status


def _run_template(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = child_env(dict(HOME=str(tmp_path), PATH="/usr/bin:/bin", SLURM_JOB_ID="7"))
    return subprocess.run(
        ["bash", str(DEPLOY / "aner-slurm.sbatch")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, "SLURM_SUBMIT_DIR": str(tmp_path), **env},
        stdin=subprocess.DEVNULL,
        cwd=tmp_path,
    )


def test_without_aner_on_the_jobs_path_the_template_says_so_and_exits_2(tmp_path: Path) -> None:
    done = _run_template(tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "aner-slurm.sbatch: no aner executable: put aner on the job's PATH or set "
        "ANER=/path/to/aner when submitting"
    )
    assert not (tmp_path / "aner-jobs").exists()  # nothing made
    done = _run_template(tmp_path, ANER=str(tmp_path / "nowhere" / "aner"))
    assert done.returncode == 2 and f"no aner executable at {tmp_path}/nowhere/aner" in (
        done.stderr
    )


def test_the_watch_log_never_repeats_a_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    snapshot = decode_status((TESTS / "data" / "status-v2.json").read_bytes())
    starting = msgspec.structs.replace(snapshot, state=JobState.STARTING, accepted=0)
    show = _PlainLines(JobDir.open(tmp_path))  # no timeline yet: no busy shares
    for seq in range(1, 6):  # a STARTING status rewritten five times: one line
        rewritten = msgspec.structs.replace(starting, seq=seq)
        show(Observation(rewritten, JobState.STARTING, True, 0.0), True)
    running = msgspec.structs.replace(starting, state=JobState.RUNNING, seq=6)
    show(Observation(running, JobState.RUNNING, True, 0.0), True)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[0].startswith("STARTING"), lines
    assert lines[1].startswith("RUNNING"), lines
