"""No command prints a traceback when its reader goes away (aner_coord/cli/main.py).

Each command that writes to standard output runs twice, through the real `aner` program:

* `head`: in a shell pipeline, `aner ... | head -1`, its own exit status taken from
  `PIPESTATUS[0]` (where the whole output is one small write it may be done before `head`
  exits; then this form proves little and the next one decides);
* `closed`: with standard output a pipe whose read end is already closed, so that its first
  write fails with EPIPE (Python ignores SIGPIPE: a BrokenPipeError, and again at the flush
  of interpreter shutdown, "Exception ignored ... BrokenPipeError" and exit 120).

What must hold: stderr holds no traceback and no "Exception ignored", the exit status is the
command's own (the one it gives when its output is read: 0, or 5 for `status` of an offline
job), and a job whose summary could not be printed has still completed (`result.json`).

Adapted from a reviewer's CLI-only harness; tiny jobs, so that the module stays fast.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import ANER, HANG_S, run_aner

TIMEOUT_S = HANG_S  # a bound for a hang, not a measure of speed
BAD = ("Traceback (most recent call last)", "BrokenPipeError", "Exception ignored")


@dataclass(frozen=True)
class Bases:
    """Job directories and a model made once with the CLI, shared by the cases."""

    root: Path
    done: Path  # a completed Monte Carlo job: 1,000 samples, one worker
    model: Path  # a completed train job (teacher 200 x 4, 2 classes)

    def offline(self, dest: Path) -> Path:
        """The completed job as a coordinator killed before the end leaves it: no result,
        the last status RUNNING, no lock holder."""
        shutil.copytree(self.done, dest, symlinks=True)
        (dest / "result.json").unlink()
        status = json.loads((dest / "status.json").read_text())
        status["state"] = "RUNNING"
        (dest / "status.json").write_text(json.dumps(status))
        return dest

    def rows(self, path: Path, n: int = 5000) -> Path:
        """Feature rows for the model (4 features), about 0.2 MB of CSV: more than a pipe
        holds, so that the write itself meets the closed pipe."""
        lines = ["x0,x1,x2,x3"]
        lines += [
            ",".join(f"{((r * 7 + j * 13) % 200) / 100 - 1:.4f}" for j in range(4))
            for r in range(n)
        ]
        path.write_text("\n".join(lines) + "\n")
        return path


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> Bases:
    root = tmp_path_factory.mktemp("bases")
    made = []
    for name, argv in (
        ("done", ["run", "--samples", "1000", "--seed", "1", "--workers", "1"]),
        (
            "model",
            ["train", "--teacher", "200,4,2", "--epochs", "1", "--seed", "1", "--workers", "1"],
        ),
    ):
        done = run_aner("parallel", *argv, "--output", str(root / name), "--quiet", timeout=300)
        assert done.returncode == 0, done.stderr
        made.append(root / name)
    return Bases(root, *made)


@dataclass(frozen=True)
class Command:
    id: str
    argv: Callable[[Bases, Path], list[str]]  # given the bases and a fresh directory
    rc: int = 0
    job_output: bool = False  # its --output is a job directory that must complete


COMMANDS = [
    Command("version", lambda b, d: ["--version"]),
    Command("help", lambda b, d: ["parallel", "train", "--help"]),
    Command("inventory", lambda b, d: ["parallel", "inventory"]),
    Command("inventory_json", lambda b, d: ["parallel", "inventory", "--json"]),
    Command(
        "run",
        lambda b, d: [
            "parallel",
            "run",
            "--samples",
            "1000",
            "--seed",
            "1",
            "--workers",
            "1",
            "--output",
            str(d / "out"),
        ],
        job_output=True,
    ),
    Command(
        "regression",
        lambda b, d: [
            "parallel",
            "regression",
            "--samples",
            "1000",
            "--steps",
            "2",
            "--rate",
            "0.5",
            "--seed",
            "1",
            "--workers",
            "1",
            "--output",
            str(d / "out"),
        ],
        job_output=True,
    ),
    Command(
        "train",
        lambda b, d: [
            "parallel",
            "train",
            "--teacher",
            "200,4,2",
            "--epochs",
            "1",
            "--seed",
            "1",
            "--workers",
            "1",
            "--output",
            str(d / "out"),
        ],
        job_output=True,
    ),
    Command("status", lambda b, d: ["parallel", "status", "--job", str(b.done)]),
    Command("status_json", lambda b, d: ["parallel", "status", "--job", str(b.done), "--json"]),
    Command("status_watch", lambda b, d: ["parallel", "status", "--job", str(b.done), "--watch"]),
    Command(
        "status_offline",
        lambda b, d: ["parallel", "status", "--job", str(b.offline(d / "job"))],
        rc=5,
    ),
    Command("cancel_finished", lambda b, d: ["parallel", "cancel", "--job", str(b.done)]),
    Command(
        "predict_stdout",
        lambda b, d: [
            "parallel",
            "predict",
            "--model",
            str(b.model),
            "--data",
            str(b.rows(d / "rows.csv")),
        ],
    ),
    Command("resume", lambda b, d: ["parallel", "resume", "--job", str(b.offline(d / "job"))]),
    Command(
        "plan_json",
        lambda b, d: [
            "parallel",
            "plan",
            "--samples",
            "1e6",
            "--json",
            "--save",
            str(d / "p.json"),
        ],
    ),
]


@dataclass(frozen=True)
class Outcome:
    rc: int | None  # None: killed at the timeout
    stderr: str


def run_cli(program: list[str], cwd: Path, stdout: int | None = None) -> Outcome:
    """Run `program` in its own session, killing the whole session at TIMEOUT_S."""
    with subprocess.Popen(
        program,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL if stdout is None else stdout,
        stderr=subprocess.PIPE,
        cwd=cwd,
        start_new_session=True,
        text=True,
    ) as proc:
        try:
            _, err = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
            return Outcome(None, err)
        return Outcome(proc.returncode, err)


def judge(cmd: Command, d: Path, argv: list[str], got: Outcome, how: str) -> None:
    problems = []
    if got.rc is None:
        problems.append(f"[hang] still running after {TIMEOUT_S:g} s")
    for bad in BAD:
        if bad in got.stderr:
            problems.append(f"[traceback] {bad!r} on stderr")
            break
    if got.rc is not None and got.rc != cmd.rc:
        problems.append(f"[exit code] exit {got.rc}, expected {cmd.rc} (the command's own)")
    if cmd.job_output and not (d / "out" / "result.json").exists():
        problems.append("[job] the job did not complete: no result.json")
    assert not problems, (
        f"aner {' '.join(argv)} ({how})\n  "
        + "\n  ".join(problems)
        + f"\n  stderr: {got.stderr[-1500:]}"
    )


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path


@pytest.mark.parametrize("cmd", COMMANDS, ids=[c.id for c in COMMANDS])
def test_into_head(cmd: Command, bases: Bases, fresh: Path) -> None:
    argv = cmd.argv(bases, fresh)
    script = '"$@" | head -1 >/dev/null; exit "${PIPESTATUS[0]}"'
    got = run_cli(["bash", "-c", script, "bash", ANER, *argv], cwd=fresh)
    judge(cmd, fresh, argv, got, "piped into head -1")


@pytest.mark.parametrize("cmd", COMMANDS, ids=[c.id for c in COMMANDS])
def test_into_a_closed_pipe(cmd: Command, bases: Bases, fresh: Path) -> None:
    argv = cmd.argv(bases, fresh)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        got = run_cli([ANER, *argv], cwd=fresh, stdout=write_end)
    finally:
        os.close(write_end)
    judge(cmd, fresh, argv, got, "stdout a pipe whose reader has gone")
