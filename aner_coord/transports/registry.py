"""`open_transport(record)`: the one way to start a worker, over the transport its cluster-file
record names. The SSH and Slurm implementations are imported only when a record names them,
so a job without SSH records never loads asyncssh.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aner_coord.clusterfile import SlurmEndpoint, WorkerRecord
from aner_coord.transports.base import Transport
from aner_coord.transports.pipe import open_pipe


async def open_ssh(
    identity: str, endpoint: str, argv: Sequence[str], *, connect_timeout: float = 15.0
) -> Transport:
    """Run `argv` on an SSH worker (see `aner_coord.transports.ssh`, which alone imports
    asyncssh: a job without SSH records never loads it)."""
    from aner_coord.transports.ssh import open_ssh as open_over_ssh

    return await open_over_ssh(identity, endpoint, argv, connect_timeout=connect_timeout)


async def open_slurm(
    identity: str,
    endpoint: SlurmEndpoint,
    slots: int,
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    start_timeout: float | None = None,
) -> Transport:
    """Run `argv` as a Slurm job step (see `aner_coord.transports.slurm`)."""
    from aner_coord.transports.slurm import open_slurm as open_step

    return await open_step(identity, endpoint, slots, argv, env=env, start_timeout=start_timeout)


async def open_transport(
    record: WorkerRecord, argv: Sequence[str], *, env: Mapping[str, str] | None = None
) -> Transport:
    """Start the worker of one cluster-file record over the transport it names."""
    if record.transport == "local":
        return await open_pipe(record.identity, argv, env=env)
    if record.transport == "ssh":
        return await open_ssh(record.identity, record.endpoint, argv)
    endpoint = record.slurm if record.slurm is not None else SlurmEndpoint()
    return await open_slurm(record.identity, endpoint, record.slots, argv, env=env)
