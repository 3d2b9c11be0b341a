"""Which host a process runs on, as an identity that can be compared and never read back.

Two worker records, or local threads and a pipe worker, that run on one host share its CPUs:
a planner that counted them apart would promise a speedup the host cannot give. The host
identity (docs/contracts.md, section 18) is HMAC-SHA256, keyed with the fixed project
salt `HOST_SALT`, of this host's `/etc/machine-id` and the running kernel's boot id
(`/proc/sys/kernel/random/boot_id`), cut to 32 hex digits. The raw values never leave this
module: systemd's machine-id(5) asks for exactly this (an application-specific keyed hash
rather than the ID itself).

The salt is the project's, the same for every user, because the identity exists to be
compared across accounts: an SSH worker that logs in as another user on this very host must
come out equal to local threads here. A per-user salt would split one host into several,
and would need a secret kept on every host. A fixed salt still stops the raw machine ID
leaking (the ID is 128 random bits: no table of guesses reaches it); what it allows is
linking reports published during one boot to one host, never to its name or address. The
boot id limits even that to one boot, and tells apart clones of one disk image that share
a machine ID.

Where one of the two files is missing or not in its format (a container without
`/etc/machine-id`, a system that does not expose the boot id) the identity is the hash of
the other alone, with a note; where neither is readable it is None with a note, never a
made-up value: an unknown host is not taken for this one, nor for any other.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from pathlib import Path

from protocol import HOST_HEX_DIGITS

HOST_SALT = b"aner-host/v1"
MACHINE_ID = Path("/etc/machine-id")
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
_READ_BYTES = 128  # either file holds one line of 33 or 37 bytes
_FORMATS = {
    "machine-id": re.compile(r"[0-9a-f]{32}"),
    "boot id": re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"),
}


@dataclass(frozen=True)
class HostIdentity:
    """This host's identity (None where nothing identifies it) and why it is partial."""

    value: str | None
    notes: tuple[str, ...] = ()


def _read(what: str, path: Path) -> tuple[str, str | None]:
    """The value of `path` in its format, or "" and the note saying why there is none."""
    try:
        with path.open("rb") as f:
            text = f.read(_READ_BYTES).decode("ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not ASCII"
        return "", f"no {what} ({path}: {reason})"
    if not _FORMATS[what].fullmatch(text):
        return "", f"no {what} ({path} is not one: an uninitialised or foreign value)"
    return text, None


def host_identity(machine_id: Path = MACHINE_ID, boot_id: Path = BOOT_ID) -> HostIdentity:
    """This host's identity from the two files (their paths a parameter for tests)."""
    machine, machine_note = _read("machine-id", machine_id)
    boot, boot_note = _read("boot id", boot_id)
    notes = tuple(n for n in (machine_note, boot_note) if n is not None)
    if not machine and not boot:
        return HostIdentity(None, (*notes, "host identity unknown"))
    # Each input is labelled, so a missing one never makes another's hash.
    message = f"machine-id={machine}\nboot-id={boot}\n".encode("ascii")
    digest = hmac.new(HOST_SALT, message, hashlib.sha256).hexdigest()
    return HostIdentity(digest[:HOST_HEX_DIGITS], notes)
