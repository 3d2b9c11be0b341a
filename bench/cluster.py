"""cluster: local threads vs worker groups on the same Monte Carlo job: local pipes (N records
x 1 slot, 1 record x N slots) and SSH (1 record x N slots, a real sshd on loopback), the same
total slots everywhere, at two chunk sizes. Goal: a group within 10% of local threads at the
default chunk, wall time with worker start-up included.

Groups pay a fixed cost that threads do not (worker process start, numba import, kernel
cache load, handshake, shutdown): the median wall time of a tiny job on each execution is
measured too and subtracted for a second ratio."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aner_coord import parallel
from bench.calls import environment, loopback_ssh, monte_carlo, write_cluster
from bench.runner import (
    Benchmark,
    Failure,
    Series,
    attempt,
    counts,
    goal,
    interleave,
    mega,
    note,
    ratio,
    scratch_dir,
    secs,
    table,
    with_cpu,
)

SEED = 42
GOAL_RATIO = 1.10
TINY = 4 * 65_536  # the fixed-cost job: start, handshake, shutdown, ~1 ms of work
TINY_CHUNK = 65_536


@dataclass(frozen=True)
class Sizes:
    samples: int
    chunks: tuple[int, ...]  # the first one is the default, on which the goal is judged
    reps: int


@dataclass(frozen=True)
class Group:
    """A cluster file and the environment its transport needs."""

    path: Path
    env: dict[str, str | None]


def run(sizes: Sizes) -> dict[str, Any]:
    n_all = int(parallel.inventory()["auto_workers"])
    tmp = scratch_dir("aner-bench-cluster-")
    tmp.chmod(0o700)
    local_name = f"local threads, {n_all} workers"
    groups = {
        f"pipes {n_all} x 1 slot": Group(
            write_cluster(
                tmp / "pipes-nx1", [(f"pipe-{i + 1}", "local", "-", 1) for i in range(n_all)]
            ),
            {},
        ),
        f"pipes 1 x {n_all} slots": Group(
            write_cluster(tmp / "pipes-1xn", [("pipe-1", "local", "-", n_all)]), {}
        ),
    }
    ssh_note = None
    (tmp / "sshd").mkdir(mode=0o700)
    with contextlib.ExitStack() as stack:
        try:
            peer = stack.enter_context(loopback_ssh(tmp / "sshd"))
            groups[f"ssh 1 x {n_all} slots"] = Group(
                write_cluster(tmp / "ssh-1xn", [("peer-1", "ssh", peer.alias, n_all)]), peer.env
            )
        except Exception as exc:  # no sshd here: measure the others and say so
            ssh_note = f"SSH group skipped: {type(exc).__name__}: {str(exc)[:300]}"
        runs = measure(sizes, local_name, n_all, groups)
    return report(sizes, local_name, n_all, list(groups), runs, ssh_note)


def measure(
    sizes: Sizes, local_name: str, n_all: int, groups: dict[str, Group]
) -> dict[str, Series]:
    """Every (execution, chunk) case and each execution's tiny job, interleaved; keys are
    'name|chunk' and 'name|tiny'."""

    def on_local(samples: int, chunk: int) -> Callable[[], Any]:
        execution = parallel.local(workers=n_all, chunk=chunk)
        return lambda: with_cpu(lambda: monte_carlo(samples, SEED, execution))

    def on_group(group: Group, samples: int, chunk: int) -> Callable[[], Any]:
        def call() -> Any:
            with environment(group.env):
                execution = parallel.cluster(group.path, chunk=chunk)
                return with_cpu(lambda: monte_carlo(samples, SEED, execution))

        return lambda: attempt(call)

    cases: dict[str, Callable[[], Any]] = {}
    for chunk in sizes.chunks:
        cases[f"{local_name}|{chunk}"] = on_local(sizes.samples, chunk)
        for name, group in groups.items():
            cases[f"{name}|{chunk}"] = on_group(group, sizes.samples, chunk)
    cases[f"{local_name}|tiny"] = on_local(TINY, TINY_CHUNK)
    for name, group in groups.items():
        cases[f"{name}|tiny"] = on_group(group, TINY, TINY_CHUNK)
    # A warm-up round (first worker start-ups, the coordinator's imports): not recorded.
    interleave({k: v for k, v in cases.items() if k.endswith("|tiny")}, 1)
    return interleave(cases, sizes.reps)


def report(
    sizes: Sizes,
    local_name: str,
    n_all: int,
    groups: list[str],
    runs: dict[str, Series],
    ssh_note: str | None,
) -> dict[str, Any]:
    n, reps = sizes.samples, sizes.reps
    failures = sorted(
        {
            f"{key.replace('|', ', chunk ')}: {v.text[:400]}"
            for key, series in runs.items()
            for v in series.values
            if isinstance(v, Failure)
        }
    )
    good = {key: s.where(lambda v: not isinstance(v, Failure)) for key, s in runs.items()}
    fixed = {name: good[f"{name}|tiny"].median for name in [local_name, *groups]}
    out: dict[str, Any] = {
        "samples": n,
        "seed": SEED,
        "reps": reps,
        "slots_total": n_all,
        "fixed_cost_job": {"samples": TINY, "chunk": TINY_CHUNK, "median_wall_s": fixed},
        "runs": {},
        "ssh_note": ssh_note,
        "failures": failures,
    }
    rows = []
    all_hits: set[int] = set()
    for chunk in sizes.chunks:
        local_med = good[f"{local_name}|{chunk}"].median
        local_adj = local_med - fixed[local_name]
        for name in [local_name, *groups]:
            series = good[f"{name}|{chunk}"]
            tried = len(runs[f"{name}|{chunk}"].walls)
            if not series.walls:
                out["runs"][f"{name}, chunk {chunk}"] = {"chunk": chunk, "failed": True}
                rows.append((name, f"{chunk:,}", "failed", *["-"] * 8, ""))
                continue
            med = series.median
            job = series.median_of(lambda m: m.value.seconds)
            hits = {m.value.hits for m in series.values}
            own_cpu = series.median_of(lambda m: m.own_cpu)
            child_cpu = series.median_of(lambda m: m.child_cpu)
            all_hits |= hits
            adj = med - fixed[name]
            # With noise larger than the signal a difference can come out <= 0: no ratio then.
            adj_ratio = adj / local_adj if adj > 0 and local_adj > 0 else None
            fails = tried - len(series.walls)
            out["runs"][f"{name}, chunk {chunk}"] = {
                "chunk": chunk,
                **series.figures(),
                "job_seconds_median": job,
                "samples_per_s": n / med,
                "fixed_cost_s": fixed[name],
                "median_minus_fixed_s": adj,
                "ratio_vs_local": med / local_med,
                "ratio_vs_local_excluding_fixed": adj_ratio,
                "hits": sorted(hits),
                "this_process_cpu_s": own_cpu,
                "reaped_children_cpu_s": child_cpu,
                "runs_ok": f"{len(series.walls)}/{tried}",
            }
            rows.append(
                (
                    name,
                    f"{chunk:,}",
                    secs(med),
                    series.span(),
                    secs(job),
                    mega(n / med),
                    secs(fixed[name]),
                    ratio(med / local_med),
                    "n/a (noise)" if adj_ratio is None else ratio(adj_ratio),
                    f"{own_cpu:.2f} s",
                    f"{child_cpu:.2f} s",
                    f"{fails} failed" if fails else "",
                )
            )
    print(
        f"  {n:,} samples, seed {SEED}, {reps} interleaved round(s); same total slots "
        f"({n_all}) everywhere"
    )
    table(
        (
            "execution",
            "chunk",
            "median wall",
            "min:max s",
            "job s",
            "M samples/s",
            "fixed cost",
            "vs local",
            "vs local - fixed",
            "CPU here",
            "CPU children",
            "",
        ),
        rows,
    )
    identical = len(all_hits) == 1
    out["hits_identical"] = identical
    print(f"  hits identical across all runs: {identical} ({counts(all_hits)})")
    note(
        f"'fixed cost' is the median wall time of a {TINY:,}-sample job on the same "
        "execution: worker process start (Python, numba import, kernel cache load), "
        "handshake and shutdown; local threads pay almost none of it"
    )
    note(
        "'CPU here' is this process's CPU time per run (the coordinator; for local threads "
        "also the kernels), 'CPU children' that of the pipe workers it started and reaped; "
        "SSH workers run under the sshd this benchmark started and are only accounted when "
        "it stops, so not per run (on loopback they share the same cores)"
    )
    note(
        "'job s' (result.seconds) starts when the coordinator starts, so for a group it "
        "also includes the worker start-up; 'vs local - fixed' subtracts each execution's "
        "fixed cost from its wall time and compares the remainder"
    )
    if ssh_note:
        note(ssh_note)
    for failure in failures:
        note(f"FAILED: {failure}")
    default = sizes.chunks[0]
    verdicts = {}
    for name in groups:
        entry = out["runs"][f"{name}, chunk {default}"]
        if entry.get("failed"):
            verdicts[name] = {"raw": False, "excluding_fixed": None}
            continue
        excluding = entry["ratio_vs_local_excluding_fixed"]
        verdicts[name] = {
            "raw": entry["ratio_vs_local"] <= GOAL_RATIO,
            "excluding_fixed": None if excluding is None else excluding <= GOAL_RATIO,
        }
    out["goal_met_by_group"] = verdicts
    out["goal_met"] = any(v["raw"] for v in verdicts.values())
    said = {True: "yes", False: "no", None: "n/a"}
    for name, v in verdicts.items():
        print(
            f"  {name} at chunk {default:,}: within 10% of local threads: "
            f"{said[v['raw']]} (wall, start-up included), "
            f"{said[v['excluding_fixed']]} (start-up excluded)"
        )
    goal(
        f"a group within 10% of local threads at the default chunk {default:,} "
        "(wall time, start-up included)",
        out["goal_met"],
    )
    return out


BENCHMARK = Benchmark(
    title="local threads vs worker groups (pipes, SSH on loopback)",
    full=Sizes(samples=10**9, chunks=(65_536, 10**6), reps=3),
    quick=Sizes(samples=5 * 10**7, chunks=(65_536, 10**6), reps=1),
    smoke=Sizes(samples=10**6, chunks=(65_536, 250_000), reps=1),
    run=run,
)
