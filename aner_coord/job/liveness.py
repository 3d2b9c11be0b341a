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
  while its slot says it computes: the bound then follows what the worker says.
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
from dataclasses import dataclass

DEFAULT_SILENCE_S = 30.0
DEFAULT_RESULT_FLOOR_S = 30.0
DEFAULT_HANDSHAKE_S = 120.0  # a first start on a host may compile the kernels
MIN_SILENCE_S = 0.5
MIN_RESULT_FLOOR_S = 0.5
FRAME_GRACE_BYTES = 4 << 20  # bytes per extra silence period an open frame may take
RESULT_FACTOR = 20.0
UNMEASURED_FACTOR = 4.0


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
            bound = result_bound(self.result_floor_s, task_s, measured) + extra
            if now - self.progress > bound:
                return (
                    f"answered pings but returned no result for {bound:.4g} s with "
                    f"{outstanding} task(s) outstanding (its tasks take about {task_s:.3g} s; "
                    "stalled)"
                )
        return None
