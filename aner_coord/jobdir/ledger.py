"""The job ledger (SPEC section 11): every accepted chunk and committed pass, durable before
`status.json` reports it, so a job can be resumed with exactly the same result.

File `ledger` in the job directory, owner-only, append-only. Each record is

    4-byte big-endian length | 4-byte big-endian CRC-32 of the payload | payload

where the payload is one MessagePack `Record` (a tagged union). A reader stops at the first
record that is torn (shorter than its length) or corrupt (wrong checksum or undecodable):
everything before it is trusted, it and everything after it are recomputed.

Writes are buffered by the coordinator on its event loop (`append`) and made durable by
`sync()` (write, fsync), which the status writer calls on its own thread before every
status it writes: at most every half second, and at once at every pass barrier and state
change. A status therefore never reports work the ledger could lose.
"""

from __future__ import annotations

import os
import threading
import zlib
from dataclasses import dataclass, field
from typing import Any

import msgspec

from aner_coord.jobdir.directory import JobDir, JobDirError
from aner_coord.jobdir.status import WorkerLoss
from aner_worker.kernels.base import decode

LEDGER = "ledger"
_HEADER = 8
MAX_RECORD_BYTES = 256 << 20


class Accepted(msgspec.Struct, frozen=True, tag="accepted", array_like=True):
    """Chunk `chunk` of pass `pass_id` was accepted with these statistics (kernel encoding)."""

    pass_id: int
    chunk: int
    stats: bytes


class Committed(msgspec.Struct, frozen=True, tag="committed", array_like=True):
    """Pass `pass_id` was committed at its barrier."""

    pass_id: int


class Lost(msgspec.Struct, frozen=True, tag="lost", array_like=True):
    """A worker was lost and the job went on without it (retries)."""

    identity: str
    phase: str
    detail: str
    at: float


class Resumed(msgspec.Struct, frozen=True, tag="resumed", array_like=True):
    """A coordinator resumed the job from this ledger."""

    at: float
    pid: int


Record = Accepted | Committed | Lost | Resumed

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Record)


def frame(record: Record) -> bytes:
    payload = _encoder.encode(record)
    header = len(payload).to_bytes(4, "big") + zlib.crc32(payload).to_bytes(4, "big")
    return header + payload


def scan(data: bytes) -> tuple[list[Record], int]:
    """The intact records of `data`, in order, up to the first torn or corrupt one, and the
    number of bytes they take."""
    records: list[Record] = []
    offset = 0
    while len(data) - offset >= _HEADER:
        size = int.from_bytes(data[offset : offset + 4], "big")
        crc = int.from_bytes(data[offset + 4 : offset + 8], "big")
        end = offset + _HEADER + size
        if size > MAX_RECORD_BYTES or end > len(data):
            break  # torn: the write of this record never finished
        payload = data[offset + _HEADER : end]
        if zlib.crc32(payload) != crc:
            break
        try:
            records.append(_decoder.decode(payload))
        except msgspec.DecodeError:
            break
        offset = end
    return records, offset


@dataclass
class Recovered:
    """What a ledger says was done: accepted chunk statistics by pass, losses, resumes."""

    chunks: dict[int, dict[int, bytes]] = field(default_factory=dict)
    committed: set[int] = field(default_factory=set)
    losses: list[Lost] = field(default_factory=list)
    resumes: int = 0

    def statistics(self, stats_type: type[Any]) -> dict[int, dict[int, Any]]:
        """The accepted chunks' statistics, decoded, by pass and chunk."""
        return {
            pass_id: {chunk: decode(stats_type, body) for chunk, body in chunks.items()}
            for pass_id, chunks in self.chunks.items()
        }

    def worker_losses(self) -> list[WorkerLoss]:
        return [
            WorkerLoss(r.identity, r.phase, r.detail, r.at, "an earlier coordinator's run")
            for r in self.losses
        ]


def read_ledger(directory: JobDir) -> Recovered:
    try:
        data = directory.read_bytes(LEDGER)
    except FileNotFoundError:
        return Recovered()
    recovered = Recovered()
    for record in scan(data)[0]:
        if isinstance(record, Accepted):
            recovered.chunks.setdefault(record.pass_id, {})[record.chunk] = record.stats
        elif isinstance(record, Committed):
            recovered.committed.add(record.pass_id)
        elif isinstance(record, Lost):
            recovered.losses.append(record)
        else:
            recovered.resumes += 1
    return recovered


class LedgerWriter:
    """Appends records to the ledger: `append` from the event loop (memory only), `sync` from
    the status writer's thread (write and fsync). A failure raises JobDirError from `sync`,
    which fails the job like any other job-directory write."""

    def __init__(self, directory: JobDir) -> None:
        self._directory = directory
        # Keep only what was intact: a torn tail from a killed coordinator is cut off, so
        # new records never follow garbage.
        try:
            data = directory.read_bytes(LEDGER)
        except FileNotFoundError:
            data = b""
        intact = scan(data)[1]
        self._fd = directory.open_file(LEDGER, os.O_WRONLY | os.O_CREAT, action="write")
        try:
            os.ftruncate(self._fd, intact)
            os.lseek(self._fd, intact, os.SEEK_SET)
        except OSError as exc:
            os.close(self._fd)
            raise directory.write_error("write", LEDGER, exc) from None
        self._lock = threading.Lock()
        self._pending: list[bytes] = []

    def append(self, record: Record) -> None:
        data = frame(record)
        with self._lock:
            self._pending.append(data)

    def sync(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        if not pending:
            return
        data = memoryview(b"".join(pending))
        try:
            while data:
                data = data[os.write(self._fd, data) :]
            os.fsync(self._fd)
        except OSError as exc:
            raise self._directory.write_error("write", LEDGER, exc) from None

    def close(self) -> None:
        try:
            self.sync()
        finally:
            os.close(self._fd)


__all__ = [
    "LEDGER",
    "Accepted",
    "Committed",
    "JobDirError",
    "LedgerWriter",
    "Lost",
    "Recovered",
    "Resumed",
    "frame",
    "read_ledger",
    "scan",
]
