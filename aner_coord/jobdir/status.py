"""The job's state and its status snapshot: what `status.json` holds, what observers,
progress displays, systemd and exit codes read.

`JobState` is the one state type: the job machine moves through its written members,
`status.json` records them, and a monitor may observe `COORDINATOR_OFFLINE`, which is never
written (docs/contracts.md, section 7). `WorkerAccount` is the one per-worker accounting type,
shared by status snapshots and results.

Schema `aner-status/3`; files of schema 1 keep reading (their kind "fixture" is today's
"regression"), and of schemas 1 and 2 (whose training `step` counted the epoch's committed
steps, from 0) read as schema 3 counts it, the step in progress, from 1. New fields are
appended with defaults; checked-in examples of each schema live in tests/data.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

from aner_coord.errors import EXIT_CANCELLED, EXIT_FAILED, EXIT_OFFLINE, EXIT_OK

STATUS_SCHEMA = "aner-status/3"
_OLD_KINDS = {"fixture": "regression"}


class JobState(enum.Enum):
    # Waiting for its CPU slots in the lease table (docs/contracts.md, section 13): written
    # by the coordinator before any worker starts, with the jobs in its way.
    QUEUED = "QUEUED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLING = "CANCELLING"
    CANCELLED = "CANCELLED"
    # Observed by a monitor (the recorded state is not terminal and nobody holds the lock);
    # never entered by a job, never written.
    COORDINATOR_OFFLINE = "COORDINATOR_OFFLINE"

    @property
    def terminal(self) -> bool:
        return self in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)

    @property
    def active(self) -> bool:
        """Starting or running: work may still be dispatched."""
        return self in (JobState.STARTING, JobState.RUNNING)

    @property
    def exit_code(self) -> int:
        """docs/contracts.md, section 8: what `status`, `cancel` and a finished command exit
        with."""
        return _EXIT_CODES[self]


_EXIT_CODES = {
    JobState.QUEUED: EXIT_OK,
    JobState.STARTING: EXIT_OK,
    JobState.RUNNING: EXIT_OK,
    JobState.CANCELLING: EXIT_OK,  # still running, as far as a script is concerned
    JobState.COMPLETED: EXIT_OK,
    JobState.FAILED: EXIT_FAILED,
    JobState.CANCELLED: EXIT_CANCELLED,
    JobState.COORDINATOR_OFFLINE: EXIT_OFFLINE,
}


class WorkerAccount(msgspec.Struct, frozen=True, omit_defaults=True):
    """What one worker did for a job: public identity only, never an endpoint. Fields left
    at their defaults (costs not measured) are omitted, so files of older writers read the
    same; a reader sees them as None."""

    identity: str
    slots: int
    items: int
    chunks: int
    items_by_pass: list[int] = []
    # Measured costs in slot-seconds (see `aner_coord.job.timing`); None where not measured.
    compute_s: float | None = None
    transfer_s: float | None = None
    wait_s: float | None = None
    # The worker's hardware and software identity from its handshake (public facts only).
    machine: dict[str, str] | None = None
    # Latency-adaptive dispatch (`aner_coord.job.pacing`), worker groups only: the estimated
    # round trip and seconds per task, and the in-flight window they gave, at the latest.
    rtt_s: float | None = None
    task_s: float | None = None
    window: int | None = None
    # The host it ran on (docs/contracts.md, section 18), so that readers can tell
    # records that share one; None where unknown (or from an older writer).
    host: str | None = None


class WorkerLoss(msgspec.Struct, frozen=True):
    """A worker lost during a job that went on without it (retries, docs/contracts.md, section
    11)."""

    identity: str
    phase: str
    detail: str
    at: float  # Unix time
    during: str  # the pass it was lost in


class StagingRecord(msgspec.Struct, frozen=True):
    """How a worker process got the job's file data: "cold" when blocks were sent, "cached"
    when its block cache already held them all (nothing sent)."""

    identity: str
    state: str
    bytes: int
    blocks: int
    seconds: float


class TrainingPosition(msgspec.Struct, frozen=True, omit_defaults=True):
    """Where a training stands, in its user's terms: epoch `epoch` (1-based) of at most
    `epochs`, step `step` (1-based, the one in progress, as the phase names it) of the
    epoch's `steps`, and the validation accuracy after the latest finished epoch (None
    before the first)."""

    epoch: int
    epochs: int
    step: int
    steps: int
    validation_accuracy: float | None = None


class QueuedBehind(msgspec.Struct, frozen=True):
    """A job (or granted worker) holding slots that a QUEUED job waits for: its job id,
    computation and pid, never its directory (a path is private)."""

    job: str
    kind: str
    pid: int
    slots: int


class StatusSnapshot(msgspec.Struct, frozen=True):
    schema: str
    seq: int
    state: JobState
    kind: str  # the computation: "monte-carlo", "regression", ...
    pid: int
    created_at: float  # Unix time
    updated_at: float
    elapsed_s: float
    requested: int  # items (samples or rows) per pass
    passes: int
    pass_index: int  # passes completed
    phase: str
    accepted: int  # items accepted in all passes so far
    accepted_in_pass: int
    chunks_total: int
    chunks_done: int
    in_flight: int
    throughput: float | None  # items per second
    eta_s: float | None
    workers: list[WorkerAccount]
    error: str | None = None
    committed_steps: int | None = None
    unit: str = "items"
    losses: list[WorkerLoss] = []
    resumes: int = 0  # how many times a coordinator resumed this job from its ledger
    recovered: int = 0  # items the last resume took from the ledger
    staging: list[StagingRecord] = []
    # What the computation says of its own progress (a model search: fits running by worker,
    # the best candidate so far); None for computations that say nothing more.
    detail: dict[str, Any] | None = None
    # Appended in aner 0.x (older files read with these defaults): the items of every pass
    # planned (None: `requested * passes`, every pass alike), whether that is an upper
    # bound (early stopping may end the job sooner; a completed job's is what ran), where
    # a training stands, and notes on the plan (worker slots a step leaves idle).
    work: int | None = None
    work_upper_bound: bool = False
    position: TrainingPosition | None = None
    notes: list[str] = []
    # Appended with checkpoints (issue 20): the committed steps the last resume took from a
    # checkpoint, and those the job's latest checkpoint holds (None: none written yet).
    steps_recovered: int = 0
    checkpointed_steps: int | None = None
    # Appended with slot leases (issue 28): while QUEUED, who holds the slots it waits for.
    queued_behind: list[QueuedBehind] = []
    # Appended with weighted progress (issue 27): the planned cost done, 0..1, each kind of
    # pass's items weighted by their measured cost (`aner_coord.job.pace`); None from older
    # writers, whose readers take `accepted / total_work`.
    fraction_done: float | None = None
    # Appended with issue 38: when the job was submitted (Unix time): its queueing began
    # then, where it waited for slots; `created_at` and `elapsed_s` are the current writer's
    # (the coordinator's from its start). None from older writers: `created_at`.
    submitted_at: float | None = None
    # Appended with local worker processes (issue 39): how a local job's workers run, and
    # why ("local: 2 worker processes (search fits hold the GIL)"); None for a cluster's.
    plan: str | None = None

    @property
    def fraction(self) -> float:
        """The planned work done, 0..1: by cost where the writer weighed it, else by items."""
        if self.fraction_done is not None:
            return self.fraction_done
        total = self.total_work
        return min(1.0, self.accepted / total) if total else 0.0

    @property
    def total_work(self) -> int:
        return self.work if self.work is not None else self.requested * self.passes

    @property
    def terminal(self) -> bool:
        return self.state.terminal


_decoder = msgspec.json.Decoder(StatusSnapshot)


def decode_status(data: bytes) -> StatusSnapshot:
    snapshot = _decoder.decode(data)
    if snapshot.schema == "aner-status/1":
        kind = _OLD_KINDS.get(snapshot.kind, snapshot.kind)
        unit = "rows" if kind == "regression" else "samples"
        snapshot = msgspec.structs.replace(snapshot, kind=kind, unit=unit)
    at = snapshot.position
    if at is not None and snapshot.schema in ("aner-status/1", "aner-status/2"):
        step = min(at.step + 1, at.steps)  # committed steps, then; the step in progress now
        position = msgspec.structs.replace(at, step=step)
        # In schema 3's terms now: written back, it must not be counted on again.
        snapshot = msgspec.structs.replace(snapshot, schema=STATUS_SCHEMA, position=position)
    return snapshot


def encode_status(snapshot: StatusSnapshot) -> bytes:
    return msgspec.json.format(msgspec.json.encode(snapshot), indent=2) + b"\n"
