"""A computation chosen by name (docs/contracts.md, section 15): `aner parallel run
--computation NAME --param NAME=VALUE` and `parallel.run(NAME, params={...})` on the sample
plugin `asian` give the bits its request type gives, with replicates, a job directory and a
detached coordinator; a bad parameter, option or name is one line naming the plugin, exit 2,
before anything is made."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from plugin_site import install_broken
from suite_env import child_env
from support import result_of, run_aner, status_of, wait_status

from aner_coord import parallel
from aner_coord.computations import request_type_of
from aner_coord.errors import RequestError
from aner_coord.jobdir.status import JobState

SAMPLES = 2 * 65_536 + 500
PLUGIN = "asian (plugin aner-asian 0.1.0)"


def test_the_named_call_gives_the_bits_of_the_request_type() -> None:
    kind = request_type_of("asian")
    from aner_coord.computations.simulation.request import params_of
    from aner_worker.plugins import discover

    found = discover().get("asian")
    assert found is not None
    params = params_of("asian", found.declaration, {"sigma": 0.3}, text=False)  # type: ignore[arg-type]
    by_request = parallel.run(kind(samples=SAMPLES, seed=5, params=params))
    by_name = parallel.run("asian", samples=SAMPLES, seed=5, params={"sigma": 0.3})
    assert by_name.outputs == by_request.outputs
    assert by_name.params["sigma"] == 0.3 and by_name.params["strike"] == 100.0


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            {"params": {"sigma": 9}},
            f"{PLUGIN}: parameter sigma = 9 is not a number in [1e-06, 5.0]",
        ),
        ({"params": {"vol": 1}}, f"{PLUGIN} has no parameter 'vol' (its parameters: spot, "),
        ({"samples": "many"}, f"{PLUGIN}: samples= expected `int`, got `str`"),
        ({"samples": None}, f"{PLUGIN} needs samples="),
    ],
)
def test_the_named_call_refuses_in_one_line(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(RequestError) as refused:
        parallel.run("asian", **{"samples": 1000, "seed": 1, **arguments})  # type: ignore[arg-type]
    assert str(refused.value).startswith(message)


def test_an_unknown_name_lists_the_installed_computations() -> None:
    with pytest.raises(RequestError) as refused:
        parallel.run("asain", samples=1000, seed=1)
    assert str(refused.value).startswith(
        "no computation 'asain' is installed; installed: monte-carlo, regression, dense, "
        "search, asian"
    )


def test_the_command_line_runs_replicates_as_the_api_does(tmp_path: Path) -> None:
    job = tmp_path / "job"
    done = run_aner(
        "parallel", "run", "--computation", "asian", "--samples", "65,536", "--seed", "2",
        "--replicates", "3", "--param", "strike=90", "--param", "steps=4", "--workers", "2",
        "--output", str(job), "--quiet", timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    api = parallel.run("asian", samples=65_536, seed=2, replicates=3,
                       params={"strike": 90, "steps": 4})  # fmt: skip
    result = result_of(job)
    assert result["computation"] == "replicates" and result["of"] == "asian"
    assert [row["arithmetic"] for row in result["per_replicate"]] == [
        row["arithmetic"] for row in api.per_replicate
    ]
    assert (job / "replicates.csv").exists()


def test_a_detached_named_job_completes_and_status_shows_it(tmp_path: Path) -> None:
    job = tmp_path / "job"
    done = run_aner(
        "parallel", "run", "--computation", "asian", "--samples", "65536", "--seed", "3",
        "--param", "sigma=0.25", "--output", str(job), "--background", timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    wait_status(job, lambda s: s.state is JobState.COMPLETED, 120, "the job completes")
    request = json.loads((job / "request.json").read_text())["computation"]
    assert request["kind"] == "asian" and request["params"]["sigma"] == 0.25
    shown = run_aner("parallel", "status", "--job", str(job))
    assert "simulation asian (aner-asian/gbm-call/v1), 65,536 samples" in shown.stdout
    assert result_of(job)["outputs"]["arithmetic"]["n"] == 65_536


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (["--param", "sigma=9"], f"aner: {PLUGIN}: parameter sigma = 9 is not a number in "
         "[1e-06, 5.0]: give one within it"),
        (["--param", "steps=2.5"], f"aner: {PLUGIN}: parameter steps = 2.5 is not a whole "
         "number in [1, 32]: give one within it"),
        (["--param", "vol=1"], f"aner: {PLUGIN} has no parameter 'vol' (its parameters: spot, "
         "strike, rate, sigma, maturity, steps)"),
        (["--param", "sigma"], "aner: --param takes NAME=VALUE, got 'sigma'"),
        (["--computation", "asain"], "aner: no computation 'asain' is installed; installed: "
         "monte-carlo, regression, dense, search, asian (`aner parallel capabilities` lists "
         "them; a plugin is a distribution installed with pip)"),
    ],
)  # fmt: skip
def test_a_bad_flag_is_one_line_and_exit_2_before_anything_starts(
    tmp_path: Path, flags: list[str], line: str
) -> None:
    job = tmp_path / "job"
    named = [] if "--computation" in flags else ["--computation", "asian"]
    done = run_aner("parallel", "run", *named, *flags, "--samples", "1e6", "--seed", "1",
                    "--output", str(job))  # fmt: skip
    assert (done.returncode, done.stderr, done.stdout) == (2, line + "\n", "")
    assert not job.exists()


def test_param_without_a_computation_is_refused(tmp_path: Path) -> None:
    done = run_aner("parallel", "run", "--samples", "1e6", "--seed", "1", "--param", "a=1",
                    "--output", str(tmp_path / "job"))  # fmt: skip
    assert done.returncode == 2
    assert done.stderr == "aner: --param goes with --computation NAME (the computation it sets)\n"


def test_a_plugin_raising_in_a_task_fails_the_job_naming_plugin_worker_and_task(
    tmp_path: Path,
) -> None:
    # A real distribution on PYTHONPATH (tests/plugin_site.py): its function raises on the
    # first sample of seed 1 whose first uniform is below 2e-7, sample 2,4xx,xxx.
    site = tmp_path / "site"
    install_broken(site)
    job = tmp_path / "job"
    done = run_aner(
        "parallel", "run", "--computation", "lab-raises", "--samples", "5e6", "--seed", "1",
        "--workers", "1", "--chunk", "65536", "--output", str(job),
        env=child_env(PYTHONPATH=str(site)), timeout=120,
    )  # fmt: skip
    assert done.returncode == 3
    assert done.stderr == (
        f'aner: job failed (job directory {job}): worker "local-1" failed during task: '
        "SimulationError: simulation 'lab-raises' (plugin lab-kit 1.0): lab_kit.model:raises "
        "raised ValueError: the path left the domain, in the task of samples [2424832, "
        "2490368) of seed 1\n"
    )
    # Every chunk before the failing one was accepted and stays in the ledger.
    assert status_of(job).accepted == 37 * 65_536


def test_a_request_takes_no_options_beside_it() -> None:
    kind = request_type_of("asian")
    with pytest.raises(RequestError) as refused:
        parallel.run(kind(samples=1000, seed=1), samples=2000)
    assert str(refused.value) == (
        "run() takes no samples= with a request: the request holds its options (or name the "
        "computation: run(NAME, ...))"
    )


def test_a_named_call_can_be_submitted() -> None:
    handle = parallel.submit("run", "asian", samples=65_536, seed=4, params={"steps": 3})
    result = handle.result()
    assert result.params["steps"] == 3.0 and result.outputs["geometric"].n == 65_536
