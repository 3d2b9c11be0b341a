"""The worker's pipes are widened so a large frame (a Dense result of the 256-wide model,
680 KB) is written at once instead of blocking its computing thread (`worker.widen_pipe`)."""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path

import pytest

from aner_worker.worker import PIPE_BYTES, widen_pipe

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
