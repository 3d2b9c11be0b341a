"""`aner parallel status` and `aner parallel cancel`: observe a job directory from outside.

A monitor only reads: `status.json` for the last snapshot the coordinator confirmed, and the
lock for whether that coordinator still lives. The observed state is the recorded one, or
COORDINATOR_OFFLINE when the record is not terminal and nobody holds the lock (docs/contracts.md,
section 7). The lock is probed *before* the status is read: a coordinator that ends between the two
has written its terminal status first, so an ending job is never mistaken for a dead one.
A recorded terminal state is final only once the coordinator has let go of the lock, because
it writes `result.json` after its last status.

Everything is read through one descriptor of the job directory (`jobdir.JobDir`), and only
regular files within their size limits: a `status.json` that is a link, a FIFO, a directory,
too large, unreadable or not a status ends the monitor with one line and exit 2
(`jobdir.JobFileError`); a broken `result.json` of a COMPLETED job is a note beside the
status; a lock file that is not a regular file is nobody's lock. A directory deleted while a
monitor looks at it ends the monitor with one line and exit 3 (JobDirGone): the job's
record is gone and its coordinator fails the same way. A reader
that closes the pipe early (`| head -1`) ends `status` quietly with exit 0.

`cancel` writes one file, `cancel-request`, which the coordinator watches; it never signals
a process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from aner_coord import jobdir
from aner_coord.cli.progress import (
    describe,
    eta_text,
    pacing_text,
    position_text,
    queue_text,
    rate_text,
    work_text,
)
from aner_coord.errors import (
    EXIT_FAILED,
    EXIT_OFFLINE,
    EXIT_OK,
    AnerError,
    RequestError,
    bounded_message,
)
from aner_coord.hosts import hosts_text
from aner_coord.jobdir.status import JobState, StatusSnapshot

OFFLINE = JobState.COORDINATOR_OFFLINE
EXIT_INTERRUPTED = 130
SETTLE_S = 2.0  # how long a one-shot look waits for an ending coordinator to let go
CANCEL_WAIT_S = 60.0
# `status --watch`: the busy shares over the last BUSY_WINDOW_S seconds of the timeline,
# from its last BUSY_TAIL_BYTES (some 2,000 task lines: enough for seconds of any job).
BUSY_WINDOW_S = 5.0
BUSY_TAIL_BYTES = 512 << 10
FOREIGN_RECHECK_S = 0.1  # far longer than a coordinator takes to write its pid in the lock


class CoordinatorOffline(AnerError):
    """The coordinator died before it wrote any status: there is no snapshot to show."""

    exit_code = EXIT_OFFLINE


@dataclass(frozen=True)
class Observation:
    snapshot: StatusSnapshot
    state: JobState  # observed: the recorded state, or COORDINATOR_OFFLINE
    lock_held: bool
    age_s: float  # since the snapshot was written
    note: str | None = None
    result: dict[str, Any] | None = None  # result.json, for a COMPLETED job
    broken_result: bool = False  # a COMPLETED job's result.json cannot be read as one

    @property
    def final(self) -> bool:
        """Nothing will change any more: ended and let go, or no coordinator at all (not
        even one whose lock another process holds)."""
        return self.state is OFFLINE or (not self.lock_held and self.snapshot.terminal)

    @property
    def exit_code(self) -> int:
        return self.state.exit_code

    def to_json(self, *, indent: int = 2) -> bytes:
        """The snapshot as `status.json` has it, plus what the monitor observed (and the
        result of a COMPLETED job). An offline job has no ETA: nothing is working on it."""
        data = msgspec.to_builtins(self.snapshot)
        if self.state is OFFLINE:
            data["eta_s"] = None
        data.update(
            observed_state=self.state,
            snapshot_age_s=round(self.age_s, 3),
            lock_held=self.lock_held,
            note=self.note,
            result=self.result,
        )
        encoded = msgspec.json.encode(data)
        return msgspec.json.format(encoded, indent=indent) if indent else encoded


# --------------------------------------------------------------------------- observing


class JobDirGone(AnerError):
    """The job directory was deleted while we looked at it: its status and any result are
    gone, so the job cannot be reported as anything but failed (exit 3, as the coordinator
    itself exits when its directory disappears under it)."""

    exit_code = EXIT_FAILED


def open_job_dir(job: Path) -> jobdir.JobDir:
    """Open a job directory to observe it; refuse (exit 2) anything that is not a readable
    job directory, saying what it is."""
    try:
        directory = jobdir.JobDir.open(job)
    except FileNotFoundError:
        raise RequestError(f"no job directory at {job}: check the --job path") from None
    except NotADirectoryError:
        if os.path.islink(job):
            raise RequestError(f"{job} is a symbolic link: give the job directory itself") from None
        raise RequestError(f"{job} is not a directory: --job takes a job directory") from None
    except PermissionError:
        raise RequestError(f"cannot read job directory {job}: permission denied") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RequestError(f"{job} is a symbolic link: give the job directory itself") from None
        raise RequestError(f"cannot open job directory {job}: {exc.strerror or exc}") from None
    try:
        is_job = directory.exists(jobdir.MANIFEST)
    except PermissionError:
        directory.close()
        raise RequestError(f"cannot read job directory {job}: permission denied") from None
    if not is_job:
        directory.close()
        raise RequestError(f"{job} is not an aner job directory (it has no {jobdir.MANIFEST})")
    return directory


def observe(job: jobdir.JobDir | Path, *, settle_s: float = 0.0) -> Observation:
    """One look at the job. With settle_s, wait that long for an ending coordinator to
    release its lock (and a starting one to write its first status)."""
    if isinstance(job, jobdir.JobDir):
        return _observe(job, settle_s)
    with jobdir.JobDir.open(job) as directory:
        return _observe(directory, settle_s)


def _gone(directory: jobdir.JobDir) -> JobDirGone:
    return JobDirGone(f"job directory {directory.path} was deleted: there is nothing to report")


def _observe(directory: jobdir.JobDir, settle_s: float) -> Observation:
    job = directory.path
    deadline = time.monotonic() + settle_s
    while True:
        if directory.gone():
            raise _gone(directory)
        held = jobdir.lock_is_held(directory)
        try:
            snapshot = jobdir.read_status(directory)
        except FileNotFoundError:
            if directory.gone():
                raise _gone(directory) from None
            if not held:
                raise CoordinatorOffline(
                    f"job {job}: {OFFLINE.value}: its coordinator ended before writing any status"
                ) from None
            if time.monotonic() < deadline:
                time.sleep(0.05)
                continue
            raise RequestError(f"job {job} is starting: no status yet, try again") from None
        if held and snapshot.terminal and time.monotonic() < deadline:
            time.sleep(0.05)
            continue
        return _judge(directory, snapshot, held)


def _judge(directory: jobdir.JobDir, snapshot: StatusSnapshot, held: bool) -> Observation:
    age = max(0.0, time.time() - snapshot.updated_at)
    if held and not snapshot.terminal:
        foreign = _foreign_holder(directory)
        if foreign is not None:
            return Observation(snapshot, OFFLINE, held, age, foreign)
    if held or (snapshot.terminal and snapshot.state is not JobState.COMPLETED):
        return Observation(snapshot, snapshot.state, held, age)
    if snapshot.terminal:
        try:
            result = jobdir.read_json(directory, jobdir.RESULT)
        except FileNotFoundError:
            # COMPLETED is only true with its result: the coordinator died in between.
            note = f"status says COMPLETED but the coordinator ended before writing {jobdir.RESULT}"
            return Observation(snapshot, OFFLINE, held, age, note)
        except jobdir.JobFileError as exc:
            return Observation(snapshot, snapshot.state, held, age, str(exc), broken_result=True)
        return Observation(
            snapshot, snapshot.state, held, age, result=result if isinstance(result, dict) else None
        )
    note = "no process holds the job's lock: the coordinator is gone"
    return Observation(snapshot, OFFLINE, held, age, note)


def _foreign_holder(directory: jobdir.JobDir) -> str | None:
    """`jobdir.foreign_holder`, seen twice: a coordinator taking the lock writes its pid
    into the file just after, so one look may catch the previous coordinator's."""
    if jobdir.foreign_holder(directory) is None:
        return None
    time.sleep(FOREIGN_RECHECK_S)
    return jobdir.foreign_holder(directory)


