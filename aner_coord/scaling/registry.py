"""The configuration registry: each public identity's revisions `C01, C02, ...`.

A revision is an immutable record of one machine identity (the fields of
`aner_worker.machine.FIELDS`, nothing else: never a hostname or an endpoint), less what
changes neither a kernel's bits nor its speed (`public_machine`), so that one worker
reached over pipes, SSH or Slurm is one revision. The first identity seen under a public
name is `C01`; any change of a recorded field makes the next revision. A revision whose
hardware (CPU model, logical CPUs, memory and architecture) all differ from the one before
is flagged `replaced`: probably another machine under the same name, which a report must
say.

The registry lives in the user's data directory (`$XDG_DATA_HOME/aner/registry.json`,
default `~/.local/share/aner/registry.json`) unless a file is given; it is written
atomically and owner-only. Several experiments may run at once: each new revision is a
read-modify-write of the file under an exclusive `flock` on a lock file beside it
(`registry.json.lock`), so none is lost and two experiments number alike. It is read only
if it is a regular file (never a FIFO or a device: the open never blocks) of at most
`MAX_REGISTRY_BYTES`, and only if it has the registry's shape: anything else is refused
with one line (exit 2).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from aner_coord.errors import RequestError
from aner_worker.files import FileRefused, read_regular, write_atomically
from aner_worker.machine import FIELDS

SCHEMA = "aner-registry/1"
HARDWARE = ("cpu_model", "logical_cpus", "memory_bytes", "arch")
MAX_REGISTRY_BYTES = 16 << 20  # thousands of revisions of hundreds of identities


def default_path() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return Path(base) / "aner" / "registry.json"


@dataclass(frozen=True)
class Revision:
    identity: str
    revision: str  # "C01"
    machine: dict[str, str]
    replaced: bool  # every hardware field differs from the previous revision

    @property
    def label(self) -> str:
        return f"{self.identity} / {self.revision}"


class _Entry(msgspec.Struct, frozen=True):
    revision: str
    machine: dict[str, str]
    first_seen: str
    replaced: bool = False


class _File(msgspec.Struct, frozen=True):
    schema: str
    identities: dict[str, list[_Entry]] = {}


# Left out of a revision: the BLAS thread count (every kernel holds BLAS to one thread per
# computing thread; an SSH login may lack the variable a terminal sets) and, of the
# OpenBLAS settings, OPENBLAS_CORETYPE (the kernel set it chose is `blas` itself; naming
# the set the CPU would pick anyway computes alike). OPENBLAS_L2_SIZE stays: it sizes the
# blocks of a matrix product, so it may change the speed.
_NOT_RECORDED = ("blas_threads",)
_RECORDED_BLAS_ENV = ("OPENBLAS_L2_SIZE=",)


def public_machine(machine: dict[str, Any]) -> dict[str, str]:
    """The listed public fields that decide bits or speed, as strings."""
    facts = {k: str(machine[k]) for k in FIELDS if k in machine and k not in _NOT_RECORDED}
    if "blas_env" in facts:
        kept = [w for w in facts["blas_env"].split() if w.startswith(_RECORDED_BLAS_ENV)]
        facts["blas_env"] = " ".join(kept) or "none"
    return facts


class Registry:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._data = self._load()

    def _load(self) -> _File:
        try:
            data = read_regular(self.path, MAX_REGISTRY_BYTES, follow=True)
        except FileNotFoundError:
            return _File(SCHEMA)
        except FileRefused as exc:
            raise RequestError(f"registry {self.path} cannot be read: it is {exc}") from None
        except OSError as exc:
            raise RequestError(
                f"registry {self.path} cannot be read: {exc.strerror or exc}"
            ) from None
        try:
            loaded = msgspec.json.decode(data, type=_File)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
            raise RequestError(f"registry {self.path} is not an {SCHEMA} file: {exc}") from None
        if loaded.schema != SCHEMA:
            raise RequestError(f"registry {self.path} is not an {SCHEMA} file")
        return loaded

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The registry to ourselves, across processes, for one read-modify-write."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock = self.path.with_name(self.path.name + ".lock")
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(lock, flags, 0o600)
        except OSError as exc:
            raise RequestError(
                f"cannot lock registry {self.path} ({lock}): {exc.strerror}"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def revision(self, identity: str, machine: dict[str, Any]) -> Revision:
        """The revision of `identity` with `machine`, recording a new one on any change (in
        the file as it is now, under its lock)."""
        facts = public_machine(machine)
        known = self._data.identities.get(identity, [])
        if known and known[-1].machine == facts:
            return Revision(identity, known[-1].revision, facts, known[-1].replaced)
        with self._locked():
            self._data = self._load()  # what other experiments recorded meanwhile
            revisions = self._data.identities.setdefault(identity, [])
            if revisions and revisions[-1].machine == facts:
                last = revisions[-1]
                return Revision(identity, last.revision, facts, last.replaced)
            previous = revisions[-1].machine if revisions else None
            replaced = previous is not None and all(
                previous.get(k) != facts.get(k) for k in HARDWARE
            )
            entry = _Entry(
                revision=f"C{len(revisions) + 1:02d}",
                machine=facts,
                first_seen=datetime.now(UTC).isoformat(timespec="seconds"),
                replaced=replaced,
            )
            revisions.append(entry)
            self._save()
        return Revision(identity, entry.revision, facts, replaced)

    def history(self, identity: str) -> list[dict[str, Any]]:
        return [msgspec.to_builtins(e) for e in self._data.identities.get(identity, [])]

    def save(self) -> None:
        with self._locked():
            self._save()

    def _save(self) -> None:
        data = msgspec.json.format(msgspec.json.encode(self._data), indent=2) + b"\n"
        write_atomically(self.path, data)
