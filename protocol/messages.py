"""Wire messages: one tagged union of frozen msgspec Structs.

Messages are nouns. The coordinator sends `Hello`, then `Params` (the frozen parameters of a
pass, once per worker and pass), `Task`s, `Ping`s and finally `Shutdown`; a worker answers
with `Welcome` or `Refused`, then a `Result` or `TaskFailed` per task (and `Working` while a
long one runs) and a `Pong` per ping.

The wire knows no computation: `Params.body` and `Result.body` are MessagePack documents
that the named kernel defines (its own Structs), so a new workload adds no message here.
Tasks carry a pass and a range only: no code, no pickles, no paths, no row data.

Staging (file data for a job, before its first task): the coordinator sends `Stage` (the
data set's digest and its blocks' digests, SHA256 hex); the worker answers `Missing` with the
blocks its cache lacks; the coordinator sends one `Block` per missing digest; the worker
answers `Staged` once the data set is assembled and checked. A second job on the same data
finds every block cached and sends none.
New fields are appended with defaults, so an older peer still decodes a newer message.
A message added to the union is sent only to a peer that asked for it: `Working` only when
the Hello's `heartbeat_s` (appended, default 0) is positive.
"""

from __future__ import annotations

import msgspec


class _Wire(msgspec.Struct, frozen=True, array_like=True):
    """Base of every wire message: frozen, and encoded as a compact array led by its tag."""


class PluginIdentity(msgspec.Struct, frozen=True, array_like=True):
    """An installed plugin's code (docs/contracts.md, section 15): its distribution, version
    and the SHA256 ("sha256:...") of each installed file, by path."""

    distribution: str
    version: str
    files: dict[str, str]


class Hello(_Wire, frozen=True, tag="hello"):
    """Coordinator -> worker, first frame: who it is to the job, what it may use, and the
    kernels the job will run (the worker warms up only those)."""

    protocol: int
    identity: str
    slots: int
    fingerprint: str
    kernels: tuple[str, ...] = ()
    # How often a slot computing a task says so (`Working`); 0: never (a coordinator older
    # than heartbeats, which could not decode them).
    heartbeat_s: float = 0.0
    # The plugins the job's kernels come from, as the coordinator has them installed: the
    # worker refuses a Hello whose plugin it lacks or has otherwise (docs/contracts.md,
    # section 15). Empty for aner's own computations, which the fingerprint covers.
    plugins: tuple[PluginIdentity, ...] = ()


class Welcome(_Wire, frozen=True, tag="welcome"):
    """Worker -> coordinator: the handshake succeeded on the worker's side."""

    protocol: int
    fingerprint: str
    platform: str
    effective_cpus: int
    slots: int
    # The worker's hardware and software identity (docs/contracts.md, section 10): CPU model,
    # logical CPUs, memory, OS and architecture, Python, numpy, numba and aner versions. Never a
    # hostname: it feeds the public configuration registry.
    machine: dict[str, str] = {}
    # The compute precisions its kernels offer (docs/contracts.md, section 9). A worker that does
    # not say (one older than the choice) computes in float64 only.
    precisions: tuple[str, ...] = ("float64",)
    # Its build provenance (install path hash, editable or not: `aner_worker.build`; its
    # numeric stack is in `machine`) and the kernels it offers, for `aner parallel
    # capabilities`. An older worker says neither.
    build: dict[str, str] = {}
    kernels: tuple[str, ...] = ()
    # The host it runs on: a salted hash of its machine ID and boot id, never the raw values
    # (docs/contracts.md, section 18), so that records sharing one host are known as
    # such. None where the worker cannot tell, or is older than the field.
    host: str | None = None
    # Its installed plugins: distribution -> "version digest" (docs/contracts.md, section 15).
    plugins: dict[str, str] = {}


class Refused(_Wire, frozen=True, tag="refused"):
    """Worker -> coordinator: the worker will not serve this job, and why."""

    reason: str
    protocol: int
    fingerprint: str


class Params(_Wire, frozen=True, tag="params"):
    """The frozen parameters of pass `pass_id` for kernel `kernel` (its own encoding)."""

    pass_id: int
    kernel: str
    body: msgspec.Raw


class Task(_Wire, frozen=True, tag="task"):
    """Run the kernel of pass `pass_id` over items [start, start + count) of that pass."""

    task_id: int
    pass_id: int
    start: int
    count: int


class Result(_Wire, frozen=True, tag="result"):
    """The sufficient statistics of one task (the kernel's encoding), the seconds the
    worker's slot spent computing it and the seconds it waited for a slot."""

    task_id: int
    start: int
    count: int
    body: msgspec.Raw
    busy_s: float = 0.0
    # Seconds the task waited in the worker's queue before a slot took it, so that the
    # coordinator can tell time on the link from time queued behind other tasks.
    queued_s: float = 0.0
    # The worker's own monotonic clock when a slot took the task (0: not said, an older
    # worker). With `Pong.clock` the coordinator maps it onto its own clock for the job's
    # timeline; the task ended at `started + busy_s` on the same clock.
    started: float = 0.0


class TaskFailed(_Wire, frozen=True, tag="task_failed"):
    """Worker -> coordinator: a task raised instead of producing a result."""

    task_id: int
    reason: str


class Ping(_Wire, frozen=True, tag="ping"):
    """Coordinator -> worker: answer at once; silence means the worker is lost."""

    nonce: int


class Pong(_Wire, frozen=True, tag="pong"):
    """Worker -> coordinator: the answer to `Ping` with the same nonce, and the worker's
    monotonic clock when it answered (0: not said), from which and the round trip the
    coordinator estimates the offset between the two clocks."""

    nonce: int
    clock: float = 0.0


class Working(_Wire, frozen=True, tag="working"):
    """Worker -> coordinator, from the slot computing task `task_id`: still at it, for
    `elapsed_s` so far. Sent every `Hello.heartbeat_s` while the task runs (between the
    kernel's sub-ranges, so a slot that is stuck says nothing), only if that is positive.
    `elapsed_s` counts computing only: a slot that waits for a granted slot of its host
    (`--max-slots`) says so in `waiting_s` (appended with a default), with `elapsed_s` 0
    until it computes. Their sum grows from one Working of a task to the next."""

    task_id: int
    elapsed_s: float
    waiting_s: float = 0.0


class Shutdown(_Wire, frozen=True, tag="shutdown"):
    """Coordinator -> worker: stop taking tasks, drop queued ones, exit."""

    reason: str = ""


class Stage(_Wire, frozen=True, tag="stage"):
    """Coordinator -> worker: the job's data set `dataset` is the concatenation of `blocks`
    (each a SHA256 hex digest of its bytes); `dataset` is the SHA256 of the whole."""

    dataset: str
    blocks: tuple[str, ...]


class Missing(_Wire, frozen=True, tag="missing"):
    """Worker -> coordinator: the blocks of `dataset` its cache lacks (possibly none)."""

    dataset: str
    blocks: tuple[str, ...]


class Block(_Wire, frozen=True, tag="block"):
    """Coordinator -> worker: the bytes of one block the worker said it lacks."""

    digest: str
    data: bytes


class Staged(_Wire, frozen=True, tag="staged"):
    """Worker -> coordinator: `dataset` is assembled, checked and ready for tasks."""

    dataset: str


Message = (
    Hello
    | Welcome
    | Refused
    | Params
    | Task
    | Result
    | TaskFailed
    | Ping
    | Pong
    | Shutdown
    | Stage
    | Missing
    | Block
    | Staged
    | Working
)
