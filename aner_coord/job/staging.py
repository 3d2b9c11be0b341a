"""Staging file data on a worker process, right after its handshake (docs/contracts.md, section 9,
Data).

The coordinator names the data set and its blocks; the worker answers with the blocks its
cache lacks; those alone are sent; the worker confirms once the data set is assembled. The
exchange's rules live in `protocol.connection`; this is the shell that moves the bytes and
records what it cost, per worker, for `status.json` and `result.json`.
"""

from __future__ import annotations

import time
from typing import Any, TypeVar

from aner_coord.computations.base import StagePlan, StagesData
from aner_coord.job.link import LinkClosed, WorkerLink
from aner_coord.jobdir.status import StagingRecord
from protocol import BlocksWanted, DataStaged

_T = TypeVar("_T")


class StagingLost(Exception):
    """The worker went away or said something else while staging."""


def plan_of(run: Any) -> StagePlan | None:
    return run.staging() if isinstance(run, StagesData) else None


async def stage_worker(link: WorkerLink, plan: StagePlan, timeout_s: float) -> StagingRecord:
    """Stage `plan` on the worker of `link`, waiting at most `timeout_s` for each answer."""
    began = time.monotonic()
    transport, connection = link.transport, link.connection
    await transport.write(connection.stage(plan.dataset, plan.names))
    wanted = await _expect(link, BlocksWanted, timeout_s)
    data = dict(plan.blocks)
    sent = 0
    for digest in wanted.blocks:
        block = data[digest]
        await transport.write(connection.block(digest, block))
        sent += len(block)
    await _expect(link, DataStaged, timeout_s)
    return StagingRecord(
        identity=link.identity,
        state="cold" if wanted.blocks else "cached",
        bytes=sent,
        blocks=len(wanted.blocks),
        seconds=round(time.monotonic() - began, 6),
    )


async def _expect(link: WorkerLink, kind: type[_T], timeout_s: float) -> _T:
    """The next event of `kind`; the events before it are dropped, those after it (Missing
    and Staged may share a read) stay pending on the link."""
    while True:
        while link.pending:
            event = link.pending.pop(0)
            if isinstance(event, kind):
                return event
        try:
            link.pending.extend(await link.receive(timeout_s))
        except LinkClosed:
            raise StagingLost("the worker closed its connection while staging data") from None
