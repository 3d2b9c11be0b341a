"""The worker's output: its pipes are widened so a large frame (a Dense result of the
256-wide model, 680 KB) is written at once (`worker.widen_pipe`), and a slot that sends a
frame never waits on the pipe: the writer thread writes it (`worker._Output`)."""

from __future__ import annotations

import fcntl
import os
import tempfile
import threading
from pathlib import Path

import pytest

from aner_worker.worker import PIPE_BYTES, _Output, widen_pipe
from protocol import WorkerConnection
from tests.support import HANG_S

linux_only = pytest.mark.skipif(
    not hasattr(fcntl, "F_SETPIPE_SZ"), reason="F_SETPIPE_SZ is Linux's"
)


@linux_only
def test_a_pipe_takes_a_whole_large_frame_at_once() -> None:
    limit = int(Path("/proc/sys/fs/pipe-max-size").read_text())
    if limit < PIPE_BYTES and os.geteuid() != 0:
        pytest.skip(f"pipe-max-size is {limit} here")
    r, w = os.pipe()
    try:
        widen_pipe(w)
        assert fcntl.fcntl(r, fcntl.F_GETPIPE_SZ) >= PIPE_BYTES  # one pipe, both ends
        os.set_blocking(w, False)
        frame = b"x" * 700_000  # larger than a Dense result frame of the 256-wide model
        assert os.write(w, frame) == len(frame)  # never blocks: no reader needed
    finally:
        os.close(r)
        os.close(w)


def test_what_is_not_a_pipe_is_left_alone() -> None:
    with tempfile.TemporaryFile() as f:
        widen_pipe(f.fileno())  # EBADF/EINVAL from the kernel: nothing raised
    r, w = os.pipe()
    os.close(r)
    os.close(w)
    widen_pipe(w)  # a closed descriptor: nothing raised


def _read_all(fd: int, size: int) -> bytes:
    got = bytearray()
    while len(got) < size:
        piece = os.read(fd, size - len(got))
        assert piece, "the pipe ended early"
        got += piece
    return bytes(got)


def test_a_slot_sending_a_frame_larger_than_the_pipe_does_not_wait_for_the_reader() -> None:
    # Before the writer thread, the sending slot wrote the frame itself and blocked until
    # the coordinator read it: here nobody reads until every send has returned.
    r, w = os.pipe()
    try:
        capacity = fcntl.fcntl(w, fcntl.F_GETPIPE_SZ) if hasattr(fcntl, "F_GETPIPE_SZ") else 65536
        out = _Output(w, WorkerConnection("f" * 64, 1, "p", {"dense"}))
        frames = [bytes([i]) * (capacity + 1000) for i in range(3)]  # each overfills the pipe
        sent = threading.Event()

        def slot() -> None:
            for frame in frames:
                out.send(frame)
            sent.set()

        threading.Thread(target=slot, daemon=True).start()
        assert sent.wait(HANG_S), "a send waited for the pipe's reader"
        closed = threading.Thread(target=out.close)
        closed.start()  # writes what is pending, as the reader takes it
        data = _read_all(r, sum(map(len, frames)))
        closed.join(HANG_S)
        assert not closed.is_alive()
        assert data == b"".join(frames)  # whole, in order
    finally:
        os.close(r)
        os.close(w)


def test_a_held_frame_goes_out_with_the_next_or_at_close() -> None:
    r, w = os.pipe()
    try:
        out = _Output(w, WorkerConnection("f" * 64, 1, "p", {"dense"}))
        out.send(b"held", hold=True)
        out.send(b"next")
        assert _read_all(r, 8) == b"heldnext"
        out.send(b"last", hold=True)
        out.close()
        assert _read_all(r, 4) == b"last"
        out.send(b"after")  # a closed output drops what comes later
        os.set_blocking(r, False)
        with pytest.raises(BlockingIOError):
            os.read(r, 10)
    finally:
        os.close(r)
        os.close(w)


def test_a_broken_pipe_drops_what_is_pending_and_close_returns() -> None:
    r, w = os.pipe()
    os.close(r)
    try:
        out = _Output(w, WorkerConnection("f" * 64, 1, "p", {"dense"}))
        out.send(b"x" * 100)
        out.close()
        assert out.broken
    finally:
        os.close(w)
