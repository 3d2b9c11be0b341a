"""`timeline.jsonl`: where a job's time went, one JSON object per line (docs/contracts.md,
section 14).

Lines (`Line`, tagged by `kind`):
- `segment`: one per coordinator that ran the job (a resumed job appends one more): its
  number, the wall-clock time of its zero, its backend, workers and slots;
- `task`: one per task (`aner_coord.job.timing.TaskRecord`), times in seconds from its
  segment's zero on the coordinator's clock;
- `phase`: one per coordinator phase that costs time (a pass's reduce and update, the
  parameters' broadcast, a checkpoint, a status snapshot);
- `sampling` / `truncated`: where the size bound took effect.

The bound: every line is kept up to `TIMELINE_FULL_BYTES`; past it, a `sampling` line, then
only one task or phase line in `TIMELINE_SAMPLE_EVERY` (those whose task id, or pass number,
is a multiple of it) and every line that is not routine (segments, lost, retried and
duplicate tasks); at `TIMELINE_MAX_BYTES` one `truncated` line and nothing more. A resumed
job's coordinator counts the bytes already there.

The writer opens the file through the job directory's descriptor (never a link, never a
FIFO), buffers lines in memory from the event loop (`add`) and writes them from the status
writer's thread (`sync`, before each status, and at `close`). It does not fsync: the
timeline is a diagnosis, not a promise. A write that fails (a full disk) ends the timeline
there (noted in the coordinator's log); it never fails the job. A last line left unfinished (by a
coordinator killed while it wrote, or a full disk) makes the file unreadable as it is (the
reader refuses it, naming the byte) until a resumed job's writer cuts that line off before
it appends.
Reading is bounded as every job file's (`READ_LIMITS`); a file that is not one this aner
wrote is one line (`JobFileError`, exit 2).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

import msgspec

from aner_coord.errors import RequestError
from aner_coord.jobdir.directory import (
    TIMELINE,
    TIMELINE_MAX_BYTES,
    JobDir,
    JobFileError,
    opened,
)
from aner_worker.files import READ_PIECE

TIMELINE_SCHEMA = "aner-timeline/1"
# Timelines are on by default; `ANER_TIMELINE=off` leaves a job without one (to measure
# what it costs: `python -m bench timeline`).
ENV_TIMELINE = "ANER_TIMELINE"
TIMELINE_FULL_BYTES = 32 << 20
TIMELINE_SAMPLE_EVERY = 16


class _Line(msgspec.Struct, frozen=True, tag_field="kind", omit_defaults=True):
    """Base of every line: a JSON object whose `kind` says which."""


class Segment(_Line, frozen=True, tag="segment"):
    """A coordinator's part of the job: times in its lines count from its zero, `wall`."""

    schema: str
    segment: int
    wall: float  #: Unix time of this segment's zero
    computation: str
    backend: str  #: "threads" or "processes"
    workers: dict[str, int]  #: public identity -> slots
    start: float = 0.0  #: when the backend started (the span of wait_s counts from here)
    pid: int = 0


class TaskLine(_Line, frozen=True, tag="task"):
    """One task; the fields of `TaskRecord`, times from the segment's zero (null: unknown)."""

    segment: int
    worker: str
    pass_id: int
    task_id: int
    start: int
    count: int
    dispatched: float
    started: float | None = None
    ended: float | None = None
    received: float | None = None
    busy_s: float | None = None
    queued_s: float | None = None
    link_s: float | None = None
    bytes_out: int | None = None
    bytes_in: int | None = None
    outcome: str = "accepted"
    clock_error_s: float | None = None


class PhaseLine(_Line, frozen=True, tag="phase"):
    """A stretch of the coordinator's own work: `name` from `begin` to `end`. A phase made
    of many short pieces (a pass's `reduce`, one per result) is one line: its first piece's
    begin, its last piece's end, and the seconds they took together (`busy_s`)."""

    segment: int
    name: str
    begin: float
    end: float
    pass_id: int = -1
    busy_s: float | None = None  #: where not `end - begin`
    pieces: int = 1


