"""The per-user, per-host lease table of CPU slots (docs/contracts.md, section 13).

One file per slot, `slot-0`, `slot-1`, ..., in one owner-only directory; a slot is leased
while a process holds an exclusive `flock` on its file, and the kernel drops that lock when
the process dies, however it dies (`kill -9` included): nothing is ever stale. The holder
writes who it is into the file it locked (a small JSON object: job id, kind, pid, slots,
directory) so that a job that must wait can name the jobs in its way; a reader never trusts
those bytes (bounded, decoded into a typed record, an unreadable one is "unknown").

The table is `slots/` in aner's runtime directory (`runtime_dir()`), the first that applies:

- `$ANER_RUNTIME_DIR` (tests point it at a directory of their own);
- `$XDG_RUNTIME_DIR/aner` (per user and per boot: systemd's runtime directory), or
  `/run/user/$UID/aner` where the variable is unset and that directory exists (so that a
  shell without it meets the user's systemd units);
- `/tmp/aner-$UID`, created `0700`.

Every directory of ours on that path must be a real directory (not a symlink), owned by the user,
with no group or other permission bits; otherwise the table is refused in one line naming the
directory (`LeaseError`), as it is when it is full, when a slot file is not a regular file with one
link (a hard link would have its target overwritten), or when its filesystem has no `flock`. A job
never runs unadmitted because the table could not be used, unless the user says so:
`ANER_LEASES=off` switches leases off for the process and its children (the test suite does,
outside its lease tests).

Taking is all or nothing: `LeaseTable.take(n)` locks `n` free slots of the table's first
`size` files or none, so two waiting jobs never hold half each. A waiter polls (see
`aner_coord.job.queue`): a slot freed by a killed holder is seen within one poll.

Waiters start in the order they asked: each takes a ticket (`LeaseTable.ticket()`), a file
`ticket-<number>` beside the slots, locked and signed as a slot is, its number above every
ticket's before it; a job takes slots only when no live ticket is older than its own (and
a newcomer only when no ticket is live at all), so a wide job is never overtaken. A ticket
whose holder died is unlocked: the first reader to meet it removes it.

This module is shared by coordinators (local threads, local pipe workers) and worker
processes granted a number of slots (`aner parallel worker --max-slots N`), so it lives on
the worker's side of the layering rule. A granted worker takes one slot of the grant table
`granted/` (its first N slots) for each task it computes, not of `slots/`: a local pipe
worker's coordinator has leased that worker's slots in `slots/` already, and the grant is
its own bound, the host owner's, on what other coordinators may use.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import msgspec

__all__ = [
    "DIR_ENV",
    "DISABLE_ENV",
    "GRANTED",
    "Holder",
    "Lease",
    "LeaseError",
    "LeaseTable",
    "Place",
    "checked_dir",
    "leases_enabled",
    "private_dir",
    "runtime_dir",
]

DIR_ENV = "ANER_RUNTIME_DIR"
GRANTED = "granted"  # the grant table of workers started with --max-slots N
DISABLE_ENV = "ANER_LEASES"  # "off": no leases, asked for explicitly
HOLDER_BYTES = 4096  # what a reader reads of a slot file, at most
TICKET = "ticket-"  # a waiting job's place in the queue: ticket-<number>
_FLOCK_UNSUPPORTED = (errno.EINVAL, errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)


class LeaseError(Exception):
    """The lease table cannot be used: one line naming its directory and what to change."""


class Holder(msgspec.Struct, frozen=True, omit_defaults=True):
    """Who holds a slot, as its holder wrote it (never trusted: see `read_holder`)."""

    pid: int
    job: str = ""  # the job's id (hex), "" for a granted worker
    kind: str = ""  # the computation, or "worker"
    slots: int = 0  # how many slots the holder took in all
    directory: str = ""  # the job directory, if it has one (private: never in status.json)

    def describe(self) -> str:
        who = f"job {self.job}" if self.job else f"a {self.kind or 'process'}"
        what = f"{self.kind}, " if self.job and self.kind else ""
        where = f" in {self.directory}" if self.directory else ""
        return f"{who} ({what}pid {self.pid}, {self.slots} slot(s)){where}"


_decoder = msgspec.json.Decoder(Holder)
UNKNOWN = Holder(pid=0, kind="unknown holder")


def leases_enabled(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return env.get(DISABLE_ENV, "").strip().lower() != "off"


def runtime_dir(environ: Mapping[str, str] | None = None) -> tuple[Path, tuple[Path, ...]]:
    """aner's per-user runtime directory on this host (the lease table's `slots/`, the job
    index's `jobs/`), and the directories of ours to create and check on the way."""
    env = os.environ if environ is None else environ
    given = env.get(DIR_ENV)
    if given:
        path = Path(given).absolute()
        return path, (path,)
    runtime = env.get("XDG_RUNTIME_DIR")
    if not (runtime and os.path.isabs(runtime)):
        # A shell without the variable (an SSH session without pam_systemd) still meets
        # the jobs of the user's systemd units there.
        runtime = f"/run/user/{os.getuid()}"
    if os.path.isdir(runtime):
        return Path(runtime) / "aner", (Path(runtime) / "aner",)
    base = Path(f"/tmp/aner-{os.getuid()}")
    return base, (base,)


