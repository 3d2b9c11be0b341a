"""The status snapshot: what `status.json` holds and what progress displays show.

Schema `aner-status/1`. New fields are appended with defaults so that files written by an
older version keep reading (checked-in examples live in tests/data).
"""

from __future__ import annotations

import msgspec

STATUS_SCHEMA = "aner-status/1"


class WorkerStatus(msgspec.Struct, frozen=True):
    identity: str
    slots: int
    items: int
    chunks: int
    items_by_pass: list[int] = []


class StatusSnapshot(msgspec.Struct, frozen=True):
    schema: str
    seq: int
    state: str
    kind: str  # "monte-carlo" or "fixture"
    pid: int
    created_at: float  # Unix time
    updated_at: float
    elapsed_s: float
    requested: int  # samples or rows per pass
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
    workers: list[WorkerStatus]
    error: str | None = None
    committed_steps: int | None = None

    @property
    def total_work(self) -> int:
        return self.requested * self.passes

    @property
    def terminal(self) -> bool:
        return self.state in ("COMPLETED", "FAILED", "CANCELLED")


def decode_status(data: bytes) -> StatusSnapshot:
    return msgspec.json.decode(data, type=StatusSnapshot)


def encode_status(snapshot: StatusSnapshot) -> bytes:
    return msgspec.json.format(msgspec.json.encode(snapshot), indent=2) + b"\n"
