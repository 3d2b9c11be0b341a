"""The conformance suite `aner.testing.check_computation` (aner_coord/conformance.py,
docs/contracts.md, section 15) on a real distribution of simulations (tests/plugin_site.py,
on PYTHONPATH for the suite's process and its workers): one that keeps the kit's rules
passes every check; one that draws from numpy's global generator, one that reads the clock,
one that returns a value that is not finite and one that returns another number of values
than it declares are each caught, one line per failed check, naming the computation and
what it does wrong."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from plugin_site import install_broken
from suite_env import child_env

CHECKED = ["lab-good", "lab-global-rng", "lab-clock", "lab-non-finite", "lab-count"]

# The suite in a process of its own: the distribution is on its path, and so on its
# workers', as an installed plugin is; each computation's lines (or the checks passed).
SCRIPT = """
import json, sys
from aner.testing import ConformanceError, check_computation
out = {}
for name in sys.argv[1:]:
    try:
        out[name] = {"passed": list(check_computation(name).passed)}
    except ConformanceError as exc:
        out[name] = {"lines": list(exc.lines)}
print(json.dumps(out))
"""

RULE = (
    "the same samples computed twice gave different values: the function must use only the "
    "uniforms and parameters it is given (not numpy's global generator, the clock, or state "
    "kept between calls)"
)
PLACED = (
    "the bits on 1 local worker differ from those on 2 local workers, chunks of 131,072, a "
    "pipe group of 2 worker processes: the result must not depend on the placement"
)


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, list[str]]]:
    site = tmp_path_factory.mktemp("site")
    install_broken(site)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *CHECKED],
        env=child_env(PYTHONPATH=str(site)),
        cwd=site.parent,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, dict[str, list[str]]] = json.loads(done.stdout)
    return result


def test_a_simulation_that_keeps_the_rules_passes_every_check(
    verdicts: dict[str, dict[str, list[str]]],
) -> None:
    assert verdicts["lab-good"] == {"passed": ["stream", "placement", "resume", "refusals"]}


def test_numpys_global_generator_is_caught(verdicts: dict[str, dict[str, list[str]]]) -> None:
    lines = verdicts["lab-global-rng"]["lines"]
    assert lines[:2] == [f"lab-global-rng: stream: {RULE}", f"lab-global-rng: placement: {PLACED}"]


def test_the_clock_is_caught(verdicts: dict[str, dict[str, list[str]]]) -> None:
    lines = verdicts["lab-clock"]["lines"]
    assert lines[:2] == [f"lab-clock: stream: {RULE}", f"lab-clock: placement: {PLACED}"]
    assert lines[2:] == [
        "lab-clock: resume: a job resumed after an interruption differs from an uninterrupted run"
    ]


def test_a_value_that_is_not_finite_is_caught_and_no_job_runs(
    verdicts: dict[str, dict[str, list[str]]],
) -> None:
    assert verdicts["lab-non-finite"]["lines"] == [
        "lab-non-finite: stream: SimulationError: simulation 'lab-non-finite': "
        "lab_kit.model:non_finite returned a value that is not finite among samples "
        "[0, 65536) of seed 1",
        "lab-non-finite: placement: not run: its function fails on the stream check's samples",
        "lab-non-finite: resume: not run: its function fails on the stream check's samples",
    ]


def test_a_wrong_number_of_values_is_the_declarations_one_line(
    verdicts: dict[str, dict[str, list[str]]],
) -> None:
    assert verdicts["lab-count"]["lines"] == [
        "lab-count: declaration: lab-count (plugin lab-kit 1.0): simulation 'lab-count': "
        "lab_kit.model:good returns a tuple of 2, but the declaration names 3 output(s) "
        "(x, y, z)"
    ]


def test_an_unknown_name_is_refused_listing_the_installed(tmp_path: Path) -> None:
    from aner.testing import check_computation

    from aner_coord.errors import RequestError

    with pytest.raises(RequestError, match="no computation 'nope' is installed; installed: "):
        check_computation("nope")