def private_dir(name: str, environ: Mapping[str, str] | None = None) -> Path:
    """`name` in the runtime directory, each directory of ours on the way created `0700`
    and checked (`LeaseError` naming the one that is not safe to use)."""
    base, ours = runtime_dir(environ)
    for directory in (*ours, base / name):
        checked_dir(directory)
    return base / name


def checked_dir(path: Path) -> None:
    """Create `path` owner-only if it is missing; refuse it unless it is a real directory
    of ours that nobody else may write."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise LeaseError(
            f"lease directory {path} cannot be created: {exc.strerror} "
            f"(set {DIR_ENV} to a directory of yours)"
        ) from None
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        raise LeaseError(f"lease directory {path} is a symlink: remove it, or set {DIR_ENV}")
    if not stat.S_ISDIR(info.st_mode):
        raise LeaseError(f"lease directory {path} is not a directory: remove it, or set {DIR_ENV}")
    if info.st_uid != os.getuid():
        raise LeaseError(
            f"lease directory {path} is owned by uid {info.st_uid}, not by you: "
            f"remove it, or set {DIR_ENV}"
        )
    if info.st_mode & 0o077:
        raise LeaseError(
            f"lease directory {path} has mode {stat.S_IMODE(info.st_mode):o}: "
            f"`chmod 700` it, or set {DIR_ENV}"
        )


@dataclass
class Lease:
    """Slots held by this process: their numbers and the locked files' descriptors."""

    table: LeaseTable
    slots: tuple[int, ...]
    _fds: list[int]

    def release(self) -> None:
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)  # closing the last descriptor drops the flock

    @property
    def held(self) -> bool:
        return bool(self._fds)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()


