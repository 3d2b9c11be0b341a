"""The numba loop of the simulation kit: a sample's uniforms from the Philox stream, the
plugin's function, and each block's mean and sum of squared deviations (docs/contracts.md,
section 15).

Within a block the deviations are taken from the block's first value and summed in sample
order, so that a block's statistics are a pure function of its samples; blocks are
combined by the coordinator, in block order. The plugin's function is an argument of the
loop (numba compiles one loop for it, and inlines it), never a global, so one process can
hold several simulations.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

from aner_worker import startup

startup.prepare()  # every numba kernel module imports this one first

from numba import njit  # noqa: E402
from numba.core.registry import CPUDispatcher  # noqa: E402

from aner_worker.kernels.philox import philox4x64_10  # noqa: E402
from aner_worker.kernels.simulation.stream import BLOCK, KIT_STREAM  # noqa: E402
from aner_worker.plugins.declaration import Simulation  # noqa: E402

_SHIFT = np.uint64(11)
_TWO_M53 = 2.0**-53


@njit(inline="always", nogil=True, cache=True)
def draw(u, i, key, stream):  # type: ignore[no-untyped-def]
    """Sample `i`'s uniforms into `u`: words of blocks (i, j, 0, 0), four a block."""
    zero = np.uint64(0)
    n = u.shape[0]
    for j in range((n + 3) // 4):
        w = philox4x64_10(np.uint64(i), np.uint64(j), zero, zero, key, stream)
        for k in range(min(4, n - 4 * j)):
            u[4 * j + k] = np.float64(np.int64(w[k] >> _SHIFT)) * _TWO_M53


@njit(nogil=True)
def _blocks_of_one(f, key, start, count, draws, p, means, m2s):  # type: ignore[no-untyped-def]
    """A function of one output: `means[b, 0]`, `m2s[b, 0]` of each block."""
    stream = np.uint64(KIT_STREAM)
    u = np.empty(draws)
    end = start + count
    for b, first in enumerate(range(start, end, BLOCK)):
        n = min(BLOCK, end - first)
        draw(u, first, key, stream)
        x0 = np.float64(f(u, p))
        s = 0.0
        q = 0.0
        for i in range(first + 1, first + n):
            draw(u, i, key, stream)
            d = np.float64(f(u, p)) - x0
            s += d
            q += d * d
        means[b, 0] = x0 + s / n
        m2s[b, 0] = q - s * s / n


@njit(nogil=True)
def _blocks_of_many(f, key, start, count, draws, p, means, m2s):  # type: ignore[no-untyped-def]
    """A function of a tuple of outputs: `means[b, k]`, `m2s[b, k]` of each block."""
    stream = np.uint64(KIT_STREAM)
    u = np.empty(draws)
    outputs = means.shape[1]
    x0 = np.empty(outputs)
    s = np.empty(outputs)
    q = np.empty(outputs)
    end = start + count
    for b, first in enumerate(range(start, end, BLOCK)):
        n = min(BLOCK, end - first)
        draw(u, first, key, stream)
        v = f(u, p)
        for k in range(outputs):
            x0[k] = v[k]
            s[k] = 0.0
            q[k] = 0.0
        for i in range(first + 1, first + n):
            draw(u, i, key, stream)
            v = f(u, p)
            for k in range(outputs):
                d = v[k] - x0[k]
                s[k] += d
                q[k] += d * d
        for k in range(outputs):
            means[b, k] = x0[k] + s[k] / n
            m2s[b, k] = q[k] - s[k] * s[k] / n


class SimulationError(ValueError):
    """A simulation's function is not what its declaration says."""


def _function(name: str, simulation: Simulation) -> Any:
    module, _, attribute = simulation.function.partition(":")
    function = getattr(importlib.import_module(module), attribute)
    if not isinstance(function, CPUDispatcher):
        raise SimulationError(
            f"simulation {name!r}: {simulation.function} is not a numba-compiled function "
            "(decorate it with @numba.njit)"
        )
    return function


def outputs_of(function: Any, simulation: Simulation) -> int | None:
    """How many values `function` returns for the uniforms of sample 0 and the default
    parameters: None for a float (one value)."""
    u = np.full(simulation.draws, 0.5)
    p = np.array([param.default for param in simulation.params], dtype=np.float64)
    value = function(u, p)
    if isinstance(value, tuple):
        return len(value)
    if isinstance(value, float | np.floating):
        return None
    raise SimulationError(f"returns a {type(value).__name__}, not a float or a tuple of floats")


def compiled(name: str, simulation: Simulation) -> Callable[..., tuple[bytes, bytes]]:
    """The block statistics of simulation `name`, as `(seed, first, count, values) ->
    (means, m2s)` (float64 bytes, block-major); SimulationError if its function returns
    other than the declared number of values."""
    function = _function(name, simulation)
    try:
        returned = outputs_of(function, simulation)
    except SimulationError as exc:
        raise SimulationError(f"simulation {name!r}: {simulation.function} {exc}") from None
    declared = len(simulation.outputs)
    if not (returned == declared or (returned is None and declared == 1)):
        got = "one float" if returned is None else f"a tuple of {returned}"
        raise SimulationError(
            f"simulation {name!r}: {simulation.function} returns {got}, but the declaration "
            f"names {declared} output(s) ({', '.join(simulation.outputs)})"
        )
    loop = _blocks_of_one if returned is None else _blocks_of_many
    draws = simulation.draws

    def blocks(seed: int, first: int, count: int, values: tuple[float, ...]) -> tuple[bytes, bytes]:
        n_blocks = -(-count // BLOCK)
        means = np.empty((n_blocks, declared))
        m2s = np.empty((n_blocks, declared))
        p = np.array(values, dtype=np.float64)
        loop(function, np.uint64(seed), first, count, draws, p, means, m2s)
        if not (np.isfinite(means).all() and np.isfinite(m2s).all()):
            bad = int(np.argmin(np.isfinite(means).all(axis=1) & np.isfinite(m2s).all(axis=1)))
            lo = first + bad * BLOCK
            raise SimulationError(
                f"simulation {name!r}: {simulation.function} returned a value that is not "
                f"finite among samples [{lo}, {min(lo + BLOCK, first + count)}) of seed {seed}"
            )
        return means.astype("<f8").tobytes(), m2s.astype("<f8").tobytes()

    return blocks
