"""scaling: `parallel.local(workers=1)` vs `parallel.local()` (one worker per effective CPU)
on the same Monte Carlo job; the hits must be identical. Goal: efficiency (speedup per
worker) >= 0.9."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aner_coord import parallel
from bench.calls import monte_carlo
from bench.runner import Benchmark, counts, goal, interleave, mega, note, ratio, secs, table

SEED = 42
GOAL_EFFICIENCY = 0.9
# The independent numpy oracle (aner_worker.oracle.oracle_hits) for seed 42 at 10**9 samples,
# computed once: it takes minutes.
ORACLE_HITS_42_1E9 = 785_386_550


@dataclass(frozen=True)
class Sizes:
    samples: int
    reps: int


def run(sizes: Sizes) -> dict[str, Any]:
    n = sizes.samples
    n_all = int(parallel.inventory()["auto_workers"])
    one, every = "local(workers=1)", f"local() automatic, {n_all} workers"
    workers = {one: 1, every: n_all}
    monte_carlo(10**6, 1, parallel.local(workers=1))
    monte_carlo(10**6, 1, parallel.local())
    runs = interleave(
        {
            one: lambda: monte_carlo(n, SEED, parallel.local(workers=1)),
            every: lambda: monte_carlo(n, SEED, parallel.local()),
        },
        sizes.reps,
    )
    out: dict[str, Any] = {
        "samples": n,
        "seed": SEED,
        "reps": sizes.reps,
        "workers_all": n_all,
        "runs": {},
    }
    rows = []
    all_hits: set[int] = set()
    for name, series in runs.items():
        job = series.median_of(lambda c: c.seconds)
        hits = {c.hits for c in series.values}
        all_hits |= hits
        speedup = runs[one].median / series.median
        out["runs"][name] = {
            "workers": workers[name],
            **series.figures(),
            "job_seconds_median": job,
            "samples_per_s": n / series.median,
            "speedup": speedup,
            "efficiency": speedup / workers[name],
            "hits": sorted(hits),
        }
        rows.append(
            (
                name,
                workers[name],
                secs(series.median),
                series.span(),
                secs(job),
                mega(n / series.median),
                ratio(speedup),
                f"{speedup / workers[name]:.3f}",
                counts(hits),
            )
        )
    table(
        (
            "execution",
            "workers",
            "median wall",
            "min:max s",
            "job s",
            "M samples/s",
            "speedup",
            "efficiency",
            "hits",
        ),
        rows,
    )
    efficiency = out["runs"][every]["efficiency"]
    identical = len(all_hits) == 1
    out.update(
        hits_identical=identical,
        efficiency=efficiency,
        goal_min_efficiency=GOAL_EFFICIENCY,
        goal_met=efficiency >= GOAL_EFFICIENCY if n_all > 1 else None,
    )
    print(f"  hits identical across all runs: {identical} ({counts(all_hits)})")
    if n == 10**9:
        out["oracle_reference_hits"] = ORACLE_HITS_42_1E9
        same = "matches" if all_hits == {ORACLE_HITS_42_1E9} else "DIFFERS"
        note(
            f"the numpy oracle gives {ORACLE_HITS_42_1E9:,} hits for seed 42 at 10**9 "
            f"(computed once, not in this run); measured {same}"
        )
    note(
        "'job s' is the coordinator's own elapsed (result.seconds); speedup and "
        "efficiency use the median wall time around the API call"
    )
    goal(f"efficiency >= {GOAL_EFFICIENCY} with {n_all} workers", out["goal_met"])
    return out


BENCHMARK = Benchmark(
    title="local threads, 1 worker vs all cores",
    full=Sizes(samples=10**9, reps=3),
    quick=Sizes(samples=5 * 10**7, reps=2),
    smoke=Sizes(samples=10**6, reps=1),
    run=run,
)
