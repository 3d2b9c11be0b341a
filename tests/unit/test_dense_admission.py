"""Admission of Dense requests (docs/contracts.md, sections 3 and 9): every limit and every
bad field is refused before anything starts, with a message that names the argument as the
caller spells it. Pure: nothing is created or run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aner_coord.admission import admit
from aner_coord.computations.dense.computation import DEFAULT_CHUNK_ROWS
from aner_coord.computations.dense.request import DenseRequest
from aner_coord.errors import AdmissionError, RequestError, cli_name
from aner_coord.requests import ClusterExecution, JobRequest, LocalExecution


def request(**fields: Any) -> JobRequest:
    computation = {"seed": 1, "teacher": (600, 5, 3), **fields}
    return JobRequest(computation=DenseRequest(**computation), execution=LocalExecution(1, 64))


@pytest.mark.parametrize(
    ("fields", "kind", "message"),
    [
        ({"hidden": (5000,)}, AdmissionError, "--hidden has a layer of 5,000 units; the limit"),
        ({"hidden": (1,) * 17}, AdmissionError, "--hidden has 17 layers; the limit is 16"),
        ({"hidden": (0,)}, RequestError, "--hidden must be positive, got 0"),
        (
            {"teacher": (600, 256, 3), "hidden": (4096, 1024)},
            AdmissionError,
            "[256, 4096, 1024, 3] make 5,251,075 parameters; the limit is 4,000,000",
        ),
        ({"batch": 2_000_000}, AdmissionError, "--batch is 2,000,000; the limit is 1,000,000"),
        ({"epochs": 0}, RequestError, "--epochs must be positive"),
        ({"epochs": 10_001}, AdmissionError, "--epochs is 10,001; the limit is 10,000"),
        ({"optimizer": "rmsprop"}, RequestError, "--optimizer must be adam or sgd"),
        (
            {"precision": "float16"},
            RequestError,
            "--precision must be float64 or float32, got 'float16'",
        ),
        ({"lr": float("nan")}, RequestError, "--lr must be a finite number"),
        ({"lr": -1.0}, RequestError, "--lr must be positive"),
        ({"target_accuracy": 1.5}, RequestError, "--target-accuracy must be in (0, 1]"),
        ({"teacher": (600, 300, 3)}, RequestError, "teacher features must be in 1..256"),
        ({"teacher": (300_000_000, 5, 3)}, AdmissionError, "the limit is 200,000,000"),
        ({"teacher": (5, 5, 3)}, RequestError, "5 rows leave no"),
        ({"teacher": None}, RequestError, "give either --data FILE or --teacher"),
        ({"data": "digits"}, RequestError, "give either --data FILE or --teacher"),
        ({"seed": -1}, RequestError, "--seed must be in [0, 2**64)"),
    ],
)
def test_a_bad_request_is_refused_naming_the_argument(
    fields: dict[str, Any], kind: type[Exception], message: str
) -> None:
    with pytest.raises(kind) as info:
        admit(request(**fields))
    assert message in info.value.render(cli_name)  # type: ignore[attr-defined]


def test_a_file_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    with pytest.raises(RequestError) as info:
        admit(request(teacher=None, data=str(tmp_path / "nope.csv")))
    assert info.value.render(cli_name) == (
        f"--data: cannot read {tmp_path / 'nope.csv'}: No such file or directory"
    )


def test_a_bad_value_is_named_by_line_and_column(tmp_path: Path) -> None:
    data = tmp_path / "d.csv"
    data.write_text("a,b,label\n1,2,0\n3,inf,1\n")
    with pytest.raises(RequestError, match=r"line 3, column 2 \('b'\): not a finite number"):
        admit(request(teacher=None, data=str(data)))


def test_an_admitted_request_describes_roles_and_plan() -> None:
    job = admit(request(hidden=(7,), batch=100, epochs=3))
    describe = job.admitted.describe
    roles = describe["roles"]
    assert sum(roles.values()) == 600 and min(roles.values()) > 0
    assert describe["layer_sizes"] == [5, 7, 3]
    assert describe["steps_per_epoch"] == -(-roles["train"] // 100)
    assert job.admitted.passes == 1 + 3 * (describe["steps_per_epoch"] + 1) + 1
    assert len(describe["roles_sha256"]) == 64


def test_the_planned_work_counts_every_pass() -> None:
    job = admit(request(batch=100, epochs=3, patience=5))
    roles = job.admitted.describe["roles"]
    # normalisation, three epochs of steps and validation, the test
    assert job.admitted.planned_work == (
        roles["train"] + 3 * (roles["train"] + roles["validation"]) + roles["test"]
    )
    assert job.admitted.largest == roles["train"] and not job.admitted.upper_bound
    # With fewer patience than epochs, early stopping may end it sooner: an upper bound.
    assert admit(request(epochs=10, patience=2)).admitted.upper_bound


def cluster_file(tmp_path: Path, workers: int) -> str:
    lines = ["ANER_CLUSTER 1"] + [
        f'worker "w{i}" ssh "peer-{i}" "/opt/aner/bin/aner" 1' for i in range(workers)
    ]
    path = tmp_path / "cluster"
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)
    return str(path)


def on_cluster(tmp_path: Path, workers: int, **fields: Any) -> JobRequest:
    execution = ClusterExecution(config=cluster_file(tmp_path, workers))
    computation = {"seed": 1, "teacher": (2000, 5, 3), **fields}
    return JobRequest(computation=DenseRequest(**computation), execution=execution)


def test_the_defaults_split_a_step_for_two_workers_without_a_note(tmp_path: Path) -> None:
    job = admit(on_cluster(tmp_path, 2))
    assert job.chunk == DEFAULT_CHUNK_ROWS == 128
    assert -(-job.admitted.items // job.chunk) == 2  # a batch of 256: one chunk each
    assert job.notes == ()


def test_a_step_smaller_than_the_group_is_admitted_with_one_note(tmp_path: Path) -> None:
    # Six workers for two chunks a step: every worker still takes part in the larger
    # passes (normalisation, validation), so it is no error, but four slots idle each step.
    job = admit(on_cluster(tmp_path, 6))
    (note,) = job.notes
    assert note == (
        "a step of 256 rows makes 2 chunk(s) of 128 for 6 worker slots: 4 slot(s) idle during "
        "every step (a chunk of at most 42 would use them all, with other parameters)"
    )
    local = admit(
        JobRequest(
            computation=DenseRequest(seed=1, teacher=(2000, 5, 3)),
            execution=LocalExecution(2, 256),
        )
    )
    assert len(local.notes) == 1 and "1 slot(s) idle" in local.notes[0]


def test_a_group_larger_than_every_pass_is_refused(tmp_path: Path) -> None:
    # 300 rows leave about 210 training rows: two chunks of 128 in the largest pass.
    with pytest.raises(AdmissionError, match="fewer than the 6 configured workers"):
        admit(on_cluster(tmp_path, 6, teacher=(300, 5, 3)))
