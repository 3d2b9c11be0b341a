"""The scaling command's pure parts: the configuration registry, the agreement of trials,
experiment files refused with one line, and the recommender on probe fixtures (records on
one host among them)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from aner_coord.cli.scaling import format_plan, rate_text
from aner_coord.errors import RequestError
from aner_coord.scaling.experiment import load_experiment
from aner_coord.scaling.plan import chunk_candidates, predict_local, recommend, shared_rates
from aner_coord.scaling.probe import LocalProbe, Probe, WorkerProbe
from aner_coord.scaling.registry import Registry
from aner_coord.scaling.trials import disagreement, scientific
from aner_worker.machine import FIELDS, machine_identity

MACHINE = {
    "cpu_model": "AMD EPYC 7763",
    "logical_cpus": "16",
    "memory_bytes": "68719476736",
    "os": "Linux 6.1",
    "arch": "x86_64",
    "python": "3.11.7",
    "numpy": "1.26.4",
    "numba": "0.59.1",
    "aner": "0.1.0",
    "source": "sha256:" + "a" * 64,
}


def test_the_machine_identity_has_every_public_field_and_no_hostname() -> None:
    import socket

    identity = machine_identity()
    assert tuple(identity) == FIELDS
    assert all(isinstance(v, str) and v for v in identity.values())
    assert socket.gethostname() not in json.dumps(identity)


def test_a_changed_field_makes_the_next_revision(tmp_path: Path) -> None:
    path = tmp_path / "data" / "registry.json"
    registry = Registry(path)
    first = registry.revision("Atlas-02", MACHINE)
    assert first.label == "Atlas-02 / C01" and not first.replaced
    assert registry.revision("Atlas-02", dict(MACHINE)).label == "Atlas-02 / C01"
    # Any one field, software included, is a new revision; and it persists on disk.
    upgraded = registry.revision("Atlas-02", {**MACHINE, "numba": "0.60.0"})
    assert upgraded.label == "Atlas-02 / C02" and not upgraded.replaced
    reread = Registry(path)
    assert reread.revision("Atlas-02", {**MACHINE, "numba": "0.60.0"}).label == "Atlas-02 / C02"
    assert [h["revision"] for h in reread.history("Atlas-02")] == ["C01", "C02"]
    # Each public identity numbers its own revisions.
    assert reread.revision("Atlas-01", MACHINE).label == "Atlas-01 / C01"
    assert path.stat().st_mode & 0o077 == 0


def test_one_worker_reached_over_pipes_and_ssh_keeps_one_revision(tmp_path: Path) -> None:
    # What the same worker reported over pipes and over SSH (issue 35: C01 to C06 in six
    # runs alternating the two): the kernel set is the same, the login's BLAS thread count
    # and whether OPENBLAS_CORETYPE named that set are not.
    blas = "openblas 0.3.31 SkylakeX pthreads"
    env = "OPENBLAS_CORETYPE=SkylakeX OPENBLAS_L2_SIZE=512"
    pipe = {**MACHINE, "blas": blas, "blas_threads": "1", "blas_env": env}
    ssh = {**MACHINE, "blas": blas, "blas_threads": "2", "blas_env": "OPENBLAS_L2_SIZE=512"}
    registry = Registry(tmp_path / "registry.json")
    labels = [registry.revision("Atlas-02", m).revision for m in [pipe, ssh] * 3]
    assert labels == ["C01"] * 6
    # What changes bits or speed still makes the next revision: another kernel set, or
    # another L2 size for OpenBLAS to block for.
    haswell = {**ssh, "blas": blas.replace("SkylakeX", "Haswell")}
    assert registry.revision("Atlas-02", haswell).revision == "C02"
    larger_l2 = {**ssh, "blas_env": "OPENBLAS_L2_SIZE=1024"}
    assert registry.revision("Atlas-02", larger_l2).revision == "C03"


def test_a_rebuilt_engine_under_the_same_version_is_a_new_revision(tmp_path: Path) -> None:
    from aner_worker.contract import source_fingerprint

    # What a worker reports carries this installation's source fingerprint...
    assert machine_identity()["source"] == source_fingerprint()
    # ...so a rebuilt engine that kept its version string is told apart.
    registry = Registry(tmp_path / "registry.json")
    assert registry.revision("Atlas-02", MACHINE).revision == "C01"
    rebuilt = registry.revision("Atlas-02", {**MACHINE, "source": "sha256:" + "b" * 64})
    assert rebuilt.revision == "C02" and not rebuilt.replaced
    assert rebuilt.machine["aner"] == MACHINE["aner"]


def test_a_different_machine_under_the_same_name_is_flagged(tmp_path: Path) -> None:
    registry = Registry(tmp_path / "registry.json")
    registry.revision("Atlas-02", MACHINE)
    other = {
        **MACHINE,
        "cpu_model": "Apple M2",
        "logical_cpus": "8",
        "memory_bytes": "17179869184",
        "arch": "arm64",
    }
    moved = registry.revision("Atlas-02", other)
    assert moved.label == "Atlas-02 / C02" and moved.replaced
    # Only the public fields are kept: a hostname offered by a worker never enters.
    kept = registry.revision("Atlas-03", {**MACHINE, "hostname": "secret.lab.internal"})
    assert "hostname" not in kept.machine
    assert "secret.lab.internal" not in (tmp_path / "registry.json").read_text()


def test_a_registry_that_is_not_one_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "registry.json"
    path.write_text('{"schema": "something else"}')
    with pytest.raises(RequestError, match="is not an aner-registry/1 file"):
        Registry(path)


def test_trials_agree_on_exact_counts_and_parameters_within_tolerance() -> None:
    result = {"seconds": 1.0, "workers": [], "hits": 10, "theta": [0.5, -0.25]}
    same = scientific({**result, "seconds": 2.0, "execution": {"kind": "cluster"}})
    assert disagreement(scientific(result), same) is None
    assert disagreement({"theta": [0.5 + 5e-11]}, {"theta": [0.5]}) is None
    assert disagreement({"theta": [0.5 + 1e-9]}, {"theta": [0.5]}) == (
        "theta[0] is 0.500000001, the first trial's is 0.5"
    )
    assert disagreement({"hits": 11}, {"hits": 10}) == "hits is 11, the first trial's is 10"
    # A Dense result names its chunk: how it ran, not what it found.
    assert (
        disagreement(scientific({**result, "chunk": 64}), scientific({**result, "chunk": 32}))
        is None
    )


def test_a_fits_seconds_and_worker_are_never_part_of_the_scientific_result() -> None:
    # Issue 25 item 15: a search's every fit and its refit carry their own timing and worker.
    def search(seconds: float, worker: str, loss: float) -> dict[str, object]:
        fit = {"candidate": 0, "fold": 0, "validation_loss": loss, "seconds": seconds}
        refit = {"test_loss": loss, "seconds": seconds, "worker": worker}
        return {"fits": [{**fit, "worker": worker}], "refit": refit}

    first = scientific(search(0.0013, "local-1", 0.5))
    assert disagreement(scientific(search(0.41, "local-2", 0.5)), first) is None
    assert disagreement(scientific(search(0.41, "local-2", 0.6)), first) == (
        "fits[0].validation_loss is 0.6, the first trial's is 0.5"
    )


def _experiment(tmp_path: Path, body: str) -> str:
    """An experiment file: top-level keys of `body` first, then the computation, the cases."""
    top, _, cases = body.partition("[[case]]")
    path = tmp_path / "experiment.toml"
    path.write_text(
        top
        + '[computation]\nkind = "monte-carlo"\nsamples = 1_000_000\nseed = 1\n'
        + ("[[case]]" + cases if _ else "")
    )
    return str(path)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('[[case]]\nname = "a"\nworkers = 1\nthreads = 2\n', "unknown field `threads`"),
        ('repetitions = 2\n[[case]]\nname = "a"\nworkers = 1\n', "at least 3 are needed"),
        ('[[case]]\nname = "a"\n', "give exactly one of workers = N or cluster = FILE"),
        ('[[case]]\nname = "a"\nworkers = 1\n[[case]]\nname = "a"\nworkers = 1\n', "unique"),
        ('reference = "b"\n[[case]]\nname = "a"\nworkers = 1\n', "reference 'b' is not a case"),
        ('[[case]]\nname = "a"\nworkers = 100000\n', "case 'a': 100000 local workers exceed"),
        ("", "no [[case]]"),
    ],
)
def test_a_bad_experiment_is_one_clear_line(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(RequestError, match=r"experiment .*experiment\.toml") as caught:
        load_experiment(_experiment(tmp_path, body))
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_subset_naming_an_unknown_record_is_refused(tmp_path: Path) -> None:
    cluster = tmp_path / "lab.cluster"
    cluster.write_text('ANER_CLUSTER 1\nworker "w1" local "-" "/usr/bin/aner" 1\n')
    cluster.chmod(0o600)
    body = '[[case]]\nname = "g"\ncluster = "lab.cluster"\nidentities = ["w1", "w9"]\n'
    with pytest.raises(RequestError, match=r"case 'g': w9 not in lab.cluster \(it has w1\)"):
        load_experiment(_experiment(tmp_path, body))


# -- the recommender on a probe fixture ----------------------------------------------------
RATE = 100e6  # items per second per slot, everywhere


def _probe(startup_s: float) -> Probe:
    local = LocalProbe(cpus=1, command_s=0.5, rates={1: RATE}, task_s=2e-6)
    workers = tuple(
        WorkerProbe(
            identity=f"w{i}",
            transport="local",
            slots=2,
            startup_s=startup_s,
            shutdown_s=0.05,
            rate_per_slot=RATE,
            task_s=50e-6,
            round_trip_s=0.001,
            bandwidth_bps=100e6,
        )
        for i in (1, 2)
    )
    return Probe(kind="monte-carlo", local=local, workers=workers)


def test_local_for_a_tiny_job_and_the_group_for_a_large_one() -> None:
    probe = _probe(startup_s=1.4)
    tiny = recommend(probe, 10_000_000, 1)
    assert tiny.best.local and tiny.best.workers == 1
    assert tiny.reason.startswith("local, 1 worker(s): ")
    assert "start-up of " in tiny.reason and "exceeds the" in tiny.reason
    large = recommend(probe, 10_000_000_000, 1)
    assert not large.best.local and large.best.identities == ("w1", "w2")
    assert large.reason.startswith("the group: its 4 slots save ")
    # Predictions are ordered and every candidate chunk admits the job.
    times = [c.predicted_s for c in large.candidates]
    assert times == sorted(times)
    assert all(-(-10_000_000_000 // c.chunk) <= 1_000_000 for c in large.candidates)


def test_a_slower_start_moves_the_break_even_to_larger_jobs() -> None:
    items = 1_000_000_000  # 10 s on one slot here, 2.5 s on the group
    assert not recommend(_probe(startup_s=1.0), items, 1).best.local
    assert recommend(_probe(startup_s=20.0), items, 1).best.local


def test_training_steps_get_a_break_even_sentence() -> None:
    probe = _probe(startup_s=1.0)
    advice = recommend(probe, 1000, 12, rows_per_step=1000)
    assert "Per step of 1,000 rows the group loses" in advice.reason
    far = replace(probe, workers=tuple(replace(w, round_trip_s=1e-6) for w in probe.workers))
    assert "the group gains" in recommend(far, 10**8, 12, rows_per_step=10**8).reason


def test_chunks_lie_between_the_overhead_and_the_load_balance_bounds() -> None:
    chunks = chunk_candidates(10**9, 4, RATE, 50e-6)
    overhead_bound = 50e-6 * RATE / 0.05
    balance_bound = 10**9 // (4 * 4)
    assert min(c for c in chunks if c != 65536) >= overhead_bound
    assert max(chunks) == balance_bound


def test_the_auto_matrix(tmp_path: Path) -> None:
    from aner_coord.scaling.experiment import auto_experiment

    cluster = tmp_path / "lab.cluster"
    cluster.write_text(
        'ANER_CLUSTER 1\nworker "w1" local "-" "/usr/bin/aner" 1\n'
        'worker "w2" ssh "peer" "/usr/bin/aner" 2\n'
    )
    cluster.chmod(0o600)
    experiment = auto_experiment(str(cluster), 10**8, 1, 3, effective_cpus=1)
    # 1 worker (the only power of two up to 1 CPU), each record alone, all of them; each at
    # the default chunk and a coarse one (two chunks per slot).
    assert [c.name for c in experiment.cases] == [
        "local-1 chunk 65536",
        "local-1 chunk 50000000",
        "alone w1 chunk 65536",
        "alone w1 chunk 50000000",
        "alone w2 chunk 65536",
        "alone w2 chunk 25000000",
        "all chunk 65536",
        "all chunk 16666667",
    ]
    assert experiment.reference == "local-1 chunk 65536"
    assert experiment.case("all chunk 65536").identities == ["w1", "w2"]
    assert experiment.repetitions == 3


def test_the_report_flags_a_machine_replaced_under_its_name_and_what_did_not_scale(
    tmp_path: Path,
) -> None:
    from aner_coord.computations.montecarlo import MonteCarloRequest
    from aner_coord.scaling.experiment import Case, Experiment
    from aner_coord.scaling.records import report_md, summarize

    registry = Registry(tmp_path / "registry.json")
    registry.revision("local", MACHINE)
    moved = {**MACHINE, "cpu_model": "Other", "logical_cpus": "2", "memory_bytes": "1"}
    moved["arch"] = "arm64"
    label = registry.revision("local", moved).label
    cases = (Case("one", 65536, workers=1), Case("two", 65536, workers=2))
    experiment = Experiment("e", MonteCarloRequest(samples=10, seed=1), cases, 3, "one")

    def trial(case: str, rep: int, wall: float) -> dict[str, object]:
        worker = {"configuration": label, "replaced": True}
        return {
            "case": case, "repetition": rep, "warmup": rep == 0, "ok": True, "wall_s": wall,
            "exit_code": 0, "internal_s": wall / 2, "compute_s": None, "transfer_s": None,
            "wait_s": None, "workers": [worker], "source_fingerprint": "sha256:x",
            "started": "t", "failure": None,
        }  # fmt: skip

    records = [trial("one", r, 2.0) for r in range(4)] + [trial("two", r, 1.6) for r in range(4)]
    summaries = summarize(experiment, records, {"one": 2.1, "two": None})
    text = report_md(experiment, records, summaries, registry, [], interrupted=False)
    assert "**local / C02 is a different machine**" in text
    assert "- two reached a speedup of 1.25 on 2 slots (efficiency 0.62)." in text
    assert "| one | local | 1 | 65,536 | 2.000 | 2.000:2.000 | 1.00 | 1.00 | 2.100 | N/A |" in text


# -- one host is one host (docs/contracts.md, section 18) ----------------------------
HERE, ELSEWHERE = "a" * 32, "b" * 32


def _issue_probe(host: str | None) -> Probe:
    """Issue 28's reproduction, as `plan` probed it: two `local` records of one slot on this
    2-CPU machine, measured (noise) faster per slot and quicker to start than its threads,
    for a Dense job of 114 steps of 256 rows."""
    local = LocalProbe(cpus=2, command_s=0.5, rates={1: 40e3, 2: 80e3}, task_s=300e-6, host=HERE)
    workers = tuple(
        WorkerProbe(
            identity=f"p{i}", transport="local", slots=1, startup_s=0.01, shutdown_s=0.01,
            rate_per_slot=400e3, task_s=20e-6, round_trip_s=1e-5, bandwidth_bps=1e9, host=host,
        )
        for i in (1, 2)
    )  # fmt: skip
    return Probe(kind="dense", local=local, workers=workers)


def test_a_group_on_this_host_is_never_recommended_over_local_threads() -> None:
    advice = recommend(_issue_probe(HERE), 256, 114, rows_per_step=256)
    assert advice.best.local, advice.reason
    group = next(c for c in advice.candidates if c.name == "the group")
    assert group.on_this_host and group.predicted_s < advice.best.predicted_s  # on paper
    assert all(c.on_this_host for c in advice.candidates if not c.local)
    assert "runs on this host (" in advice.reason and ", this one)" in advice.reason
    assert "a difference of measurement, not of CPUs" in advice.reason
    assert advice.reason.endswith(
        "Per step of 256 rows the group cannot gain: its workers share this machine's 2 "
        "CPU(s) with local threads."
    )
    assert advice.to_dict()["recommended"]["on_this_host"] is False
    # The same measurements from another host, or from workers that did not say: the group.
    for host in (ELSEWHERE, None):
        assert not recommend(_issue_probe(host), 256, 114).best.local


def test_two_local_threads_are_not_predicted_slower_than_one() -> None:
    probe = _issue_probe(HERE)  # 2 threads compute twice as fast as 1
    advice = recommend(probe, 256, 114)
    fastest = {p: min(c.predicted_s for c in advice.candidates if c.workers == p) for p in (1, 2)}
    assert fastest[2] < fastest[1]  # a chunk of its own for each thread: 128 rows
    assert {c.chunk for c in advice.candidates if c.workers == 2} == {128}
    # A pass of one chunk leaves the second thread idle: the first computes at one
    # thread's rate, not at half of a contended pair's.
    contended = replace(probe, local=replace(probe.local, rates={1: 40e3, 2: 60e3}))
    one, two = (predict_local(contended, 256, 114, p, 256).predicted_s for p in (1, 2))
    assert one == two


def test_records_sharing_a_host_share_its_cpus() -> None:
    remote = {"logical_cpus": "2"}
    pair = tuple(
        replace(w, slots=2, host=ELSEWHERE, machine=remote) for w in _issue_probe(None).workers
    )
    probe = replace(_issue_probe(None), workers=pair)
    assert shared_rates(probe, pair) == [200e3, 200e3]  # 4 slots on 2 CPUs
    apart = (pair[0], replace(pair[1], host=HERE))  # this host: its 2 effective CPUs
    assert shared_rates(probe, apart) == [400e3, 400e3]
    unknown = tuple(replace(w, host=None) for w in pair)  # nobody says: measured, alone
    assert shared_rates(probe, unknown) == [400e3, 400e3]


def test_the_plan_shows_rates_in_a_unit_that_fits_and_marks_this_host() -> None:
    probe = _issue_probe(HERE)
    text = format_plan(probe, recommend(probe, 256, 114), {}, "rows")
    assert "0.0 M" not in text
    assert "40.0k rows/s per thread" in text
    assert "p1 (local, 1 slot, this host): " in text and "400.0k rows/s per slot" in text
    assert "hosts: 2 records on 1 host, this one" in text
    assert "the group (this host)" in text
    assert rate_text(0.35, "rows") == "0.35 rows/s" and rate_text(0.0, "rows") == "N/A"
    assert rate_text(245.4e6, "samples") == "245.4M samples/s"