# --------------------------------------------------------------------------- rendering


def elapsed_text(snap: StatusSnapshot) -> str:
    """Both clocks, labelled: since the job was submitted (queueing included) and since its
    coordinator started it, as of the snapshot. A queued job has not started."""
    submitted = snap.submitted_at if snap.submitted_at is not None else snap.created_at
    since_submission = max(0.0, snap.updated_at - submitted)
    if snap.state is JobState.QUEUED or snap.phase == "ended while queued":
        return f"{since_submission:.1f} s since submission (not started)"
    return f"{since_submission:.1f} s since submission, {snap.elapsed_s:.1f} s since start"


def render_lines(job: Path, obs: Observation) -> list[str]:
    """The human view: state, work done of planned, rate, ETA, position, workers, error."""
    snap = obs.snapshot
    unit = snap.unit
    if obs.state is OFFLINE:
        state = (
            f"{OFFLINE.value} (last confirmed snapshot: {snap.state.value}, seq {snap.seq}, "
            f"{obs.age_s:.1f} s old)"
        )
    else:
        state = f"{obs.state.value} (seq {snap.seq}, updated {obs.age_s:.1f} s ago)"
    lines = [
        f"job       {job}",
        f"state     {state}",
        f"work      {work_text(snap)}",
        f"rate      {rate_text(snap)}",
    ]
    if obs.state is not OFFLINE:  # nothing is working on an offline job: no ETA
        eta = eta_text(snap.eta_s, upper_bound=snap.work_upper_bound)
        sooner = " (early stopping may end it sooner)" if snap.work_upper_bound else ""
        lines.append(f"eta       {eta}{sooner if snap.eta_s is not None else ''}")
    lines.append(f"elapsed   {elapsed_text(snap)}")
    position = position_text(snap)
    if position is not None:
        lines.append(f"training  {position}")
    if snap.passes > 1:
        most = "at most " if snap.work_upper_bound else ""
        done = snap.state is JobState.COMPLETED  # early stopping may have ended it sooner
        passes = snap.pass_index if done else snap.passes
        lines.append(f"pass      {snap.pass_index} of {most}{passes} ({snap.phase})")
        if snap.committed_steps is not None:
            lines.append(f"steps     {snap.committed_steps} committed")
    plan = [snap.plan] if snap.plan is not None else []  # how local workers run, and why
    lines.extend(f"plan      {note}" for note in [*plan, *snap.notes])
    queued = queue_text(snap)
    if queued is not None:
        lines.append(f"queued    {queued}")
    for i, worker in enumerate(snap.workers):
        slots = "slot" if worker.slots == 1 else "slots"
        lines.append(
            f"{'workers' if i == 0 else '':<9} {worker.identity}: {worker.slots} {slots}, "
            f"{worker.items:,} {unit}, {worker.chunks:,} chunks{pacing_text(worker)}"
        )
    if len(snap.workers) > 1 and any(w.host is not None for w in snap.workers):
        # Workers that share a host share its CPUs, whatever their names (two `local`
        # records of one cluster file, or threads).
        lines.append(
            f"hosts     {hosts_text({w.identity: w.host for w in snap.workers}, 'worker')}"
        )
    lines.extend(_progress_lines(snap))
    for loss in snap.losses:
        lines.append(
            f"lost      {loss.identity} during {loss.phase} ({loss.during}), the job went on "
            f"without it: {bounded_message(loss.detail, None)}"
        )
    lines.extend(_resume_lines(snap))
    if snap.error:
        # status.json's is bounded already; one written by something else is cut here too.
        lines.append(f"error     {bounded_message(snap.error, None)}")
    if obs.note:
        lines.append(f"note      {obs.note}")
    if obs.state is OFFLINE or obs.state is JobState.FAILED:
        lines.append(f"          continue it from its ledger: aner parallel resume --job {job}")
    if obs.state is JobState.COMPLETED:
        if obs.result is not None:
            lines.extend(result_lines(obs.result))
        lines.append(f"result    {job / jobdir.RESULT}")
    return lines


