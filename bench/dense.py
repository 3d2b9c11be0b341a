"""dense: `aner-dense/v1` training through the product (`parallel.dense_fit`), side by side
with what a researcher would use instead, and against the machine's own limit.

- **GEMM limit.** The single-core rows per second that this machine's BLAS gives for the
  matrix products of a training row (forward, weight and input gradients) at the model's own
  layer shapes, float64 and float32 (`dense_limit.gemm_limit`; for the 256-wide model the
  better of chunks of 1,024 and 8,192 rows), next to aner's chunk kernel alone; measured
  again in every round of the comparisons below, so that a fit's share of the limit compares
  figures taken in the same minutes of a shared machine.
- **digits** (1,797 x 64, 10 classes), hidden 64,64, batch 256, Adam 1e-3, 30 epochs: one
  local worker in float64 and float32 against scikit-learn's `MLPClassifier` (float64).
- **teacher** 10**5 x 64, 10 classes, hidden 256,256, batch 8,192, 2 epochs, chunk 1,024:
  the same, plus PyTorch in float64 and float32 where an interpreter with torch is found
  (`dense_rivals.torch_python`); aner's rows per second against the GEMM limit.
- **scaling**: the teacher set at 10**6 x 64 (hidden 256,256, batch 8,192, chunk 1,024,
  float64): one local worker, two, and a 2-worker local-pipe group (parameters must be
  bitwise equal); efficiency, time to a validation-accuracy target, and per committed step
  the wall time against the compute on its critical path.

Whole fits with the data in memory, one thread each, interleaved round by round, medians.
aner's rows per second are the whole job's (roles, normalisation, a validation pass per
epoch and the test pass included); scikit-learn's and torch's are their training loop's.
"of limit" is aner's training rows per second over the GEMM limit (the goal's figure);
"all passes" counts the evaluated rows too, at the forward share of a training row's FLOPs.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from aner_coord import parallel
from bench.calls import write_cluster
from bench.dense_limit import gemm_flops, gemm_limit, kernel_rate
from bench.dense_rivals import TorchFits, rows_of, sklearn_fit, torch_python
from bench.runner import Benchmark, goal, interleave, note, ratio, scratch_dir, secs, table

SEED = 5
DIGITS = [64, 64, 64, 10]
WIDE = [64, 256, 256, 10]
GOAL_VS_SKLEARN = 1.2
GOAL_VS_TORCH = 1.0
GOAL_F32_SPEEDUP = 1.7
GOAL_F32_ACCURACY = 0.01
GOAL_LIMIT = {"float64": 0.85, "float32": 0.8}
GOAL_EFFICIENCY = 0.9
GOAL_PIPES = 0.85
PRECISIONS = ("float64", "float32")


@dataclass(frozen=True)
class Sizes:
    digits_epochs: int
    digits_reps: int
    teacher_rows: int
    teacher_epochs: int
    teacher_reps: int
    chunk: int
    scale_rows: int
    scale_reps: int
    limit_rounds: int
    target: float


def _n_all() -> int:
    from aner_worker.inventory import current

    return int(current().auto_workers)


def _median(values: list[float]) -> float:
    return float(np.median(values))


def _rates(series: Any) -> list[float]:
    return [v["rows_per_s"] for v in series.values]


# -- the GEMM limit -------------------------------------------------------------------------


def limits(sizes: Sizes) -> dict[str, Any]:
    cases = [(DIGITS, 256), (WIDE, sizes.chunk), (WIDE, 8192)]
    rows, out = [], {}
    for shape, chunk in cases:
        for precision in PRECISIONS:
            limit = gemm_limit(shape, chunk, precision, sizes.limit_rounds)
            kernel = kernel_rate(shape, chunk, precision, 0.2 * sizes.limit_rounds)
            key = f"{'digits' if shape == DIGITS else 'wide'} x{chunk} {precision}"
            out[key] = {**limit, "kernel_rows_per_s": kernel}
            rows.append(
                (key, f"{limit['rows_per_s']:,.0f}", f"{limit['gflop_per_s']:.1f}",
                 f"{kernel:,.0f}", f"{kernel / limit['rows_per_s']:.2f}")
            )  # fmt: skip
    print("  single-core GEMM limit at the model's layer shapes, and aner's chunk kernel alone")
    table(("model x chunk rows", "limit rows/s", "GFLOP/s", "kernel rows/s", "of limit"), rows)
    return out


# -- one local worker against scikit-learn and torch -----------------------------------------


def aner_fit(precision: str, chunk: int, **request: Any) -> dict[str, Any]:
    fit = parallel.dense_fit(
        **request, seed=SEED, precision=precision,
        execution=parallel.local(workers=1, chunk=chunk),
    )  # fmt: skip
    # Every pass's matrix products in training rows: an evaluated row costs the forward
    # share of a training row's FLOPs (normalisation passes and row generation cost none).
    sizes = fit.layer_sizes
    forward = sum(a * b for a, b in itertools.pairwise(sizes)) * 2 / gemm_flops(sizes)
    evaluated = fit.roles["validation"] * len(fit.history) + fit.roles["test"]
    return {
        "rows_per_s": fit.rows_processed / fit.seconds,
        "flop_rows_per_s": (fit.rows_processed + forward * evaluated) / fit.seconds,
        "test_accuracy": fit.test_accuracy,
        "seconds": fit.seconds,
    }


def limit_case(shape: list[int], chunks: tuple[int, ...], precision: str, rounds: int) -> Any:
    """A case measuring the GEMM limit of `shape` (the best of `chunks`) in its round, so
    that aner's share of it compares figures of the same minutes of a shared machine."""

    def measure() -> dict[str, Any]:
        best = max(gemm_limit(shape, c, precision, rounds)["rows_per_s"] for c in chunks)
        return {"rows_per_s": best, "test_accuracy": float("nan")}

    return measure


