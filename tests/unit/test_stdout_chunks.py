"""A child's stdout read as the loop's chunks (`StdoutChunks`): every byte once, in order,
never more than asked for, end of stream and errors as StreamReader gives them, and reading
paused while too much waits. The last test runs a real child through `spawn`."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest
import uvloop

from aner_coord.transports.pipe import open_pipe
from aner_coord.transports.process import StdoutChunks

T = TypeVar("T")


class _Pipe:
    """Records what the reader asks of the pipe it reads (the loop's read transport)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def pause_reading(self) -> None:
        self.calls.append("pause")

    def resume_reading(self) -> None:
        self.calls.append("resume")


def _run(body: Callable[[StdoutChunks], Awaitable[T]]) -> T:
    async def go() -> T:
        return await body(StdoutChunks(100, asyncio.get_running_loop()))

    return asyncio.run(go())


def test_a_chunk_is_handed_over_as_it_came() -> None:
    chunk = bytes(range(50))

    async def body(reader: StdoutChunks) -> None:
        reader.feed_data(chunk)
        assert await reader.read(1000) is chunk

    _run(body)


def test_reads_join_queued_chunks_up_to_n_and_split_one_larger() -> None:
    async def body(reader: StdoutChunks) -> list[bytes]:
        for piece in (b"abc", b"defg", b"hi", b"jklmnopq"):
            reader.feed_data(piece)
        reader.feed_eof()
        return [await reader.read(5) for _ in range(6)]

    # b"abc" + b"defg" would be 7 > 5: each read takes whole chunks while they fit.
    assert _run(body) == [b"abc", b"defg", b"hi", b"jklmn", b"opq", b""]


def test_a_read_waits_for_data_and_sees_the_end() -> None:
    async def body(reader: StdoutChunks) -> list[bytes]:
        loop = asyncio.get_running_loop()
        loop.call_soon(reader.feed_data, b"late")
        first = await reader.read(10)
        loop.call_soon(reader.feed_eof)
        return [first, await reader.read(10), await reader.read(10)]

    assert _run(body) == [b"late", b"", b""]


def test_an_error_on_the_pipe_is_raised_by_the_next_read() -> None:
    async def body(reader: StdoutChunks) -> None:
        reader.feed_data(b"kept")
        reader.set_exception(ConnectionResetError("gone"))
        with pytest.raises(ConnectionResetError):
            await reader.read(10)

    _run(body)


def test_a_cancelled_read_leaves_the_reader_usable() -> None:
    async def body(reader: StdoutChunks) -> bytes:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.read(10), 0.01)
        reader.feed_data(b"after")
        return await reader.read(10)

    assert _run(body) == b"after"


def test_reading_pauses_past_twice_the_limit_and_resumes_at_the_limit() -> None:
    async def body(reader: StdoutChunks) -> list[str]:
        pipe = _Pipe()
        reader.set_transport(pipe)  # type: ignore[arg-type]
        for _ in range(5):
            reader.feed_data(b"x" * 50)  # 250 bytes > 2 x 100 after the fifth
        assert pipe.calls == ["pause"]
        await reader.read(100)  # 150 left: still paused
        assert pipe.calls == ["pause"]
        await reader.read(50)  # 100 left: resumed
        return pipe.calls

    assert _run(body) == ["pause", "resume"]


@pytest.mark.parametrize("use_uvloop", [False, True], ids=["asyncio", "uvloop"])
def test_a_child_writing_megabytes_in_odd_pieces(use_uvloop: bool) -> None:
    # 3 MB written in pieces of 7,777 bytes by a real child: every byte arrives once, in
    # order, no read longer than asked.
    script = (
        "import os, sys\n"
        "data = bytes(i % 251 for i in range(3_000_000))\n"
        "for i in range(0, len(data), 7777):\n"
        "    os.write(1, data[i : i + 7777])\n"
    )
    expected = bytes(i % 251 for i in range(3_000_000))

    async def go() -> bytes:
        transport = await open_pipe("w1", [sys.executable, "-c", script])
        pieces = []
        try:
            while data := await transport.read(300_000):
                assert len(data) <= 300_000
                pieces.append(data)
        finally:
            await transport.close()
        return b"".join(pieces)

    if use_uvloop:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            got = runner.run(go())
    else:
        got = asyncio.run(go())
    assert got == expected
