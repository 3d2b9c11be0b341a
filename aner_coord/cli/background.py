"""Detached background jobs: `run/regression --background` and the coordinator it starts.

`submit()` re-executes this program as `aner parallel coordinate` in a new session (no
terminal, stdin from /dev/null) rather than double-forking, and waits on a pipe for a
readiness line from it:

    NOTE <text>\\n                 a note on a new job's plan, for the submitter to say
                                   (any number of them, before READY)
    READY\\n                       the job directory is locked, its manifest and first
                                   status are written: the job is the coordinator's now
    ERROR <code> <JSON>\\n         it failed before that (exit code 2 or 3): the JSON holds
                                   the message, and a refused request's template and
                                   arguments, which the submitter renders in its own words
                                   (flags, or a spec file's keys)
    end of file, no line           it died (its stderr tail says why)

The submitter checks only what costs no work in proportion to the data's rows
(`admission.precheck`, `check_resumable`); the coordinator admits the job whole before it
is ready (reading the data, or generating a teacher set's labels, and assigning every row's
role), so a refusal found there is still the submitter's one line and exit status, and the
rows are held in the coordinator's process alone.

Until the directory exists the child's stdout and stderr go to an unlinked temporary file
that the parent can still read when the child dies early; once ready, the child copies that
file into `coordinator.log` in the job directory (opened through the directory descriptor
the job holds, never by path) and points its stdout and stderr there.

The coordinator then runs the job like the foreground does, minus the display: SIGTERM, SIGINT
and SIGHUP cancel gracefully, and `aner parallel cancel` reaches it through the job directory's
`cancel-request` file (see `aner_coord.job.execute`). Its log has timestamps and names workers
by public identity only, never by endpoint or path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from typing import IO

import msgspec

from aner_coord import jobdir
from aner_coord.admission import Job, Prechecked, admit, with_strict_bits
from aner_coord.cli.progress import describe
from aner_coord.errors import (
    EXIT_CANCELLED,
    EXIT_FAILED,
    EXIT_INVALID,
    EXIT_OK,
    AnerError,
    RequestError,
    bounded_message,
)
from aner_coord.job.coordinator import JobReport
from aner_coord.job.execute import Resumption, execute
from aner_coord.jobdir.status import JobState, StatusSnapshot
from aner_coord.requests import encode_request, with_absolute_paths
from aner_coord.runner import CANCEL_SIGNALS
from aner_coord.specfile import decode_request

READY_TIMEOUT_S = 180.0  # a first run on this machine may compile the kernels
REAP_TIMEOUT_S = 30.0
READY = b"READY"
ERROR = b"ERROR"
NOTE = b"NOTE"
_MAX_TEMPLATE = 1 << 16  # a refusal's template sent back whole; a longer one as its message
PROGRESS_LOG_INTERVAL_S = 10.0
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

log = logging.getLogger("aner.background")


# --------------------------------------------------------------------------- submit


def submit(
    job: Job | Prechecked,
    *,
    quiet: bool,
    resume: bool = False,
    ready_timeout_s: float = READY_TIMEOUT_S,
    wait: bool = True,
    strict: bool = False,
) -> int:
    """Start `job` (or, with `resume`, the resumption of its existing directory) under a
    detached coordinator, which admits it whole; return once it is ready (0) or has
    failed, having said the notes it sent on the plan of a new job (unless `quiet`)."""
    if job.output is None:
        raise RequestError(
            "--background needs --output DIR: the job directory is how you follow it"
        )
    output = job.output.absolute()
    if resume:
        how: tuple[str, ...] = (
            "--resume-job",
            str(output),
            *(("--strict-bits",) if strict else ()),
        )
    else:
        # A detached coordinator starts in `/` (it must not pin the working directory).
        spec = with_absolute_paths(msgspec.structs.replace(job.request, output=str(output)))
        how = ("--spec-json", encode_request(spec).decode())
    read_end, write_end = os.pipe()
    try:
        with tempfile.TemporaryFile(prefix="aner-coordinator-", suffix=".log") as early_log:
            try:
                child = _spawn((*how, *(() if wait else ("--no-wait",))), write_end, early_log)
            finally:
                os.close(write_end)  # only the child holds it now: its death means EOF
            try:
                line = _read_reply(read_end, ready_timeout_s, quiet)
            except BaseException:  # timeout or Ctrl-C: a coordinator nobody waits for must go
                _kill_session(child)
                raise
            if line != READY:
                return _report_failure(child, line, early_log)
            pid = child.pid
            with warnings.catch_warnings():
                # The coordinator is meant to outlive us: Popen would warn that it still runs.
                warnings.simplefilter("ignore", ResourceWarning)
                del child
    finally:
        os.close(read_end)
    if not quiet:
        where = shlex.quote(str(output))
        started = "resumed" if resume else "started"
        print(f"job {started} in the background: {output} (coordinator pid {pid})")
        queued = _queued(output)
        if queued is not None:
            print(f"  queued: {queued}")
        print(f"  watch:  aner parallel status --job {where} --watch")
        print(f"  cancel: aner parallel cancel --job {where}")
    return EXIT_OK


def _queued(output: os.PathLike[str]) -> str | None:
    """What a job that is QUEUED now waits for (its first status says), else None."""
    from aner_coord.cli.progress import queue_text

    try:
        return queue_text(jobdir.read_status(output))
    except (OSError, AnerError):
        return None  # it is the coordinator's now: `status` will say


def _spawn(how: tuple[str, ...], ready_fd: int, early_log: IO[bytes]) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable,
        "-P",  # no working-directory entry on sys.path to shadow our packages
        *("-m", "aner_coord", "parallel", "coordinate"),
        *how,
        *("--ready-fd", str(ready_fd)),
    ]
    # The child must not answer to a systemd unit that started *us*.
    env = {key: value for key, value in os.environ.items() if key != "NOTIFY_SOCKET"}
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=early_log,
        stderr=early_log,
        pass_fds=(ready_fd,),
        start_new_session=True,
        cwd="/",
        env=env,
    )


class CoordinatorNotReady(AnerError):
    """The detached coordinator did not report readiness in time; it was killed."""

    exit_code = EXIT_FAILED


def _read_reply(fd: int, timeout_s: float, quiet: bool) -> bytes:
    """The child's first line that is not a note, or b"" at end of file; each note before
    it said on stderr (unless `quiet`); CoordinatorNotReady after timeout_s."""
    deadline = time.monotonic() + timeout_s
    data = b""
    while True:
        while b"\n" in data:
            line, data = data.split(b"\n", 1)
            if not line.startswith(NOTE + b" "):
                return line
            if not quiet:
                note = line.removeprefix(NOTE + b" ").decode(errors="replace")
                print(f"aner: note: {note}", file=sys.stderr)
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise CoordinatorNotReady(
                f"the background coordinator was not ready after {timeout_s:g} s and was stopped"
            )
        chunk = os.read(fd, 4096)
        if not chunk:
            return b""
        data += chunk


def _kill_session(child: subprocess.Popen[bytes]) -> None:
    # Its own session, started by us a moment ago: the group is exactly the coordinator and
    # any worker it spawned, never a process found by name.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def _reap(child: subprocess.Popen[bytes]) -> int:
    """The exit status of a child that said it is ending (or died)."""
    try:
        return child.wait(REAP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _kill_session(child)
        return child.wait()


class CoordinatorFailed(AnerError):
    """The detached coordinator failed before it was ready (its own message)."""

    exit_code = EXIT_FAILED


class _Refusal(msgspec.Struct, frozen=True):
    """An ERROR line's JSON."""

    message: str
    template: str | None = None  # a refused request's (`RequestError`), for its arguments
    arguments: tuple[str, ...] = ()