def compare(title: str, cases: dict[str, Any], reps: int) -> dict[str, Any]:
    runs = interleave(cases, reps)
    out: dict[str, Any] = {"runs": {}}
    sklearn = _median(_rates(runs["scikit-learn float64"]))
    rows = []
    for name, series in runs.items():
        rates = _rates(series)
        accuracy = _median([v["test_accuracy"] for v in series.values])
        rate = _median(rates)
        entry: dict[str, Any] = {
            "rows_per_s": rates,
            "test_accuracy": accuracy,
            "vs_sklearn": rate / sklearn,
        }
        limit = f"GEMM limit {name.split()[-1]}"
        if name.startswith("aner") and limit in runs:
            bound = _median(_rates(runs[limit]))
            entry["of_gemm_limit"] = rate / bound
            flops = _median([v["flop_rows_per_s"] for v in series.values])
            entry["all_passes_of_gemm_limit"] = flops / bound
        out["runs"][name] = entry
        rows.append(
            (name, f"{rate:,.0f}", f"{min(rates):,.0f}:{max(rates):,.0f}",
             "-" if np.isnan(accuracy) else f"{accuracy:.4f}", ratio(rate / sklearn),
             f"{entry['of_gemm_limit']:.2f}" if "of_gemm_limit" in entry else "-",
             f"{entry['all_passes_of_gemm_limit']:.2f}" if "of_gemm_limit" in entry else "-")
        )  # fmt: skip
    print(f"  {title}")
    table(
        ("trainer", "rows/s", "min:max", "test accuracy", "vs sklearn", "of limit", "all passes"),
        rows,
    )
    return out


def digits(sizes: Sizes) -> dict[str, Any]:
    from aner_worker.kernels.dense.data import load_digits

    rows = rows_of(load_digits(), SEED)
    request = {"data": "digits", "batch": 256, "hidden": (64, 64)}
    epochs = {"epochs": sizes.digits_epochs, "patience": sizes.digits_epochs}
    for precision in PRECISIONS:
        aner_fit(precision, 256, **request, epochs=2, patience=2)  # kernels loaded
    cases = {
        f"aner 1 worker {p}": (lambda p=p: aner_fit(p, 256, **request, **epochs))
        for p in PRECISIONS
    }
    cases["scikit-learn float64"] = lambda: sklearn_fit(rows, (64, 64), 256, sizes.digits_epochs)
    for p in PRECISIONS:
        cases[f"GEMM limit {p}"] = limit_case(DIGITS, (256,), p, 3)
    title = f"digits, hidden 64,64, batch 256, Adam 1e-3, {sizes.digits_epochs} epochs"
    return compare(title, cases, sizes.digits_reps)