def _resume_lines(snap: StatusSnapshot) -> list[str]:
    """What the last resume recovered, and what a resume would recover from a checkpoint."""
    lines: list[str] = []
    if snap.resumes:
        times = "once" if snap.resumes == 1 else f"{snap.resumes} times"
        what = f"{snap.recovered:,} {snap.unit} from the ledger"
        if snap.steps_recovered:
            what = f"{snap.steps_recovered:,} committed steps from its checkpoint"
        lines.append(f"resumed   {times}; the last resume recovered {what}")
    if snap.checkpointed_steps is not None and snap.state is not JobState.COMPLETED:
        lines.append(
            f"resumable from its checkpoint of {snap.checkpointed_steps:,} committed steps"
        )
    return lines


def _progress_lines(snap: StatusSnapshot) -> list[str]:
    """The computation's own account of a running job (a search's fits by worker)."""
    if snap.terminal or snap.detail is None:
        return []
    from aner_coord.computations import progress_lines

    try:
        return progress_lines(snap.kind, snap.detail, {w.identity: w.slots for w in snap.workers})
    except (KeyError, TypeError, ValueError) as exc:
        return [f"note      {jobdir.STATUS} detail lacks {exc}: this aner cannot show it"]


def result_lines(result: dict[str, Any]) -> list[str]:
    """The scientific result as `result.json` has it: the estimate and hits of a Monte Carlo
    run, the final loss and fit accuracy of the regression fixture: whatever the job's
    computation shows of it."""
    from aner_coord.computations import summarize

    try:
        return summarize(str(result.get("computation")), result) or []
    except (KeyError, TypeError, ValueError) as exc:
        return [f"note      {jobdir.RESULT} lacks {exc}: this aner cannot show its result"]


