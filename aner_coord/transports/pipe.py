"""Local pipe workers: `aner parallel worker --stdio` started as a child of this process."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aner_coord.transports.base import Transport
from aner_coord.transports.process import ProcessTransport, spawn


async def open_pipe(
    identity: str, argv: Sequence[str], *, env: Mapping[str, str] | None = None
) -> Transport:
    """Start `argv` as a local worker with its stdin, stdout and stderr on private pipes.

    `close_fds=True`: the worker inherits no descriptor but its three pipes.  The worker stays
    in our process group rather than a new session, so a signal to the group (Ctrl-C in a
    terminal, or stopping a detached coordinator's session) reaches the workers too and none
    outlives the coordinator by accident; `close()` remains the orderly way to stop one.
    """
    process, transport = await spawn(identity, argv, env)
    return ProcessTransport(identity, process, transport, private=[argv[0]] if argv else [])