def _report_failure(child: subprocess.Popen[bytes], line: bytes, early_log: IO[bytes]) -> int:
    """Say why the coordinator did not become ready; return the submit's exit status. A
    refused request is raised here as a RequestError, for the caller to render."""
    if line.startswith(ERROR + b" "):
        _reap(child)
        _, code, payload = [*line.split(b" ", 2), b""][:3]
        try:
            refusal = msgspec.json.decode(payload, type=_Refusal)
        except (msgspec.DecodeError, msgspec.ValidationError):
            refusal = _Refusal(f"unreadable readiness line: {payload[:200]!r}")
        if code == str(EXIT_INVALID).encode():
            if refusal.template is not None:
                raise RequestError(refusal.template, *refusal.arguments)
            raise RequestError(refusal.message)
        raise CoordinatorFailed(refusal.message)
    status = _reap(child)
    early_log.seek(0)
    lines = [t for t in early_log.read().decode(errors="replace").splitlines() if t.strip()]
    why = f": {lines[-1].strip()}" if lines else ""
    print(
        f"aner: the background coordinator exited (status {status}) before it was ready{why}",
        file=sys.stderr,
    )
    return EXIT_FAILED


# --------------------------------------------------------------------------- coordinator


def coordinate_command(
    spec_json: str | None,
    resume_job: str | None,
    ready_fd: int,
    *,
    wait: bool = True,
    strict_bits: bool = False,
) -> int:
    """The detached coordinator: `aner parallel coordinate`, started only by `submit()`."""
    try:
        os.set_inheritable(ready_fd, False)  # workers must not keep the submitter waiting
    except OSError:
        raise RequestError(f"--ready-fd {ready_fd} is not an open descriptor") from None
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stderr)
    logging.getLogger("watchfiles").setLevel(logging.WARNING)  # one line per file event
    ready = _Readiness(ready_fd)
    resumption: Resumption | None = None
    try:
        if resume_job is not None:
            from aner_coord.job.resume import prepare_resume

            job, resumption = prepare_resume(resume_job)
            if strict_bits:  # `resume --strict-bits --background`
                job = with_strict_bits(job)
        else:
            assert spec_json is not None
            job = admit(decode_request(spec_json.encode(), fmt="json", source="--spec-json"))
            for note in job.notes:
                ready.note(note)
    except AnerError as exc:
        ready.error(exc)
        return exc.exit_code
    if job.output is None:
        ready.error(RequestError("a background job needs an output directory"))
        return EXIT_INVALID
    log.info(
        "coordinator pid %d: %s job %s, plan %s",
        os.getpid(),
        job.kind,
        msgspec.json.encode(job.admitted.describe).decode(),
        msgspec.json.encode(job.describe_execution()).decode(),  # identities, never endpoints
    )
    try:
        report = _run(job, ready, resumption, wait)
    except AnerError as exc:
        ready.error(exc)
        log.error("%s", exc)
        return exc.exit_code
    except Exception as exc:
        failed = f"the background coordinator failed: {type(exc).__name__}: {exc}"
        ready.error(CoordinatorFailed(bounded_message(failed, None)))
        log.exception("coordinator failed")
        return EXIT_FAILED
    finally:
        ready.close()
    return _log_outcome(report)


