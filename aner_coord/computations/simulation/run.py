"""A simulation's run: one pass of `replicates * samples` items (item `i` is sample
`i % samples` of replicate `i // samples`), and the reduction whose bits no placement can
change (docs/contracts.md, section 15).

Each task returns its blocks' statistics (`aner_worker.kernels.simulation`); the run keeps
each chunk's in its slot and, for the result, combines every replicate's blocks in block
order, one at a time (Chan et al.'s pairwise update of count, mean and sum of squared
deviations). A block's bits depend on its samples alone and the chunks are cut at block
boundaries (`chunk_problem`), so the worker count, the chunk size, the transport and the
order results arrive in never change the result's bits.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np

from aner_coord.computations.base import Accounting, PassSpec
from aner_coord.computations.replicates import replicate_seeds, replicates_files, replicates_result
from aner_coord.computations.simulation.result import (
    OutputSummary,
    SimulationResult,
    output_summary,
)
from aner_coord.jobdir.status import JobState
from aner_worker.kernels.montecarlo import replicate_segments
from aner_worker.kernels.simulation import BLOCK, SimParams, SimStats


def chunk_problem(samples: int, replicates: int, chunk: int) -> str | None:
    """Why chunks of `chunk` items would cut a block of the reduction, or None."""
    if replicates == 1:
        if chunk % BLOCK == 0 or chunk >= samples:
            return None
        return f"a chunk of {chunk:,} samples is not a multiple of the kit's block of {BLOCK:,}"
    if chunk % samples == 0 or (samples % BLOCK == 0 and chunk % BLOCK == 0):
        return None
    return (
        f"a chunk of {chunk:,} samples cuts a replicate's block of {BLOCK:,}: use a multiple "
        f"of --samples ({samples:,})" + (f" or of {BLOCK:,}" if samples % BLOCK == 0 else "")
    )


def _block_sizes(n: int) -> Iterator[int]:
    full, rest = divmod(n, BLOCK)
    yield from (BLOCK,) * full
    if rest:
        yield rest


class _Moments:
    """Count, means and sums of squared deviations, combined block by block in order."""

    def __init__(self, outputs: int) -> None:
        self.n = 0
        self.mean = [0.0] * outputs
        self.m2 = [0.0] * outputs

    def add(self, n: int, means: np.ndarray, m2s: np.ndarray) -> None:
        total = self.n + n
        for k in range(len(self.mean)):
            delta = float(means[k]) - self.mean[k]
            self.mean[k] += delta * n / total
            self.m2[k] += float(m2s[k]) + delta * delta * self.n * n / total
        self.n = total

    def summaries(self, names: tuple[str, ...]) -> dict[str, OutputSummary]:
        return {
            name: output_summary(self.n, self.mean[k], self.m2[k]) for k, name in enumerate(names)
        }


class SimulationRun:
    durable_chunks: ClassVar[bool] = True

    def __init__(self, job: Any, request: Any, values: tuple[float, ...], chunk: int) -> None:
        self._job = job  # the SimulationComputation: name, outputs, contract, plugin
        self._request = request
        self._values = values
        self._chunk = chunk
        self._outputs = len(job.outputs)
        self._seeds = replicate_seeds(request.seed, request.replicates)
        self._stats: dict[int, SimStats] = {}
        self._passes_begun = 0

    @property
    def _total(self) -> int:
        return int(self._request.samples * self._request.replicates)

    def next_pass(self) -> PassSpec | None:
        if self._passes_begun:
            return None
        self._passes_begun = 1
        request = self._request
        if request.replicates == 1:
            params = SimParams(request.seed, self._values)
        else:
            params = SimParams(request.seed, self._values, self._seeds, request.samples)
        return PassSpec(self._total, params, "sampling")

    def _segments(self, start: int, count: int) -> list[tuple[int, int, int]]:
        return replicate_segments(self._request.samples, start, count)

    def _blocks(self, start: int, count: int) -> int:
        return sum(-(-n // BLOCK) for _, _, n in self._segments(start, count))

    def check(self, chunk: int, start: int, count: int, stats: Any) -> str | None:
        if not isinstance(stats, SimStats):
            return f"expected simulation statistics, got {type(stats).__name__}"
        size = self._blocks(start, count) * self._outputs * 8
        if len(stats.means) != size or len(stats.m2s) != size:
            return (
                f"statistics of {len(stats.means)} and {len(stats.m2s)} bytes for a range of "
                f"{self._blocks(start, count)} block(s) of {self._outputs} output(s) ({size} each)"
            )
        means = np.frombuffer(stats.means, "<f8")
        m2s = np.frombuffer(stats.m2s, "<f8")
        if not (np.isfinite(means).all() and np.isfinite(m2s).all()):
            return f"{self._job.name} statistics that are not finite"
        return None

    def accept(self, chunk: int, stats: SimStats) -> None:
        self._stats[chunk] = stats

    def commit(self) -> None:
        return None

    def same(self, a: SimStats, b: SimStats) -> bool:
        return a.means == b.means and a.m2s == b.m2s

    @property
    def committed_steps(self) -> int | None:
        return None

    def moments(self) -> list[_Moments]:
        """Each replicate's moments: its blocks combined in block order."""
        replicates = [_Moments(self._outputs) for _ in self._seeds]
        for chunk in range(len(self._stats)):
            start = chunk * self._chunk
            stats = self._stats[chunk]
            means = np.frombuffer(stats.means, "<f8").reshape(-1, self._outputs)
            m2s = np.frombuffer(stats.m2s, "<f8").reshape(-1, self._outputs)
            b = 0
            for replicate, _, n in self._segments(start, min(self._chunk, self._total - start)):
                for size in _block_sizes(n):
                    replicates[replicate].add(size, means[b], m2s[b])
                    b += 1
        return replicates

    def _params(self) -> dict[str, float]:
        return {p.name: v for p, v in zip(self._job.simulation.params, self._values, strict=True)}

    def rows(self) -> list[dict[str, Any]]:
        rows = []
        for k, (seed, moments) in enumerate(zip(self._seeds, self.moments(), strict=True)):
            row: dict[str, Any] = {"replicate": k, "seed": seed}
            for name, o in moments.summaries(self._job.outputs).items():
                row[name] = o.mean
                row[f"{name}_se"] = o.standard_error
            rows.append(row)
        return rows

    def result(self, accounting: Accounting) -> Any:
        job, request = self._job, self._request
        if request.replicates == 1:
            return SimulationResult(
                of=job.name,
                contract=job.contract,
                plugin=job.plugin,
                seed=request.seed,
                samples=request.samples,
                params=self._params(),
                outputs=self.moments()[0].summaries(job.outputs),
                seconds=accounting.seconds,
                execution=accounting.execution,
                workers=list(accounting.workers),
                losses=list(accounting.losses),
            )
        pooled = _Moments(self._outputs)
        for moments in self.moments():
            pooled.add(moments.n, np.array(moments.mean), np.array(moments.m2))
        first = pooled.summaries(job.outputs)[job.outputs[0]]
        options = {"samples": request.samples, "params": self._params(), "plugin": job.plugin}
        return replicates_result(
            job.name, job.contract, request.seed, options, self.rows(), job.outputs,
            accounting,
            {"estimate": first.mean, "standard_error": first.standard_error or math.nan},
        )  # fmt: skip

    def files(self, state: JobState) -> dict[str, bytes]:
        """`replicates.csv` (and its chart) of a completed job with replicates."""
        if state is not JobState.COMPLETED or self._request.replicates == 1:
            return {}
        title = f"{self._request.replicates} replicates of {self._request.samples:,} samples"
        return replicates_files(self.rows(), self._job.outputs, title)
