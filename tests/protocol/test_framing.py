"""The wire, sans-IO: framing byte by byte, bad frames, and the source-contract fingerprint."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aner_worker.contract import source_fingerprint
from protocol import (
    CONTRACT_FILES,
    MAX_FRAME_BYTES,
    PROTOCOL_VERSION,
    FrameDecoder,
    FrameEncoder,
    FxResult,
    FxTask,
    Hello,
    LocalProtocolError,
    McResult,
    McTask,
    Message,
    Refused,
    RemoteProtocolError,
    Shutdown,
    TaskFailed,
    Welcome,
    fingerprint_sources,
)

PEER = 'worker "Atlas-01"'
FP = "sha256:" + "ab" * 32

MESSAGES: list[Message] = [
    Hello(PROTOCOL_VERSION, "Atlas-01", 2, FP),
    Welcome(PROTOCOL_VERSION, FP, "Linux-x86_64/CPython-3.11.7/little", 16, 2),
    Refused("source contract differs (coordinator a, worker b)", PROTOCOL_VERSION, FP),
    McTask(task_id=1, seed=42, start=0, count=65_536),
    McResult(task_id=1, start=0, count=65_536, hits=51_472),
    FxTask(
        task_id=2,
        seed=7,
        start=1_000,
        count=500,
        theta=(0.0, -0.0, 1.5, -2.25, 5e-324, 1.7976931348623157e308, 0.1, -1e-300, 3.0),
    ),
    FxResult(
        task_id=2,
        start=1_000,
        count=500,
        grad=(0.1, 0.2, 0.30000000000000004, -1.0, 1e-17, 2.0, -3.5, 4.0, 1e300),
        loss_sum=346.5735902799727,
        correct=412,
        valid=500,
    ),
    TaskFailed(task_id=3, reason="ValueError: boom"),
    Shutdown(),
    Shutdown("job completed"),
]


def _stream(messages: Sequence[Message]) -> bytes:
    encoder = FrameEncoder()
    return b"".join(encoder.encode(m) for m in messages)


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_message_type_round_trips(message: Message) -> None:
    frame = FrameEncoder().encode(message)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    decoder = FrameDecoder(PEER)
    assert list(decoder.feed(frame)) == [message]
    assert decoder.pending == 0
    decoder.close()


def test_byte_by_byte_gives_the_same_messages() -> None:
    data = _stream(MESSAGES)
    decoder = FrameDecoder(PEER)
    out: list[Message] = []
    for i in range(len(data)):
        out.extend(decoder.feed(data[i : i + 1]))
    assert out == MESSAGES
    decoder.close()


def test_several_frames_in_one_feed() -> None:
    decoder = FrameDecoder(PEER)
    assert list(decoder.feed(_stream(MESSAGES))) == MESSAGES
    assert decoder.pending == 0


def test_frame_split_across_feeds() -> None:
    first, second = MESSAGES[3], MESSAGES[5]
    data = _stream([first, second])
    cut = len(FrameEncoder().encode(first)) + 7  # inside the second frame's payload
    decoder = FrameDecoder(PEER)
    assert list(decoder.feed(data[:cut])) == [first]
    assert decoder.pending == 7
    assert list(decoder.feed(data[cut:])) == [second]
    assert decoder.pending == 0


def test_split_inside_the_header() -> None:
    data = _stream([MESSAGES[0]])
    decoder = FrameDecoder(PEER)
    assert list(decoder.feed(data[:2])) == []
    assert list(decoder.feed(data[2:])) == [MESSAGES[0]]


@pytest.mark.parametrize("keep", [1, 3, 4, 10])
def test_truncated_stream_names_the_peer(keep: int) -> None:
    data = _stream([MESSAGES[6]])
    decoder = FrameDecoder(PEER)
    assert list(decoder.feed(data[:keep])) == []
    with pytest.raises(RemoteProtocolError) as info:
        decoder.close()
    assert info.value.peer == PEER
    assert PEER in str(info.value)
    assert f"{keep} bytes left over" in str(info.value)


def test_clean_end_of_stream_is_not_an_error() -> None:
    decoder = FrameDecoder(PEER)
    assert list(decoder.feed(_stream(MESSAGES[:2]))) == MESSAGES[:2]
    decoder.close()


def test_oversized_header_raises_before_any_payload() -> None:
    decoder = FrameDecoder(PEER)
    with pytest.raises(RemoteProtocolError) as info:
        list(decoder.feed((2**31).to_bytes(4, "big")))
    assert info.value.peer == PEER
    assert f"{2**31} bytes exceeds the maximum of {MAX_FRAME_BYTES}" in str(info.value)
    assert decoder.pending == 4  # the header only: nothing was waited for or allocated


def test_largest_allowed_length_waits_for_its_payload() -> None:
    decoder = FrameDecoder(PEER, max_frame=100)
    assert list(decoder.feed((100).to_bytes(4, "big") + b"\x00" * 99)) == []
    with pytest.raises(RemoteProtocolError, match="101 bytes exceeds the maximum of 100"):
        list(FrameDecoder(PEER, max_frame=100).feed((101).to_bytes(4, "big")))


def test_zero_length_frame() -> None:
    decoder = FrameDecoder(PEER)
    with pytest.raises(RemoteProtocolError, match="empty frame") as info:
        list(decoder.feed(b"\x00\x00\x00\x00"))
    assert info.value.peer == PEER


def test_malformed_msgpack() -> None:
    payload = b"\xc1"  # the one byte MessagePack never uses
    decoder = FrameDecoder(PEER)
    with pytest.raises(RemoteProtocolError, match="malformed message") as info:
        list(decoder.feed(len(payload).to_bytes(4, "big") + payload))
    assert PEER in str(info.value)


@pytest.mark.parametrize(
    "value",
    [
        {"samples": 10},  # a map, not a tagged array
        ["launch_missiles", 1, 2],  # unknown tag
        ["mc_task", 1, 2],  # known tag, missing fields
        ["mc_task", "one", 2, 3, 4],  # known tag, wrong field type
        ["mc_task", 1, -1, 3, 4.5],  # known tag, a float count
        ["hello", 1, "w", 2],  # Hello without its fingerprint
        42,
        None,
    ],
    ids=[
        "map",
        "unknown-tag",
        "missing-fields",
        "wrong-type",
        "float",
        "short-hello",
        "int",
        "nil",
    ],
)
def test_valid_msgpack_that_is_not_a_message(value: object) -> None:
    payload = msgspec.msgpack.encode(value)
    decoder = FrameDecoder(PEER)
    with pytest.raises(RemoteProtocolError, match="malformed message") as info:
        list(decoder.feed(len(payload).to_bytes(4, "big") + payload))
    assert info.value.peer == PEER


def test_largest_seed_round_trips_exactly() -> None:
    task = McTask(task_id=1, seed=2**64 - 1, start=2**62 - 10, count=10)
    (decoded,) = FrameDecoder(PEER).feed(FrameEncoder().encode(task))
    assert isinstance(decoded, McTask)
    assert decoded.seed == 2**64 - 1
    assert decoded == task


def test_encoding_over_the_maximum_is_a_local_error() -> None:
    encoder = FrameEncoder("coordinator", max_frame=64)
    with pytest.raises(LocalProtocolError) as info:
        encoder.encode(TaskFailed(1, "x" * 100))
    assert info.value.peer == "coordinator"
    assert "exceeds 64" in str(info.value)
    # The same encoder still works for a frame that fits.
    frame = encoder.encode(Shutdown())
    assert list(FrameDecoder(PEER).feed(frame)) == [Shutdown()]


def test_encoding_at_the_default_maximum() -> None:
    encoder = FrameEncoder()
    with pytest.raises(LocalProtocolError):
        encoder.encode(TaskFailed(1, "x" * MAX_FRAME_BYTES))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=8))
def test_random_bytes_only_ever_raise_remote_protocol_errors(chunks: list[bytes]) -> None:
    decoder = FrameDecoder(PEER, max_frame=4096)
    try:
        for chunk in chunks:
            for message in decoder.feed(chunk):
                assert isinstance(message, msgspec.Struct)
        decoder.close()
    except RemoteProtocolError as exc:
        assert exc.peer == PEER


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=200))
def test_random_payloads_in_valid_frames(payload: bytes) -> None:
    decoder = FrameDecoder(PEER)
    try:
        messages = list(decoder.feed(len(payload).to_bytes(4, "big") + payload))
    except RemoteProtocolError as exc:
        assert exc.peer == PEER
    else:
        assert len(messages) == 1
        assert decoder.pending == 0


def _reader(files: dict[str, bytes]) -> Callable[[str], bytes]:
    return lambda name: files[name]


def test_fingerprint_is_content_and_order_sensitive() -> None:
    files = {name: f"# {name}\n".encode() for name in CONTRACT_FILES}
    base = fingerprint_sources(_reader(files))
    assert base.startswith("sha256:") and len(base) == len("sha256:") + 64
    assert fingerprint_sources(_reader(dict(files))) == base

    changed = dict(files)
    changed[CONTRACT_FILES[-1]] += b" "
    assert fingerprint_sources(_reader(changed)) != base

    # The same bytes moved from one file to the next must not hash the same.
    a, b = CONTRACT_FILES[0], CONTRACT_FILES[1]
    moved = dict(files)
    moved[a], moved[b] = files[a] + files[b][:1], files[b][1:]
    assert fingerprint_sources(_reader(moved)) != base

    # Swapping two files' contents is a different contract.
    swapped = dict(files)
    swapped[a], swapped[b] = files[b], files[a]
    assert fingerprint_sources(_reader(swapped)) != base


def test_fingerprint_reads_the_listed_files_in_order() -> None:
    seen: list[str] = []

    def read(name: str) -> bytes:
        seen.append(name)
        return b""

    fingerprint_sources(read)
    assert seen == list(CONTRACT_FILES)
    assert seen.index("protocol/messages.py") < seen.index("aner_worker/worker.py")


def test_installed_source_fingerprint_is_stable() -> None:
    first = source_fingerprint()
    assert first.startswith("sha256:")
    assert len(first) == len("sha256:") + 64
    int(first.removeprefix("sha256:"), 16)
    source_fingerprint.cache_clear()
    assert source_fingerprint() == first