class _Readiness:
    """The write end of the readiness pipe: one line, then closed."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def _send(self, line: str) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):  # the submitter was killed: the job goes on
            os.write(self._fd, line.encode() + b"\n")
        self.close()

    def note(self, text: str) -> None:
        """A line before the last: the pipe stays open."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.write(self._fd, NOTE + b" " + " ".join(text.split()).encode() + b"\n")

    def ready(self) -> None:
        self._send(READY.decode())

    def error(self, exc: AnerError) -> None:
        refusal = _Refusal(bounded_message(str(exc), None))
        if isinstance(exc, RequestError) and len(exc.template) <= _MAX_TEMPLATE:
            refusal = msgspec.structs.replace(
                refusal, template=exc.template, arguments=exc.arguments
            )
        self._send(f"{ERROR.decode()} {exc.exit_code} {msgspec.json.encode(refusal).decode()}")

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _run(job: Job, ready: _Readiness, resumption: Resumption | None, wait: bool) -> JobReport:
    from aner_coord.runner import run_sync

    held: list[jobdir.JobDir] = []  # the job directory this run holds (execute gives it)

    def on_ready() -> None:
        adopt_log(held[0], append=resumption is not None)
        log.info("ready: lock held, manifest and first status written")
        ready.ready()

    async def main() -> JobReport:
        cancel = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in CANCEL_SIGNALS:
            loop.add_signal_handler(sig, _cancel_on, sig, cancel)
        try:
            return await execute(
                job,
                observers=[_ProgressLog()],
                cancel=cancel,
                on_ready=on_ready,
                resume=resumption,
                on_directory=held.append,
                wait=wait,
            )
        finally:
            for sig in CANCEL_SIGNALS:
                loop.remove_signal_handler(sig)

    return run_sync(main())


def _cancel_on(sig: signal.Signals, cancel: asyncio.Event) -> None:
    if not cancel.is_set():
        log.info("%s received: cancelling", sig.name)
    cancel.set()


def adopt_log(directory: jobdir.JobDir, *, append: bool = False) -> None:
    """Copy what we logged so far into the job's `coordinator.log` and send stdout and stderr
    there from now on. The log is opened through the descriptor of the job directory that
    this coordinator made (or checked) and holds, never by path: whatever now stands at the
    path (another directory swapped in by someone who can write the parent) gets nothing."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = directory.open_log(append=append)
    offset = 0
    try:
        while chunk := os.pread(2, 65536, offset):
            os.write(fd, chunk)
            offset += len(chunk)
    except OSError:
        pass  # stderr was not our temporary file (run by hand): nothing to carry over
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


class _ProgressLog:
    """Observer logging state changes at once and progress every PROGRESS_LOG_INTERVAL_S."""

    where = "the coordinator's log"  # how its failure is named in the job's error

    def __init__(self) -> None:
        self._state: JobState | None = None
        self._last = 0.0

    def __call__(self, snapshot: StatusSnapshot) -> None:
        now = time.monotonic()
        if snapshot.state != self._state or now - self._last >= PROGRESS_LOG_INTERVAL_S:
            self._state = snapshot.state
            self._last = now
            log.info("%s", describe(snapshot))


def _log_outcome(report: JobReport) -> int:
    if report.state is JobState.COMPLETED:
        log.info("completed: %s", report.result.summary())
        return EXIT_OK
    if report.state is JobState.CANCELLED:
        log.info("cancelled; partial counts are diagnostic only: %s", describe(report.snapshot))
        return EXIT_CANCELLED
    log.error("failed: %s", report.error)
    return EXIT_FAILED