class Sampling(_Line, frozen=True, tag="sampling"):
    """From here on, one routine line in `every` is kept."""

    segment: int
    every: int


class Truncated(_Line, frozen=True, tag="truncated"):
    """The file reached its bound: nothing more was written."""

    segment: int


Line = Segment | TaskLine | PhaseLine | Sampling | Truncated
_decoder = msgspec.json.Decoder(Line)
log = logging.getLogger("aner.jobdir")
_encoder = msgspec.json.Encoder()


def timeline_wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether jobs keep a timeline: `ANER_TIMELINE` unset, `on` or `off` (RequestError for
    any other value, before anything starts)."""
    raw = environ.get(ENV_TIMELINE, "on")
    if raw not in ("on", "off"):
        raise RequestError(
            f"{ENV_TIMELINE}={raw!r} is neither `on` nor `off`: unset it, or set `off`"
        )
    return raw == "on"


class TimelineWriter:
    """Appends lines to the job's `timeline.jsonl`, within its bound (see the module).

    `add` only keeps the line (it runs on the event loop, and from local threads, once per
    task); `sync` encodes and writes what was added, applying the bound line by line once
    the file nears it."""

    def __init__(self, directory: JobDir, segment: int) -> None:
        self._directory = directory
        self.segment = segment
        self._fd = directory.open_file(
            TIMELINE, os.O_RDWR | os.O_CREAT | os.O_APPEND, action="write"
        )
        try:
            self._size = _cut_torn_tail(self._fd)  # a resumed job's lines count too
        except OSError as exc:
            os.close(self._fd)
            raise directory.write_error("write", TIMELINE, exc) from None
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._pending: list[tuple[Line, int | None]] = []
        self._sampling = self._size >= TIMELINE_FULL_BYTES
        self._full = self._size >= TIMELINE_MAX_BYTES
        self.failed: str | None = None  # why writing stopped, if a write failed

    def add(self, line: Line, sample_key: int | None = None) -> None:
        """Keep `line` (routine lines give a `sample_key`; see the module for the rule)."""
        with self._lock:
            if not self._full:
                self._pending.append((line, sample_key))

    def _bounded(self, pending: list[tuple[Line, int | None]]) -> bytes:
        """The bytes of `pending` as the bound lets them into the file: all of them while
        the file stays under TIMELINE_FULL_BYTES, else line by line by the rule."""
        data = _encoder.encode_lines([line for line, _ in pending])
        if not self._sampling and self._size + len(data) <= TIMELINE_FULL_BYTES:
            self._size += len(data)
            return data
        out: list[bytes] = []
        for line, key in pending:
            if self._size >= TIMELINE_FULL_BYTES and not self._sampling:
                self._sampling = True
                out.append(self._encoded(Sampling(self.segment, TIMELINE_SAMPLE_EVERY)))
            if self._sampling and key is not None and key % TIMELINE_SAMPLE_EVERY:
                continue
            if self._size >= TIMELINE_MAX_BYTES:
                self._full = True
                out.append(self._encoded(Truncated(self.segment)))
                break
            out.append(self._encoded(line))
        return b"".join(out)

    def _encoded(self, line: Line) -> bytes:
        data = _encoder.encode(line) + b"\n"
        self._size += len(data)
        return data

    def sync(self) -> None:
        """Write what was added (from any thread; one writer at a time, in order). A write
        that fails (a full disk) ends the timeline there, logged once: a diagnosis never
        fails the job it describes (the job's own files fail it, if they cannot be written)."""
        with self._write_lock:
            with self._lock:
                pending, self._pending = self._pending, []
            if not pending or self._fd < 0 or self.failed is not None:
                return
            data = memoryview(self._bounded(pending))  # the loop may add meanwhile
            if self._full:
                with self._lock:
                    self._pending = []
            before = os.fstat(self._fd).st_size
            try:
                while data:
                    data = data[os.write(self._fd, data) :]
            except OSError as exc:
                # What the failed write took goes back (no torn line, and the room is the
                # job's own files' again).
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, before)
                self.failed = str(self._directory.write_error("write", TIMELINE, exc))
                log.info("%s; the job goes on without its timeline", self.failed)
                with self._lock:
                    self._full = True
                    self._pending = []

    def close(self) -> None:
        try:
            self.sync()
        finally:
            with self._write_lock:
                if self._fd >= 0:
                    os.close(self._fd)
                    self._fd = -1


