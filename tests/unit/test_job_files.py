"""The job files (docs/contracts.md, section 7) as msgspec Structs, against checked-in
samples of each schema: `status.json` of schema 1 and 2, `result.json` of both computations and
`run-manifest.json` keep reading as the code evolves."""

from __future__ import annotations

import json

import msgspec
import pytest
from support import DATA

from aner_coord.cli.progress import describe
from aner_coord.computations.montecarlo import MonteCarloResult
from aner_coord.computations.regression import RegressionResult
from aner_coord.errors import EXIT_CANCELLED, EXIT_FAILED, EXIT_OFFLINE, EXIT_OK
from aner_coord.jobdir.manifest import (
    MANIFEST_SCHEMA,
    decode_manifest,
    encode_manifest,
    sources_difference,
)
from aner_coord.jobdir.results import RESULT_SCHEMA, encode_result
from aner_coord.jobdir.status import (
    STATUS_SCHEMA,
    JobState,
    StatusSnapshot,
    TrainingPosition,
    WorkerAccount,
    decode_status,
    encode_status,
)

HITS_1E7_SEED_42 = 7_856_672
JobResult = MonteCarloResult | RegressionResult


def read_result(name: str) -> JobResult:
    result: JobResult = msgspec.json.decode((DATA / name).read_bytes(), type=JobResult)
    return result


# -- status.json ----------------------------------------------------------------------------


def test_checked_in_status_v1_still_reads() -> None:
    data = (DATA / "status-v1.json").read_bytes()
    assert b'"schema": "aner-status/1"' in data
    status = decode_status(data)
    assert status.schema == "aner-status/1"
    assert status.state is JobState.COMPLETED
    assert status.kind == "monte-carlo"
    assert status.unit == "samples"  # schema 1 had no unit: derived from the kind
    assert status.requested == status.accepted == 10_000_000
    assert status.chunks_done == status.chunks_total == 153
    assert [w.identity for w in status.workers] == ["local-1", "local-2"]
    assert sum(w.items for w in status.workers) == 10_000_000
    assert status.terminal
    assert status.total_work == 10_000_000


def test_per_worker_pacing_fields_are_optional_and_round_trip() -> None:
    data = json.loads((DATA / "status-v2.json").read_text())
    status = decode_status(json.dumps(data).encode())
    # Written before latency-adaptive dispatch: no estimates, no window.
    assert all((w.rtt_s, w.task_s, w.window) == (None, None, None) for w in status.workers)
    data["workers"][0].update(rtt_s=0.0612, task_s=0.0035, window=33)
    paced = decode_status(json.dumps(data).encode())
    assert (paced.workers[0].rtt_s, paced.workers[0].task_s, paced.workers[0].window) == (
        0.0612,
        0.0035,
        33,
    )
    assert decode_status(encode_status(paced)) == paced
    # Unmeasured fields stay out of the file, as older writers left them.
    assert b"rtt_s" not in encode_status(status)


def test_a_schema_1_fixture_reads_as_regression() -> None:
    data = json.loads((DATA / "status-v1.json").read_text())
    data.update(kind="fixture", passes=4, committed_steps=2)
    status = decode_status(json.dumps(data).encode())
    assert (status.kind, status.unit, status.committed_steps) == ("regression", "rows", 2)


def test_checked_in_status_v2_reads() -> None:
    data = (DATA / "status-v2.json").read_bytes()
    status = decode_status(data)
    assert status.schema == "aner-status/2" and STATUS_SCHEMA == "aner-status/3"
    assert status.state is JobState.COMPLETED
    assert (status.kind, status.unit, status.phase) == ("monte-carlo", "samples", "done")
    assert status.requested == status.accepted == status.accepted_in_pass == 10_000_000
    assert status.chunks_done == status.chunks_total == 153
    assert status.workers == [
        WorkerAccount("local-1", 1, 5_084_800, 78, [5_084_800]),
        WorkerAccount("local-2", 1, 4_915_200, 75, [4_915_200]),
    ]
    assert status.eta_s is None and status.error is None and status.committed_steps is None
    # It round-trips through the writer's own encoding (fields appended later, with
    # defaults, may add to the bytes but never change what the sample says).
    assert decode_status(encode_status(status)) == status


def test_unknown_state_is_refused() -> None:
    data = json.loads((DATA / "status-v2.json").read_text())
    data["state"] = "SLEEPING"
    with pytest.raises(msgspec.ValidationError, match="state"):
        decode_status(json.dumps(data).encode())