def teacher(sizes: Sizes, work: Path) -> dict[str, Any]:
    from aner_worker.kernels.dense.data import TeacherDataset

    n, epochs = sizes.teacher_rows, sizes.teacher_epochs
    rows = rows_of(TeacherDataset(n, 64, 10, SEED), SEED)
    request = {"teacher": (n, 64, 10), "batch": 8192, "hidden": (256, 256)}
    cases: dict[str, Any] = {
        f"aner 1 worker {p}": (
            lambda p=p: aner_fit(p, sizes.chunk, **request, epochs=epochs, patience=epochs)
        )
        for p in PRECISIONS
    }
    cases["scikit-learn float64"] = lambda: sklearn_fit(rows, (256, 256), 8192, epochs)
    python = torch_python()
    if python is not None:
        torch = TorchFits(python, rows, work)
        for p in PRECISIONS:
            cases[f"torch {p}"] = lambda p=p: torch.fit((256, 256), 8192, epochs, p)
    else:
        note("PyTorch not found (set ANER_BENCH_TORCH_PYTHON to an interpreter with torch)")
    for p in PRECISIONS:
        cases[f"GEMM limit {p}"] = limit_case(WIDE, (sizes.chunk, 8192), p, 3)
    aner_fit("float32", sizes.chunk, **request, epochs=1, patience=1)  # kernels loaded
    title = (
        f"teacher {n:,} x 64, hidden 256,256, batch 8,192, chunk {sizes.chunk:,}, {epochs} epochs"
    )
    out = compare(title, cases, sizes.teacher_reps)
    runs = out["runs"]
    f64, f32 = runs["aner 1 worker float64"], runs["aner 1 worker float32"]
    out["float32_vs_float64"] = _median(f32["rows_per_s"]) / _median(f64["rows_per_s"])
    out["float32_accuracy_difference"] = abs(f32["test_accuracy"] - f64["test_accuracy"])
    if python is not None:
        for p in PRECISIONS:
            ours = _median(runs[f"aner 1 worker {p}"]["rows_per_s"])
            out[f"vs_torch_{p}"] = ours / _median(runs[f"torch {p}"]["rows_per_s"])
    return out


# -- one worker, two, and a pipe group ------------------------------------------------------


def scaling_fit(sizes: Sizes, execution: Any) -> Any:
    return parallel.dense_fit(
        teacher=(sizes.scale_rows, 64, 10), seed=SEED, hidden=(256, 256), batch=8192,
        epochs=2, patience=2, target_accuracy=sizes.target, execution=execution,
    )  # fmt: skip


def scaling(sizes: Sizes, work: Path) -> dict[str, Any]:
    n_all = _n_all()
    group = write_cluster(work / "pipes", [("p1", "local", "-", 1), ("p2", "local", "-", 1)])
    one, two, pipes = "local(workers=1)", "local(workers=2)", "2-worker pipe group"
    executions = {
        one: parallel.local(workers=1, chunk=sizes.chunk),
        two: parallel.local(workers=2, chunk=sizes.chunk),
        pipes: parallel.cluster(group, chunk=sizes.chunk),
    }
    runs = interleave(
        {name: (lambda e=e: scaling_fit(sizes, e)) for name, e in executions.items()},
        sizes.scale_reps,
    )
    out: dict[str, Any] = {"rows": sizes.scale_rows, "chunk": sizes.chunk, "runs": {}}
    rows, steps_rows = [], []
    rates: dict[str, float] = {}
    for name, series in runs.items():
        fits = series.values
        rate = _median([f.rows_processed / f.seconds for f in fits])
        rates[name] = rate
        # Per committed step of the whole job (its evaluation passes included on both sides):
        # the wall time, and the kernel seconds of the busiest worker, which bound it below.
        step_wall = _median([f.seconds / f.committed_steps for f in fits])
        compute = _median([_critical_compute_s(f) / f.committed_steps for f in fits])
        targets = [t for f in fits if (t := f.time_to_target_s) is not None]
        out["runs"][name] = {
            "rows_per_s": [f.rows_processed / f.seconds for f in fits],
            "seconds": [f.seconds for f in fits],
            "time_to_target_s": targets,
            "test_accuracy": fits[-1].test_accuracy,
            "step_wall_s": step_wall,
            "step_compute_s": compute,
        }
        rows.append(
            (name, f"{rate:,.0f}", secs(series.median), series.span(),
             secs(_median(targets)) if targets else "not reached",
             f"{fits[-1].history[-1].validation_accuracy:.4f}")
        )  # fmt: skip
        steps_rows.append((name, secs(step_wall), secs(compute), secs(step_wall - compute)))
    flats = {name: _flat(series.values[-1]) for name, series in runs.items()}
    equal = all(np.array_equal(flats[one], f) for f in flats.values())
    out.update(
        parameters_bitwise_equal=equal,
        efficiency_2_workers=rates[two] / (2 * rates[one]),
        efficiency_pipe_group=rates[pipes] / (2 * rates[one]),
        cpus=n_all,
    )
    print(
        f"  teacher {sizes.scale_rows:,} x 64, hidden 256,256, batch 8,192, chunk "
        f"{sizes.chunk:,}, 2 epochs, float64, target validation accuracy {sizes.target}"
    )
    table(
        ("execution", "train rows/s", "median", "min:max s", "time to target", "val accuracy"),
        rows,
    )
    table(
        ("per committed step", "wall", "compute (critical path)", "transfer + coordination + wait"),
        steps_rows,
    )
    print(
        f"  efficiency: 2 workers {ratio(out['efficiency_2_workers'])}, pipe group "
        f"{ratio(out['efficiency_pipe_group'])} ({n_all} CPUs); parameters bitwise equal "
        f"across the three: {equal}"
    )
    return out


