"""Helpers shared by every layer of the suite (tests/unit, protocol, contract, integration):
the paths of the tree, the executable, cluster files, the one `wait_for` and `read_status`,
the one way to run and reap a subprocess, background submission, and the `Coordinators`
tracker behind the `coordinators` fixture (conftest.py).

Nothing here sleeps to synchronise: every wait polls a condition with `wait_for`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil
from suite_env import child_env

from aner_coord.jobdir.status import JobState, StatusSnapshot, decode_status
from aner_worker.leases import Holder, Lease, LeaseTable, private_dir

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
# The toy computation's plugin site (tests/toy), on every test process's path
# (pyproject.toml): a subprocess whose plugins must be this process's gets it on PYTHONPATH.
TOY_SITE = str(TESTS / "toy")
DATA = TESTS / "data"
DEPLOY = ROOT / "deploy"
SAMPLES = ROOT / "samples"

ANER = str(Path(sys.executable).with_name("aner"))
# The kernels do roughly 200 M samples/s per core here; 4 M-sample chunks keep the
# coordinator's overhead negligible, so these sizes give a job of about three seconds and
# one that only ends when cancelled or killed.
CHUNK = "4000000"
FEW_SECONDS = "600000000"
LONG = "6000000000"

POLL_S = 0.02
# Hang protection, never an assertion: no wait below fails a test sooner than this, whatever
# its caller asked, because a loaded machine may take many times its idle time for anything
# (a resume of 41 s at load 13). What a test waits for is its condition; a wait that would
# not come only takes longer to fail.
HANG_S = 300.0


# --------------------------------------------------------------------------- waiting


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll `predicate` until it returns something true (returned) or `timeout` (at
    least HANG_S) passes."""
    timeout = max(timeout, HANG_S)
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(POLL_S)


def read_status(job: Path) -> StatusSnapshot | None:
    """The job's status.json, decoded; None while the job has not written one yet."""
    try:
        data = (job / "status.json").read_bytes()
    except FileNotFoundError:
        return None
    return decode_status(data)


def status_of(job: Path) -> StatusSnapshot:
    """The job's status.json, which must exist."""
    status = read_status(job)
    assert status is not None, f"{job} has no status.json"
    return status


def wait_status(
    job: Path,
    predicate: Callable[[StatusSnapshot], bool],
    timeout: float,
    what: str,
) -> StatusSnapshot:
    def check() -> StatusSnapshot | None:
        status = read_status(job)
        return status if status is not None and predicate(status) else None

    snapshot: StatusSnapshot = wait_for(check, timeout, f"{job}: {what}")
    return snapshot


def wait_running(job: Path, min_accepted: int = 1, timeout: float = 30) -> StatusSnapshot:
    return wait_status(
        job,
        lambda s: s.state is JobState.RUNNING and s.accepted >= min_accepted,
        timeout,
        "RUNNING with accepted work",
    )


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


SLICE_S = 0.02  # a few switch intervals: every thread of the coordinator gets a turn


def advance_until(pid: int, check: Callable[[], Any], what: str, timeout: float = 600) -> Any:
    """Let the coordinator `pid`, stopped (SIGSTOP), run in slices of `SLICE_S` until
    `check()` returns something true (returned); it is left stopped. However fast the
    machine, the job moves on by at most a slice past what `check` saw."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert not process_gone(pid), f"{what}: the job ended first"
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        os.kill(pid, signal.SIGCONT)
        time.sleep(SLICE_S)
        os.kill(pid, signal.SIGSTOP)


def status_where(job: Path, predicate: Callable[[StatusSnapshot], bool]) -> Callable[[], Any]:
    """A check for `advance_until`: the job's status once it satisfies `predicate`."""

    def check() -> StatusSnapshot | None:
        status = read_status(job)
        return status if status is not None and predicate(status) else None

    return check


# --------------------------------------------------------------------------- processes


def run_aner(
    *args: str, timeout: float = 60, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ANER, *args],
        capture_output=True,
        text=True,
        timeout=max(timeout, HANG_S),
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        check=False,
    )


