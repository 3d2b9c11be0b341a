"""Helpers shared by the tests that start real `aner` processes: the executable, cluster
files, waiting on job directories, background submission, and the `Coordinators` tracker
behind the `coordinators` fixture (conftest.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

ANER = str(Path(sys.executable).with_name("aner"))
# The kernels do roughly 200 M samples/s per core here; 4 M-sample chunks keep the
# coordinator's overhead negligible, so these sizes give a job of about three seconds and
# one that only ends when cancelled or killed.
CHUNK = "4000000"
FEW_SECONDS = "600000000"
LONG = "6000000000"


# --------------------------------------------------------------------------- helpers


def run_aner(
    *args: str, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ANER, *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def read_status(job: Path) -> dict[str, Any]:
    status: dict[str, Any] = json.loads((job / "status.json").read_text())
    return status


def lock_held(job: Path) -> bool:
    from aner_coord.jobdir import lock_is_held

    held: bool = lock_is_held(job)
    return held


def process_gone(pid: int) -> bool:
    """Gone, or a zombie waiting for whoever adopted it: either way it runs nothing."""
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def wait_running(job: Path, min_accepted: int = 1, timeout: float = 30) -> dict[str, Any]:
    def running() -> dict[str, Any] | None:
        status = read_status(job)
        ok = status["state"] == "RUNNING" and status["accepted"] >= min_accepted
        return status if ok else None

    status: dict[str, Any] = wait_for(running, timeout, f"{job} RUNNING with accepted work")
    return status


def submit(
    job: Path, samples: str, *extra: str, timeout: float = 60, env: dict[str, str] | None = None
) -> int:
    """`aner parallel run --background`; returns the coordinator's pid."""
    done = run_aner(
        "parallel", "run", "--samples", samples, "--seed", "1", "--chunk", CHUNK,
        "--output", str(job), "--background", *extra,
        timeout=timeout, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    pid = read_status(job)["pid"]
    assert isinstance(pid, int)
    return pid


def write_cluster(path: Path, records: list[tuple[str, str, str, str, int]]) -> Path:
    lines = ["ANER_CLUSTER 1", "# written by the test suite"]
    for identity, transport, endpoint, executable, slots in records:
        lines.append(f'worker "{identity}" {transport} "{endpoint}" "{executable}" {slots}')
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)
    return path


def write_cluster_file(path: Path, executable: str = ANER) -> Path:
    """A group of one local-pipe worker "w1" with one slot."""
    return write_cluster(path, [("w1", "local", "-", executable, 1)])


class Coordinators:
    """Coordinator pids a test started; any still alive at teardown are killed with their
    session (a detached coordinator leads its own), checked by command line first so that
    a recycled pid is never touched."""

    def __init__(self) -> None:
        self.pids: list[int] = []

    def add(self, pid: int) -> int:
        self.pids.append(pid)
        return pid

    def cleanup(self) -> None:
        for pid in self.pids:
            try:
                cmdline = " ".join(psutil.Process(pid).cmdline())
            except psutil.Error:
                continue
            if "aner" in cmdline and not process_gone(pid):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