def test_the_offline_state_is_observed_never_written_and_each_state_has_its_exit_code() -> None:
    assert {s: s.exit_code for s in JobState} == {
        JobState.QUEUED: EXIT_OK,
        JobState.STARTING: EXIT_OK,
        JobState.RUNNING: EXIT_OK,
        JobState.CANCELLING: EXIT_OK,
        JobState.COMPLETED: EXIT_OK,
        JobState.FAILED: EXIT_FAILED,
        JobState.CANCELLED: EXIT_CANCELLED,
        JobState.COORDINATOR_OFFLINE: EXIT_OFFLINE,
    }
    assert (EXIT_OK, EXIT_FAILED, EXIT_CANCELLED, EXIT_OFFLINE) == (0, 3, 4, 5)
    assert {s for s in JobState if s.terminal} == {
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.CANCELLED,
    }
    assert {s for s in JobState if s.active} == {JobState.STARTING, JobState.RUNNING}
    assert not JobState.COORDINATOR_OFFLINE.terminal
    assert not JobState.COORDINATOR_OFFLINE.active


# -- result.json ----------------------------------------------------------------------------


def test_checked_in_monte_carlo_result_v2_reads() -> None:
    result = read_result("result-v2.json")
    assert isinstance(result, MonteCarloResult)
    assert result.schema == "aner-result/2" and RESULT_SCHEMA == "aner-result/3"
    assert (result.samples, result.seed, result.hits) == (10_000_000, 42, HITS_1E7_SEED_42)
    assert result.estimate == 4 * HITS_1E7_SEED_42 / 10_000_000
    assert result.stream == "aner-mc/philox4x64-10/v1"
    assert result.execution == {"kind": "local", "workers": 2, "chunk": 65536, "automatic": False}
    assert sum(w.items for w in result.workers) == 10_000_000
    assert sum(w.chunks for w in result.workers) == 153
    assert "7,856,672 hits" in result.summary()
    assert msgspec.json.decode(encode_result(result), type=JobResult) == result


def test_checked_in_regression_result_v2_reads() -> None:
    result = read_result("result-v2-regression.json")
    assert isinstance(result, RegressionResult)
    assert result.fixture == "aner-fixture/logistic/v1"
    assert (result.samples, result.steps, result.rate, result.seed) == (10_000, 3, 0.5, 3)
    assert result.committed_steps == 3
    assert len(result.theta) == 9
    assert result.final_loss < result.initial_loss
    assert [len(w.items_by_pass) for w in result.workers] == [5, 5]  # steps + 2 passes
    assert sum(w.items for w in result.workers) == 10_000 * 5
    assert "loss 0.693147 -> 0.627874" in result.summary()


def test_results_are_tagged_by_computation() -> None:
    samples = {"result-v2.json": "monte-carlo", "result-v2-regression.json": "regression"}
    for name, kind in samples.items():
        assert json.loads((DATA / name).read_text())["computation"] == kind
    data = json.loads((DATA / "result-v2.json").read_text())
    data["computation"] = "fixture"
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(json.dumps(data), type=JobResult)


def test_checked_in_dense_and_search_results_v2_read_with_epochs_from_1() -> None:
    # Schema 2 indexed a Dense history and best epoch from 0; shown, they count from 1.
    from aner_coord.computations.dense.result import DenseResult
    from aner_coord.computations.dense.summary import summarize
    from aner_coord.computations.search.result import SearchResult

    data = json.loads((DATA / "result-v2-dense.json").read_text())
    assert data["schema"] == "aner-result/2" and data["best_epoch"] == 3
    assert summarize(data)[0] == (
        "epochs    4 run, the best was epoch 4 (validation accuracy "
        f"{data['history'][3]['validation_accuracy']:.4f})"
    )
    dense = msgspec.json.decode((DATA / "result-v2-dense.json").read_bytes(), type=DenseResult)
    assert dense.history[0].epoch == 0  # the file as it was written
    search = msgspec.json.decode((DATA / "result-v2-search.json").read_bytes(), type=SearchResult)
    assert search.selected is not None
    assert search.fits[0].best_epoch == 2  # 0-based in schema 2, of 3 epochs


# -- run-manifest.json ---------------------------------------------------------------------


def test_checked_in_manifest_v4_reads_with_the_sources_of_its_rule() -> None:
    manifest = decode_manifest((DATA / "manifest-v4.json").read_bytes())
    assert manifest.schema == "aner-manifest/4"
    assert manifest.request == {"samples": 1_000_000, "seed": 1}
    # Schema 4's rule: the worker's contract, the computations and two modules, 89 files.
    assert len(manifest.sources) == 89
    assert "aner_coord/computations/montecarlo.py" in manifest.sources
    assert "aner_coord/jobdir/ledger.py" not in manifest.sources
    assert decode_manifest(encode_manifest(manifest)) == manifest


