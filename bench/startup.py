"""startup: the wall time of whole commands, from a bare interpreter to a 1,000-sample
`aner parallel run`; what a tiny run costs beyond `import numba`.

Goals (issue 13): a tiny whole-command run within 2x `python -c "import numba"`;
`aner parallel inventory --json` and `aner parallel status` (of a completed job) each within
1.5x (`python -c "import msgspec"` + 0.1 s)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.calls import ANER, run_argv
from bench.runner import (
    Benchmark,
    Command,
    goal,
    interleave,
    note,
    ratio,
    run_command,
    scratch_dir,
    secs,
    table,
)

PY = sys.executable
BARE = "python -c pass"
NUMBA = "python -c 'import numba'"
MSGSPEC = "python -c 'import msgspec'"
KERNEL_CACHE = "python: import + load MC kernel cache"
INVENTORY = "aner parallel inventory --json"
STATUS = "aner parallel status --job (completed)"
TINY_RUN = "aner parallel run --samples 1000"

# The kernel loaded as an `aner` process loads it (startup, no collections at exit).
LOAD_KERNEL = (
    "from aner_worker.startup import own_process; own_process()\n"
    "from aner_worker.kernels.philox import warm_up; warm_up()\n"
    "import gc; gc.freeze()"
)

RUN_GOAL = 2.0  # x `import numba`
MONITOR_GOAL = 1.5  # x (`import msgspec` + MONITOR_ALLOWANCE_S)
MONITOR_ALLOWANCE_S = 0.1


@dataclass(frozen=True)
class Sizes:
    reps: int


def run(sizes: Sizes) -> dict[str, Any]:
    tmp = scratch_dir("aner-bench-startup-")
    jobs = iter(range(10**6))

    def command(argv: Callable[[], list[str]]) -> Callable[[], Command]:
        return lambda: run_command(argv(), timeout=60)

    done = tmp / "completed"
    first = run_command(run_argv(1000, 1, done), timeout=60)
    assert first.exit == 0, first.failure()
    cases = {
        BARE: command(lambda: [PY, "-c", "pass"]),
        NUMBA: command(lambda: [PY, "-c", "import numba"]),
        MSGSPEC: command(lambda: [PY, "-c", "import msgspec"]),
        KERNEL_CACHE: command(lambda: [PY, "-c", LOAD_KERNEL]),
        INVENTORY: command(lambda: [ANER, "parallel", "inventory", "--json"]),
        STATUS: command(lambda: [ANER, "parallel", "status", "--job", str(done)]),
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
    run_ratio = med[TINY_RUN] / med[NUMBA]
    monitor_budget = MONITOR_GOAL * (med[MSGSPEC] + MONITOR_ALLOWANCE_S)
    goals = {
        "tiny_run": run_ratio <= RUN_GOAL,
        "inventory": med[INVENTORY] <= monitor_budget,
        "status": med[STATUS] <= monitor_budget,
    }
    goal(
        f"tiny run {secs(med[TINY_RUN])} = {ratio(run_ratio)} `import numba` "
        f"({secs(med[NUMBA])}); within {RUN_GOAL:g}x",
        goals["tiny_run"],
    )
    for name, key in ((INVENTORY, "inventory"), (STATUS, "status")):
        goal(
            f"{name}: {secs(med[name])}, within {MONITOR_GOAL:g} x (`import msgspec` "
            f"{secs(med[MSGSPEC])} + {MONITOR_ALLOWANCE_S:g} s) = {secs(monitor_budget)}",
            goals[key],
        )
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
        "tiny_run_over_import_numba": run_ratio,
        "monitor_budget_s": monitor_budget,
        "goals": goals,
        "goal_met": all(goals.values()) and not failures,
        "failures": failures,
    }


BENCHMARK = Benchmark(
    title="whole-command wall time of a tiny run",
    full=Sizes(reps=7),
    quick=Sizes(reps=2),
    smoke=Sizes(reps=1),
    run=run,
)
