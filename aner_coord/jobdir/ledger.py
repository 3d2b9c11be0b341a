"""The job ledger (docs/contracts.md, section 11): every accepted chunk and committed pass, durable
before `status.json` reports it, so a job can be resumed with exactly the same result.

File `ledger` in the job directory, owner-only, append-only, schema `aner-ledger/3`. Each
record is

    length (4 bytes, big-endian) | CRC-32 of the payload (4) | CRC-32 of these 8 bytes (4)
    | payload

where the payload is one MessagePack `Entry`: the job's identity (`JOB_KEY_BYTES` random
bytes that `run-manifest.json` records as `job` when the job begins), one `Record`, a
tagged union, and its MAC: keyed by the user's job key (`aner_coord.jobdir.jobkey`) over the
record and its offset, so that a record written by someone without the key is refused
(docs/contracts.md, section 7, "Keyed job files"). An older aner's `aner-ledger/2` has no
MACs and is read, and continued, as it was. The first record of every ledger is `Opened`.
Records of another job, a ledger that does not begin with its job's `Opened`, or a chunk
recorded twice are refused.

Only a torn tail is forgiven: the last record, cut short or with a damaged payload, left by
a coordinator killed while it wrote (also a tail of zero bytes, which a filesystem may leave
after a crash). A damaged record before the tail, a record this aner cannot read or a file
over `READ_LIMITS[LEDGER]` is refused (`LedgerError`, one line, exit 2): the ledger then no
longer says what was done, and recomputing past it would silently discard what follows.
The header's own checksum is what tells a torn tail from a damaged length field.

The ledger is read in bounded pieces (`READ_PIECE`), never whole, and only if it is a
regular file of this job's directory (never through a link, never a FIFO or a device).

Growth: a later record kind is one more member of `Record`; every entry carries the job's
identity, and an older aner refuses a ledger with a kind it does not know rather than skip
it. `Checkpointed` is one: it vouches for a checkpoint file
(`aner_coord.computations.dense.checkpoint`) by its size and SHA256, and is durable before that
file is renamed into place.

Writes are buffered by the coordinator on its event loop (`append`) and made durable by
`sync()` (write, fsync), which the status writer calls on its own thread before every
status it writes: at most every half second, and at once at every pass barrier and state
change. A status therefore never reports work the ledger could lose.
"""

from __future__ import annotations

import hmac
import io
import os
import struct
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, assert_never

import msgspec

from aner_coord.jobdir import jobkey
from aner_coord.jobdir.directory import LEDGER, READ_LIMITS, JobDir, JobDirError, JobFileError
from aner_coord.jobdir.status import WorkerLoss
from aner_worker.files import READ_PIECE
from aner_worker.kernels.base import decode

LEDGER_SCHEMA = "aner-ledger/3"  # keyed: every record carries its MAC
UNKEYED_SCHEMA = "aner-ledger/2"  # an older aner's: read as before, without MACs
JOB_KEY_BYTES = 16
_HEADER = 12
MAX_RECORD_BYTES = 256 << 20


class Opened(msgspec.Struct, frozen=True, tag="opened", array_like=True):
    """The ledger's first record: which job and computation it belongs to, and when."""

    schema: str
    computation: str
    at: float


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


class Checkpointed(msgspec.Struct, frozen=True, tag="checkpoint", array_like=True):
    """A checkpoint of the state after `passes` committed passes (`steps` optimizer steps)
    was written as `CHECKPOINT`: `size` bytes of SHA256 `sha256`."""

    passes: int
    steps: int
    size: int
    sha256: bytes
    at: float
    # The items of those passes, as the job's status counted them (a resumed job's status
    # starts from them); 0 in a ledger older than the count.
    items: int = 0


Record = Opened | Accepted | Committed | Lost | Resumed | Checkpointed


