"""kernel: the Monte Carlo kernel `count_hits` on one thread vs the numpy oracle
`oracle_hits`, same samples and seed. Goal: the kernel >= 2x the oracle's throughput."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aner_worker.kernels.philox import count_hits, warm_up
from aner_worker.oracle import oracle_hits
from bench.runner import Benchmark, counts, goal, interleave, mega, ratio, secs, table

SEED = 42
GOAL_RATIO = 2.0
KERNEL = "numba kernel (count_hits)"
ORACLE = "numpy oracle (oracle_hits)"


@dataclass(frozen=True)
class Sizes:
    samples: int
    reps: int


def run(sizes: Sizes) -> dict[str, Any]:
    n = sizes.samples
    warm_up()
    oracle_hits(SEED, 0, 1000)
    runs = interleave(
        {KERNEL: lambda: count_hits(SEED, 0, n), ORACLE: lambda: oracle_hits(SEED, 0, n)},
        sizes.reps,
    )
    out: dict[str, Any] = {"samples": n, "seed": SEED, "reps": sizes.reps, "runs": {}}
    rows = []
    for name, series in runs.items():
        out["runs"][name] = {
            **series.figures(),
            "samples_per_s": n / series.median,
            "hits": sorted(set(series.values)),
        }
        rows.append(
            (
                name,
                f"{n:,}",
                secs(series.median),
                series.span(),
                mega(n / series.median),
                counts(set(series.values)),
            )
        )
    table(("implementation", "samples", "median", "min:max s", "M samples/s", "hits"), rows)
    speedup = runs[ORACLE].median / runs[KERNEL].median
    agree = out["runs"][KERNEL]["hits"] == out["runs"][ORACLE]["hits"]
    out.update(
        ratio_kernel_over_oracle=speedup,
        hits_agree=agree,
        goal_min_ratio=GOAL_RATIO,
        goal_met=speedup >= GOAL_RATIO,
    )
    print(f"  kernel / oracle throughput: {ratio(speedup)}; hits agree: {agree}")
    goal(f"kernel >= {GOAL_RATIO:g}x the numpy oracle per core", speedup >= GOAL_RATIO)
    return out


BENCHMARK = Benchmark(
    title="Monte Carlo kernel vs numpy oracle, one thread",
    full=Sizes(samples=5 * 10**7, reps=3),
    quick=Sizes(samples=5 * 10**6, reps=2),
    smoke=Sizes(samples=10**5, reps=1),
    run=run,
)
