"""The names a user types (aner_coord/aner/, aner_coord/shadowing.py): `import aner.parallel`
is `aner_coord.parallel` itself, `python -m aner` is the `aner` command, and a user's own
`protocol.py`, `aner_worker.py` or `calls.py` beside their script or in their working
directory breaks neither, while one imported before aner is refused in one line naming the
file. Real subprocesses of the installed interpreter, in a folder of hostile files that raise
if they are ever imported."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support import ANER, ROOT, write_pipe_pair

HOSTILE = ("protocol", "aner_worker", "calls")
HITS_1M = 785_882  # 10**6 samples of seed 42 (docs/contracts.md, section 1)


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    """A folder holding a user's `protocol.py`, `aner_worker.py` and `calls.py`."""
    folder = tmp_path / "work"
    folder.mkdir()
    for name in HOSTILE:
        (folder / f"{name}.py").write_text(f"raise RuntimeError('the user\\'s {name}.py')\n")
    return folder


def python(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *argv], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


SCRIPT = """
import sys
path = list(sys.path)
import aner.parallel
import aner
from aner_coord import parallel
assert sys.path == path, "sys.path changed"
assert aner.parallel is parallel and sys.modules["aner.parallel"] is parallel
from aner.parallel import monte_carlo, local
assert monte_carlo is parallel.monte_carlo
import protocol, aner_worker
assert protocol.__file__ == {protocol!r}, protocol.__file__
assert aner_worker.__file__ == {aner_worker!r}, aner_worker.__file__
print(monte_carlo(samples=10**6, seed=42, execution=local(workers=1)).hits)
print(aner.parallel.monte_carlo(samples=10**6, seed=42, execution=parallel.cluster({group!r})).hits)
"""


def _script(group: Path) -> str:
    return SCRIPT.format(
        protocol=str(ROOT / "protocol" / "__init__.py"),
        aner_worker=str(ROOT / "aner_worker" / "__init__.py"),
        group=str(group),
    )


def test_import_aner_parallel_in_a_folder_of_hostile_files(hostile: Path, tmp_path: Path) -> None:
    group = write_pipe_pair(tmp_path / "cluster")
    done = python(hostile, "-c", _script(group))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(HITS_1M), str(HITS_1M)]


def test_a_script_beside_hostile_files_run_from_elsewhere(hostile: Path, tmp_path: Path) -> None:
    group = write_pipe_pair(tmp_path / "cluster")
    script = hostile / "estimate.py"
    script.write_text(_script(group))
    done = python(tmp_path, str(script))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(HITS_1M), str(HITS_1M)]


def test_from_aner_coord_import_parallel_in_that_folder(hostile: Path) -> None:
    code = (
        "from aner_coord import parallel\n"
        "print(parallel.monte_carlo(samples=10**6, seed=42, execution=parallel.local(1)).hits)"
    )
    done = python(hostile, "-c", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(HITS_1M)]


def test_python_m_aner_is_the_aner_command(hostile: Path) -> None:
    inventory = python(hostile, "-m", "aner", "parallel", "inventory", "--json")
    assert inventory.returncode == 0, inventory.stderr
    command = subprocess.run(
        [ANER, "parallel", "inventory", "--json"], capture_output=True, text=True, check=False
    )
    assert set(json.loads(inventory.stdout)) == set(json.loads(command.stdout))

    job = hostile / "job"
    run = ["parallel", "run", "--samples", "1000000", "--seed", "42", "--workers", "1"]
    done = python(hostile, "-m", "aner", *run, "--output", str(job), "--quiet")
    assert done.returncode == 0, done.stderr
    assert json.loads((job / "result.json").read_text())["hits"] == HITS_1M

    wrong = ["parallel", "run", "--samples", "0", "--seed", "1", "--output", str(hostile / "no")]
    refused = python(hostile, "-m", "aner", *wrong)
    by_command = subprocess.run([ANER, *wrong], capture_output=True, text=True, check=False)
    assert (refused.returncode, by_command.returncode) == (2, 2)
    assert refused.stderr == by_command.stderr and refused.stderr.count("\n") == 1
    assert not (hostile / "no").exists()


@pytest.mark.parametrize("name", ["protocol", "aner_worker"])
@pytest.mark.parametrize("entry", ["import aner.parallel", "from aner_coord import parallel"])
def test_a_foreign_package_imported_first_is_refused_in_one_line(
    tmp_path: Path, name: str, entry: str
) -> None:
    (tmp_path / f"{name}.py").write_text("VALUE = 1\n")  # harmless, and imported first
    done = python(tmp_path, "-c", f"import {name}\n{entry}")
    assert done.returncode == 1
    foreign = tmp_path / f"{name}.py"
    assert done.stderr.splitlines()[-1] == (
        f"ImportError: {foreign} shadows aner's own package `{name}` ({ROOT / name}) and was "
        f"imported before aner: rename {foreign}"
    )


def test_the_aner_package_is_installed_from_its_folder() -> None:
    code = textwrap.dedent(
        """
        import sys
        import aner, aner_coord
        print("aner_coord.parallel" not in sys.modules)  # `import aner` alone loads no API
        print(aner.__file__)
        print(aner.parallel.__file__)  # imported on first use
        print(aner.__version__ == aner_coord.__version__)
        """
    )
    done = python(ROOT / "docs", "-c", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "True",
        str(ROOT / "aner_coord" / "aner" / "__init__.py"),
        str(ROOT / "aner_coord" / "parallel.py"),
        "True",
    ]