def test_a_resume_holds_an_older_manifest_to_the_files_it_recorded() -> None:
    v4 = decode_manifest((DATA / "manifest-v4.json").read_bytes())
    ledger = "aner_coord/jobdir/ledger.py"
    installed = {**v4.sources, ledger: "sha256:" + "0" * 64}
    assert sources_difference(v4, installed) is None  # schema 4 did not record the ledger
    changed = {**installed, "aner_coord/computations/montecarlo.py": "sha256:" + "1" * 64}
    said = sources_difference(v4, changed)
    assert said is not None and said.startswith("aner_coord/computations/montecarlo.py differs")
    gone = {k: v for k, v in installed.items() if k != "protocol/messages.py"}
    said = sources_difference(v4, gone)
    assert said == "protocol/messages.py took part when it began but is not installed now"
    v3 = decode_manifest((DATA / "manifest-v3.json").read_bytes())
    assert sources_difference(v3, installed) is None  # no sources: the fingerprint decides
    # From schema 5 on every file is recorded, so one the manifest does not name is new.
    v5 = msgspec.structs.replace(v4, schema=MANIFEST_SCHEMA)
    said = sources_difference(v5, installed)
    assert said == f"{ledger} is installed now but took no part when it began"
    assert sources_difference(msgspec.structs.replace(v5, sources=installed), installed) is None


def test_checked_in_manifest_v3_reads_with_the_jobs_identity() -> None:
    manifest = decode_manifest((DATA / "manifest-v3.json").read_bytes())
    assert manifest.schema == "aner-manifest/3"
    assert manifest.sources == {}  # appended in schema 4
    assert manifest.job == "29682178615dc6b4621065c5ce50cdd3"
    assert manifest.request_sha256 == (
        "sha256:18967e354a60a03cd8cbd2fe60e49bdc3c3dabc194ad48fc084b30e0be4540ad"
    )
    assert manifest.request == {"samples": 1_000_000, "seed": 1}
    assert decode_manifest(encode_manifest(manifest)) == manifest


def test_checked_in_manifest_v2_reads() -> None:
    data = (DATA / "manifest-v2.json").read_bytes()
    manifest = decode_manifest(data)
    assert manifest.schema == "aner-manifest/2"
    assert (manifest.job, manifest.request_sha256) == ("", "")  # appended in schema 3
    assert manifest.computation == "monte-carlo"
    assert manifest.identity == "aner-mc/philox4x64-10/v1"
    assert manifest.request == {"samples": 10_000_000, "seed": 42}
    assert manifest.plan == {
        "kind": "local",
        "workers": 2,
        "chunk": 65_536,
        "automatic": False,
        "chunks": 153,
        "passes": 1,
    }
    assert manifest.inventory["effective_cpus"] == 2
    assert manifest.source_fingerprint.startswith("sha256:")
    assert manifest.audit == 0.0
    assert decode_manifest(encode_manifest(manifest)) == manifest


def test_a_manifest_of_the_old_fixture_kind_reads_as_regression() -> None:
    data = json.loads((DATA / "manifest-v2.json").read_text())
    data.update(computation="fixture", schema="aner-manifest/1")
    del data["audit"]  # appended in schema 2, with a default
    manifest = decode_manifest(json.dumps(data).encode())
    assert (manifest.computation, manifest.audit) == ("regression", 0.0)


def test_a_status_v2_from_before_the_durable_fields_still_reads() -> None:
    data = json.loads((DATA / "status-v2.json").read_text())
    appended = ("losses", "resumes", "recovered")
    for name in appended:
        data.pop(name, None)  # written by aner before durable jobs
    status = decode_status(json.dumps(data).encode())
    assert (status.losses, status.resumes, status.recovered) == ([], 0, 0)
    assert status.state is JobState.COMPLETED and status.accepted == 10_000_000


