"""session: a call on a warm 2-worker pipe session (`parallel.session`) against the same call
on 2 local threads, 10**7 samples, seed 42, default chunk; hits must be identical. The
session's first call (which starts its workers) is timed apart and excluded; the calls that
follow are interleaved with the local ones. A one-off group call is shown for scale."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aner_coord import parallel
from bench.calls import monte_carlo, session, session_monte_carlo, write_cluster
from bench.runner import Benchmark, goal, interleave, ratio, scratch_dir, secs, table

GOAL = 1.2
LOCAL = "local threads, 2 workers"
WARM = "warm pipe session, 2 workers"
ONE_OFF = "one-off pipe group, 2 workers"


@dataclass(frozen=True)
class Sizes:
    samples: int
    reps: int


def run(sizes: Sizes) -> dict[str, Any]:
    tmp = scratch_dir("aner-bench-session-")
    cluster = write_cluster(tmp / "cluster", [("w1", "local", "-", 1), ("w2", "local", "-", 1)])
    group = parallel.cluster(str(cluster))
    local = parallel.local(2)
    with session(group) as s:
        first = interleave({"first call": lambda: session_monte_carlo(s, sizes.samples, 42)}, 1)
        monte_carlo(sizes.samples, 42, local)  # kernels loaded in this process too
        runs = interleave(
            {
                LOCAL: lambda: monte_carlo(sizes.samples, 42, local),
                WARM: lambda: session_monte_carlo(s, sizes.samples, 42),
            },
            sizes.reps,
        )
    runs[ONE_OFF] = interleave({ONE_OFF: lambda: monte_carlo(sizes.samples, 42, group)}, 2)[ONE_OFF]
    hits = {v.hits for series in (*runs.values(), *first.values()) for v in series.values}
    assert len(hits) == 1, f"hits differ between executions: {sorted(hits)}"
    table(
        ("execution", "median", "min:max s"),
        [
            ("warm session, first call (starts workers)", secs(first["first call"].median), "-"),
            *((name, secs(s.median), s.span()) for name, s in runs.items()),
        ],
    )
    warm_vs_local = runs[WARM].median / runs[LOCAL].median
    print(f"  warm session / local threads: {ratio(warm_vs_local)}")
    goal(f"a warm 2-worker pipe session within {GOAL}x of 2 local threads", warm_vs_local <= GOAL)
    return {
        "samples": sizes.samples,
        "reps": sizes.reps,
        "hits": hits.pop(),
        "first_call_s": first["first call"].median,
        "runs": {name: s.figures() for name, s in runs.items()},
        "warm_session_over_local": warm_vs_local,
        "goal": GOAL,
        "goal_met": warm_vs_local <= GOAL,
    }


BENCHMARK = Benchmark(
    title="second call on a warm 2-worker pipe session vs 2 local threads",
    full=Sizes(samples=10**7, reps=15),
    quick=Sizes(samples=10**7, reps=5),
    smoke=Sizes(samples=10**6, reps=1),
    run=run,
)
