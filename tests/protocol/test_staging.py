"""Staging rules of protocol/connection.py, byte by byte and without processes: Stage, Missing,
the blocks named missing (each checked against its SHA256 name), Staged; no task meanwhile."""

from __future__ import annotations

import hashlib

import msgspec
import pytest

from protocol import (
    Block,
    BlockReceived,
    BlocksWanted,
    CoordinatorConnection,
    DataStaged,
    FrameDecoder,
    FrameEncoder,
    HelloReceived,
    LocalProtocolError,
    Missing,
    RemoteProtocolError,
    Stage,
    Staged,
    StageReceived,
    Task,
    TaskReceived,
    WorkerConnection,
    sha256_hex,
)

FP = "sha256:" + "ab" * 32
BODY = msgspec.msgpack.encode([1])
BLOCKS = [b"first block", b"second block", b"third"]
NAMES = tuple(hashlib.sha256(b).hexdigest() for b in BLOCKS)
DATASET = hashlib.sha256(b"".join(BLOCKS)).hexdigest()


def ready() -> tuple[CoordinatorConnection, WorkerConnection]:
    coordinator = CoordinatorConnection("w1", 1, FP, ("dense",), window=4)
    worker = WorkerConnection(FP, 1, "test-platform", {"dense"})
    [hello] = worker.receive(coordinator.hello())
    assert isinstance(hello, HelloReceived) and hello.refusal is None
    coordinator.receive(worker.reply())
    return coordinator, worker


def frame(message: object) -> bytes:
    return FrameEncoder("test").encode(message)  # type: ignore[arg-type]


def test_the_names_are_sha256_hex() -> None:
    assert sha256_hex(b"abc") == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )


def test_staging_one_byte_at_a_time_moves_only_the_missing_blocks() -> None:
    coordinator, worker = ready()
    got: list[object] = []
    for byte in coordinator.stage(DATASET, NAMES):
        got.extend(worker.receive(bytes([byte])))
    assert got == [StageReceived(DATASET, NAMES)]
    # The worker's cache holds the first block: it asks for the other two.
    events = coordinator.receive(worker.missing(NAMES[1:]))
    assert events == [BlocksWanted(DATASET, NAMES[1:])]
    received: list[object] = []
    for name, data in zip(NAMES[1:], BLOCKS[1:], strict=True):
        for byte in coordinator.block(name, data):
            received.extend(worker.receive(bytes([byte])))
    assert received == [
        BlockReceived(NAMES[1], BLOCKS[1], complete=False),
        BlockReceived(NAMES[2], BLOCKS[2], complete=True),
    ]
    assert coordinator.receive(worker.staged()) == [DataStaged(DATASET)]
    assert not coordinator.staging
    # Tasks flow again once staging is over.
    data = coordinator.params(0, "dense", BODY) + coordinator.task(Task(1, 0, 0, 5))
    assert isinstance(worker.receive(data)[1], TaskReceived)


def test_a_cached_data_set_sends_no_block() -> None:
    coordinator, worker = ready()
    worker.receive(coordinator.stage(DATASET, NAMES))
    assert coordinator.receive(worker.missing(())) == [BlocksWanted(DATASET, ())]
    with pytest.raises(LocalProtocolError, match="not asked for"):
        coordinator.block(NAMES[0], BLOCKS[0])
    assert coordinator.receive(worker.staged()) == [DataStaged(DATASET)]


def test_a_corrupted_block_is_refused_naming_it() -> None:
    coordinator, worker = ready()
    worker.receive(coordinator.stage(DATASET, NAMES))
    coordinator.receive(worker.missing(NAMES))
    with pytest.raises(RemoteProtocolError, match=f"block {NAMES[0]} does not match its SHA256"):
        worker.receive(frame(Block(NAMES[0], b"first blocK")))


def test_a_block_nobody_asked_for_is_refused() -> None:
    coordinator, worker = ready()
    worker.receive(coordinator.stage(DATASET, NAMES))
    with pytest.raises(RemoteProtocolError, match="not asked for"):
        worker.receive(frame(Block(NAMES[0], BLOCKS[0])))  # before Missing