def test_checked_in_dense_status_reads_and_renders_its_position() -> None:
    # Written by a Dense job in its third epoch: the planned work (an upper bound: early
    # stopping was possible), the position and a note on the plan, all appended fields.
    status = decode_status((DATA / "status-v2-dense.json").read_bytes())
    assert (status.kind, status.unit, status.state) == ("dense", "rows", JobState.RUNNING)
    assert status.total_work == status.work == 595_742 and status.work_upper_bound
    # Schema 2 counted the epoch's committed steps (137) where its phase said "step 138 of
    # 274"; it reads as schema 3 counts, the step in progress, from 1.
    assert status.phase == "epoch 3 of 6, step 138 of 274"
    assert status.position == TrainingPosition(3, 6, 138, 274, 0.8272800106823341)
    assert status.notes and "1 slot(s) idle during every step" in status.notes[0]
    line = describe(status)
    assert line.startswith(
        "RUNNING [epoch 3 of 6, step 138 of 274, validation accuracy 0.8273] "
        "275,454 of at most 595,742 rows (46.2%), "
    )
    assert " rows/s, ETA at most 0:02" in line
    assert decode_status(encode_status(status)) == status
    # A status written before these fields: no position, the work of equal passes.
    old = decode_status((DATA / "status-v2.json").read_bytes())
    assert (old.work, old.work_upper_bound, old.position, old.notes) == (None, False, None, [])
    assert old.total_work == old.requested * old.passes
    assert b'"position"' not in (DATA / "status-v2.json").read_bytes()


def test_a_new_manifest_records_the_identity_of_every_file_its_numbers_come_from() -> None:
    from aner_coord.jobdir.sources import installed_result_sources

    manifest = decode_manifest((DATA / "manifest-v3.json").read_bytes())
    newer = msgspec.structs.replace(
        manifest, schema=MANIFEST_SCHEMA, sources=installed_result_sources()
    )
    assert MANIFEST_SCHEMA == "aner-manifest/5"
    again = decode_manifest(encode_manifest(newer))
    assert again == newer
    for name in ("aner_coord/computations/regression.py", "aner_coord/jobdir/ledger.py"):
        assert again.sources[name].startswith("sha256:")


def test_a_queued_job_says_whom_it_waits_for_and_how_it_ended() -> None:
    """The statuses of a job that waits (`aner_coord.job.queue`): QUEUED naming the holders
    of its slots, or the job it runs after; CANCELLED or FAILED if it never started."""
    from aner_coord.admission import admit
    from aner_coord.computations.montecarlo import MonteCarloRequest
    from aner_coord.job.queue import QueuedPublisher, Turn
    from aner_coord.requests import JobRequest, LocalExecution
    from aner_worker.leases import Holder

    job = admit(JobRequest(MonteCarloRequest(samples=1000, seed=1), LocalExecution(workers=1)))
    seen: list[StatusSnapshot] = []
    queue = QueuedPublisher(job, [seen.append], first_seq=4)
    queue.queued([Holder(42, "0123456789ab", "regression", 2, "/private/path")])
    queue.queued([Holder(43, "ba9876543210", "monte-carlo", 0)])
    queue.ended(Turn(cancelled=True))
    queue.ended(Turn(failure="the job it was to run after, /a, ended FAILED: it did not start"))
    assert [(s.seq, s.state) for s in seen] == [
        (5, JobState.QUEUED),
        (6, JobState.QUEUED),
        (7, JobState.CANCELLED),
        (8, JobState.FAILED),
    ]
    assert describe(seen[0]).startswith(
        "QUEUED [waiting for CPU slots held by job 0123456789ab (regression, pid 42, "
        "2 slot(s))] 0 of 1,000 samples (0.0%)"
    )
    assert "/private/path" not in encode_status(seen[0]).decode()  # a path is private
    assert describe(seen[1]).startswith(
        "QUEUED [waiting for job ba9876543210 (monte-carlo, pid 43) to complete]"
    )
    assert seen[3].error == "the job it was to run after, /a, ended FAILED: it did not start"
    assert decode_status(encode_status(seen[0])) == seen[0]


def test_a_percent_of_the_cost_is_labelled_beside_the_items() -> None:
    # Issue 38, item 4: "70,228 of 340,418 rows (1.4%)" gave rows and a percent of the cost.
    from aner_coord.cli.progress import compact, work_text

    status = decode_status((DATA / "status-v2-dense.json").read_bytes())
    weighed = msgspec.structs.replace(status, accepted=70_228, work=340_418, fraction_done=0.0141)
    assert work_text(weighed) == (
        "70,228 of at most 340,418 rows (20.6% of the rows, 1.4% of the cost)"
    )
    assert "  1.4% of the cost, 70.2k of <=340.4k rows, " in compact(weighed)
    alike = msgspec.structs.replace(weighed, fraction_done=70_228 / 340_418)
    assert work_text(alike) == "70,228 of at most 340,418 rows (20.6%)"
