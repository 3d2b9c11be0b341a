"""dense_workers: Dense training with the default plan, 2 local workers against 1, whole
commands (`aner parallel train ... --workers W`), side by side in one run.

On the digits (the defaults: 100 epochs with early stopping, batch 256, hidden 64,64) and on
the teacher set 10**5 x 64 x 10 (the defaults, a fixed number of epochs): the default chunk
(128 rows, two chunks a step) against 64 rows (four chunks a step) and the previous default
(256 rows: one chunk a step, so a second worker had almost nothing to do), each with 1 and
2 local workers, interleaved.
Per case: the whole command's wall time, training rows per second (training rows over the
job's own seconds, which leave out loading the kernels), efficiency (the 2-worker rate over
twice the 1-worker rate, same chunk), the share of the rows the less busy worker computed,
epochs run and test accuracy. Same chunk, same parameters: the 1- and 2-worker results must
agree exactly. Goal: with the default chunk, 2 workers each compute at least 40% of the rows
and the efficiency is at least 0.7 on the teacher set.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.runner import Benchmark, goal, interleave, note, ratio, run_command, scratch_dir, table

ANER = str(Path(sys.executable).with_name("aner"))
OLD_CHUNK = 256
GOAL_SHARE = 0.4
GOAL_EFFICIENCY = 0.7


@dataclass(frozen=True)
class Sizes:
    reps: int
    teacher_rows: int
    teacher_epochs: int
    digits_epochs: int | None = None  # None: the defaults (100 epochs, early stopping)


@dataclass(frozen=True)
class Case:
    workers: int
    chunk: int | None  # None: the default

    @property
    def name(self) -> str:
        chunk = "default chunk" if self.chunk is None else f"chunk {self.chunk}"
        return f"{self.workers} worker(s), {chunk}"


FINER = 64  # four chunks a step: one each for 4 workers
CASES = tuple(Case(w, c) for c in (None, FINER, OLD_CHUNK) for w in (1, 2))


def train(data: list[str], case: Case, work: Path, counter: list[int]) -> dict[str, Any]:
    counter[0] += 1
    out = work / f"job-{counter[0]}"
    chunk = [] if case.chunk is None else ["--chunk", str(case.chunk)]
    argv = [ANER, "parallel", "train", *data, "--seed", "1", "--workers", str(case.workers),
            *chunk, "--output", str(out), "--quiet"]  # fmt: skip
    done = run_command(argv, timeout=1800)
    if done.exit != 0:
        raise RuntimeError(done.failure())
    result = json.loads((out / "result.json").read_text())
    items = [w["items"] for w in result["workers"]]
    return {
        "wall_s": done.wall_s,
        "seconds": result["seconds"],
        "load_s": result.get("load_s"),
        "rows_per_s": result["rows_processed"] / result["seconds"],
        "epochs": len(result["history"]),
        "test_accuracy": result["test_accuracy"],
        "least_share": min(items) / sum(items),
        "chunk": result["chunk"],
    }


def one_data_set(title: str, data: list[str], reps: int, work: Path) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(dir=work))
    counter = [0]
    train(data, CASES[0], work, counter)  # kernels cached, data read once, before timing
    runs = interleave({c.name: (lambda c=c: train(data, c, work, counter)) for c in CASES}, reps)
    rate = {c.name: statistics.median(v["rows_per_s"] for v in runs[c.name].values) for c in CASES}
    out: dict[str, Any] = {"cases": {}}
    rows = []
    for case in CASES:
        series = runs[case.name]
        values = series.values
        single = rate[Case(1, case.chunk).name]
        efficiency = rate[case.name] / (case.workers * single)
        share = statistics.median(v["least_share"] for v in values)
        out["cases"][case.name] = {
            **series.figures(),
            "runs": list(values),
            "rows_per_s": rate[case.name],
            "efficiency": efficiency,
            "least_share": share,
        }
        rows.append(
            (case.name, f"{series.median:.3f}", series.span(), f"{rate[case.name]:,.0f}",
             ratio(efficiency) if case.workers > 1 else "-", f"{share:.2f}",
             values[-1]["epochs"], f"{values[-1]['test_accuracy']:.4f}")
        )  # fmt: skip
    for chunk in (None, FINER, OLD_CHUNK):
        a, b = (runs[Case(w, chunk).name].values[-1] for w in (1, 2))
        same = (a["epochs"], a["test_accuracy"]) == (b["epochs"], b["test_accuracy"])
        out[f"same_result_chunk_{chunk or 'default'}"] = same
    print(f"  {title}")
    table(
        ("case", "whole command s", "min:max s", "train rows/s", "efficiency",
         "least share", "epochs", "test accuracy"),
        rows,
    )  # fmt: skip
    return out


def run(sizes: Sizes) -> dict[str, Any]:
    work = scratch_dir("aner-bench-dense-workers-")
    rows, features = sizes.teacher_rows, 64
    digits = ["--data", "digits"]
    title = "digits, the defaults (batch 256, hidden 64,64, 100 epochs, early stopping)"
    if sizes.digits_epochs is not None:
        digits += ["--epochs", str(sizes.digits_epochs)]
        title = f"digits, the defaults but {sizes.digits_epochs} epoch(s)"
    out: dict[str, Any] = {
        "digits": one_data_set(title, digits, sizes.reps, work),
        "teacher": one_data_set(
            f"teacher {rows:,} x {features} x 10, the defaults, {sizes.teacher_epochs} epochs",
            ["--teacher", f"{rows},{features},10", "--epochs", str(sizes.teacher_epochs)],
            sizes.reps, work,
        ),
    }  # fmt: skip
    two = Case(2, None).name
    share = min(out[d]["cases"][two]["least_share"] for d in ("digits", "teacher"))
    efficiency = out["teacher"]["cases"][two]["efficiency"]
    same = all(v for d in ("digits", "teacher") for k, v in out[d].items() if k.startswith("same"))
    out.update(least_share=share, teacher_efficiency=efficiency, same_results=same)
    out["goal_met"] = share >= GOAL_SHARE and efficiency >= GOAL_EFFICIENCY and same
    note("train rows/s: training rows over the job's own seconds (kernel loading left out)")
    goal(
        f"default chunk: each of 2 workers computes >= {GOAL_SHARE:.0%} ({share:.2f})",
        share >= GOAL_SHARE,
    )
    goal(
        f"teacher efficiency >= {GOAL_EFFICIENCY} ({ratio(efficiency)})",
        efficiency >= GOAL_EFFICIENCY,
    )
    goal("1 and 2 workers give the same result for one chunk", same)
    return out


BENCHMARK = Benchmark(
    title="Dense defaults: 2 local workers vs 1, digits and teacher 10**5 x 64 (whole commands)",
    full=Sizes(reps=3, teacher_rows=100_000, teacher_epochs=5),
    quick=Sizes(reps=1, teacher_rows=20_000, teacher_epochs=2),
    smoke=Sizes(reps=1, teacher_rows=2_048, teacher_epochs=1, digits_epochs=1),
    run=run,
)
