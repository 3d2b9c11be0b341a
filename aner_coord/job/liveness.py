"""Liveness: when a worker that is still connected counts as lost, judged from its clocks.

A worker proves that it is alive with complete frames, never with bytes: a corrupted length
can make the frame decoder swallow every later frame, pongs included, so bytes that keep
arriving prove nothing. The process backend keeps one `Liveness` per worker from monotonic
time and asks `verdict()` on every tick of the worker's watchdog (a third of the silence
bound, the pace of its pings); this module reads no clock and does no I/O.

The rules, each with its bound (`silence_s` is ANER_WORKER_SILENCE_S, default 30 s;
`result_floor_s` is ANER_WORKER_RESULT_S, default 30 s; before them, the handshake has
ANER_WORKER_HANDSHAKE_S, default 120 s, to be answered):

- **Silence.** No complete frame for `silence_s` while no frame is open. Pings go out every
  `silence_s / 3` and a worker answers them from its reading thread whatever its slots do,
  so a live worker never falls silent that long.
- **An open frame** must be complete within `frame_bound(silence_s, size)` of its first
  byte (the handshake's Welcome too, see `aner_coord.job.link`): `silence_s` for a small
  frame, plus `silence_s` per `FRAME_GRACE_BYTES` of its announced size (a 64 MiB frame
  gets 17 times the bound: at the default that is a floor of about 140 kB/s, below any
  working link; slower links raise ANER_WORKER_SILENCE_S). A frame whose header is not
  even complete gets the plain `silence_s`.
- **Results.** A worker with tasks outstanding must answer one, or say from a computing
  slot that it is still at one (`Working`, every `heartbeat_interval`: a third of the
  floor), within `result_bound` of its previous answer or word (or of the write that gave
  it tasks when it had none), whatever else it sends: an open frame (which may be the
  answer arriving) adds its own frame bound once, never more, so a worker that keeps a
  frame of pongs open forever is lost all the same. The bound is at least
  `result_floor_s`, and `RESULT_FACTOR` (20) times its measured task time. Until a task has
  been measured, the computation's prior estimate stands in and the floor is
  `UNMEASURED_FACTOR` (4) times larger, since a first task may pay one-off costs (a kept
  session worker loads a kernel its handshake did not warm). Answering pings is not enough:
  a worker that has stopped computing is lost, and the job's retries decide what follows.
  Twenty times: a slot shared with other busy processes runs a few times slower, not twenty.
  A task that grows far beyond those it follows (a loaded machine, uneven work) is no stall
  while its slot says it computes, up to the task's deadline (below).
- **Deadlines.** Every task a slot says it computes has a deadline on the coordinator's
  clock: `Deadline.of` gives it, `--task-timeout` where the user set one, else
  `max(floor, DEADLINE_FACTOR (20) x the slowest compute time per item of the job's tasks
  measured so far x the task's items)`, the floor being `result_floor_s` (four times that
  while nothing is measured, with the computation's prior estimate for the task instead).
  A computation whose tasks' cost does not follow their items (a search's fits,
  `UnevenTasks`) has the ceiling, MAX_BOUND_S (a day), unless the user sets one.
  The task began computing when its first `Working` with time computed says (now less its
  `elapsed_s`); later frames move nothing, so `Working` frames extend nothing past the
  deadline, and each must count up (its `elapsed_s + waiting_s` greater than the last's,
  neither smaller): a worker whose frames stand still or count down is lost at once. Time a
  slot waits for a granted slot (`waiting_s`) is not computing and has no deadline here:
  the grant's holders are tasks of other coordinators, each bounded by its own.
- **Writing.** A write to the worker (tasks, parameters, pings) must complete within the
  frame bound of its size: a worker that stopped reading its input is lost. While a write is
  in progress only that bound applies, and when it completes the other clocks are moved on
  by its duration: a worker reading a large frame of ours answers the ping behind it only
  after it, and the reader, which may be the writer, parses nothing meanwhile. A write that
  failed (its input is closed) is reported at the next tick unless reading its output has
  told what happened first (its end of file names the loss the same way whichever side
  notices first).

Every verdict is one line that says what the worker did, for `WorkerLost`'s detail.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field

DEFAULT_SILENCE_S = 30.0
DEFAULT_RESULT_FLOOR_S = 30.0
DEFAULT_HANDSHAKE_S = 120.0  # a first start on a host may compile the kernels
MIN_SILENCE_S = 0.5
MIN_RESULT_FLOOR_S = 0.5
FRAME_GRACE_BYTES = 4 << 20  # bytes per extra silence period an open frame may take
RESULT_FACTOR = 20.0
UNMEASURED_FACTOR = 4.0
DEADLINE_FACTOR = RESULT_FACTOR  # a task may take this many times the slowest measured


MAX_BOUND_S = 86_400.0  # a day: beyond it a bound means "never", which none may


def _seconds_from_env(name: str, default: float, minimum: float) -> float:
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    if not math.isfinite(value):
        return default
    return min(MAX_BOUND_S, max(minimum, value))


def silence_timeout() -> float:
    """ANER_WORKER_SILENCE_S: how long a worker may send no complete frame (lower for
    tests, higher for very slow links); at least MIN_SILENCE_S."""
    return _seconds_from_env("ANER_WORKER_SILENCE_S", DEFAULT_SILENCE_S, MIN_SILENCE_S)


def result_floor() -> float:
    """ANER_WORKER_RESULT_S: the least time a worker with tasks may go without answering
    one (see `result_bound`); at least MIN_RESULT_FLOOR_S."""
    return _seconds_from_env("ANER_WORKER_RESULT_S", DEFAULT_RESULT_FLOOR_S, MIN_RESULT_FLOOR_S)


def handshake_timeout() -> float:
    """ANER_WORKER_HANDSHAKE_S: how long a started worker may take to answer the Hello
    (and each step of staging); a first start on a host compiles the kernels."""
    return _seconds_from_env("ANER_WORKER_HANDSHAKE_S", DEFAULT_HANDSHAKE_S, MIN_SILENCE_S)


def heartbeat_interval(result_floor_s: float) -> float:
    """How often a computing slot is asked to say so: three times within the shortest
    result bound, as pings are within the silence bound."""
    return result_floor_s / 3


def frame_bound(silence_s: float, size: int | None) -> float:
    """Seconds a frame (or a write) of `size` bytes may take; None: size not yet known."""
    return silence_s * (1.0 + (size or 0) / FRAME_GRACE_BYTES)


def frame_stalled(received: int, size: int | None, bound: float) -> str:
    """The verdict on a frame still incomplete after its bound."""
    of = f"of a {size:,}-byte frame" if size else "of a frame"
    return (
        f"sent {received:,} bytes {of} and not the rest within {bound:.4g} s "
        "(stalled mid-frame, or a corrupted length)"
    )


def result_bound(floor_s: float, task_s: float, measured: bool) -> float:
    """Seconds a worker with tasks outstanding may go without answering one."""
    floor = floor_s if measured else floor_s * UNMEASURED_FACTOR
    return max(floor, RESULT_FACTOR * task_s)


@dataclass(frozen=True)
class Deadline:
    """How long one task may compute: `timeout_s` where the user gave one (`--task-timeout`),
    else a multiple of its estimated cost (see the module docstring)."""

    timeout_s: float | None
    floor_s: float
    uneven: bool = False  # tasks whose cost does not follow their items: the ceiling

    def of(self, count: int, per_item_s: float | None, prior_task_s: float) -> float:
        """The deadline of a task of `count` items, given the slowest compute seconds per
        item measured so far (None: none yet, so `prior_task_s` estimates it)."""
        if self.timeout_s is not None:
            return self.timeout_s
        if self.uneven:
            return MAX_BOUND_S
        if per_item_s is None:
            return max(self.floor_s * UNMEASURED_FACTOR, DEADLINE_FACTOR * prior_task_s)
        return min(MAX_BOUND_S, max(self.floor_s, DEADLINE_FACTOR * per_item_s * count))

    @property
    def rule(self) -> str:
        if self.timeout_s is not None:
            return "--task-timeout"
        if self.uneven:
            return "a day: this computation's tasks differ in cost; set --task-timeout"
        return (
            f"{DEADLINE_FACTOR:g} times the slowest measured task's time per item, at least "
            f"{self.floor_s:g} s; set --task-timeout where tasks grow faster"
        )


@dataclass
class TaskClock:
    """A task that a slot of the worker says it works on: its items, what its last
    `Working` said (seconds computing, seconds waiting for a granted slot), and when it began
    computing on the coordinator's clock (None while it has computed nothing)."""

    count: int
    elapsed_s: float
    waiting_s: float
    began: float | None


