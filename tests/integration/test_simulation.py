"""The simulation kit (docs/contracts.md, section 15) on the sample plugin `asian`
(samples/asian, installed in the test environment as a user installs it): the result's bits
do not depend on the worker count, the chunk size or a pipe group; the geometric-average
output agrees with its closed form; bad parameters and chunks are one line before any worker
starts."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from aner_asian.model import geometric_price
from support import write_pipe_pair

from aner_coord import parallel
from aner_coord.computations import request_type_of
from aner_coord.errors import RequestError

SAMPLES = 3 * 65_536 + 1_000  # a short last block


def request(samples: int = SAMPLES, seed: int = 7, replicates: int = 1, **params: object) -> object:
    from aner_coord.computations.simulation.request import params_of
    from aner_worker.plugins import discover

    found = discover().get("asian")
    assert found is not None
    kind = request_type_of("asian")
    declared = params_of("asian", found.declaration, dict(params), text=False)  # type: ignore[arg-type]
    return kind(samples=samples, seed=seed, replicates=replicates, params=declared)


def test_the_bits_do_not_depend_on_the_placement(tmp_path: Path) -> None:
    one = parallel.run(request(), execution=parallel.local(1))
    two = parallel.run(request(), execution=parallel.local(2, chunk=65_536))
    pipes = parallel.run(
        request(), execution=parallel.cluster(write_pipe_pair(tmp_path / "c"), chunk=131_072)
    )
    assert one.outputs == two.outputs == pipes.outputs
    assert one.outputs["arithmetic"].n == SAMPLES


def test_the_geometric_average_agrees_with_its_closed_form() -> None:
    result = parallel.run(request(samples=1 << 20, seed=3), execution=parallel.local(2))
    geometric = result.outputs["geometric"]
    exact = geometric_price(100.0, 100.0, 0.05, 0.2, 1.0, 12)
    assert abs(geometric.mean - exact) < 4 * geometric.standard_error
    assert geometric.ci_low < geometric.mean < geometric.ci_high
    assert result.outputs["arithmetic"].mean > geometric.mean  # AM >= GM on every path
    assert result.plugin["distribution"] == "aner-asian"


def test_replicates_give_each_replicate_and_their_aggregate() -> None:
    result = parallel.run(request(samples=65_536, replicates=3), execution=parallel.local(2))
    assert [row["replicate"] for row in result.per_replicate] == [0, 1, 2]
    assert result.aggregate["arithmetic"].n == 3
    assert math.isfinite(result.pooled["standard_error"])


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"sigma": 9.0}, "parameter sigma = 9.0 is not a number in [1e-06, 5.0]"),
        ({"steps": 33}, "parameter steps = 33 is not a whole number in [1, 32]"),
        ({"vol": 0.3}, "has no parameter 'vol'"),
    ],
)
def test_a_bad_parameter_is_one_line_naming_the_plugin(
    params: dict[str, float], message: str
) -> None:
    with pytest.raises(RequestError) as refused:
        request(**params)
    assert message in str(refused.value)


def test_a_chunk_that_cuts_a_block_is_refused() -> None:
    with pytest.raises(RequestError, match="not a multiple of the kit's block of 65,536"):
        parallel.run(request(), execution=parallel.local(1, chunk=100_000))


def test_the_manifest_records_the_plugin_and_resume_refuses_a_changed_one(tmp_path: Path) -> None:
    import json

    from aner_coord.job.resume import check_resumable

    job = tmp_path / "job"
    parallel.run(request(samples=65_536), execution=parallel.local(1), output=str(job))
    manifest = json.loads((job / "run-manifest.json").read_text())
    record = manifest["plugins"]["aner-asian"]
    assert record["version"] == "0.1.0" and "aner_asian/model.py" in record["files"]
    # As if the job had begun with another model.py: the job directory is otherwise intact.
    record["files"]["aner_asian/model.py"] = "sha256:" + "0" * 64
    (job / "run-manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(RequestError) as refused:
        check_resumable(job)
    assert (
        f"job {job} was started with a different plugin aner-asian: aner_asian/model.py "
        f"differs (sha256:{'0' * 64} when it began, sha256:"
    ) in str(refused.value)