class Entry(msgspec.Struct, frozen=True, array_like=True, omit_defaults=True):
    """One record as the file holds it: with the identity of the job it belongs to, and in
    a keyed ledger its MAC (`aner_coord.jobdir.jobkey.mac` of the `_Body`'s bytes at the
    record's offset); an unkeyed record has none, as an older aner's did."""

    job: bytes
    record: Record
    mac: bytes = b""


class _Body(msgspec.Struct, frozen=True, array_like=True):
    """What a record's MAC covers."""

    job: bytes
    record: Record


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Entry)
_LENGTH_CRC = struct.Struct(">II")
_CRC = struct.Struct(">I")


def new_job_key() -> bytes:
    """A fresh job identity (the manifest records its hex form): random, its second half
    keyed by the user's job key (made now if it does not exist yet), so that the key's
    holder knows the job was begun keyed and refuses an unkeyed ledger of it."""
    half = os.urandom(JOB_KEY_BYTES // 2)
    try:
        secret = jobkey.user_secret(create=True)
    except jobkey.JobKeyError:
        # A job without a directory needs no key; one with a directory is refused, naming
        # the key file, when its ledger is made (`LedgerWriter`).
        return half + os.urandom(JOB_KEY_BYTES // 2)
    assert secret is not None
    return half + jobkey.identity_tag(secret, half)


def _keyed_identity(job: bytes, secret: bytes) -> bool:
    half = job[: JOB_KEY_BYTES // 2]
    return len(job) == JOB_KEY_BYTES and hmac.compare_digest(
        job[JOB_KEY_BYTES // 2 :], jobkey.identity_tag(secret, half)
    )


def job_id(key: bytes) -> str:
    """The short id people see (`aner parallel jobs`, a QUEUED job's holders): the first
    12 hex digits of the job's identity."""
    return key.hex()[:12]


def frame(job: bytes, record: Record, key: bytes | None = None, offset: int = 0) -> bytes:
    """The bytes of one record of job `job`: keyed with the job's MAC key `key` for byte
    `offset` of the ledger, or (None) unkeyed, as an older aner wrote it."""
    body = b"" if key is None else jobkey.mac(key, offset, _encoder.encode(_Body(job, record)))
    payload = _encoder.encode(Entry(job, record, body))
    head = _LENGTH_CRC.pack(len(payload), zlib.crc32(payload))
    return b"".join((head, _CRC.pack(zlib.crc32(head)), payload))


class LedgerError(JobFileError):
    """The ledger cannot be trusted: damaged before its tail, of another job, unreadable.
    Nothing is resumed from it (exit 2)."""


class _Damaged(Exception):
    def __init__(self, offset: int, why: str) -> None:
        super().__init__(f"its record at byte {offset:,} {why}")
        self.offset = offset


class _Reader:
    """A file's bytes from `read` (a descriptor's), in pieces, with a cursor (`buf[pos:]`
    is what is buffered there); never more than `limit` bytes in all."""

    def __init__(self, read: Callable[[int], bytes], limit: int) -> None:
        self._read_piece = read
        self._limit = limit
        self.buf = bytearray()
        self.pos = 0  # the cursor, inside buf
        self.offset = 0  # the cursor, in the file
        self._eof = False
        self._read = 0

    def available(self, n: int) -> int:
        """Make up to `n` bytes available at the cursor; how many are (fewer only at EOF)."""
        have = len(self.buf) - self.pos
        while have < n and not self._eof:
            piece = self._read_piece(READ_PIECE)
            self._read += len(piece)
            if self._read > self._limit:
                why = f"lies past the ledger's limit of {self._limit:,} bytes"
                raise _Damaged(self.offset, why)
            if not piece:
                self._eof = True
                break
            if self.pos > READ_PIECE:  # keep the buffer small: drop what was consumed
                del self.buf[: self.pos]
                self.pos = 0
            self.buf += piece
            have = len(self.buf) - self.pos
        return min(n, have)

    def advance(self, n: int) -> None:
        self.pos += n
        self.offset += n

    def rest_is_zero(self) -> bool:
        """Whether every byte from the cursor to the end of the file is zero."""
        while got := self.available(READ_PIECE):
            if any(self.buf[self.pos : self.pos + got]):
                return False
            self.advance(got)
        return True


_HEAD = struct.Struct(">III")


def _records(reader: _Reader) -> Iterator[tuple[int, int, Entry]]:
    """(offset, end, entry) of each intact record, up to a torn tail; _Damaged before it.

    Whole records in the buffer are taken in a tight loop; the careful path (`_next`) sees
    only a record the buffer holds part of, and one that fails a check."""
    while True:
        buf, pos = reader.buf, reader.pos
        base, end = reader.offset - pos, len(buf)
        while end - pos >= _HEADER:
            size, checksum, own = _HEAD.unpack_from(buf, pos)
            stop = pos + _HEADER + size
            if stop > end or size > MAX_RECORD_BYTES or zlib.crc32(buf[pos : pos + 8]) != own:
                break
            payload = bytes(buf[pos + _HEADER : stop])
            if zlib.crc32(payload) != checksum:
                break
            try:
                entry = _decoder.decode(payload)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise _Damaged(base + pos, f"is not a record this aner reads ({exc})") from None
            yield base + pos, base + stop, entry
            pos = stop
        reader.advance(pos - reader.pos)
        found = _next(reader)
        if found is None:
            return
        yield found


def _next(reader: _Reader) -> tuple[int, int, Entry] | None:
    """The record at the cursor, checked byte by byte: None at the end (or a torn tail)."""
    if reader.available(_HEADER) < _HEADER:
        return None  # empty, or a header cut short: the tail write never finished
    start = reader.offset
    size, checksum, own = _HEAD.unpack_from(reader.buf, reader.pos)
    if zlib.crc32(reader.buf[reader.pos : reader.pos + 8]) != own:
        if reader.rest_is_zero():
            return None  # zeros a crash left after the last record
        raise _Damaged(start, "is damaged (its header's checksum is wrong)")
    if size > MAX_RECORD_BYTES:
        raise _Damaged(start, f"claims {size:,} bytes, over the limit of {MAX_RECORD_BYTES:,}")
    if reader.available(_HEADER + size) < _HEADER + size:
        return None  # cut short: the tail write never finished
    payload = bytes(reader.buf[reader.pos + _HEADER : reader.pos + _HEADER + size])
    if zlib.crc32(payload) != checksum:
        if reader.available(_HEADER + size + 1) == _HEADER + size:
            return None  # the last record, damaged while it was written
        raise _Damaged(start, "is damaged (its checksum is wrong) and records follow it")
    try:
        entry = _decoder.decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise _Damaged(start, f"is not a record this aner reads ({exc})") from None
    reader.advance(_HEADER + size)
    return start, reader.offset, entry


@dataclass
class Recovered:
    """What a ledger says was done: accepted chunk statistics by pass, committed passes,
    losses, resumes; and where its intact records end (a writer keeps exactly those)."""

    chunks: dict[int, dict[int, bytes]] = field(default_factory=dict)
    committed: set[int] = field(default_factory=set)
    losses: list[Lost] = field(default_factory=list)
    checkpoints: list[Checkpointed] = field(default_factory=list)  # in ledger order
    resumes: int = 0
    opened: bool = False  # it holds its job's `Opened` record
    intact: int = 0  # bytes of intact records; a torn tail after them is cut off
    file: tuple[int, int] | None = None  # (st_dev, st_ino) of the ledger read, if any
    mac_key: bytes | None = None  # a keyed ledger's MAC key (its writer goes on keying)

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

    def add(self, offset: int, record: Record) -> None:
        """Take in the record found at byte `offset` (_Damaged if it contradicts the
        records before it)."""
        kind = type(record)
        if (kind is Opened) != (offset == 0):
            where = "does not begin with" if offset == 0 else "holds a second"
            raise _Damaged(offset, f"is wrong: the ledger {where} its job's opening record")
        if kind is Accepted:
            assert isinstance(record, Accepted)
            chunks = self.chunks.get(record.pass_id)
            if chunks is None:
                chunks = self.chunks[record.pass_id] = {}
            if record.chunk in chunks:
                raise _Damaged(
                    offset, f"records chunk {record.chunk} of pass {record.pass_id} twice"
                )
            chunks[record.chunk] = record.stats
            return
        match record:
            case Opened():
                self.opened = True
            case Committed():
                self.committed.add(record.pass_id)
            case Lost():
                self.losses.append(record)
            case Resumed():
                self.resumes += 1
            case Checkpointed():
                self.checkpoints.append(record)


def read_ledger(directory: JobDir, job: bytes) -> Recovered:
    """What the ledger of job `job` in `directory` holds (empty if there is none yet).
    LedgerError for a ledger that is not a regular file, is too large, is damaged before its
    tail or holds a record of another job."""
    try:
        fd, _size = directory.open_reader(LEDGER)
    except FileNotFoundError:
        return Recovered()
    except JobFileError as exc:
        raise LedgerError(str(exc)) from None
    where = directory.path / LEDGER
    recovered = Recovered()
    try:
        info = os.fstat(fd)
        recovered.file = (info.st_dev, info.st_ino)
        reader = _Reader(lambda n: os.read(fd, n), READ_LIMITS[LEDGER])
        for offset, end, entry in _records(reader):
            if entry.job != job:
                raise _Damaged(offset, "belongs to another job (not this manifest's)")
            if offset == 0:
                recovered.mac_key = _mac_key_of(entry, job)
            if recovered.mac_key is not None:
                _check_mac(recovered.mac_key, offset, entry)
            recovered.add(offset, entry.record)
            recovered.intact = end
    except _Damaged as exc:
        raise LedgerError(
            f"{where} cannot be trusted: {exc}; resume needs the ledger this job wrote (start "
            "the job again with a new --output)"
        ) from None
    except OSError as exc:
        raise LedgerError(f"{where} cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    return recovered


def _mac_key_of(first: Entry, job: bytes) -> bytes | None:
    """The MAC key of a ledger whose first record is `first` (None: an unkeyed ledger of
    an older aner, read as before). _Damaged where it must be keyed and cannot be checked."""
    keyed = isinstance(first.record, Opened) and first.record.schema != UNKEYED_SCHEMA
    secret = jobkey.user_secret(create=False)
    if secret is None:
        if keyed:
            raise _Damaged(
                0,
                f"is keyed by a job key that is not here: {jobkey.key_path()} is missing (a "
                "job directory from another account or machine resumes with that account's "
                "job key copied there, mode 600)",
            )
        return None
    if not keyed:
        if _keyed_identity(job, secret):
            raise _Damaged(
                0,
                "carries no MAC though the job was begun keyed by your job key: the ledger "
                "was replaced by someone without that key",
            )
        return None
    return jobkey.job_mac_key(secret, job)


def _check_mac(key: bytes, offset: int, entry: Entry) -> None:
    expected = jobkey.mac(key, offset, _encoder.encode(_Body(entry.job, entry.record)))
    if not hmac.compare_digest(entry.mac, expected):
        raise _Damaged(
            offset,
            f"({_describe(entry.record)}) does not carry the MAC of your job key "
            f"({jobkey.key_path()}): it was written or changed by someone without that key",
        )


def _describe(record: Record) -> str:
    match record:
        case Accepted():
            return f"chunk {record.chunk} of pass {record.pass_id}"
        case Committed():
            return f"the commit of pass {record.pass_id}"
        case Checkpointed():
            return f"the checkpoint after {record.passes} passes"
        case Opened():
            return "the opening record"
        case Lost():
            return f"the loss of worker {record.identity[:40]!r}"
        case Resumed():
            return "a resume"
        case _:
            assert_never(record)


def scan(data: bytes) -> tuple[list[Entry], int]:
    """The intact records of ledger bytes `data` (for tools and tests) and where they end,
    whatever job they belong to; LedgerError if a record before the tail is damaged."""
    reader = _Reader(io.BytesIO(data).read, len(data))
    entries: list[Entry] = []
    intact = 0
    try:
        for _offset, end, entry in _records(reader):
            entries.append(entry)
            intact = end
    except _Damaged as exc:
        raise LedgerError(f"ledger bytes cannot be trusted: {exc}") from None
    return entries, intact


class LedgerWriter:
    """Appends records of job `job` to the ledger: `append` from the event loop (memory
    only), `sync` from the status writer's thread (write and fsync). A failure raises
    JobDirError from `sync`, which fails the job like any other job-directory write.

    A new job's ledger is created (never an existing file) and opened with its `Opened`
    record; a resumed job's (`recovered`, read under the same lock) is cut back to its
    intact records, which must still be the very file that was read."""

    def __init__(
        self,
        directory: JobDir,
        job: bytes,
        *,
        computation: str,
        at: float,
        recovered: Recovered | None = None,
    ) -> None:
        self._directory = directory
        self._job = job
        self._lock = threading.Lock()
        # `sync` may be called from the status writer's thread and the event loop's (a
        # checkpoint's record is made durable before its file): one at a time, in order.
        self._write_lock = threading.Lock()
        self._pending: list[bytes] = []
        # A new ledger is keyed; a resumed one goes on as it began (an older aner's unkeyed).
        if recovered is None:
            secret = jobkey.user_secret(create=True)
            assert secret is not None
            self._mac_key: bytes | None = jobkey.job_mac_key(secret, job)
        else:
            self._mac_key = recovered.mac_key
        self._offset = recovered.intact if recovered is not None else 0
        flags = os.O_WRONLY | os.O_CREAT | (0 if recovered is not None else os.O_EXCL)
        self._fd = directory.open_file(LEDGER, flags, action="write")
        keep = recovered.intact if recovered is not None else 0
        try:
            if recovered is not None and recovered.file is not None:
                info = os.fstat(self._fd)
                if (info.st_dev, info.st_ino) != recovered.file:
                    raise JobDirError(
                        f"cannot write {directory.path / LEDGER}: it was replaced while the "
                        "job was being resumed"
                    )
            # Keep only what was intact: a torn tail from a killed coordinator is cut off,
            # so new records never follow garbage.
            os.ftruncate(self._fd, keep)
            os.lseek(self._fd, keep, os.SEEK_SET)
        except OSError as exc:
            os.close(self._fd)
            raise directory.write_error("write", LEDGER, exc) from None
        except BaseException:
            os.close(self._fd)
            raise
        if recovered is None or not recovered.opened:
            schema = LEDGER_SCHEMA if self._mac_key is not None else UNKEYED_SCHEMA
            self.append(Opened(schema, computation, at))

    def append(self, record: Record) -> None:
        with self._lock:  # in order: each record's MAC covers its offset
            data = frame(self._job, record, self._mac_key, self._offset)
            self._offset += len(data)
            self._pending.append(data)

    def sync(self) -> None:
        with self._write_lock:
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
    "JOB_KEY_BYTES",
    "LEDGER",
    "LEDGER_SCHEMA",
    "UNKEYED_SCHEMA",
    "Accepted",
    "Checkpointed",
    "Committed",
    "Entry",
    "JobDirError",
    "LedgerError",
    "LedgerWriter",
    "Lost",
    "Opened",
    "Recovered",
    "Resumed",
    "frame",
    "new_job_key",
    "read_ledger",
    "scan",
]