def test_a_block_sent_twice_is_refused() -> None:
    coordinator, worker = ready()
    worker.receive(coordinator.stage(DATASET, NAMES))
    coordinator.receive(worker.missing(NAMES[:2]))
    worker.receive(coordinator.block(NAMES[0], BLOCKS[0]))
    with pytest.raises(LocalProtocolError):
        coordinator.block(NAMES[0], BLOCKS[0])
    with pytest.raises(RemoteProtocolError, match="twice"):
        worker.receive(frame(Block(NAMES[0], BLOCKS[0])))


def test_no_task_while_staging_on_either_side() -> None:
    coordinator, worker = ready()
    params = coordinator.params(0, "dense", BODY)
    worker.receive(params)
    worker.receive(coordinator.stage(DATASET, NAMES))
    with pytest.raises(LocalProtocolError, match="while staging"):
        coordinator.task(Task(1, 0, 0, 5))
    with pytest.raises(RemoteProtocolError, match="before staging completed"):
        worker.receive(frame(Task(1, 0, 0, 5)))


def test_staged_before_every_block_is_an_error_on_both_sides() -> None:
    coordinator, worker = ready()
    worker.receive(coordinator.stage(DATASET, NAMES))
    coordinator.receive(worker.missing(NAMES[:1]))
    with pytest.raises(LocalProtocolError, match="before every missing block"):
        worker.staged()
    with pytest.raises(RemoteProtocolError, match="before receiving every block"):
        coordinator.receive(frame(Staged(DATASET)))


@pytest.mark.parametrize(
    ("message", "match"),
    [
        (Missing(DATASET, (NAMES[0], NAMES[0])), "names a block twice"),
        (Missing(DATASET, ("ab" * 32,)), "not part of data set"),
        (Missing("cd" * 32, NAMES), "not being staged"),
    ],
)
def test_a_missing_list_must_name_blocks_of_the_data_set(message: Missing, match: str) -> None:
    coordinator, worker = ready()
    worker.receive(coordinator.stage(DATASET, NAMES))
    with pytest.raises(RemoteProtocolError, match=match):
        coordinator.receive(frame(message))


def test_missing_or_staged_without_a_stage_is_an_error() -> None:
    coordinator, _ = ready()
    with pytest.raises(RemoteProtocolError, match="not being staged"):
        coordinator.receive(frame(Missing(DATASET, ())))
    coordinator, _ = ready()
    with pytest.raises(RemoteProtocolError, match="not being staged"):
        coordinator.receive(frame(Staged(DATASET)))


@pytest.mark.parametrize(
    ("stage", "match"),
    [
        (Stage("not-a-digest", NAMES), "not a SHA256 hex digest"),
        (Stage(DATASET, ()), "0 blocks"),
        (Stage(DATASET, ("AB" * 32,)), "not a SHA256 hex digest"),
    ],
)
def test_a_malformed_stage_is_refused(stage: Stage, match: str) -> None:
    _, worker = ready()
    with pytest.raises(RemoteProtocolError, match=match):
        worker.receive(frame(stage))
    coordinator, _ = ready()
    with pytest.raises(LocalProtocolError, match=match):
        coordinator.stage(stage.dataset, stage.blocks)


def test_stage_before_the_handshake_is_refused() -> None:
    worker = WorkerConnection(FP, 1, "test-platform", {"dense"})
    with pytest.raises(RemoteProtocolError, match="expected Hello"):
        worker.receive(frame(Stage(DATASET, NAMES)))


def test_a_large_block_fits_in_one_frame_and_an_oversized_one_is_refused_unread() -> None:
    data = bytes(4 << 20)
    name = hashlib.sha256(data).hexdigest()
    coordinator, worker = ready()
    worker.receive(coordinator.stage(name, (name,)))
    coordinator.receive(worker.missing((name,)))
    [event] = worker.receive(coordinator.block(name, data))
    assert isinstance(event, BlockReceived) and event.data == data and event.complete
    decoder = FrameDecoder("worker", max_frame=1 << 20)
    with pytest.raises(RemoteProtocolError, match="exceeds the maximum"):
        decoder.feed(frame(Block(name, data))[:16])  # refused from the header alone
