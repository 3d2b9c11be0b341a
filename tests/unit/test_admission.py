"""The one admission path (aner_coord/admission.py): every limit of docs/contracts.md,
section 3, checked before anything starts, with errors that name the argument as the caller
wrote it."""

from __future__ import annotations

from pathlib import Path

import pytest

from aner_coord import limits
from aner_coord.admission import admit, cluster, local
from aner_coord.computations import COMPUTATIONS, computation_for
from aner_coord.computations.montecarlo import MonteCarloRequest
from aner_coord.computations.regression import RegressionRequest
from aner_coord.errors import AdmissionError, RequestError, cli_name
from aner_coord.requests import JobRequest, LocalExecution, encode_request
from aner_coord.specfile import decode_request
from aner_worker.inventory import current


def mc(samples: int = 10**6, seed: int = 1, **execution: int) -> JobRequest:
    return JobRequest(
        computation=MonteCarloRequest(samples=samples, seed=seed),
        execution=LocalExecution(**execution),
    )


def test_a_valid_request_is_admitted_with_its_plan() -> None:
    job = admit(mc(samples=1_000_001, workers=1, chunk=1000))
    assert job.kind == "monte-carlo"
    assert job.admitted.items == 1_000_001 and job.admitted.passes == 1
    assert job.workers.slots == {"local-1": 1}
    assert job.describe_execution() == {
        "kind": "local",
        "workers": 1,
        "chunk": 1000,
        "automatic": False,
        "backend": "threads",
        "why": "one worker: nothing shares its GIL",
    }
    assert job.output is None


def test_automatic_workers_follow_the_inventory() -> None:
    job = admit(mc())
    assert len(job.workers.slots) == current().auto_workers
    assert job.workers.automatic


@pytest.mark.parametrize(
    ("request_", "api", "cli"),
    [
        (mc(seed=-1), "seed= must be in [0, 2**64), got -1", "--seed must be in"),
        (mc(seed=2**64), "seed= must be in [0, 2**64)", "--seed must be in"),
        (mc(samples=0), "samples= must be positive, got 0", "--samples must be positive"),
        (mc(workers=-2), "workers= must be 0 (automatic) or positive", "--workers must be 0"),
        (mc(chunk=0), "chunk= must be positive, got 0", "--chunk must be positive"),
    ],
)
def test_errors_name_api_arguments_and_cli_flags(request_: JobRequest, api: str, cli: str) -> None:
    with pytest.raises(RequestError) as error:
        admit(request_)
    assert api in str(error.value)
    assert cli in error.value.render(cli_name)


def test_a_bool_is_not_an_integer() -> None:
    with pytest.raises(RequestError, match="samples= must be an integer, got True"):
        admit(mc(samples=True))


def test_samples_above_the_limit_are_refused() -> None:
    with pytest.raises(AdmissionError, match="the limit is 10,000,000,000: ask for fewer"):
        admit(mc(samples=limits.MAX_SAMPLES + 1))


def test_too_many_chunks_suggest_the_smallest_chunk_that_fits() -> None:
    with pytest.raises(AdmissionError) as error:
        admit(mc(samples=10**9, chunk=100))
    assert "the limit is 1,000,000: use a chunk of at least 1000 (chunk=)" in str(error.value)
    assert "(--chunk)" in error.value.render(cli_name)


def test_more_workers_than_the_allocation_names_both_numbers() -> None:
    effective = current().effective_cpus
    with pytest.raises(AdmissionError) as error:
        local(workers=effective + 1)
    message = str(error.value)
    assert f"{effective + 1} workers exceed" in message
    assert f"effective CPU allocation of {effective}" in message


def test_more_than_the_local_worker_limit_is_refused() -> None:
    with pytest.raises(AdmissionError, match="exceed the limit of 256"):
        local(workers=limits.MAX_LOCAL_WORKERS + 1)


def test_a_cluster_needs_one_chunk_per_worker(tmp_path: Path) -> None:
    from support import ANER, write_cluster

    path = write_cluster(
        tmp_path / "c", [("a", "local", "-", ANER, 1), ("b", "local", "-", ANER, 1)]
    )
    request = JobRequest(
        computation=MonteCarloRequest(samples=100, seed=1), execution=cluster(path, chunk=100)
    )
    with pytest.raises(AdmissionError, match="fewer than the 2 configured workers"):
        admit(request)


def test_regression_parameters_are_checked() -> None:
    def reg(steps: int = 1, rate: float = 0.5) -> JobRequest:
        return JobRequest(
            computation=RegressionRequest(samples=100, steps=steps, rate=rate, seed=1)
        )

    with pytest.raises(RequestError, match=r"steps= must be in \[0, 100000\]"):
        admit(reg(steps=limits.MAX_STEPS + 1))
    with pytest.raises(RequestError, match="rate= must be positive"):
        admit(reg(rate=-0.1))
    with pytest.raises(RequestError, match="rate= must be a finite number"):
        admit(reg(rate=float("nan")))


