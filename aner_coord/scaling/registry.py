"""The configuration registry: each public identity's revisions `C01, C02, ...`.

A revision is an immutable record of one machine identity (the fields of
`aner_worker.machine.FIELDS`, nothing else: never a hostname or an endpoint). The first
identity seen under a public name is `C01`; any change of any field makes the next
revision. A revision whose hardware (CPU model, logical CPUs, memory and architecture) all
differ from the one before is flagged `replaced`: probably another machine under the same
name, which a report must say.

The registry lives in the user's data directory (`$XDG_DATA_HOME/aner/registry.json`,
default `~/.local/share/aner/registry.json`) unless a file is given; it is written
atomically and owner-only.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aner_coord.errors import RequestError
from aner_worker.files import write_atomically
from aner_worker.machine import FIELDS

SCHEMA = "aner-registry/1"
HARDWARE = ("cpu_model", "logical_cpus", "memory_bytes", "arch")


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


def public_machine(machine: dict[str, Any]) -> dict[str, str]:
    """Only the listed public fields, as strings."""
    return {k: str(machine[k]) for k in FIELDS if k in machine}


class Registry:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._data: dict[str, Any] = {"schema": SCHEMA, "identities": {}}
        try:
            loaded = json.loads(path.read_bytes())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            raise RequestError(f"registry {path} cannot be read: {exc}") from None
        if not isinstance(loaded, dict) or loaded.get("schema") != SCHEMA:
            raise RequestError(f"registry {path} is not an {SCHEMA} file")
        self._data = loaded

    def revision(self, identity: str, machine: dict[str, Any]) -> Revision:
        """The revision of `identity` with `machine`, recording a new one on any change."""
        facts = public_machine(machine)
        revisions: list[dict[str, Any]] = self._data["identities"].setdefault(identity, [])
        if revisions and revisions[-1]["machine"] == facts:
            last = revisions[-1]
            return Revision(identity, last["revision"], facts, bool(last.get("replaced")))
        previous = revisions[-1]["machine"] if revisions else None
        replaced = previous is not None and all(previous.get(k) != facts.get(k) for k in HARDWARE)
        entry: dict[str, Any] = {
            "revision": f"C{len(revisions) + 1:02d}",
            "machine": facts,
            "first_seen": datetime.now(UTC).isoformat(timespec="seconds"),
            "replaced": replaced,
        }
        revisions.append(entry)
        self.save()
        return Revision(identity, entry["revision"], facts, replaced)

    def history(self, identity: str) -> list[dict[str, Any]]:
        return list(self._data["identities"].get(identity, []))

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        data = json.dumps(self._data, indent=2, sort_keys=True).encode() + b"\n"
        write_atomically(self.path, data)
