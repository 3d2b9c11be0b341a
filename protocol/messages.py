"""Wire messages: one tagged union of frozen msgspec Structs.

Messages are nouns. The coordinator sends `Hello`, tasks and `Shutdown`; a worker answers
with `Welcome` or `Refused`, then results or `TaskFailed`. Tasks carry parameters only and
results sufficient statistics only: no code, no pickles, no paths. New fields are appended
with defaults so that an older peer still decodes a newer message.
"""

from __future__ import annotations

import msgspec


class _Wire(msgspec.Struct, frozen=True, array_like=True):
    """Base of every wire message: frozen, and encoded as a compact array led by its tag."""


class Hello(_Wire, frozen=True, tag="hello"):
    """Coordinator -> worker, first frame: who it is to the job and what it may use."""

    protocol: int
    identity: str
    slots: int
    fingerprint: str


class Welcome(_Wire, frozen=True, tag="welcome"):
    """Worker -> coordinator: the handshake succeeded on the worker's side."""

    protocol: int
    fingerprint: str
    platform: str
    effective_cpus: int
    slots: int


class Refused(_Wire, frozen=True, tag="refused"):
    """Worker -> coordinator: the worker will not serve this job, and why."""

    reason: str
    protocol: int
    fingerprint: str


class McTask(_Wire, frozen=True, tag="mc_task"):
    """Count Monte Carlo hits for global samples [start, start + count)."""

    task_id: int
    seed: int
    start: int
    count: int


class McResult(_Wire, frozen=True, tag="mc_result"):
    """Hits for the range named by the task it answers."""

    task_id: int
    start: int
    count: int
    hits: int


class FxTask(_Wire, frozen=True, tag="fx_task"):
    """Fixture pass over rows [start, start + count) with frozen parameters theta (9 floats)."""

    task_id: int
    seed: int
    start: int
    count: int
    theta: tuple[float, ...]


class FxResult(_Wire, frozen=True, tag="fx_result"):
    """Sufficient statistics of one fixture range: gradient sums, loss sum, counts."""

    task_id: int
    start: int
    count: int
    grad: tuple[float, ...]
    loss_sum: float
    correct: int
    valid: int


class TaskFailed(_Wire, frozen=True, tag="task_failed"):
    """Worker -> coordinator: a task raised instead of producing a result."""

    task_id: int
    reason: str


class Shutdown(_Wire, frozen=True, tag="shutdown"):
    """Coordinator -> worker: stop taking tasks, drop queued ones, exit."""

    reason: str = ""


Message = Hello | Welcome | Refused | McTask | McResult | FxTask | FxResult | TaskFailed | Shutdown
