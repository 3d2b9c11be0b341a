"""The "search" kernel: the entry the worker calls for each search task, a range of whole
fits run one after the other on this slot. The fitting itself lives in `fits` (imported
when a task first runs, so that importing the kernel registry stays cheap)."""

from __future__ import annotations

from typing import Any, ClassVar

from aner_worker.kernels.base import StopCheck
from aner_worker.kernels.search.params import SearchParams, SearchStats


class SearchKernel:
    name: ClassVar[str] = "search"
    params_type: ClassVar[type[Any]] = SearchParams
    stats_type: ClassVar[type[Any]] = SearchStats

    def warm_up(self) -> None:
        from aner_worker.kernels.dense.data import warm_up as warm_data
        from aner_worker.kernels.dense.streams import warm_up as warm_streams
        from aner_worker.kernels.search import fits  # noqa: F401  (numpy, the network)

        warm_streams()
        warm_data()

    def has_staged(self, dataset: str) -> bool:
        from aner_worker.kernels.dense.rows import has

        return has(dataset)

    def stage(self, dataset: str, blob: bytes) -> None:
        from aner_worker.kernels.dense.rows import stage

        stage(dataset, blob)

    def run(
        self, params: SearchParams, start: int, count: int, should_stop: StopCheck | None
    ) -> SearchStats:
        from aner_worker.kernels.search.fits import run_fits

        return run_fits(params, start, count, should_stop)