@dataclass
class Liveness:
    """One worker's clocks (monotonic seconds), kept by the backend, judged by `verdict`."""

    silence_s: float
    result_floor_s: float
    heard: float  # the last complete frame (or when watching began)
    # the last answer or word from a computing slot, or the write that gave an idle worker tasks
    progress: float = 0.0
    frame_opened: float | None = None  # first byte of the frame in progress
    frame_bytes: int = 0
    frame_size: int | None = None  # what its header announced, once complete
    writing_since: float | None = None
    writing_bytes: int = 0
    write_failed: str | None = None
    # --task-timeout: no result or word may be further apart than it (a slot says `Working`
    # three times within it, see `heartbeat_interval`)
    task_timeout_s: float | None = None
    computing: dict[int, TaskClock] = field(default_factory=dict)  # task id -> its clock

    def working(
        self, now: float, task_id: int, count: int, elapsed_s: float, waiting_s: float
    ) -> str | None:
        """A slot says it works on task `task_id`: why that makes the worker lost (its
        frames for the task stand still or count down), or None."""
        clock = self.computing.get(task_id)
        if clock is not None:
            said, total = clock.elapsed_s + clock.waiting_s, elapsed_s + waiting_s
            if total <= said or elapsed_s < clock.elapsed_s or waiting_s < clock.waiting_s:
                return (
                    f"said it had been at task {task_id} for {total:.4g} s after saying "
                    f"{said:.4g} s (its Working frames must count up)"
                )
            clock.elapsed_s, clock.waiting_s = elapsed_s, waiting_s
        else:
            clock = self.computing[task_id] = TaskClock(count, elapsed_s, waiting_s, None)
        if clock.began is None and elapsed_s > 0:
            clock.began = now - elapsed_s
        self.progress = now
        return None

    def answered(self, task_id: int) -> None:
        self.computing.pop(task_id, None)

    def overdue(self, now: float, deadline: Callable[[int], float], rule: str) -> str | None:
        """Why the worker is lost now because a task of it is past its deadline, or None."""
        for task_id, clock in self.computing.items():
            if clock.began is None:
                continue
            bound = deadline(clock.count)
            if now - clock.began > bound:
                return (
                    f"computed task {task_id} ({clock.count:,} items) for "
                    f"{now - clock.began:.4g} s, past its deadline of {bound:.4g} s ({rule})"
                )
        return None

    def read(self, now: float, frames: int, pending: int, announced: int | None) -> None:
        """After each read: `frames` completed by it, and the frame left in progress
        (`pending` bytes of it, `announced` its size or None)."""
        if frames:
            self.heard = now
        if not pending:
            self.frame_opened = None
        elif frames or self.frame_opened is None:
            self.frame_opened = now  # a frame that began in this read
        self.frame_bytes, self.frame_size = pending, announced

    def writing(self, now: float, size: int) -> None:
        self.writing_since, self.writing_bytes = now, size

    def written(self, now: float) -> None:
        """The write in progress completed: the other clocks did not run meanwhile."""
        began = self.writing_since
        if began is None:
            return
        self.writing_since = None
        paused = now - began
        self.heard = min(now, self.heard + paused)
        self.progress = min(now, self.progress + paused)
        if self.frame_opened is not None:
            self.frame_opened = min(now, self.frame_opened + paused)

    def verdict(self, now: float, outstanding: int, task_s: float, measured: bool) -> str | None:
        """Why the worker counts as lost now (one line), or None while it is alive."""
        if self.write_failed is not None:
            return f"its input cannot be written to: {self.write_failed}"
        if self.writing_since is not None:
            bound = frame_bound(self.silence_s, self.writing_bytes)
            if now - self.writing_since > bound:
                return (
                    f"did not take the {self.writing_bytes:,} bytes written to it within "
                    f"{bound:.4g} s (it stopped reading its input)"
                )
            return None  # a write in progress: its own bound applies, not the others
        extra = 0.0  # an open frame may be the answer: its own bound on top, once
        if self.frame_opened is not None:
            extra = frame_bound(self.silence_s, self.frame_size)
            if now - self.frame_opened > extra:
                return frame_stalled(self.frame_bytes, self.frame_size, extra)
        elif now - self.heard > self.silence_s:
            return (
                f"sent nothing for {self.silence_s:g} s, not even an answer to a ping "
                "(stalled, or its link is cut)"
            )
        if outstanding:
            bound = result_bound(self.result_floor_s, task_s, measured)
            if self.task_timeout_s is not None:
                bound = min(bound, self.task_timeout_s)
            bound += extra
            if now - self.progress > bound:
                return (
                    f"answered pings but returned no result for {bound:.4g} s with "
                    f"{outstanding} task(s) outstanding (its tasks take about {task_s:.3g} s; "
                    "stalled)"
                )
        return None