def _critical_compute_s(fit: Any) -> float:
    """Kernel seconds of the busiest worker: per slot, so a 2-slot worker counts half."""
    return float(max((w.compute_s or 0.0) / w.slots for w in fit.workers))


def _flat(fit: Any) -> np.ndarray:
    from aner_worker.kernels.dense.network import flatten

    return flatten(fit.model.params)


# -- goals -----------------------------------------------------------------------------------


def judge(out: dict[str, Any]) -> bool:
    met = []

    def check(text: str, ok: bool | None) -> None:
        goal(text, ok)
        if ok is not None:
            met.append(ok)

    for size in ("digits", "teacher"):
        for p in PRECISIONS:
            vs = out[size]["runs"][f"aner 1 worker {p}"]["vs_sklearn"]
            check(f"{size}: 1 worker {p} >= {GOAL_VS_SKLEARN}x scikit-learn ({ratio(vs)})",
                  vs >= GOAL_VS_SKLEARN)  # fmt: skip
    big = out["teacher"]
    for p in PRECISIONS:
        vs = big.get(f"vs_torch_{p}")
        check(f"teacher: {p} >= {GOAL_VS_TORCH}x torch {p} "
              f"({ratio(vs) if vs is not None else 'torch not run'})",
              None if vs is None else vs >= GOAL_VS_TORCH)  # fmt: skip
        share = big["runs"][f"aner 1 worker {p}"]["of_gemm_limit"]
        check(f"teacher: 1 worker {p} >= {GOAL_LIMIT[p]} of the GEMM limit ({share:.2f})",
              share >= GOAL_LIMIT[p])  # fmt: skip
    speedup, drift = big["float32_vs_float64"], big["float32_accuracy_difference"]
    check(f"teacher: float32 >= {GOAL_F32_SPEEDUP}x float64 ({ratio(speedup)}), test accuracy "
          f"within {GOAL_F32_ACCURACY} ({drift:.4f})",
          speedup >= GOAL_F32_SPEEDUP and drift <= GOAL_F32_ACCURACY)  # fmt: skip
    scale = out["scaling"]
    check(f"scaling: 2 workers efficiency >= {GOAL_EFFICIENCY} "
          f"({ratio(scale['efficiency_2_workers'])})",
          scale["efficiency_2_workers"] >= GOAL_EFFICIENCY)  # fmt: skip
    pipes = scale["efficiency_pipe_group"]
    check(f"scaling: 2-worker pipe group efficiency >= {GOAL_PIPES} ({ratio(pipes)}), "
          "parameters bitwise equal",
          pipes >= GOAL_PIPES and scale["parameters_bitwise_equal"])  # fmt: skip
    return all(met)


def run(sizes: Sizes) -> dict[str, Any]:
    work = scratch_dir("aner-bench-dense-")
    started = time.perf_counter()
    out: dict[str, Any] = {"limits": limits(sizes)}
    out["digits"] = digits(sizes)
    out["teacher"] = teacher(sizes, work)
    out["scaling"] = scaling(sizes, work)
    note("aner's rows/s is the whole job's; scikit-learn's and torch's their training loop's")
    out["goal_met"] = judge(out)
    out["seconds"] = time.perf_counter() - started
    return out


BENCHMARK = Benchmark(
    title="Dense training: aner vs scikit-learn and torch, the GEMM limit, 1 and 2 workers",
    full=Sizes(30, 7, 100_000, 2, 3, 1024, 1_000_000, 2, 15, 0.5),
    quick=Sizes(5, 1, 20_000, 1, 1, 1024, 100_000, 1, 3, 0.4),
    smoke=Sizes(1, 1, 4_096, 1, 1, 1024, 8_192, 1, 1, 0.4),
    run=run,
)
