"""The wire, sans-IO: framing byte by byte, bad frames, and the source-contract fingerprint."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec import Raw

from aner_worker.contract import source_fingerprint
from aner_worker.kernels.base import encode
from aner_worker.kernels.montecarlo import McParams, McStats
from aner_worker.kernels.regression import RegressionParams, RegressionStats
from protocol import (
    MAX_FRAME_BYTES,
    PROTOCOL_VERSION,
    FrameDecoder,
    FrameEncoder,
    Hello,
    LocalProtocolError,
    Message,
    Params,
    Ping,
    Pong,
    Refused,
    RemoteProtocolError,
    Result,
    Shutdown,
    Task,
    TaskFailed,
    Welcome,
    contract_files,
    fingerprint_sources,
)

PEER = 'worker "Atlas-01"'
FP = "sha256:" + "ab" * 32

THETA = (0.0, -0.0, 1.5, -2.25, 5e-324, 1.7976931348623157e308, 0.1, -1e-300, 3.0)
GRAD = (0.1, 0.2, 0.30000000000000004, -1.0, 1e-17, 2.0, -3.5, 4.0, 1e300)

MESSAGES: list[Message] = [
    Hello(PROTOCOL_VERSION, "Atlas-01", 2, FP, ("monte-carlo", "regression")),
    Welcome(PROTOCOL_VERSION, FP, "Linux-x86_64/CPython-3.11.7/little", 16, 2),
    Refused("source contract differs (coordinator a, worker b)", PROTOCOL_VERSION, FP),
    Params(pass_id=0, kernel="monte-carlo", body=Raw(encode(McParams(seed=42)))),
    Task(task_id=1, pass_id=0, start=0, count=65_536),
    Result(task_id=1, start=0, count=65_536, body=Raw(encode(McStats(hits=51_472))), busy_s=0.25),
    Params(pass_id=3, kernel="regression", body=Raw(encode(RegressionParams(7, THETA)))),
    Result(
        task_id=2,
        start=1_000,
        count=500,
        body=Raw(encode(RegressionStats(GRAD, 346.5735902799727, 412, 500))),
    ),
    TaskFailed(task_id=3, reason="ValueError: boom"),
    Ping(nonce=17),
    Pong(nonce=17),
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
    first, second = MESSAGES[4], MESSAGES[5]
    data = _stream([first, second])
    cut = len(FrameEncoder().encode(first)) + 7  # inside the second frame's payload
    decoder = FrameDecoder(PEER)
    assert list(decoder.feed(data[:cut])) == [first]
    assert decoder.pending == 7
    assert list(decoder.feed(data[cut:])) == [second]
    assert decoder.pending == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 10**6), max_size=12), st.booleans())
def test_decoded_bodies_survive_later_feeds(cuts: list[int], mutable: bool) -> None:
    # A `Raw` body refers to the bytes it was decoded from, not a copy: those bytes must stay
    # as they were whatever is fed afterwards, and whatever the caller does with its own
    # (mutable) chunk once `feed` returns.
    data = _stream(MESSAGES * 3)
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    decoder = FrameDecoder(PEER)
    out: list[Message] = []
    for a, b in itertools.pairwise(points):
        chunk = bytearray(data[a:b]) if mutable else data[a:b]
        out.extend(decoder.feed(chunk))
        if mutable:
            chunk[:] = b"\xff" * len(chunk)
    assert out == MESSAGES * 3
    assert [bytes(m.body) for m in out if isinstance(m, Params | Result)] == [
        bytes(m.body) for m in MESSAGES * 3 if isinstance(m, Params | Result)
    ]
    decoder.close()


def test_split_inside_the_header() -> None:
    data = _stream([MESSAGES[0]])
    decoder = FrameDecoder(PEER)
    assert list(decoder.feed(data[:2])) == []
    assert list(decoder.feed(data[2:])) == [MESSAGES[0]]


@pytest.mark.parametrize("keep", [1, 3, 4, 10])
def test_truncated_stream_names_the_peer(keep: int) -> None:
    data = _stream([MESSAGES[7]])
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
        ["task", 1, 2],  # known tag, missing fields
        ["task", "one", 2, 3, 4],  # known tag, wrong field type
        ["task", 1, 0, 3, 4.5],  # known tag, a float count
        ["hello", 1, "w", 2],  # Hello without its fingerprint
        ["result", 1, 0, 3, "body", "slow"],  # a string where busy seconds go
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
        "result-busy",
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
    params = Params(pass_id=0, kernel="monte-carlo", body=Raw(encode(McParams(2**64 - 1))))
    task = Task(task_id=1, pass_id=0, start=2**62 - 10, count=10)
    decoded = FrameDecoder(PEER).feed(FrameEncoder().encode(params) + FrameEncoder().encode(task))
    assert decoded == [params, task]
    first = decoded[0]
    assert isinstance(first, Params)
    assert msgspec.msgpack.decode(first.body, type=McParams).seed == 2**64 - 1


def test_bodies_are_opaque_bytes_on_the_wire() -> None:
    """The wire knows no computation: a body is the kernel's own MessagePack document, carried
    bit for bit (negative zero, subnormals and the largest double included)."""
    stats = RegressionStats(GRAD, -0.0, 0, 500)
    result = Result(task_id=9, start=0, count=500, body=Raw(encode(stats)))
    (decoded,) = FrameDecoder(PEER).feed(FrameEncoder().encode(result))
    assert isinstance(decoded, Result)
    assert bytes(decoded.body) == encode(stats)
    back = msgspec.msgpack.decode(decoded.body, type=RegressionStats)
    assert back == stats
    assert str(back.loss_sum) == "-0.0"
    assert decoded.busy_s == 0.0  # a defaulted field appended to the message


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


NAMES = (
    "protocol/version.py",
    "protocol/messages.py",
    "aner_worker/worker.py",
    "aner_worker/kernels/dense/network.py",
)


def test_fingerprint_is_content_and_order_sensitive() -> None:
    files = {name: f"# {name}\n".encode() for name in NAMES}
    base = fingerprint_sources(files, _reader(files))
    assert base.startswith("sha256:") and len(base) == len("sha256:") + 64
    assert fingerprint_sources(reversed(NAMES), _reader(dict(files))) == base

    changed = dict(files)
    changed[NAMES[-1]] += b" "
    assert fingerprint_sources(changed, _reader(changed)) != base

    # The same bytes moved from one file to the next must not hash the same.
    a, b = sorted(NAMES)[0], sorted(NAMES)[1]
    moved = dict(files)
    moved[a], moved[b] = files[a] + files[b][:1], files[b][1:]
    assert fingerprint_sources(moved, _reader(moved)) != base

    # Swapping two files' contents is a different contract.
    swapped = dict(files)
    swapped[a], swapped[b] = files[b], files[a]
    assert fingerprint_sources(swapped, _reader(swapped)) != base

    # A file added to a contract package joins the contract.
    added = {**files, "aner_worker/kernels/extra.py": b""}
    assert fingerprint_sources(added, _reader(added)) != base


def test_the_contract_is_every_source_file_of_its_packages_in_sorted_order() -> None:
    seen: list[str] = []

    def read(name: str) -> bytes:
        seen.append(name)
        return b""

    given = [
        "aner_worker/worker.py",
        "protocol/messages.py",
        "aner_worker/__pycache__/worker.cpython-311.pyc",
        "aner_worker/kernels/__pycache__/x.py",
        "aner_worker/py.typed",
        "aner_coord/parallel.py",
        "tests/test_x.py",
        "aner_worker/kernels/dense/network.py",
        "setup.py",
    ]
    fingerprint_sources(given, read)
    assert seen == [
        "aner_worker/kernels/dense/network.py",
        "aner_worker/worker.py",
        "protocol/messages.py",
    ]
    assert list(contract_files(given)) == seen


def test_installed_source_fingerprint_is_stable() -> None:
    first = source_fingerprint()
    assert first.startswith("sha256:")
    assert len(first) == len("sha256:") + 64
    int(first.removeprefix("sha256:"), 16)
    source_fingerprint.cache_clear()
    assert source_fingerprint() == first


def test_a_task_frame_byte_by_byte() -> None:
    """The exact bytes: a big-endian length, then the tagged array ["task", id, pass, start,
    count] in MessagePack."""
    frame = FrameEncoder().encode(Task(task_id=1, pass_id=0, start=256, count=3))
    assert frame == (
        b"\x00\x00\x00\x0c"  # 12 bytes follow
        b"\x95"  # an array of five
        b"\xa4task"  # the tag
        b"\x01\x00"  # task_id 1, pass_id 0
        b"\xcd\x01\x00"  # start 256 as uint16
        b"\x03"  # count 3
    )
    assert FrameDecoder(PEER).feed(frame) == [Task(1, 0, 256, 3)]
