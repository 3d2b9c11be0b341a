"""simulation: the simulation kit (docs/contracts.md, section 15) on a European call's
discounted payoff under GBM (two uniforms a sample, one Box-Muller normal: a cheap integrand,
where the kit's own work weighs most).

- one core: the kit's task loop (`SimulationKernel.run`, the blocks' means and sums of
  squared deviations) vs a hand-made numba loop over the same Philox draws that calls the
  same function and sums the values and their squares. Goal: the kit >= 0.8x its rate;
- `parallel.run` of the kit's request on `local(workers=1)` vs `local(workers=2)`, the same
  samples; the outputs must be identical. Goal: 2-worker efficiency >= 0.9.

The computation is registered here (`register`), as an installed plugin's would be declared:
the benchmark needs no distribution of its own."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from aner_worker import startup

startup.prepare()  # every numba module imports this first

from numba import njit  # noqa: E402

from aner_coord import parallel  # noqa: E402
from aner_worker.kernels.philox import philox4x64_10  # noqa: E402
from aner_worker.kernels.simulation.stream import KIT_STREAM  # noqa: E402
from aner_worker.plugins import Param, Simulation  # noqa: E402
from bench.runner import Benchmark, goal, interleave, mega, note, ratio, secs, table  # noqa: E402

SEED = 42
WORKERS = 2
GOAL_RATIO = 0.8
GOAL_EFFICIENCY = 0.9
NAME = "bench-call"
KIT = "kit task loop (SimulationKernel.run)"
HAND = "hand-made numba loop"
PARAMS = (100.0, 100.0, 0.05, 0.2, 1.0)  # spot, strike, rate, sigma, maturity

CALL = Simulation(
    function="bench.simulation:call_payoff",
    draws=2,
    outputs=("payoff",),
    params=(
        Param("spot", 100.0, 1e-6, 1e6),
        Param("strike", 100.0, 0.0, 1e6),
        Param("rate", 0.05, -0.5, 0.5),
        Param("sigma", 0.2, 1e-6, 5.0),
        Param("maturity", 1.0, 1e-6, 100.0),
    ),
    contract="aner-bench/european-call/v1",
)


@njit(nogil=True, cache=True)
def call_payoff(u, p):  # type: ignore[no-untyped-def]
    """The discounted payoff of a European call at maturity, from one normal."""
    z = math.sqrt(-2.0 * math.log(1.0 - u[0])) * math.cos(2.0 * math.pi * u[1])
    drift = (p[2] - 0.5 * p[3] * p[3]) * p[4]
    spot = p[0] * math.exp(drift + p[3] * math.sqrt(p[4]) * z)
    return math.exp(-p[2] * p[4]) * max(spot - p[1], 0.0)


@njit(nogil=True, cache=True)
def hand_made(seed, first, count, p):  # type: ignore[no-untyped-def]
    """What an author would write without aner: the kit's draws of samples [first, first +
    count) of `seed` (block (i, 0, 0, 0), two words), the sum of the values and squares."""
    key = np.uint64(seed)
    stream = np.uint64(KIT_STREAM)
    zero = np.uint64(0)
    u = np.empty(2)
    total = 0.0
    squares = 0.0
    for i in range(first, first + count):
        w = philox4x64_10(np.uint64(i), zero, zero, zero, key, stream)
        u[0] = np.float64(np.int64(w[0] >> np.uint64(11))) * 2.0**-53
        u[1] = np.float64(np.int64(w[1] >> np.uint64(11))) * 2.0**-53
        x = call_payoff(u, p)
        total += x
        squares += x * x
    return total, squares


@dataclass(frozen=True)
class Sizes:
    loop_samples: int  # the one-core comparison
    samples: int  # the 1- vs 2-worker jobs
    reps: int


def _computation() -> Any:
    """The benchmark's computation, registered as a plugin's would be declared."""
    from aner_coord.computations import register
    from aner_coord.computations.simulation.computation import SimulationComputation

    return register(SimulationComputation(NAME, "aner-bench", CALL))


def _one_core(sizes: Sizes, kernel: Any) -> tuple[dict[str, Any], float]:
    from aner_worker.kernels.simulation import SimParams

    n = sizes.loop_samples
    params = SimParams(SEED, PARAMS)
    p = np.array(PARAMS)
    kernel.run(params, 0, 1 << 16, None)  # compiled before the clock starts
    hand_made(SEED, 0, 1000, p)
    runs = interleave(
        {KIT: lambda: kernel.run(params, 0, n, None), HAND: lambda: hand_made(SEED, 0, n, p)},
        sizes.reps,
    )
    means = np.frombuffer(runs[KIT].values[0].means, "<f8")
    kit_mean = float(np.mean(means)) if n % (1 << 16) == 0 else math.nan  # blocks all full
    hand_mean = runs[HAND].values[0][0] / n
    rows = [(name, f"{n:,}", secs(s.median), s.span(), mega(n / s.median))
            for name, s in runs.items()]  # fmt: skip
    table(("loop", "samples", "median", "min:max s", "M samples/s"), rows)
    speed = runs[HAND].median / runs[KIT].median
    out = {
        "samples": n,
        "runs": {name: {**s.figures(), "samples_per_s": n / s.median} for name, s in runs.items()},
        "ratio_kit_over_hand_made": speed,
        "mean_kit": kit_mean,
        "mean_hand_made": hand_mean,
    }
    print(f"  kit / hand-made rate: {ratio(speed)}; means {kit_mean:.10g} and {hand_mean:.10g}")
    return out, speed


def _workers(sizes: Sizes, computation: Any) -> tuple[dict[str, Any], float]:
    n = sizes.samples
    request = computation.request_type(samples=n, seed=SEED)
    one, two = "local(workers=1)", f"local(workers={WORKERS})"
    executions = {one: parallel.local(workers=1), two: parallel.local(workers=WORKERS)}
    for execution in executions.values():
        parallel.run(computation.request_type(samples=1 << 20, seed=1), execution=execution)
    runs = interleave(
        {name: lambda e=e: parallel.run(request, execution=e) for name, e in executions.items()},
        sizes.reps,
    )
    outputs = {repr(r.outputs) for series in runs.values() for r in series.values}
    speedup = runs[one].median / runs[two].median
    efficiency = speedup / WORKERS
    rows = [(name, secs(s.median), s.span(), mega(n / s.median)) for name, s in runs.items()]
    table(("execution", "median wall", "min:max s", "M samples/s"), rows)
    print(f"  speedup {ratio(speedup)}, efficiency {efficiency:.3f}; "
          f"outputs identical: {len(outputs) == 1}")  # fmt: skip
    return {
        "samples": n,
        "runs": {name: {**s.figures(), "samples_per_s": n / s.median} for name, s in runs.items()},
        "speedup": speedup,
        "efficiency": efficiency,
        "outputs_identical": len(outputs) == 1,
    }, efficiency


def run(sizes: Sizes) -> dict[str, Any]:
    computation = _computation()
    loop, speed = _one_core(sizes, computation.kernel)
    scaled, efficiency = _workers(sizes, computation)
    n_cpus = int(parallel.inventory()["effective_cpus"])
    met_ratio = speed >= GOAL_RATIO
    met_efficiency = efficiency >= GOAL_EFFICIENCY if n_cpus >= WORKERS else None
    note("the kit's loop also keeps each block's mean and sum of squared deviations, and its "
         "result is the same bits on any placement; the hand-made loop's sums are not")  # fmt: skip
    goal(f"kit loop >= {GOAL_RATIO}x a hand-made numba loop, one core", met_ratio)
    goal(f"{WORKERS}-worker efficiency >= {GOAL_EFFICIENCY}", met_efficiency)
    return {
        "seed": SEED,
        "reps": sizes.reps,
        "one_core": loop,
        "workers": scaled,
        "goal_min_ratio": GOAL_RATIO,
        "goal_min_efficiency": GOAL_EFFICIENCY,
        "goal_met": None if met_efficiency is None else met_ratio and met_efficiency,
    }


BENCHMARK = Benchmark(
    title="simulation kit: task loop vs hand-made numba, and 2-worker efficiency",
    full=Sizes(loop_samples=2**26, samples=10**9, reps=3),
    quick=Sizes(loop_samples=2**23, samples=5 * 10**7, reps=2),
    smoke=Sizes(loop_samples=2**16, samples=2**20, reps=1),
    run=run,
)
