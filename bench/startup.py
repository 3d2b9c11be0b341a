"""startup: the wall time of whole commands, from a bare interpreter to a 1,000-sample
`aner parallel run`; what a tiny run costs beyond `import numba`. Reported, no goal."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.calls import ANER, run_argv
from bench.runner import (
    Benchmark,
    Command,
    interleave,
    note,
    run_command,
    scratch_dir,
    secs,
    table,
)

PY = sys.executable
BARE = "python -c pass"
NUMBA = "python -c 'import numba'"
KERNEL_CACHE = "python: import + load MC kernel cache"
INVENTORY = "aner parallel inventory --json"
TINY_RUN = "aner parallel run --samples 1000"


@dataclass(frozen=True)
class Sizes:
    reps: int


def run(sizes: Sizes) -> dict[str, Any]:
    tmp = scratch_dir("aner-bench-startup-")
    jobs = iter(range(10**6))

    def command(argv: Callable[[], list[str]]) -> Callable[[], Command]:
        return lambda: run_command(argv(), timeout=60)

    cases = {
        BARE: command(lambda: [PY, "-c", "pass"]),
        NUMBA: command(lambda: [PY, "-c", "import numba"]),
        KERNEL_CACHE: command(
            lambda: [PY, "-c", "from aner_worker.philox import warm_up; warm_up()"]
        ),
        INVENTORY: command(lambda: [ANER, "parallel", "inventory", "--json"]),
        TINY_RUN: command(lambda: run_argv(1000, 1, tmp / f"job-{next(jobs)}")),
    }
    interleave(cases, 1)  # warms the page cache and numba's on-disk cache; not recorded
    runs = interleave(cases, sizes.reps)
    # Medians over the runs that exited 0; a failed or hung run is reported, not averaged in.
    ok = {name: s.where(lambda c: c.exit == 0) for name, s in runs.items()}
    ok = {name: s if s.walls else runs[name] for name, s in ok.items()}
    med = {name: s.median for name, s in ok.items()}
    failures = [f for s in runs.values() for c in s.values if (f := c.failure())]
    table(
        ("command (same interpreter)", "median", "min:max s", "exit 0"),
        [
            (
                name,
                secs(med[name]),
                ok[name].span(),
                f"{sum(c.exit == 0 for c in s.values)}/{len(s.values)}",
            )
            for name, s in runs.items()
        ],
    )
    run_cost = med[TINY_RUN] - med[NUMBA]
    inv_cost = med[INVENTORY] - med[BARE]
    kernel_cost = med[KERNEL_CACHE] - med[NUMBA]
    print(f"  tiny run beyond `import numba`:        {secs(run_cost)}")
    print(f"  (of which loading aner's kernel cache: {secs(kernel_cost)})")
    print(f"  inventory beyond a bare interpreter:   {secs(inv_cost)}")
    for failure in failures:
        note(f"FAILED: {failure}")
    note(
        "the tiny run includes imports, job directory creation (manifest, status, result "
        "files with fsync) and the coordinator's event loop, beyond numba itself"
    )
    return {
        "reps": sizes.reps,
        "runs": {
            name: {
                **ok[name].figures(),
                "seconds": list(s.walls),
                "exit": [c.exit for c in s.values],
            }
            for name, s in runs.items()
        },
        "run_beyond_import_numba_s": run_cost,
        "kernel_cache_load_beyond_import_numba_s": kernel_cost,
        "inventory_beyond_bare_python_s": inv_cost,
        "failures": failures,
    }


BENCHMARK = Benchmark(
    title="whole-command wall time of a tiny run",
    full=Sizes(reps=5),
    quick=Sizes(reps=2),
    run=run,
)
