"""checkpoints: what keeping a Dense training resumable costs (issue 20 item 3).

The same training, written to a job directory, three ways, interleaved: without periodic
checkpoints (`ANER_CHECKPOINT_S=off`), at the defaults (one every 30 s), and at every
committed pass (`ANER_CHECKPOINT_S=0`), which prices one checkpoint (encode, SHA256, the
ledger record's fsync, the file's write, fsync and rename). A training shorter than 30 s
writes no checkpoint at the defaults, so the figure that carries over to a long training is
the projection: the cost of one checkpoint over the 30 s between two. Goal: the defaults
within 1.02x of no checkpoints, and the projection at most 2%.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aner_coord import parallel
from aner_coord.job.checkpoints import DEFAULT_EVERY_S, ENV_EVERY_S
from bench.runner import Benchmark, goal, interleave, note, ratio, scratch_dir, secs, table

SEED = 7
GOAL = 1.02
_COUNTER = itertools.count()


@dataclass(frozen=True)
class Sizes:
    teacher: tuple[int, int, int]
    hidden: tuple[int, ...]
    batch: int
    chunk: int
    epochs: int
    reps: int


def _fit(sizes: Sizes, scratch: Path, setting: str | None) -> Callable[[], dict[str, Any]]:
    def call() -> dict[str, Any]:
        job = scratch / f"job-{next(_COUNTER)}"
        before = os.environ.get(ENV_EVERY_S)
        if setting is None:
            os.environ.pop(ENV_EVERY_S, None)
        else:
            os.environ[ENV_EVERY_S] = setting
        try:
            fit = parallel.dense_fit(
                teacher=sizes.teacher, hidden=sizes.hidden, batch=sizes.batch,
                epochs=sizes.epochs, patience=sizes.epochs, seed=SEED, output=job,
                execution=parallel.local(workers=1, chunk=sizes.chunk),
            )  # fmt: skip
        finally:
            if before is None:
                os.environ.pop(ENV_EVERY_S, None)
            else:
                os.environ[ENV_EVERY_S] = before
        status = json.loads((job / "status.json").read_text())
        kept = job / "checkpoint.npz"
        return {
            "seconds": fit.seconds,
            "loss": fit.test_loss,
            "checkpointed_steps": status.get("checkpointed_steps"),
            "checkpoint_bytes": kept.stat().st_size if kept.exists() else 0,
            "checkpoints": _count(job),
            "passes": status["pass_index"],
        }

    return call


def _count(job: Path) -> int:
    from aner_coord.jobdir.ledger import Checkpointed, scan

    entries, _ = scan((job / "ledger").read_bytes())
    return sum(isinstance(e.record, Checkpointed) for e in entries)


def run(sizes: Sizes) -> dict[str, Any]:
    scratch = scratch_dir("aner-bench-checkpoints-")
    _fit(sizes, scratch, "off")()  # warm: kernels compiled or loaded
    cases = {"no periodic checkpoint": "off", "defaults (30 s)": None, "every pass": "0"}
    runs = interleave({name: _fit(sizes, scratch, s) for name, s in cases.items()}, sizes.reps)
    off, defaults, every = runs.values()
    losses = {v["loss"] for s in runs.values() for v in s.values}
    rows = []
    for name, series in runs.items():
        first = series.values[0]
        rows.append(
            (
                name,
                secs(series.median),
                series.span(),
                first["checkpoints"],
                f"{first['checkpoint_bytes']:,}",
                ratio(series.median / off.median),
            )
        )
    table(("training", "median wall", "min:max s", "checkpoints", "bytes", "vs none"), rows)
    n = every.values[0]["checkpoints"]
    per_checkpoint = max(0.0, every.median - off.median) / max(1, n)
    projected = per_checkpoint / DEFAULT_EVERY_S
    at_defaults = defaults.median / off.median
    print(
        f"  one checkpoint costs about {per_checkpoint * 1e3:.2f} ms ({n} at every pass); at "
        f"one every {DEFAULT_EVERY_S:g} s that is {projected * 100:.3f}% of a long training"
    )
    print(f"  test loss identical in every case: {len(losses) == 1}")
    note("a training shorter than 30 s writes no periodic checkpoint at the defaults")
    met = at_defaults <= GOAL and projected <= GOAL - 1 and len(losses) == 1
    goal(f"checkpoints at the defaults within {GOAL}x of none (measured and projected)", met)
    return {
        "sizes": {"teacher": sizes.teacher, "hidden": sizes.hidden, "epochs": sizes.epochs},
        "runs": {name: {**s.figures(), "values": list(s.values)} for name, s in runs.items()},
        "defaults_ratio": at_defaults,
        "every_pass_ratio": every.median / off.median,
        "per_checkpoint_s": per_checkpoint,
        "projected_default_overhead": projected,
        "losses_identical": len(losses) == 1,
        "goal_met": met,
    }


BENCHMARK = Benchmark(
    title="a Dense training with checkpoints against one without",
    full=Sizes(
        teacher=(10**5, 64, 10), hidden=(256, 256), batch=8192, chunk=1024, epochs=2, reps=5
    ),
    quick=Sizes(teacher=(10**4, 32, 4), hidden=(64,), batch=256, chunk=256, epochs=2, reps=1),
    smoke=Sizes(teacher=(2_048, 16, 4), hidden=(16,), batch=256, chunk=256, epochs=1, reps=1),
    run=run,
)
