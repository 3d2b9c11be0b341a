"""Staging file data on a worker process, right after its handshake (SPEC section 9, Data).

The coordinator names the data set and its blocks; the worker answers with the blocks its
cache lacks; those alone are sent; the worker confirms once the data set is assembled. The
exchange's rules live in `protocol.connection`; this is the shell that moves the bytes and
records what it cost, per worker, for `status.json` and `result.json`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, TypeVar

from aner_coord.computations.base import StagePlan, StagesData
from aner_coord.jobdir.status import StagingRecord
from aner_coord.transports.base import Transport
from protocol import BlocksWanted, CoordinatorConnection, DataStaged

_T = TypeVar("_T")


class StagingLost(Exception):
    """The worker went away or said something else while staging."""


def plan_of(run: Any) -> StagePlan | None:
    return run.staging() if isinstance(run, StagesData) else None


async def stage_worker(
    identity: str,
    transport: Transport,
    connection: CoordinatorConnection,
    plan: StagePlan,
    timeout_s: float,
) -> StagingRecord:
    began = time.monotonic()
    pending: list[Any] = []  # events read but not yet wanted: Missing and Staged may share a read
    await transport.write(connection.stage(plan.dataset, plan.names))
    wanted = await _expect(transport, connection, BlocksWanted, timeout_s, pending)
    data = dict(plan.blocks)
    sent = 0
    for digest in wanted.blocks:
        block = data[digest]
        await transport.write(connection.block(digest, block))
        sent += len(block)
    await _expect(transport, connection, DataStaged, timeout_s, pending)
    return StagingRecord(
        identity=identity,
        state="cold" if wanted.blocks else "cached",
        bytes=sent,
        blocks=len(wanted.blocks),
        seconds=round(time.monotonic() - began, 6),
    )


async def _expect(
    transport: Transport,
    connection: CoordinatorConnection,
    kind: type[_T],
    timeout_s: float,
    pending: list[Any],
) -> _T:
    """The next event of `kind`, from `pending` first; later events stay in `pending`."""
    while True:
        while pending:
            event = pending.pop(0)
            if isinstance(event, kind):
                return event
        data = await asyncio.wait_for(transport.read(), timeout_s)
        if not data:
            connection.end_of_input()
            raise StagingLost("the worker closed its connection while staging data")
        pending.extend(connection.receive(data))