def _cut_torn_tail(fd: int) -> int:
    """Cut an unfinished last line (a coordinator killed while writing) off the file open
    at `fd`, so that new lines never follow a fragment; its size afterwards."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return size
    at = size
    while at > 0:
        begin = max(0, at - READ_PIECE)
        piece = os.pread(fd, at - begin, begin)
        newline = piece.rfind(b"\n")
        if newline >= 0:
            at = begin + newline + 1
            break
        at = begin
    os.ftruncate(fd, at)
    return at


def read_timeline(job: JobDir | str | os.PathLike[str]) -> list[Line]:
    """Every line of the job's timeline, in file order. FileNotFoundError if there is none;
    JobFileError for a file that is not one: not a regular file (a FIFO, a link), over its
    bound, cut short (its last line unfinished: a coordinator killed while it wrote, which
    the job's next `resume` repairs), or a line that is not a timeline line."""
    with opened(job) as directory:
        data = directory.read_bytes(TIMELINE)
        if not data:
            raise directory.read_error(TIMELINE, "it is empty")
        if not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            raise directory.read_error(
                TIMELINE,
                f"it is cut short: its last line, from byte {cut:,}, is unfinished (a "
                "coordinator stopped while writing it; `aner parallel resume` repairs it)",
            )
        out = [_decode(directory, raw, n) for n, raw in enumerate(data.split(b"\n")[:-1], 1)]
        first = out[0]
        if not isinstance(first, Segment):
            raise directory.read_error(TIMELINE, "it does not begin with a segment line")
        if first.schema != TIMELINE_SCHEMA:
            raise directory.read_error(
                TIMELINE, f"its schema is {first.schema!r}, not {TIMELINE_SCHEMA!r}"
            )
        return out


def read_tail(job: JobDir, size: int) -> list[Line]:
    """The whole lines among the last `size` bytes of the job's timeline, for a monitor: a
    missing, unreadable or damaged timeline gives what it can (possibly nothing), never an
    error, and never blocks."""
    try:
        fd, total = job.open_reader(TIMELINE)
    except (FileNotFoundError, JobFileError):
        return []
    try:
        begin = max(0, total - size)
        data = os.pread(fd, total - begin, begin)
    except OSError:
        return []
    finally:
        os.close(fd)
    pieces = data.split(b"\n")
    if begin > 0:
        pieces = pieces[1:]  # the first may be the end of a line
    out: list[Line] = []
    for raw in pieces[:-1]:  # the last is empty, or a line still being written
        with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            out.append(_decoder.decode(raw))
    return out


def _decode(directory: JobDir, raw: bytes, number: int) -> Line:
    try:
        return _decoder.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise directory.read_error(
            TIMELINE, f"line {number} is not a timeline line: {exc}"
        ) from None
    except RecursionError:  # msgspec skipping an unknown field's nested arrays
        raise directory.read_error(
            TIMELINE, f"line {number} is not a timeline line: it is nested too deeply"
        ) from None


def as_dict(line: Line) -> dict[str, Any]:
    """A line as the JSON object it is in the file (with its `kind`)."""
    out: dict[str, Any] = msgspec.json.decode(_encoder.encode(line))
    return out
