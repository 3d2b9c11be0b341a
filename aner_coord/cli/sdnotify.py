"""A tiny sd_notify client: tells systemd (a `Type=notify` unit) how a foreground job is doing.

The protocol is one datagram per message on the unix socket named by `$NOTIFY_SOCKET`
(`@name` means the abstract namespace), newline-separated `KEY=value` fields. We send
`READY=1` once the job directory is locked and its first status written, `STATUS=<one line>`
as snapshots arrive (at most once a second, so systemd is not flooded), and `STOPPING=1` once
the job is cancelling or has ended. Like libsystemd's own client, sending never fails the
job: a vanished socket only loses a notification.
"""

from __future__ import annotations

import logging
import os
import socket
import time

from aner_coord.cli.progress import describe
from aner_coord.jobdir.status import JobState, StatusSnapshot

ENV = "NOTIFY_SOCKET"
STATUS_MIN_INTERVAL_S = 1.0

log = logging.getLogger("aner.sdnotify")


def socket_address(value: str) -> str | None:
    """The `AF_UNIX` address for a `$NOTIFY_SOCKET` value, or None if we cannot use it."""
    if value.startswith("@"):
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    return None  # e.g. vsock: addresses, which a user service never gets


class Notifier:
    """Observer and readiness callback for a job run under systemd."""

    def __init__(self, address: str) -> None:
        self._address = address
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self._last_status = 0.0
        self._last_state: JobState | None = None
        self._stopping = False

    @classmethod
    def from_environment(cls) -> Notifier | None:
        """A notifier if systemd gave us a socket. The variable is removed from our
        environment (as sd_notify's `unset_environment` does) so that worker processes do
        not inherit it and mistake themselves for the service."""
        value = os.environ.pop(ENV, None)
        if not value:
            return None
        address = socket_address(value)
        if address is None:
            log.warning("ignoring unsupported %s address", ENV)
            return None
        return cls(address)

    def send(self, *fields: str) -> None:
        try:
            self._socket.sendto("\n".join(fields).encode(), self._address)
        except OSError as exc:
            log.debug("sd_notify failed: %s", exc)

    def ready(self) -> None:
        self.send("READY=1")

    def __call__(self, snapshot: StatusSnapshot) -> None:
        now = time.monotonic()
        changed = snapshot.state != self._last_state
        if changed or now - self._last_status >= STATUS_MIN_INTERVAL_S:
            self._last_state = snapshot.state
            self._last_status = now
            fields = [f"STATUS={describe(snapshot)}"]
            if not self._stopping and (snapshot.terminal or snapshot.state is JobState.CANCELLING):
                self._stopping = True
                fields.append("STOPPING=1")
            self.send(*fields)

    def close(self) -> None:
        self._socket.close()
