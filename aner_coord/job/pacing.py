"""Latency-adaptive windows: how many tasks to keep in flight on one worker, and when to write.

A worker with `slots` slots finishes a task per slot every `task_s` seconds. The task that
replaces a finished one reaches the worker a round trip `rtt_s` after the finished one's
result left it (the link both ways, framing, both event loops). So that no slot waits, the
coordinator must keep in flight per slot the running task plus the tasks the slot finishes
during one round trip: `1 + rtt_s / task_s`.

The process backend also batches its writes: it buffers tasks and writes them together once
its tasks on the wire fall to the low-water mark. The low-water mark therefore covers the
round trip plus QUEUE_S/2 of work per slot (jitter, a held result), and the window leaves
another QUEUE_S/2 per slot above it, so that one write carries several tasks. With no round
trip this is the fixed rule that came before: about QUEUE_S of work per slot, written in halves.

Bounds: at least 2 tasks per slot (one running, one waiting), at most what the worker accepts
(`slots * MAX_QUEUED_PER_SLOT`, which its connection enforces); the low-water mark lies between
`slots` and the window.

Estimates, fed by the backend: round trips from pings (one right after the handshake, then
the keep-alive pings) and from every task's stamps (`receipt - dispatch - busy_s - queued_s`,
its time on the link); task times from `busy_s`. Each is an exponentially weighted moving
average with weight 1/8 (as TCP smooths its round trip), seeded by its first sample; until a
task has been measured the computation's prior estimate stands in. A sample that is not a
finite number is ignored (the connection already refuses such timing fields from a worker;
this keeps the arithmetic total whatever feeds it). The window moves (up or
down) only when the new size differs from the current one by more than an eighth, so that
noise does not churn it. Pure: nothing here reads a clock or does I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

QUEUE_S = 0.05  # seconds of queued work per slot beyond the round trip, window and low water
WEIGHT = 1 / 8  # of a new sample in the moving averages
HYSTERESIS = 1 / 8  # the window changes when the new size differs by more than this share
MIN_TASK_S = 1e-6  # below this a task time is noise; it would ask for an unbounded window


@dataclass(frozen=True)
class Window:
    """Tasks a worker may hold (`size`) and how low its tasks on the wire fall before the
    buffered ones are written (`low_water`)."""

    size: int
    low_water: int


def size_window(slots: int, rtt_s: float, task_s: float, limit: int) -> Window:
    """The window for `slots` slots at round trip `rtt_s` and task time `task_s`, within
    `limit` (what the worker accepts)."""
    per_task = max(task_s, MIN_TASK_S)
    low = slots * (1.0 + (max(rtt_s, 0.0) + QUEUE_S / 2) / per_task)
    high = slots * (1.0 + (max(rtt_s, 0.0) + QUEUE_S) / per_task)
    size = max(2 * slots, min(limit, math.ceil(high)))
    size = min(size, max(limit, slots + 1))  # a limit below 2 per slot still wins
    low_water = max(slots, min(size - 1, math.ceil(low)))
    return Window(size, low_water)


def _average(current: float | None, sample: float) -> float:
    return sample if current is None else current + WEIGHT * (sample - current)


class Pacer:
    """One worker's estimates and the window they give.

    `round_trip()` and `answered()` take measurements and return the new `Window` when it
    changed enough to apply, else None; `window` is always the one in force."""

    def __init__(self, slots: int, prior_task_s: float, limit: int) -> None:
        self.slots = slots
        self.limit = limit
        self.rtt_s: float | None = None
        self.task_s: float | None = None  # measured; None until the first result
        self._prior_task_s = prior_task_s
        self.window = self._sized()

    @property
    def task_estimate(self) -> float:
        """The measured task time, or the prior estimate until a task has been measured."""
        return self.task_s if self.task_s is not None else self._prior_task_s

    def _sized(self) -> Window:
        return size_window(self.slots, self.rtt_s or 0.0, self.task_estimate, self.limit)

    def round_trip(self, seconds: float) -> Window | None:
        """A ping's round trip: `seconds` from writing the Ping to reading its Pong."""
        if not math.isfinite(seconds):
            return None
        self.rtt_s = _average(self.rtt_s, max(0.0, seconds))
        return self._update()

    def answered(self, busy_s: float, link_s: float | None) -> Window | None:
        """A task's result: `busy_s` computing it, `link_s` on the link (None if unstamped)."""
        if not math.isfinite(busy_s):
            return None
        self.task_s = _average(self.task_s, max(0.0, busy_s))
        if link_s is not None and math.isfinite(link_s):
            self.rtt_s = _average(self.rtt_s, max(0.0, link_s))
        return self._update()

    def _update(self) -> Window | None:
        new = self._sized()
        current = self.window
        if new == current or abs(new.size - current.size) <= HYSTERESIS * current.size:
            return None
        self.window = new
        return new