def render_line(obs: Observation) -> str:
    """One line per change, for a monitor whose stdout is not a terminal."""
    if obs.state is OFFLINE:
        quiet = msgspec.structs.replace(obs.snapshot, eta_s=None)
        age = f"{obs.age_s:.1f} s old"
        return f"{OFFLINE.value}: last confirmed snapshot {age}: {describe(quiet)}"
    line = describe(obs.snapshot)
    if obs.state is JobState.COMPLETED and obs.result is not None:
        shown = [text.split(None, 1)[1] for text in result_lines(obs.result)]
        if shown:
            line += ": " + "; ".join(shown)
    return line


# --------------------------------------------------------------------------- status


def add_status_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--job", required=True, metavar="DIR", help="the job directory to report")
    p.add_argument(
        "--json", action="store_true", help="the snapshot as JSON, as status.json holds it"
    )
    p.add_argument("--watch", action="store_true", help="follow the job until it ends")


def add_cancel_arguments(p: argparse.ArgumentParser) -> None:
    from aner_coord.cli.arguments import add_json_argument

    p.add_argument("--job", required=True, metavar="DIR", help="the job directory to cancel")
    add_json_argument(p)


def status_command(args: argparse.Namespace) -> int:
    return status(args.job, as_json=args.json, watch=args.watch)


def cancel_command(args: argparse.Namespace) -> int:
    return cancel(args.job, as_json=args.json)


def status(job: str, *, as_json: bool, watch: bool) -> int:
    """`aner parallel status`. Output cut short by its reader (`| head -1`) ends quietly."""
    try:
        return _status(Path(job), as_json=as_json, watch=watch)
    except BrokenPipeError:
        _stdout_to_devnull()
        return EXIT_OK


