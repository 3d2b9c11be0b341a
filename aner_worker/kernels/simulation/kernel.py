"""The kernel of a plugin's `Simulation` (docs/contracts.md, section 15), its parameters and
statistics.

Samples are taken in blocks (`stream`: the uniforms of each, and BLOCK) from the stream's
start (the last may be shorter); a task returns, for each block its range holds, each output's mean
and sum of squared deviations, computed in sample order. A task starts at a block's
start: the coordinator cuts its chunks so (`aner_coord.computations.simulation`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import msgspec

from aner_worker.kernels.base import StopCheck, Stopped
from aner_worker.kernels.simulation.stream import BLOCK
from aner_worker.plugins.declaration import Simulation

# Blocks computed between two looks at `should_stop` (about a million samples).
_BLOCKS_BETWEEN_STOPS = 16


class SimParams(msgspec.Struct, frozen=True, array_like=True):
    seed: int
    values: tuple[float, ...]  # the simulation's parameters, in the order it declares them
    # Replicates (docs/contracts.md, section 16): item `i` of the pass is sample
    # `i % samples` of the stream of `seeds[i // samples]`. Empty: one stream, `seed`'s.
    seeds: tuple[int, ...] = ()
    samples: int = 0


class SimStats(msgspec.Struct, frozen=True, array_like=True):
    """Per block of the task's range (in order), per output: float64, little-endian,
    block-major."""

    means: bytes
    m2s: bytes


def segments(params: SimParams, start: int, count: int) -> list[tuple[int, int, int]]:
    """Items [start, start + count) as (seed, first sample, count) runs of one stream."""
    if not params.seeds:
        return [(params.seed, start, count)]
    if params.samples <= 0:
        raise ValueError(f"samples per replicate must be positive, got {params.samples}")
    out = []
    i, end = start, start + count
    while i < end:
        replicate, first = divmod(i, params.samples)
        if replicate >= len(params.seeds):
            raise ValueError(f"no replicate {replicate} among {len(params.seeds)}")
        n = min(params.samples - first, end - i)
        out.append((params.seeds[replicate], first, n))
        i += n
    return out


class SimulationKernel:
    """The worker half of simulation `name`; its function is imported at `warm_up` or the
    first task."""

    params_type: ClassVar[type[Any]] = SimParams
    stats_type: ClassVar[type[Any]] = SimStats

    def __init__(self, name: str, simulation: Simulation, plugin: str = "") -> None:
        self.name = name
        self.simulation = simulation
        self.plugin = plugin  # how a failure names the distribution: "plugin lab-kit 1.0"
        self._blocks: Callable[..., tuple[bytes, bytes]] | None = None

    def _loop(self) -> Callable[..., tuple[bytes, bytes]]:
        if self._blocks is None:
            from aner_worker.kernels.simulation.loop import compiled

            self._blocks = compiled(self.name, self.simulation)
        return self._blocks

    def warm_up(self) -> None:
        self._loop()

    def run(
        self, params: SimParams, start: int, count: int, should_stop: StopCheck | None
    ) -> SimStats:
        blocks = self._loop()
        means: list[bytes] = []
        m2s: list[bytes] = []
        for seed, first, n in segments(params, start, count):
            if first % BLOCK:
                raise ValueError(f"a task starts at sample {first}, not at a block's start")
            step = BLOCK * _BLOCKS_BETWEEN_STOPS
            for sub in range(first, first + n, step):
                if should_stop is not None and sub > first and should_stop():
                    raise Stopped(f"stopped at sample {sub}")
                count_here = min(step, first + n - sub)
                try:
                    mean, m2 = blocks(seed, sub, count_here, params.values)
                except Exception as exc:  # the plugin's code: say whose and which samples
                    raise self._failure(exc, seed, sub, count_here) from exc
                means.append(mean)
                m2s.append(m2)
        return SimStats(b"".join(means), b"".join(m2s))

    def _failure(self, exc: Exception, seed: int, first: int, count: int) -> Exception:
        """The one line a task's failure says: the simulation, its plugin, the samples of
        the task that failed and the seed (a non-finite value's own line says them already)."""
        from aner_worker.kernels.simulation.loop import SimulationError

        who = f"simulation {self.name!r}" + (f" ({self.plugin})" if self.plugin else "")
        if isinstance(exc, SimulationError):
            return SimulationError(f"{who}: {exc}".replace(f"simulation {self.name!r}: ", "", 1))
        return SimulationError(
            f"{who}: {self.simulation.function} raised {type(exc).__name__}: {exc}, in the "
            f"task of samples [{first}, {first + count}) of seed {seed}"
        )
