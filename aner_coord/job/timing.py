"""Where each worker's time went: compute, transfer and wait, from real stamps.

Backends stamp every task when its frame is written (dispatch) and when its answer is read
(receipt); a worker reports per task the seconds a slot spent computing (`busy_s`) and the
seconds the task waited in its queue for a slot (`queued_s`). Per worker, in seconds:

- `compute_s`: the sum of `busy_s` (slot-seconds spent in the kernel);
- `transfer_s`: how long the link was carrying this worker's tasks or results: each task's
  link time (`receipt - dispatch - busy_s - queued_s`, both ways and the framing) placed
  just before its receipt, and the union of those intervals taken, so that tasks in flight
  together count once. It is at most the job's span, and so never more than its wall time
  (a sum over tasks was not: 9.35 s in a 1.26 s run); local threads have no link and
  report None;
- `wait_s`: `slots * span - compute_s`, the slot-seconds not spent computing between the
  backend's start and the job's last result (start-up, the link, imbalance at the end).

A worker's `busy_s` and `queued_s` are its own word: where the task's dispatch was stamped,
each is bounded by the seconds since (no task computes longer than it has existed), and a
worker's `compute_s` by `slots * span` (its slots compute one task at a time, all within the
span), so that no report can inflate the costs, the pacing or the liveness bound built on
them.

The process backend also records here each worker's latest round-trip and task-time
estimates and the window they gave (`paced`, see `aner_coord.job.pacing`), so that status shows
them. Nothing measured is None, never 0. Accounts are thread-safe: local slots report from
their own threads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import msgspec

from aner_coord.jobdir.status import WorkerAccount


@dataclass
class _Worker:
    compute_s: float = 0.0
    transfer_s: float = 0.0
    link_until: float = 0.0  # the end of the union of link intervals so far
    answered: int = 0
    machine: dict[str, str] | None = None
    host: str | None = None
    sent: dict[int, float] = field(default_factory=dict)
    rtt_s: float | None = None
    task_s: float | None = None
    window: int | None = None


class TaskTimes:
    """The stamps of one execution, and the costs they add up to per worker."""

    def __init__(self, *, link: bool) -> None:
        self._link = link  # False: local threads, where no transfer exists to measure
        self._lock = threading.Lock()
        self._workers: dict[str, _Worker] = {}
        self._started = time.monotonic()
        self._last = self._started

    def start(self) -> None:
        with self._lock:
            self._started = self._last = time.monotonic()

    def _worker(self, identity: str) -> _Worker:
        worker = self._workers.get(identity)
        if worker is None:
            worker = self._workers[identity] = _Worker()
        return worker

    def machine(self, identity: str, machine: dict[str, str], host: str | None = None) -> None:
        """Record the machine identity and the host (docs/contracts.md, "Host identity")
        that `identity` reported."""
        with self._lock:
            worker = self._worker(identity)
            worker.machine = dict(machine) if machine else None
            worker.host = host

    def machine_of(self, identity: str) -> dict[str, str] | None:
        """The machine identity `identity` reported, if any."""
        with self._lock:
            worker = self._workers.get(identity)
            return None if worker is None or worker.machine is None else dict(worker.machine)

    def dispatched(self, identity: str, task_ids: Iterable[int], now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            sent = self._worker(identity).sent
            for task_id in task_ids:
                sent[task_id] = now

    def received(
        self,
        identity: str,
        task_id: int,
        busy_s: float,
        queued_s: float | None = None,
        now: float | None = None,
    ) -> tuple[float, float | None]:
        """Stamp a task's answer: its compute seconds as counted (bounded by its age where
        its dispatch was stamped) and its seconds on the link (None where not measured)."""
        now = time.monotonic() if now is None else now
        link_s = None
        with self._lock:
            worker = self._worker(identity)
            sent = worker.sent.pop(task_id, None)
            if sent is not None:
                age = max(0.0, now - sent)
                busy_s = min(busy_s, age)
                if queued_s is not None:
                    link_s = max(0.0, age - busy_s - min(queued_s, age))
                    # transfer time is the union of link intervals: tasks overlap on a link
                    begin = max(now - link_s, worker.link_until)
                    if now > begin:
                        worker.transfer_s += now - begin
                    worker.link_until = max(worker.link_until, now)
            worker.compute_s += busy_s
            worker.answered += 1
            self._last = max(self._last, now)
        return busy_s, link_s

    def paced(self, identity: str, rtt_s: float | None, task_s: float | None, window: int) -> None:
        """Record a worker's latest estimates and window (see `aner_coord.job.pacing`)."""
        with self._lock:
            worker = self._worker(identity)
            worker.rtt_s, worker.task_s, worker.window = rtt_s, task_s, window

    def annotate(self, accounts: Iterable[WorkerAccount]) -> list[WorkerAccount]:
        """`accounts` with each worker's measured costs, machine and host filled in."""
        with self._lock:
            span = self._last - self._started
            out = []
            for account in accounts:
                worker = self._workers.get(account.identity)
                if worker is None:
                    out.append(account)
                    continue
                measured = worker.answered > 0
                compute_s = min(worker.compute_s, account.slots * span)
                out.append(
                    msgspec.structs.replace(
                        account,
                        compute_s=round(compute_s, 6) if measured else None,
                        transfer_s=round(worker.transfer_s, 6) if measured and self._link else None,
                        wait_s=round(account.slots * span - compute_s, 6) if measured else None,
                        machine=worker.machine,
                        rtt_s=None if worker.rtt_s is None else round(worker.rtt_s, 6),
                        task_s=None if worker.task_s is None else round(worker.task_s, 6),
                        window=worker.window,
                        host=worker.host,
                    )
                )
            return out
