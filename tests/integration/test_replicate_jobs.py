"""Monte Carlo and regression replicates end to end (docs/contracts.md, section 16): the
aggregate is bitwise the same on one and two local workers and on a group of pipe workers,
each replicate is a plain run of its derived seed, and a coordinator killed with SIGKILL
mid-way resumes to the same result, recomputing only the replicates its ledger lacks."""

from __future__ import annotations

import json
import math
import os
import signal
import statistics
from pathlib import Path
from typing import Any

import msgspec
import pytest
from support import (
    Coordinators,
    GatedWorker,
    gated_pair,
    process_gone,
    result_of,
    run_aner,
    status_of,
    wait_for,
    wait_status,
    write_pipe_pair,
)

from aner_coord import parallel
from aner_coord.computations.replicates import replicate_seeds
from aner_coord.errors import RequestError
from aner_coord.jobdir.ledger import LEDGER, Accepted, scan
from aner_coord.jobdir.status import JobState
from aner_worker.kernels.montecarlo import McStats

SAMPLES, REPLICATES = 200_000, 6


def _run(job: Path, *placement: str) -> dict[str, object]:
    done = run_aner(
        "parallel", "run", "--samples", str(SAMPLES), "--seed", "42",
        "--replicates", str(REPLICATES), "--output", str(job), "--quiet", *placement,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return result_of(job)


def _science(result: dict[str, object]) -> bytes:
    keys = ("of", "contract", "seed", "options", "replicates", "per_replicate", "aggregate",
            "pooled")  # fmt: skip
    assert result["computation"] == "replicates" and result["of"] == "monte-carlo"
    return json.dumps({k: result[k] for k in keys}).encode()


def test_the_aggregate_is_bitwise_the_same_on_one_two_and_pipe_workers(tmp_path: Path) -> None:
    one = _run(tmp_path / "one", "--workers", "1")
    two = _run(tmp_path / "two", "--workers", "2", "--chunk", "70000")  # tasks straddle
    pipes = _run(tmp_path / "pipes", "--cluster", str(write_pipe_pair(tmp_path / "c")))
    assert _science(one) == _science(two) == _science(pipes)
    csv = (tmp_path / "one" / "replicates.csv").read_bytes()
    assert csv == (tmp_path / "two" / "replicates.csv").read_bytes()
    assert csv == (tmp_path / "pipes" / "replicates.csv").read_bytes()
    assert csv.count(b"\n") == REPLICATES + 1
    rows = one["per_replicate"]
    assert isinstance(rows, list) and [r["replicate"] for r in rows] == list(range(REPLICATES))
    # A replicate is exactly a plain run of its seed.
    plain = parallel.monte_carlo(samples=SAMPLES, seed=rows[2]["seed"])
    assert plain.hits == rows[2]["hits"]
    pooled = one["pooled"]
    assert isinstance(pooled, dict)
    assert pooled["hits"] == sum(r["hits"] for r in rows)
    assert pooled["samples"] == SAMPLES * REPLICATES
    assert pooled["estimate"] == 4 * pooled["hits"] / (SAMPLES * REPLICATES)
    shown = run_aner("parallel", "status", "--job", str(tmp_path / "one")).stdout
    assert f"(mean of {REPLICATES} replicates +- standard error; from " in shown


def test_the_api_returns_the_same_aggregate_and_per_replicate_results(tmp_path: Path) -> None:
    result = parallel.monte_carlo(samples=SAMPLES, seed=42, replicates=REPLICATES)
    assert result.replicates == REPLICATES
    cli = _run(tmp_path / "cli", "--workers", "2")
    assert _science(msgspec.to_builtins(result)) == _science(cli)


def test_replicates_zero_is_refused_before_anything_starts(tmp_path: Path) -> None:
    job = tmp_path / "job"
    done = run_aner(
        "parallel", "run", "--samples", "1000", "--seed", "1", "--replicates", "0",
        "--output", str(job),
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "aner: --replicates must be between 1 and 10,000, got 0"
    ]
    assert not job.exists()


def _accepted(job: Path) -> list[Accepted]:
    records, _ = scan((job / LEDGER).read_bytes())
    return [e.record for e in records if isinstance(e.record, Accepted)]


def _killed_after_three_and_resumed(
    job: Path, gate: GatedWorker, coordinators: Coordinators, replicates: int, items: int
) -> tuple[list[Accepted], list[Accepted]]:
    """Kill the job's coordinator once three replicates (of `items` each) are accepted and
    resume the job to completion; the ledger's accepted records before and after. The job
    runs on a gated pair (`gated_pair`): "w2" holds the replicates it was sent (or the one
    kept for it) until `gate` opens, after the kill, so the job is mid-way when it is killed,
    however fast the machine."""
    pid = coordinators.add(status_of(job).pid)
    wait_status(
        job,
        lambda s: s.state is JobState.RUNNING and s.accepted >= 3 * items,
        240,
        "three replicates accepted",
    )
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: process_gone(pid), 30, "the coordinator to die")
    gate.open()
    before = _accepted(job)
    assert 3 <= len(before) < replicates  # whole replicates: one task each
    resumed = run_aner("parallel", "resume", "--job", str(job), timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    final = status_of(job)
    assert final.state is JobState.COMPLETED
    assert final.recovered == len(before) * items
    return before, _accepted(job)


def test_a_killed_coordinator_resumes_recomputing_only_the_missing_replicates(
    tmp_path: Path, coordinators: Coordinators
) -> None:
    samples, replicates = 5_000_000, 40
    job = tmp_path / "job"
    with gated_pair(tmp_path / "c") as (cluster, gate):
        done = run_aner(
            "parallel", "run", "--samples", str(samples), "--seed", "7",
            "--replicates", str(replicates), "--cluster", str(cluster), "--output", str(job),
            "--background",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        before, after = _killed_after_three_and_resumed(
            job, gate, coordinators, replicates, samples
        )
    # Each replicate accepted exactly once, the recovered ones never again.
    assert sorted(a.chunk for a in after) == list(range(replicates))
    assert after[: len(before)] == before
    result = result_of(job)
    undisturbed = parallel.monte_carlo(samples=samples, seed=7, replicates=replicates)
    assert _science(result) == _science(msgspec.to_builtins(undisturbed))
    ledger_hits = {a.chunk: msgspec.msgpack.decode(a.stats, type=McStats).hits for a in after}
    assert [r["hits"] for r in result["per_replicate"]] == [
        ledger_hits[k] for k in range(replicates)
    ]


def _regression(job: Path, *placement: str) -> dict[str, Any]:
    done = run_aner(
        "parallel", "regression", "--samples", "30000", "--steps", "4", "--rate", "0.5",
        "--seed", "3", "--replicates", "5", "--output", str(job), "--quiet", *placement,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return result_of(job)


def test_regression_replicates_are_bitwise_the_same_on_any_plan_and_each_a_plain_fit(
    tmp_path: Path,
) -> None:
    keys = ("of", "contract", "seed", "options", "replicates", "per_replicate", "aggregate")
    one = _regression(tmp_path / "one", "--workers", "1")
    two = _regression(tmp_path / "two", "--workers", "2")
    pipes = _regression(tmp_path / "pipes", "--cluster", str(write_pipe_pair(tmp_path / "c")))
    science = [json.dumps({k: r[k] for k in keys}) for r in (one, two, pipes)]
    assert science[0] == science[1] == science[2]
    csv = (tmp_path / "one" / "replicates.csv").read_text().splitlines()
    assert csv[0].startswith("replicate,seed,initial_loss,initial_accuracy,final_loss,")
    assert len(csv) == 6
    rows = one["per_replicate"]
    assert [r["seed"] for r in rows] == list(replicate_seeds(3, 5))
    # A replicate, run whole on one slot, is the plain distributed fit of its seed (section
    # 2's tolerance across plans).
    plain = parallel.regression(samples=30000, steps=4, rate=0.5, seed=rows[1]["seed"])
    assert abs(plain.final_loss - rows[1]["final_loss"]) <= 1e-10
    assert abs(plain.fit_accuracy - rows[1]["fit_accuracy"]) <= 1e-12
    assert all(abs(plain.theta[j] - rows[1][f"theta_{j}"]) <= 1e-10 for j in range(9))
    final = one["aggregate"]["final_loss"]
    values = [r["final_loss"] for r in rows]
    assert final["n"] == 5 and final["mean"] == math.fsum(values) / 5
    assert abs(final["std"] - statistics.stdev(values)) <= 1e-15
    assert (final["min"], final["max"]) == (min(values), max(values))
    assert one["options"] == {"samples": 30000, "steps": 4, "rate": 0.5}


# -- Dense replicates: whole fits on the search kernel ---------------------------------------
DENSE = ("--teacher", "300,6,3", "--hidden", "8", "--epochs", "2", "--seed", "5")
DENSE_KEYS = ("of", "contract", "seed", "options", "replicates", "per_replicate", "aggregate")


def _train(job: Path, replicates: int, *placement: str) -> dict[str, Any]:
    done = run_aner(
        "parallel", "train", *DENSE, "--replicates", str(replicates), "--output", str(job),
        "--quiet", *placement, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return result_of(job)


def _dense_science(result: dict[str, Any]) -> str:
    assert result["computation"] == "replicates" and result["of"] == "dense"
    return json.dumps({k: result[k] for k in DENSE_KEYS})


def test_dense_replicates_are_bitwise_the_same_on_one_two_and_pipe_workers(
    tmp_path: Path,
) -> None:
    # One local worker through the API (the same result as the command line's), two on the
    # command line, and a group of pipe workers.
    api = parallel.dense_fit(
        teacher=(300, 6, 3), hidden=8, epochs=2, seed=5, replicates=4,
        execution=parallel.local(1), output=tmp_path / "one",
    )  # fmt: skip
    one = result_of(tmp_path / "one")
    assert _dense_science(msgspec.to_builtins(api)) == _dense_science(one)
    two = _train(tmp_path / "two", 4, "--workers", "2")
    pipes = _train(tmp_path / "pipes", 4, "--cluster", str(write_pipe_pair(tmp_path / "c")))
    assert _dense_science(one) == _dense_science(two) == _dense_science(pipes)
    csv = (tmp_path / "one" / "replicates.csv").read_bytes()
    assert csv == (tmp_path / "two" / "replicates.csv").read_bytes()
    assert csv == (tmp_path / "pipes" / "replicates.csv").read_bytes()
    assert csv.startswith(b"replicate,seed,epochs,best_epoch,validation_loss,")
    assert csv.count(b"\n") == 5
    rows = one["per_replicate"]
    assert [r["seed"] for r in rows] == list(replicate_seeds(5, 4))
    # Replicates differ (their training seeds do), on the same roles.
    assert len({r["validation_loss"] for r in rows}) == 4
    assert one["options"]["rows"] == {"train": 222, "validation": 41, "test": 37}
    # The aggregation rule, computed independently from the rows.
    for name in ("validation_loss", "validation_accuracy", "test_loss", "test_accuracy"):
        values = [r[name] for r in rows]
        field = one["aggregate"][name]
        assert field["n"] == 4 and field["mean"] == math.fsum(values) / 4
        assert abs(field["std"] - statistics.stdev(values)) <= 1e-15
        assert abs(field["standard_error"] - statistics.stdev(values) / 2) <= 1e-15
    epochs = [r["best_epoch"] for r in rows]
    spread = one["aggregate"]["best_epoch"]
    assert (spread["min"], spread["max"]) == (min(epochs), max(epochs))
    assert one["headline"] == ["validation_loss", "validation_accuracy", "test_loss",
                               "test_accuracy", "best_epoch"]  # fmt: skip
    with pytest.raises(RequestError, match=r"^chunk=: each replicate is one whole fit"):
        parallel.dense_fit(teacher=(300, 6, 3), seed=5, replicates=4, chunk=64)
    shown = run_aner("parallel", "status", "--job", str(tmp_path / "one")).stdout
    assert "test_accuracy" in shown and "(mean of 4 replicates +- standard error;" in shown


def test_a_killed_dense_replicates_job_resumes_recomputing_only_the_missing_replicates(
    tmp_path: Path, coordinators: Coordinators
) -> None:
    # Fits of about 0.1 s each on an idle core, on a gated pair: still running when killed.
    replicates = 16
    job = tmp_path / "job"
    with gated_pair(tmp_path / "c") as (cluster, gate):
        done = run_aner(
            "parallel", "train", "--teacher", "16000,16,3", "--hidden", "32", "--epochs", "4",
            "--seed", "9", "--replicates", str(replicates), "--cluster", str(cluster),
            "--output", str(job), "--background",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        before, after = _killed_after_three_and_resumed(job, gate, coordinators, replicates, 1)
    assert sorted(a.chunk for a in after) == list(range(replicates))
    assert after[: len(before)] == before
    undisturbed = parallel.dense_fit(
        teacher=(16000, 16, 3), hidden=32, epochs=4, seed=9, replicates=replicates
    )
    assert _dense_science(result_of(job)) == _dense_science(msgspec.to_builtins(undisturbed))