class LeaseTable:
    """The lease table of `size` slots in directory `path` (see the module docstring)."""

    def __init__(self, size: int, path: Path | None = None, *, first: int = 0) -> None:
        if path is None:
            path = private_dir("slots")
        else:
            checked_dir(path)
        self.path = path
        self.size = size
        self.first = first  # a granted worker uses slots first .. size - 1 only
        import fcntl  # POSIX only; callers check `aner_coord.posix` first

        self._fcntl = fcntl

    def _open(self, slot: int) -> int:
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self.path / f"slot-{slot}", flags, 0o600)
        except OSError as exc:
            why = "it is full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else exc.strerror
            raise LeaseError(
                f"lease directory {self.path}: slot-{slot} cannot be opened ({why}): "
                f"free it, or set {DIR_ENV}"
            ) from None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            raise LeaseError(
                f"lease directory {self.path}: slot-{slot} is not a regular file: remove it"
            )
        if info.st_nlink != 1:  # a hard link: the holder would be written over its target
            os.close(fd)
            raise LeaseError(
                f"lease directory {self.path}: slot-{slot} has {info.st_nlink} links (a hard "
                "link to another file): remove it"
            )
        return fd

    def _lock(self, fd: int) -> bool:
        try:
            self._fcntl.flock(fd, self._fcntl.LOCK_EX | self._fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        except OSError as exc:
            if exc.errno in _FLOCK_UNSUPPORTED:
                raise LeaseError(
                    f"lease directory {self.path} is on a filesystem without flock: "
                    f"set {DIR_ENV} to a local directory"
                ) from None
            raise
        return True

    def take(self, n: int, holder: Holder) -> Lease | list[Holder]:
        """`n` free slots, all locked and signed by `holder`; or, when fewer are free,
        none, and the holders of the busy slots (each named once)."""
        taken: list[tuple[int, int]] = []
        busy: list[Holder] = []
        try:
            for slot in range(self.first, self.size):
                if len(taken) == n:
                    break
                fd = self._open(slot)
                if self._lock(fd):
                    taken.append((slot, fd))
                else:
                    busy.append(_read_holder(fd))
                    os.close(fd)
            if len(taken) < n:
                for _, fd in taken:
                    os.close(fd)
                taken = []
                return _unique(busy)
            data = msgspec.json.encode(holder)[:HOLDER_BYTES]
            for _, fd in taken:
                _sign(fd, data)
            return Lease(self, tuple(slot for slot, _ in taken), [fd for _, fd in taken])
        except BaseException:
            for _, fd in taken:
                os.close(fd)
            raise

    def wait(
        self, n: int, holder: Holder, *, poll_s: float, stop: threading.Event | None = None
    ) -> Lease:
        """Block until `n` slots are taken (a worker's computing thread; coordinators poll
        from their event loop instead). `stop`, a `threading.Event`, ends the wait with
        `TimeoutError` when set."""
        while True:
            got = self.take(n, holder)
            if isinstance(got, Lease):
                return got
            if stop is not None and stop.is_set():
                raise TimeoutError("stopped while waiting for a slot")
            time.sleep(poll_s)

    def ticket(self, holder: Holder) -> Place:
        """A place in the queue, after every live ticket: a locked, signed file linked in
        under a number above theirs (a link never replaces a name, so two takers never
        share one)."""
        spare = self.path / f".ticket-{os.getpid()}-{time.monotonic_ns()}"
        fd = os.open(
            spare, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        try:
            if not self._lock(fd):  # a fresh file of ours: nobody else holds it
                raise LeaseError(f"lease directory {self.path}: a new ticket is locked: remove it")
            _sign(fd, msgspec.json.encode(holder)[:HOLDER_BYTES])
            number = max(time.time_ns(), 1 + max((n for n, _ in self._ticket_names()), default=0))
            while True:
                try:
                    os.link(spare, self.path / f"{TICKET}{number:020d}")
                    break
                except FileExistsError:
                    number += 1
        except BaseException:
            os.close(fd)
            raise
        finally:
            with contextlib.suppress(OSError):
                os.unlink(spare)
        return Place(self.path / f"{TICKET}{number:020d}", number, fd)

    def queue(self) -> list[tuple[int, Holder]]:
        """The live tickets, oldest first, with their holders; the dead ones are removed."""
        live: list[tuple[int, Holder]] = []
        for number, path in self._ticket_names():
            try:
                fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue  # gone meanwhile
            try:
                if not self._lock(fd):
                    live.append((number, _read_holder(fd)))
                    continue
                # Unlocked: its holder is gone. Remove it unless the name is another file now.
                with contextlib.suppress(OSError):
                    if os.lstat(path).st_ino == os.fstat(fd).st_ino:
                        os.unlink(path)
            finally:
                os.close(fd)
        return live

    def _ticket_names(self) -> list[tuple[int, Path]]:
        names: list[tuple[int, Path]] = []
        with os.scandir(self.path) as entries:
            for entry in entries:
                digits = entry.name.removeprefix(TICKET)
                if digits != entry.name and digits.isdigit():
                    names.append((int(digits), Path(entry.path)))
        return sorted(names)

    def holders(self) -> Iterator[tuple[int, Holder | None]]:
        """Every slot of the table and its holder now (None: free). Probing a slot takes
        its lock for an instant: a taker that meets it retries at its next poll."""
        for slot in range(self.first, self.size):
            fd = self._open(slot)
            try:
                if self._lock(fd):
                    yield slot, None
                else:
                    yield slot, _read_holder(fd)
            finally:
                os.close(fd)


@dataclass
class Place:
    """This process's ticket: its file, number and locked descriptor."""

    path: Path
    number: int
    _fd: int | None

    def release(self) -> None:
        """Leave the queue: the file removed, then its lock dropped."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        os.close(fd)


def _sign(fd: int, data: bytes) -> None:
    """Write the holder over the whole of the last one: padded with spaces (which JSON
    ignores) to HOLDER_BYTES, never truncated (an ftruncate costs milliseconds on a disk
    filesystem, a write into the page cache microseconds)."""
    with contextlib.suppress(OSError):  # a name is for people; the lock is what counts
        os.pwrite(fd, data.ljust(HOLDER_BYTES), 0)


def _read_holder(fd: int) -> Holder:
    try:
        data = os.pread(fd, HOLDER_BYTES, 0)
        return _decoder.decode(data)
    except (OSError, msgspec.DecodeError):
        return UNKNOWN  # being written, or not ours to trust


def _unique(holders: list[Holder]) -> list[Holder]:
    seen: dict[tuple[int, str], Holder] = {}
    for h in holders:
        seen.setdefault((h.pid, h.job), h)
    return list(seen.values())