def test_audit_is_a_fraction() -> None:
    request = JobRequest(computation=MonteCarloRequest(samples=10, seed=1), audit=1.5)
    with pytest.raises(RequestError, match=r"audit= must be a fraction in \[0, 1\]"):
        admit(request)


def test_an_existing_output_is_refused_and_nothing_is_created(tmp_path: Path) -> None:
    out = tmp_path / "exists"
    out.mkdir()
    request = JobRequest(computation=MonteCarloRequest(samples=10, seed=1), output=str(out))
    with pytest.raises(RequestError, match="is an existing directory"):
        admit(request)
    fresh = tmp_path / "fresh"
    admit(JobRequest(computation=MonteCarloRequest(samples=10, seed=1), output=str(fresh)))
    assert not fresh.exists()


def test_a_request_survives_json_and_unknown_keys_are_refused() -> None:
    request = mc(samples=123, seed=9, workers=1, chunk=7)
    assert decode_request(encode_request(request), fmt="json", source="x") == request
    with pytest.raises(RequestError, match="spec: Object contains unknown field `sample`"):
        decode_request(
            b'[computation]\nkind = "monte-carlo"\nsample = 5\nseed = 1\n',
            fmt="toml",
            source="spec",
        )
    with pytest.raises(RequestError, match="Invalid value 'pi'"):
        decode_request(b'[computation]\nkind = "pi"\nseed = 1\n', fmt="toml", source="spec")


def test_every_registered_computation_is_found_by_its_request_type() -> None:
    assert {"monte-carlo", "regression"} <= set(COMPUTATIONS)
    for kind, computation in COMPUTATIONS.items():
        assert computation.kind == kind
        assert computation.kernel.name == kind or kind not in ("monte-carlo", "regression")
    assert computation_for(MonteCarloRequest(samples=1, seed=1)).kind == "monte-carlo"


def test_each_run_starts_fresh() -> None:
    # Executing the same request twice must not accumulate: state lives in each run.
    from aner_coord import parallel

    request = MonteCarloRequest(samples=100_000, seed=5)
    first = parallel.run(request, execution=parallel.local(1))
    second = parallel.run(request, execution=parallel.local(1))
    assert first.hits == second.hits


# -- precheck: what a --background command checks itself ------------------------------------


def _dense(**options: object) -> JobRequest:
    from aner_coord.computations.dense.request import DenseRequest

    fields = {"teacher": (1000, 4, 3), "seed": 1, **options}
    return JobRequest(computation=DenseRequest(**fields), execution=LocalExecution(workers=1))  # type: ignore[arg-type]


def _search(**options: object) -> JobRequest:
    from aner_coord.computations.search.request import SearchRequest

    fields = {"teacher": (1000, 4, 3), "seed": 1, "folds": 2, **options}
    return JobRequest(computation=SearchRequest(**fields), execution=LocalExecution(workers=1))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "request_",
    [
        _dense(lr=-1.0),
        _dense(hidden=(0,)),
        _dense(teacher=(1000, 4, 1)),
        _dense(teacher=(1000, 100_000, 3)),
        _dense(hidden=(4096, 4096, 4096)),
        _dense(test_fraction=0.6, validation_fraction=0.5),
        _dense(group="g"),
        _dense(teacher=None, data="/nonexistent/x.csv"),
        _search(grid={"lr": [1e-3, -1.0]}),
        _search(grid={"hidden": [[4], [4096, 4096, 4096]]}),
        _search(teacher=(1 << 25, 4, 3)),
        _search(folds=0),
        JobRequest(
            computation=_dense().computation, execution=LocalExecution(workers=1), retries=-1
        ),
        JobRequest(computation=_dense().computation, task_timeout=0.0),
        JobRequest(computation=_dense().computation, task_timeout=float("nan")),
    ],
    ids=[
        "lr", "hidden", "classes", "features", "parameters", "fractions", "group", "file",
        "grid-lr", "grid-parameters", "search-rows", "folds", "retries", "task-timeout",
        "task-timeout-nan",
    ],
)  # fmt: skip
def test_precheck_refuses_what_admit_refuses_in_the_same_words(request_: JobRequest) -> None:
    from aner_coord.admission import precheck

    with pytest.raises(RequestError) as whole:
        admit(request_)
    with pytest.raises(RequestError) as pre:
        precheck(request_)
    assert pre.value.render(cli_name) == whole.value.render(cli_name)


def test_precheck_generates_no_row_of_a_teacher_set() -> None:
    from aner_coord.admission import precheck

    # The largest teacher set: admitted whole, its roles alone take about 3 GB; precheck
    # gives no row a role (nor generates one).
    huge = _dense(teacher=(200_000_000, 4, 3), epochs=1)
    assert precheck(huge).request == huge
    assert precheck(_search(teacher=(1 << 24, 4, 3))).output is None
