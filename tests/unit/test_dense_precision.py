"""The declared compute precision of a Dense training, piece by piece, without processes:
workers state the precisions they compute at the handshake (an older worker, which does not
say, computes float64 only), a worker that cannot compute the job's is refused naming it,
and a pass's frozen parameters are decoded once per pass, by the worker and by the kernel."""

from __future__ import annotations

import asyncio
import os

import msgspec
import numpy as np
import pytest

from aner_coord.clusterfile import WorkerRecord
from aner_coord.computations.dense.request import DenseRequest
from aner_coord.computations.dense.run import DenseRun
from aner_coord.job.link import WorkerRefused, handshake, precision_of, require_precision
from aner_worker.kernels.dense import rows
from aner_worker.kernels.dense.data import TeacherDataset
from aner_worker.kernels.dense.params import TRAIN, DenseParams
from aner_worker.worker import _Output, _Serving
from protocol import CoordinatorConnection, Params, Welcome, WorkerConnection
from protocol.messages import Message

FP = "sha256:" + "cd" * 32


class Pipe:
    """A worker's end in memory: a real WorkerConnection that answers the Hello."""

    def __init__(self, worker: WorkerConnection) -> None:
        self.worker = worker
        self.outbox = b""

    async def write(self, data: bytes) -> None:
        for _ in self.worker.receive(data):
            self.outbox += self.worker.reply()

    async def read(self, n: int = 65536) -> bytes:
        data, self.outbox = self.outbox, b""
        return data


def link_to(worker: WorkerConnection, identity: str = "old-1") -> object:
    async def go() -> object:
        record = WorkerRecord(identity, "local", "-", "/opt/aner/bin/aner", 1, line=2)
        coordinator = CoordinatorConnection(identity, 1, FP, ("dense",))
        return await handshake(record, Pipe(worker), coordinator, timeout_s=5)  # type: ignore[arg-type]

    return asyncio.run(go())


def test_a_worker_states_its_precisions_and_an_older_one_float64_only() -> None:
    both = link_to(WorkerConnection(FP, 1, "p", {"dense"}, precisions=("float64", "float32")))
    assert both.precisions == ("float64", "float32")  # type: ignore[attr-defined]
    require_precision(both, "float32")  # type: ignore[arg-type]
    older = link_to(WorkerConnection(FP, 1, "p", {"dense"}))
    assert older.precisions == ("float64",)  # type: ignore[attr-defined]
    require_precision(older, "float64")  # type: ignore[arg-type]
    require_precision(older, None)  # type: ignore[arg-type]
    with pytest.raises(WorkerRefused) as refused:
        require_precision(older, "float32")  # type: ignore[arg-type]
    assert str(refused.value) == (
        'worker "old-1" failed during handshake: it computes in float64 only and the job '
        "declares float32 (update aner there, or leave it out of the group)"
    )


def test_a_welcome_without_precisions_decodes_as_float64_only() -> None:
    # What a worker from before the field sends: the same array, one element shorter.
    class OldWelcome(msgspec.Struct, frozen=True, array_like=True, tag="welcome"):
        protocol: int
        fingerprint: str
        platform: str
        effective_cpus: int
        slots: int
        machine: dict[str, str] = {}

    old = msgspec.msgpack.encode(OldWelcome(1, FP, "p", 2, 1, {"cpu": "x"}))
    decoded = msgspec.msgpack.decode(old, type=Message)
    assert isinstance(decoded, Welcome) and decoded.precisions == ("float64",)
    new = msgspec.msgpack.encode(Welcome(1, FP, "p", 2, 1, {}, ("float64", "float32")))
    assert msgspec.msgpack.decode(new, type=Message).precisions == ("float64", "float32")  # type: ignore[union-attr]


def test_a_dense_run_declares_its_precision() -> None:
    data = TeacherDataset(300, 4, 3, 1)
    for precision in ("float64", "float32"):
        run = DenseRun(DenseRequest(seed=1, teacher=(300, 4, 3), precision=precision), 64, data)
        assert precision_of(run) == precision
        spec = run.next_pass()
        assert spec is not None and spec.params.precision == precision
    assert precision_of(object()) is None


def _train_params(precision: str) -> DenseParams:
    sizes = (4, 5, 3)
    flat = np.linspace(-0.5, 0.5, 4 * 5 + 5 + 5 * 3 + 3)
    return DenseParams(
        TRAIN, "x", (), 1, (0.15, 0.15), -1, b"", sizes, flat.tobytes(),
        np.zeros(4).tobytes(), np.ones(4).tobytes(), precision,
    )  # fmt: skip


def test_the_kernel_decodes_a_pass_once() -> None:
    params = _train_params("float32")
    first = rows.frozen(params)
    assert first.model is not None and first.model.flat.dtype == np.float32
    assert rows.frozen(params) is first  # the next chunk of the pass
    again = rows.frozen(_train_params("float32"))  # equal bytes, but another pass
    assert again is not first
    assert rows.frozen(_train_params("float64")).model.flat.dtype == np.float64  # type: ignore[union-attr]


def test_a_worker_process_decodes_a_pass_once() -> None:
    read, write = os.pipe()
    try:
        connection = WorkerConnection(FP, 1, "p", {"dense"})
        serving = _Serving(connection, _Output(write, connection))
        body = msgspec.msgpack.encode(_train_params("float32"))
        message = Params(7, "dense", msgspec.Raw(body))
        first = serving._params_of(message, DenseParams)
        assert first == _train_params("float32")
        assert serving._params_of(message, DenseParams) is first
        # A new Params message (a new pass, or another job reusing pass ids) decodes anew.
        other = Params(7, "dense", msgspec.Raw(body))
        assert serving._params_of(other, DenseParams) is not first
    finally:
        os.close(read)
        os.close(write)


def test_received_gradient_sums_are_views_that_later_frames_leave_alone() -> None:
    # DenseStats are decoded in place (memoryview fields): they must stay what they were
    # while the frame decoder goes on buffering and trimming later frames.
    from aner_worker.kernels.base import decode, encode
    from aner_worker.kernels.dense.params import DenseStats
    from protocol import Result
    from protocol.framing import FrameDecoder, FrameEncoder

    grads = [np.arange(9000.0) * (i + 1) for i in range(3)]
    frames = b"".join(
        FrameEncoder().encode(
            Result(
                i,
                0,
                8,
                msgspec.Raw(encode(DenseStats(rows.as_view(g), memoryview(b""), 1.0, 2, 8))),
            )
        )
        for i, g in enumerate(grads)
    )
    decoder = FrameDecoder("w1")
    kept = []
    for start in range(0, len(frames), 7001):  # frames cut across reads
        for message in decoder.feed(frames[start : start + 7001]):
            assert isinstance(message, Result)
            kept.append(decode(DenseStats, message.body))
    assert len(kept) == 3
    for stats, grad in zip(kept, grads, strict=True):
        assert isinstance(stats.sums, memoryview)
        assert np.array_equal(np.frombuffer(stats.sums), grad)
