"""replicates: Monte Carlo replicates (issue 29, item 6) as whole commands on 2 local workers:

- `aner parallel run --replicates 64 --samples 10**7`: makespan efficiency (the workers'
  compute slot-seconds / (slots x the job's seconds)), goal >= 0.9;
- the same work as 64 sequential `aner parallel run` commands, one per replicate seed;
- the same samples as one `aner parallel run --samples 6.4 * 10**8`.

Every replicate's hits must equal the plain run of its seed. Runs are interleaved."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aner_coord.computations.replicates import replicate_seeds
from bench.calls import hits_of, run_argv
from bench.runner import (
    Benchmark,
    goal,
    interleave,
    note,
    ratio,
    run_command,
    scratch_dir,
    secs,
    table,
)

SEED = 42
WORKERS = 2
EFFICIENCY_GOAL = 0.9


@dataclass(frozen=True)
class Sizes:
    replicates: int
    samples: int
    reps: int


def _result(job: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads((job / "result.json").read_bytes())
    except (OSError, ValueError):
        return None
    return data


def _efficiency(result: dict[str, Any]) -> float | None:
    """Compute slot-seconds over the slots times the job's seconds; None where a worker's
    compute was not measured."""
    workers = result["workers"]
    if any(w.get("compute_s") is None for w in workers):
        return None
    slots = sum(w["slots"] for w in workers)
    return float(sum(w["compute_s"] for w in workers) / (slots * result["seconds"]))


def run(sizes: Sizes) -> dict[str, Any]:
    tmp = scratch_dir("aner-bench-replicates-")
    tmp.chmod(0o700)
    jobs = iter(range(10**6))
    seeds = replicate_seeds(SEED, sizes.replicates)
    n, samples = sizes.replicates, sizes.samples

    def replicated() -> dict[str, Any] | None:
        job = tmp / f"job-{next(jobs)}"
        argv = run_argv(samples, SEED, job, workers=WORKERS, replicates=n)
        done = run_command(argv, timeout=1800)
        return _result(job) if done.exit == 0 else None

    def sequential() -> list[int | None]:
        out = []
        for seed in seeds:
            job = tmp / f"job-{next(jobs)}"
            run_command(run_argv(samples, seed, job, workers=WORKERS), timeout=900)
            out.append(hits_of(job))
        return out

    def pooled() -> int | None:
        job = tmp / f"job-{next(jobs)}"
        run_command(run_argv(n * samples, SEED, job, workers=WORKERS), timeout=1800)
        return hits_of(job)

    cases: dict[str, Callable[[], Any]] = {
        f"--replicates {n}": replicated,
        f"{n} sequential runs": sequential,
        f"one run of {n * samples:,}": pooled,
    }
    run_command(run_argv(1000, 1, tmp / "warm"), timeout=120)  # page and numba caches
    runs = interleave(cases, sizes.reps)
    a, b, c = (runs[name] for name in cases)
    results = [r for r in a.values if r is not None]
    same = bool(results) and all(
        [row["hits"] for row in r["per_replicate"]] == hits for r in results for hits in b.values
    )
    efficiencies = [e for r in results if (e := _efficiency(r)) is not None]
    table(
        ("command (whole, 2 local workers)", "median", "min:max s"),
        [(name, secs(s.median), s.span()) for name, s in runs.items()],
    )
    out: dict[str, Any] = {
        "replicates": n,
        "samples": samples,
        "workers": WORKERS,
        "runs": {name: s.figures() for name, s in runs.items()},
        "efficiency": efficiencies,
        "same_hits_as_sequential": same,
        "vs_sequential": a.median / b.median,
        "vs_one_run": a.median / c.median,
    }
    note(
        f"--replicates vs {n} sequential commands: {ratio(out['vs_sequential'])}; vs one run of "
        f"the same samples: {ratio(out['vs_one_run'])}"
    )
    if not efficiencies:
        note("makespan efficiency: the workers' compute seconds were not measured")
        out["goal_met"] = None
        return out
    best = max(efficiencies)
    median = sorted(efficiencies)[len(efficiencies) // 2]
    met = same and median >= EFFICIENCY_GOAL
    goal(
        f"makespan efficiency {median:.3f} (best {best:.3f}) >= {EFFICIENCY_GOAL}"
        + ("" if same else "; replicate hits DIFFER from the plain runs"),
        met,
    )
    out["goal_met"] = met
    return out


BENCHMARK = Benchmark(
    title="Monte Carlo replicates: one command against sequential commands and one long run",
    full=Sizes(replicates=64, samples=10**7, reps=3),
    quick=Sizes(replicates=8, samples=10**6, reps=1),
    smoke=Sizes(replicates=2, samples=10**5, reps=1),
    run=run,
)