@contextlib.contextmanager
def spawned(
    argv: Sequence[str], *, stdin: int | None = subprocess.DEVNULL, **options: Any
) -> Iterator[subprocess.Popen[str]]:
    """A text-mode subprocess with piped output that is always reaped: killed if it is
    still running when the block ends, whatever happened inside."""
    proc = subprocess.Popen(
        list(argv),
        stdin=stdin,
        stdout=options.pop("stdout", subprocess.PIPE),
        stderr=options.pop("stderr", subprocess.PIPE),
        text=True,
        **options,
    )
    try:
        yield proc
    finally:
        reap(proc)


def reap(proc: subprocess.Popen[Any], timeout: float = 30, grace: float = 0.0) -> None:
    """Stop `proc` if it still runs (SIGTERM and up to `grace` seconds first, if given;
    then SIGKILL), collect it and close its pipes (unread: a child of it may hold them open
    for as long as it likes)."""
    if proc.poll() is None and grace > 0:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=timeout)
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            with contextlib.suppress(BrokenPipeError):  # unflushed input to a dead process
                pipe.close()


def finish(proc: subprocess.Popen[str], timeout: float) -> tuple[int, str, str]:
    """Wait for `proc` to exit on its own within `timeout`, at least HANG_S (a hang fails
    the test)."""
    timeout = max(timeout, HANG_S)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate(timeout=30)
        raise AssertionError(f"{proc.args} did not exit within {timeout} s: {err}") from None
    return proc.returncode, out, err


def sigint_held(pid: int) -> bool:
    """Whether the process holds SIGINT (blocked: `aner_coord.interrupts`), from /proc."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigBlk:"):
                return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    return False


def started_aner(argv: Sequence[str]) -> tuple[subprocess.Popen[str], float]:
    """`argv` started, once it runs aner's first line (SIGINT held, or it already ended),
    and the monotonic time of that moment: the origin of a test's interrupt points, after
    the interpreter's own start-up, which no program can take SIGINT in."""
    proc = subprocess.Popen(
        list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    while not sigint_held(proc.pid) and proc.poll() is None:
        time.sleep(0.001)
    return proc, time.monotonic()


def interrupted_at(
    argv: Sequence[str], delay: float | None, timeout: float = 300
) -> tuple[int, str, str, float]:
    """Run `argv`; `delay` seconds after aner's first line (None: never) send it SIGINT;
    its exit status, stdout and stderr, and the seconds from that first line to its exit."""
    proc, origin = started_aner(argv)
    try:
        if delay is not None:
            time.sleep(max(0.0, origin + delay - time.monotonic()))
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)
        code, out, err = finish(proc, timeout)
    finally:
        reap(proc)
    return code, out, err, time.monotonic() - origin


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
    return status_of(job).pid


# --------------------------------------------------------------------------- cluster files


def write_cluster(
    path: Path, records: list[tuple[str, str, str, str, int] | tuple[str, str, str, str, int, str]]
) -> Path:
    """A cluster file of `records`: (identity, transport, endpoint, executable, slots), and
    optionally the record's options (`coretype=Sandybridge`) as the sixth."""
    lines = ["ANER_CLUSTER 1", "# written by the test suite"]
    for identity, transport, endpoint, executable, slots, *options in records:
        line = f'worker "{identity}" {transport} "{endpoint}" "{executable}" {slots}'
        lines.append(" ".join([line, *options]))
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)
    return path


def result_of(job: Path) -> dict[str, Any]:
    """A job directory's result.json, as JSON."""
    data: dict[str, Any] = json.loads((job / "result.json").read_text())
    return data


def write_pipe_pair(path: Path) -> Path:
    """A group of two local-pipe workers "w1" and "w2", one slot each."""
    return write_cluster(path, [("w1", "local", "-", ANER, 1), ("w2", "local", "-", ANER, 1)])


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