def _stdout_to_devnull() -> None:
    """Python's recipe for a closed pipe: later writes, and the flush at exit, go nowhere
    instead of raising again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _status(path: Path, *, as_json: bool, watch: bool) -> int:
    with open_job_dir(path) as directory:
        if watch:
            return _watch(directory, as_json=as_json)
        obs = observe(directory, settle_s=SETTLE_S)
        if as_json:
            sys.stdout.buffer.write(obs.to_json() + b"\n")
        else:
            sys.stdout.write("\n".join(render_lines(path, obs)) + "\n")
        sys.stdout.flush()
        if obs.broken_result:  # the state is the recorded one; its result is not there
            print(f"aner: job {path} is {obs.state.value} but {obs.note}", file=sys.stderr)
        return obs.exit_code


def _watch(directory: jobdir.JobDir, *, as_json: bool) -> int:
    from aner_coord.runner import run_sync

    if as_json or not sys.stdout.isatty():
        obs = run_sync(follow(directory, _JsonLines() if as_json else _PlainLines(directory)))
    else:
        with _LiveView(directory) as view:
            obs = run_sync(follow(directory, view))
    if obs is None:
        print("aner: stopped watching; the job itself goes on", file=sys.stderr)
        return EXIT_INTERRUPTED
    return obs.exit_code


async def follow(
    job: jobdir.JobDir,
    show: Callable[[Observation, bool], None],
    *,
    timeout_s: float | None = None,
) -> Observation | None:
    """Observe the job on every change of its files, and at least every second, until it is
    final (returned), Ctrl-C (None) or timeout_s (the last observation). JobDirGone if
    the directory is deleted meanwhile."""
    stop = asyncio.Event()
    interrupted = False

    def on_sigint() -> None:
        nonlocal interrupted
        interrupted = True
        stop.set()

    names = {jobdir.STATUS, jobdir.LOCK, jobdir.RESULT}
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, on_sigint)
    timer = loop.call_later(timeout_s, stop.set) if timeout_s is not None else None
    try:
        obs = observe(job)
        last_key: tuple[int, JobState] | None = None
        async with contextlib.aclosing(jobdir.watch_job_dir(job, names, stop)) as ticks:
            while True:
                key = (obs.snapshot.seq, obs.state)
                show(obs, key != last_key)
                last_key = key
                if obs.final or stop.is_set():
                    break
                await anext(ticks, None)  # the next change or tick (None once stopped)
                if interrupted:
                    break
                obs = observe(job)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        if timer is not None:
            timer.cancel()
    return None if interrupted else obs


def busy_text(job: jobdir.JobDir) -> str | None:
    """Each worker's share of its slots spent computing over the last BUSY_WINDOW_S seconds
    of the job's timeline (its tail only), or None before the first task."""
    from aner_coord.jobdir.timeline import read_tail
    from aner_coord.timeline.analysis import recent_busy

    shares = recent_busy(read_tail(job, BUSY_TAIL_BYTES), BUSY_WINDOW_S)
    if not shares:
        return None
    parts = ", ".join(f"{name} {100 * share:.0f}%" for name, share in shares.items())
    return f"{parts} (computing, last {BUSY_WINDOW_S:g} s of the timeline)"


class _PlainLines:
    """One line per change, and never the same line twice in a row: a log (a Slurm job's,
    say) keeps what changed, not every rewrite of a STARTING status. A running job's line
    ends with its workers' recent busy shares (`busy_text`)."""

    def __init__(self, job: jobdir.JobDir) -> None:
        self._job = job
        self._last: str | None = None

    def __call__(self, obs: Observation, changed: bool) -> None:
        line = render_line(obs)
        if changed and line != self._last:
            self._last = line
            busy = busy_text(self._job) if obs.state is JobState.RUNNING else None
            print(line if busy is None else f"{line}; busy {busy}", flush=True)


class _JsonLines:
    def __call__(self, obs: Observation, changed: bool) -> None:
        if changed:
            sys.stdout.buffer.write(obs.to_json(indent=0) + b"\n")
            sys.stdout.flush()


