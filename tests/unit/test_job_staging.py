"""The coordinator's staging shell (aner_coord.job.staging) against a real `WorkerConnection`
through an in-memory byte pipe: the worker's answers may arrive in one read or byte by byte,
and only the blocks it lacks are sent."""

from __future__ import annotations

import asyncio
import random

import pytest

from aner_coord.clusterfile import WorkerRecord
from aner_coord.computations.base import StagePlan
from aner_coord.job.link import handshake
from aner_coord.job.staging import StagingLost, stage_worker
from aner_worker.blocks import split
from protocol import (
    BlockReceived,
    CoordinatorConnection,
    StageReceived,
    WorkerConnection,
    sha256_hex,
)

FP = "sha256:" + "ab" * 32
BLOB = random.Random(1).randbytes(10_000)  # three distinct blocks of 4,096 or fewer


class Pipe:
    """The worker's end is a real WorkerConnection answering as `aner_worker.worker` does,
    with a cache holding `cached`; its bytes come back in reads of `read_size`."""

    def __init__(self, cached: set[str], read_size: int, hang_up: bool = False) -> None:
        self.identity = "w1"
        self.worker = WorkerConnection(FP, 1, "test", {"dense"})
        self.cached = cached
        self.read_size = read_size
        self.hang_up = hang_up
        self.outbox = b""
        self.sent_blocks: list[str] = []

    async def write(self, data: bytes) -> None:
        for event in self.worker.receive(data):
            if isinstance(event, StageReceived):
                if self.hang_up:
                    self.outbox = b""
                    return
                missing = tuple(d for d in dict.fromkeys(event.blocks) if d not in self.cached)
                self.outbox += self.worker.missing(missing)
                if not missing:
                    self.outbox += self.worker.staged()
            elif isinstance(event, BlockReceived):
                self.sent_blocks.append(event.digest)
                if event.complete:
                    self.outbox += self.worker.staged()
            else:
                self.outbox += self.worker.reply()

    async def read(self, n: int = 65536) -> bytes:
        data, self.outbox = self.outbox[: self.read_size], self.outbox[self.read_size :]
        return data


def staged(pipe: Pipe) -> object:
    async def go() -> object:
        record = WorkerRecord("w1", "local", "-", "/opt/aner/bin/aner", 1, line=2)
        coordinator = CoordinatorConnection("w1", 1, FP, ("dense",))
        link = await handshake(record, pipe, coordinator, timeout_s=5)  # type: ignore[arg-type]
        plan = StagePlan(sha256_hex(BLOB), tuple(split(BLOB, size=4096)))
        return await stage_worker(link, plan, timeout_s=5)

    return asyncio.run(go())


@pytest.mark.parametrize("read_size", [1, 7, 1 << 20])
def test_a_cold_worker_gets_every_block_once(read_size: int) -> None:
    pipe = Pipe(cached=set(), read_size=read_size)
    record = staged(pipe)
    names = [name for name, _ in split(BLOB, size=4096)]
    assert pipe.sent_blocks == names
    assert (record.state, record.bytes, record.blocks) == ("cold", len(BLOB), len(names))  # type: ignore[attr-defined]


@pytest.mark.parametrize("read_size", [1, 1 << 20])
def test_a_cached_worker_gets_nothing_even_when_both_answers_share_a_read(
    read_size: int,
) -> None:
    names = {name for name, _ in split(BLOB, size=4096)}
    pipe = Pipe(cached=names, read_size=read_size)
    record = staged(pipe)
    assert pipe.sent_blocks == []
    assert (record.state, record.bytes, record.blocks) == ("cached", 0, 0)  # type: ignore[attr-defined]


def test_a_worker_that_hangs_up_while_staging_is_named() -> None:
    with pytest.raises(StagingLost, match="closed its connection while staging"):
        staged(Pipe(cached=set(), read_size=64, hang_up=True))