def installed_copy(tmp_path: Path, changed: str) -> Path:
    """A second installation of aner in which `changed` has one comment line more at its end,
    and a launcher that runs it."""
    copy = tmp_path / "other-aner"
    for package in ("protocol", "aner_worker", "aner_coord"):
        shutil.copytree(
            ROOT / package, copy / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    source = copy / changed
    source.write_text(source.read_text() + "# a line that changes no number\n")
    launcher = tmp_path / "other-aner-launcher"
    launcher.write_text(
        f'#!/bin/sh\nPYTHONPATH="{copy}" exec "{sys.executable}" -P -m aner_coord "$@"\n'
    )
    launcher.chmod(0o755)
    return launcher


def unix_socket(path: Path) -> Path:
    """A unix socket file at `path`, whatever its length: bound in a short temporary
    directory (an AF_UNIX address holds 108 bytes, and pytest-xdist's temporary paths are
    long), then renamed into place."""
    with tempfile.TemporaryDirectory(dir="/tmp") as short:
        address = os.path.join(short, "s")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.bind(address)
        finally:
            s.close()
        os.rename(address, path)
    return path


# --------------------------------------------------------------------------- slot leases

HOLDING_JOB = "feedfacecafe"  # the job id a test's own lease names


def leased_env(tmp_path: Path, cpus: int) -> dict[str, str]:
    """The environment of a user whose host has `cpus` CPU slots, leases on (the rest of the
    suite runs with them off), in a lease table of the test's own."""
    return child_env(
        ANER_LEASES="on",
        ANER_RUNTIME_DIR=str(tmp_path / "rt"),
        ANER_STATE_DIR=str(tmp_path / "state"),  # its durable queue (`aner parallel jobs`)
        SLURM_CPUS_PER_TASK=str(cpus),
    )


def hold_slots(env: dict[str, str], slots: int) -> Lease:
    """Take `slots` slots of `env`'s lease table for this process: a job submitted then
    waits QUEUED, doing nothing, until the lease is released."""
    table = LeaseTable(int(env["SLURM_CPUS_PER_TASK"]), private_dir("slots", env))
    lease = table.take(slots, Holder(os.getpid(), job=HOLDING_JOB, kind="test", slots=slots))
    assert isinstance(lease, Lease)
    return lease


class GatedWorker:
    """A local-pipe worker whose host granted it one slot (`--max-slots 1`, leases on, in a
    lease table of its own), and the test's gate on it: while the test holds the grant's
    slot (`close`), the worker receives and holds its tasks but computes none, saying
    `Working` meanwhile, so a job stays mid-way, whatever the machine's speed, until the
    test `open`s it. The product's own mechanism (a host owner's grant), not a mock."""

    def __init__(self, directory: Path, identity: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.identity = identity
        self.runtime = directory / f"rt-{identity}"
        self.executable = directory / f"granted-{identity}"
        self.executable.write_text(
            f'#!/bin/sh\nunset ANER_LEASES\nANER_RUNTIME_DIR="{self.runtime}" '
            f'exec "{ANER}" "$@" --max-slots 1\n'
        )
        self.executable.chmod(0o700)
        self._lease: Lease | None = None

    def close(self) -> None:
        """Hold the grant's one slot: the worker computes nothing from its next task on."""
        if self._lease is None:
            table = LeaseTable(1, private_dir("granted", {"ANER_RUNTIME_DIR": str(self.runtime)}))
            holder = Holder(os.getpid(), job=HOLDING_JOB, kind="test", slots=1)

            def take() -> Lease | None:
                got = table.take(1, holder)
                return got if isinstance(got, Lease) else None

            self._lease = wait_for(take, HANG_S, f"{self.identity}'s granted slot")

    def open(self) -> None:
        if self._lease is not None:
            self._lease.release()
            self._lease = None


@contextlib.contextmanager
def gated_pair(path: Path) -> Iterator[tuple[Path, GatedWorker]]:
    """A group of two local-pipe workers "w1" and "w2", one slot each, "w2" gated (closed
    until the test opens it, and opened whatever happens): `w1` computes, `w2` holds the
    tasks it was sent, so a job is mid-way until `w2` is opened or lost."""
    gated = GatedWorker(path.parent, "w2")
    gated.close()
    try:
        records = [("w1", "local", "-", ANER, 1), ("w2", "local", "-", str(gated.executable), 1)]
        yield write_cluster(path, records), gated
    finally:
        gated.open()
