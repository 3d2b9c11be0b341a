"""`result.json`: what every computation's result has in common (its accounting and schema)
and how it is written. Each computation defines its own result Struct on this base.

Each result is a frozen msgspec Struct, tagged with its computation; `result.json` is its
JSON encoding (schema `aner-result/3`: epochs counted from 1, as every display counts them;
schema 2 indexed a Dense history and best epoch from 0). Results are read by attribute
(`result.hits`, `result.theta`), and their accounting names workers by public identity only.
"""

from __future__ import annotations

from typing import Any

import msgspec

from aner_coord.jobdir.status import WorkerAccount, WorkerLoss

RESULT_SCHEMA = "aner-result/3"


class AuditedWorker(msgspec.Struct, frozen=True):
    """One worker's share of an audit: of its `tasks` accepted tasks, `audited` were
    recomputed by the coordinator and agreed, `comparison` "bitwise" or "tolerance" (within
    the record's tolerance: its handshake named another platform, in `platform_differs`)."""

    identity: str
    tasks: int
    audited: int
    comparison: str
    platform_differs: list[str] = []
    # Of its tasks compared within the tolerance, the largest difference of a statistic
    # relative to its magnitude (None: none was).
    largest_difference: float | None = None


class AuditRecord(msgspec.Struct, frozen=True):
    """What `--audit` checked (`aner_coord.job.audits`)."""

    fraction: float
    tolerance: float | None  # relative, per statistic, of a "tolerance" comparison
    workers: list[AuditedWorker]


class KernelSet(msgspec.Struct, frozen=True):
    """The workers whose handshakes reported one BLAS (`aner_coord.kernelsets`)."""

    blas: str
    workers: list[str]


class BitsRecord(msgspec.Struct, frozen=True):
    """A worker group's kernel sets and what its result promises of them (docs/contracts.md,
    section 6, "Kernel sets"): `note` the warning where they differ; `tolerance` the one
    results are within across platforms (relative to each statistic's magnitude, as the
    audit holds them); `measured` the largest difference the audit found between a worker
    of another platform and the coordinator's own recomputation (None: nothing was compared
    so, without --audit or with no such worker), over `measured_tasks` tasks."""

    kernel_sets: list[KernelSet]
    note: str | None
    tolerance: float | None
    measured: float | None
    measured_tasks: int


class ResultBase(msgspec.Struct, frozen=True, kw_only=True, tag_field="computation"):
    seconds: float
    execution: dict[str, Any]
    workers: list[WorkerAccount]
    schema: str = RESULT_SCHEMA
    losses: list[WorkerLoss] = []  # workers lost and survived (retries)
    audit: AuditRecord | None = None  # None: no audit was asked for
    # A worker group's kernel sets, for a computation whose bits they decide (Dense, search);
    # None for local threads (one process) and for Monte Carlo and the fixture.
    bits: BitsRecord | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = msgspec.to_builtins(self)
        return data


def encode_result(result: Any) -> bytes:
    return msgspec.json.format(msgspec.json.encode(result), indent=2) + b"\n"
