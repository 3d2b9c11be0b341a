"""timeline: what keeping `timeline.jsonl` costs (issue 27 item 5).

The same jobs, written to a job directory, with the timeline (the default) and without it
(`ANER_TIMELINE=off`), interleaved: a Monte Carlo run of small chunks, where a task record
per 65,536 samples is the most the timeline has to keep up with (10**9 samples, chunk
65,536, 2 local workers: some 15,000 task lines), and a Dense training on the digits
(hidden 64,64, batch 256, one local worker), where the coordinator's phases are recorded
at every step. Goal: each within 1.02x of the run without; results identical.
"""

from __future__ import annotations

import itertools
import os
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aner_coord import parallel
from aner_coord.jobdir.timeline import ENV_TIMELINE
from bench.runner import Benchmark, goal, interleave, ratio, scratch_dir, secs, table

GOAL = 1.02
SEED = 42
_COUNTER = itertools.count()


@dataclass(frozen=True)
class Sizes:
    samples: int
    chunk: int
    workers: int
    mc_reps: int
    digits_epochs: int
    digits_reps: int


@contextmanager
def _timeline(setting: str) -> Iterator[None]:
    before = os.environ.get(ENV_TIMELINE)
    os.environ[ENV_TIMELINE] = setting
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ENV_TIMELINE, None)
        else:
            os.environ[ENV_TIMELINE] = before


def _lines(job: Path) -> int:
    path = job / "timeline.jsonl"
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _pi(sizes: Sizes, scratch: Path, setting: str) -> Callable[[], dict[str, Any]]:
    def call() -> dict[str, Any]:
        job = scratch / f"pi-{next(_COUNTER)}"
        cpu = time.process_time()
        with _timeline(setting):
            fit = parallel.monte_carlo(
                samples=sizes.samples,
                seed=SEED,
                output=job,
                execution=parallel.local(workers=sizes.workers, chunk=sizes.chunk),
            )
        cpu = time.process_time() - cpu
        return {"hits": fit.hits, "seconds": fit.seconds, "cpu_s": cpu, "lines": _lines(job)}

    return call


def _digits(sizes: Sizes, scratch: Path, setting: str) -> Callable[[], dict[str, Any]]:
    def call() -> dict[str, Any]:
        job = scratch / f"digits-{next(_COUNTER)}"
        cpu = time.process_time()
        with _timeline(setting):
            fit = parallel.dense_fit(
                data="digits", hidden=(64, 64), batch=256, epochs=sizes.digits_epochs,
                patience=sizes.digits_epochs, seed=SEED, output=job,
                execution=parallel.local(workers=1),
            )  # fmt: skip
        cpu = time.process_time() - cpu
        return {"loss": fit.test_loss, "seconds": fit.seconds, "cpu_s": cpu, "lines": _lines(job)}

    return call


def _cpu(series: Any) -> float:
    return float(statistics.median(v["cpu_s"] for v in series.values))


def _compare(name: str, runs: dict[str, Any], key: str) -> tuple[list[tuple[Any, ...]], float]:
    """Table rows, and the wall-time ratio (infinite where the results differ). The CPU
    time of this process (coordinator and local workers alike) is shown too: a shared
    machine stretches wall times far more than it changes the work done."""
    off, on = runs["without"], runs["with timeline"]
    same = len({v[key] for s in runs.values() for v in s.values}) == 1
    rows = [
        (
            name,
            case,
            secs(series.median),
            series.span(),
            ratio(series.median / off.median),
            secs(_cpu(series)),
            ratio(_cpu(series) / _cpu(off)),
            f"{series.values[0]['lines']:,}",
            same,
        )
        for case, series in runs.items()
    ]
    return rows, on.median / off.median if same else float("inf")


def run(sizes: Sizes) -> dict[str, Any]:
    scratch = scratch_dir("aner-bench-timeline-")
    _pi(sizes, scratch, "off")()  # warm: kernels compiled or loaded
    _digits(sizes, scratch, "off")()
    pi = interleave(
        {
            "without": _pi(sizes, scratch, "off"),
            "with timeline": _pi(sizes, scratch, "on"),
        },
        sizes.mc_reps,
    )
    digits = interleave(
        {
            "without": _digits(sizes, scratch, "off"),
            "with timeline": _digits(sizes, scratch, "on"),
        },
        sizes.digits_reps,
    )
    pi_rows, pi_ratio = _compare(
        f"Monte Carlo {sizes.samples:.0e}, chunk {sizes.chunk:,}, {sizes.workers} workers",
        pi,
        "hits",
    )
    digits_rows, digits_ratio = _compare(
        f"Dense digits, {sizes.digits_epochs} epochs, 1 worker", digits, "loss"
    )
    table(
        (
            "job",
            "case",
            "median wall",
            "min:max s",
            "vs without",
            "median CPU",
            "vs without",
            "timeline lines",
            "same result",
        ),
        pi_rows + digits_rows,
    )
    met = pi_ratio <= GOAL and digits_ratio <= GOAL
    goal(f"with the timeline within {GOAL}x of without (both jobs, results identical)", met)
    return {
        "sizes": {
            "samples": sizes.samples,
            "chunk": sizes.chunk,
            "workers": sizes.workers,
            "digits_epochs": sizes.digits_epochs,
        },
        "monte_carlo": {name: {**s.figures(), "values": list(s.values)} for name, s in pi.items()},
        "digits": {name: {**s.figures(), "values": list(s.values)} for name, s in digits.items()},
        "monte_carlo_ratio": pi_ratio,
        "digits_ratio": digits_ratio,
        "monte_carlo_cpu_ratio": _cpu(pi["with timeline"]) / _cpu(pi["without"]),
        "digits_cpu_ratio": _cpu(digits["with timeline"]) / _cpu(digits["without"]),
        "goal_met": met,
    }


BENCHMARK = Benchmark(
    title="a job with its timeline against one without",
    full=Sizes(samples=10**9, chunk=65_536, workers=2, mc_reps=7, digits_epochs=30, digits_reps=7),
    quick=Sizes(samples=10**9, chunk=65_536, workers=2, mc_reps=5, digits_epochs=10, digits_reps=5),
    smoke=Sizes(samples=10**6, chunk=65_536, workers=2, mc_reps=1, digits_epochs=1, digits_reps=1),
    run=run,
)
