"""The "dense" kernel: the entry the worker calls for each Dense task. The computing itself
and the data sets live in `rows` (imported when a kernel first runs, so that importing the
kernel registry stays cheap).
"""

from __future__ import annotations

from typing import Any, ClassVar

from aner_worker.kernels.base import StopCheck, Stopped
from aner_worker.kernels.dense.params import DenseParams, DenseStats


class DenseKernel:
    name: ClassVar[str] = "dense"
    params_type: ClassVar[type[Any]] = DenseParams
    stats_type: ClassVar[type[Any]] = DenseStats

    def warm_up(self) -> None:
        from aner_worker.kernels.dense.data import warm_up as warm_data
        from aner_worker.kernels.dense.network import warm_up as warm_network
        from aner_worker.kernels.dense.streams import warm_up as warm_streams

        warm_streams()
        warm_data()
        warm_network()

    def has_staged(self, dataset: str) -> bool:
        from aner_worker.kernels.dense.rows import has

        return has(dataset)

    def stage(self, dataset: str, blob: bytes) -> None:
        from aner_worker.kernels.dense.rows import stage

        stage(dataset, blob)

    def run(
        self, params: DenseParams, start: int, count: int, should_stop: StopCheck | None
    ) -> DenseStats:
        # A chunk is never split (its bits would change), so the check comes before it.
        if should_stop is not None and should_stop():
            raise Stopped("stopped before the chunk")
        from aner_worker.kernels.dense.rows import compute

        return compute(params, start, count)