class _LiveView:
    """Redraws the human view in place on a terminal (rich), every change and every tick."""

    def __init__(self, job: jobdir.JobDir) -> None:
        from rich.console import Console
        from rich.live import Live

        self._job = job
        self._live = Live(console=Console(), auto_refresh=False, transient=False)

    def __enter__(self) -> _LiveView:
        self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.stop()

    def __call__(self, obs: Observation, changed: bool) -> None:
        from rich.text import Text

        lines = render_lines(self._job.path, obs)
        busy = busy_text(self._job) if obs.state is JobState.RUNNING else None
        if busy is not None:
            lines.append(f"busy      {busy}")
        self._live.update(Text("\n".join(lines)), refresh=True)


# --------------------------------------------------------------------------- cancel


def cancel(job: str, *, as_json: bool = False) -> int:
    """`aner parallel cancel`; with `as_json` its outcome is one `aner-job-outcome/1`
    document on stdout (`aner_coord.cli.outcome`) in place of its lines."""
    path = Path(job)
    with open_job_dir(path) as directory:
        owner = os.fstat(directory.fileno()).st_uid
        if owner != os.geteuid():
            raise RequestError(
                f"job {path} belongs to another user (uid {owner}): only its owner can cancel it"
            )
        state, status, line, to_stderr = _cancel(directory, quiet=as_json)
    if as_json:
        from aner_coord.cli import outcome

        reason = line.removeprefix("aner: ")
        outcome.emit(outcome.document("cancel", path, state, status, reason))
    else:
        print(line, file=sys.stderr if to_stderr else sys.stdout)
    return status


def _cancel(directory: jobdir.JobDir, *, quiet: bool) -> tuple[str, int, str, bool]:
    """Ask the job to stop and wait for it: its state, the exit status, the final line and
    whether that line is an error (stderr). `quiet`: no line while waiting."""
    from aner_coord.runner import run_sync

    path = directory.path
    obs = observe(directory, settle_s=SETTLE_S)
    if obs.state is OFFLINE:
        line = (
            f"aner: job {path} is {OFFLINE.value} (last confirmed state "
            f"{obs.snapshot.state.value}, "
            f"{obs.age_s:.1f} s ago): there is no coordinator to cancel"
            + (f"; {obs.note}" if obs.lock_held and obs.note else "")
        )
        return obs.state.value, obs.exit_code, line, True
    if obs.snapshot.terminal:
        line = f"job {path} has already ended: {obs.state.value}; nothing to cancel"
        return obs.state.value, obs.exit_code, line, False
    request = f"cancel requested by uid {os.getuid()} at {time.time():.3f}\n"
    try:
        directory.write_bytes(jobdir.CANCEL_REQUEST, request.encode())
    except jobdir.JobDirError as exc:  # nothing was asked of the job: the user's to fix
        raise RequestError(f"cannot request the cancel: {exc}") from None
    if not quiet:
        print(f"cancel requested; waiting up to {CANCEL_WAIT_S:g} s for job {path} to stop")
    end = run_sync(follow(directory, lambda _obs, _changed: None, timeout_s=CANCEL_WAIT_S))
    if end is None:
        line = "aner: stopped waiting; the cancel request stands"
        return obs.state.value, EXIT_INTERRUPTED, line, True
    line, to_stderr = _report_cancel(path, end)
    return end.state.value, end.exit_code, line, to_stderr


def _report_cancel(job: Path, obs: Observation) -> tuple[str, bool]:
    """The line that ends a cancel, and whether it is an error."""
    snap = obs.snapshot
    if obs.state is JobState.CANCELLED:
        return f"job {job} CANCELLED; partial counts are diagnostic only: {describe(snap)}", False
    if obs.state is JobState.COMPLETED:
        return f"job {job} COMPLETED before the cancel took effect: {job / jobdir.RESULT}", False
    if obs.state is JobState.FAILED:
        return f"aner: job {job} FAILED: {bounded_message(snap.error or '', None)}", True
    if obs.state is OFFLINE:
        return f"aner: job {job} is {OFFLINE.value}: its coordinator is gone", True
    return (
        f"aner: job {job} is still {obs.state.value} after {CANCEL_WAIT_S:g} s; the request "
        f"stands: follow it with `aner parallel status --job {job} --watch`"
    ), True
