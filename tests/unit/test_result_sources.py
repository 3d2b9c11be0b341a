"""The files a job's numbers can come from (`aner_coord.jobdir.sources`), which the manifest
records and `resume` holds an installation to (issue 25 item 7, issue 35 item 3).

The rule names no module: every `.py` file of aner's packages is recorded. These tests hold it
to that: every module a real job's coordinator has loaded once it has written its result and
checked a resume is recorded; one comment line added, in a copied installation, in each
module on the resume path (the ledger's replay, resume, the job machine, the chunk plan, the
reductions) is named as the first difference; a new module anywhere joins by being there; and
an installed wheel's top-level `aner` package, which stands beside the others rather than in
`aner_coord/`, is recorded too.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT, installed_copy

from aner_coord.jobdir.sources import (
    first_difference,
    installed_result_sources,
    result_files,
    sources_of,
)

# Runs a Monte Carlo job in this process, as the `aner` command does, and a resume of it (which
# checks it all and is refused, the job being done), then prints the files of every module
# loaded from aner's packages (the root also holds this test's venv).
RUN_AND_LIST = """
import json, sys
from pathlib import Path
from aner_coord import program
from aner_coord.jobdir.sources import _ROOT

job = sys.argv[1]
sys.argv = ["aner", "parallel", "run", "--samples", "1e6", "--seed", "1", "--workers", "1",
            "--output", job, "--quiet"]
codes = [program.main()]
sys.argv = ["aner", "parallel", "resume", "--job", job]  # refused: the job is COMPLETED
codes.append(program.main())
files = set()
for module in list(sys.modules.values()):
    where = getattr(module, "__file__", None)
    if where and Path(where).resolve().is_relative_to(_ROOT):
        name = Path(where).resolve().relative_to(_ROOT).as_posix()
        if name.split("/")[0] in ("protocol", "aner_worker", "aner_coord", "aner"):
            files.add(name)
print(json.dumps({"codes": codes, "files": sorted(files)}))
"""

# The modules a resume runs through on its way to a number: the ledger's replay, resume's
# checks, the job machine that decides which chunks count, the chunk plan that cuts ranges,
# and the reductions (Monte Carlo's hits on the coordinator, Dense's chunk sums).
RESUME_PATH = (
    "aner_coord/jobdir/ledger.py",
    "aner_coord/job/resume.py",
    "aner_coord/job/machine.py",
    "aner_coord/job/chunks.py",
    "aner_coord/computations/montecarlo.py",
    "aner_worker/kernels/dense/plan.py",
)


def test_every_module_a_job_loads_is_recorded(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", RUN_AND_LIST, str(tmp_path / "job")],
        capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout.splitlines()[-1])
    assert listed["codes"] == [0, 2], done.stderr
    assert "COMPLETED" in done.stderr
    loaded = set(listed["files"])
    for required in RESUME_PATH[:5]:
        assert required in loaded, required  # the job took the path the tests below edit
    recorded = json.loads((tmp_path / "job/run-manifest.json").read_text())["sources"]
    assert recorded == installed_result_sources()
    assert loaded - recorded.keys() == set()


@pytest.mark.parametrize("changed", RESUME_PATH)
def test_one_changed_comment_on_the_resume_path_is_named(tmp_path: Path, changed: str) -> None:
    installed_copy(tmp_path, changed)
    before, after = installed_result_sources(), sources_of(tmp_path / "other-aner")
    assert changed in before and before.keys() == after.keys()
    assert first_difference(before, after) == (
        f"{changed} differs ({before[changed]} when it began, {after[changed]} installed)"
    )


def test_a_new_module_anywhere_joins_and_a_removed_one_is_named(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    for package in ("protocol", "aner_worker", "aner_coord"):
        shutil.copytree(ROOT / package, copy / package, ignore=shutil.ignore_patterns("*.pyc"))
    before = sources_of(copy)
    assert before == installed_result_sources()
    (copy / "aner_coord/jobdir/replay.py").write_text("SCALE = 2\n")
    (copy / "aner_coord/jobdir/notes.txt").write_text("not a module\n")
    said = first_difference(before, sources_of(copy))
    assert said == "aner_coord/jobdir/replay.py is installed now but took no part when it began"
    (copy / "aner_coord/jobdir/replay.py").unlink()
    (copy / "aner_coord/job/chunks.py").unlink()
    said = first_difference(before, sources_of(copy))
    assert said == "aner_coord/job/chunks.py took part when it began but is not installed now"
    assert first_difference(before, before) is None


def test_the_top_level_aner_package_is_recorded_where_a_wheel_installs_it(
    tmp_path: Path,
) -> None:
    in_tree = set(result_files(ROOT))
    assert "aner_coord/aner/parallel.py" in in_tree
    assert not any("__pycache__" in name or not name.endswith(".py") for name in in_tree)
    wheel = tmp_path / "site-packages"
    for package in ("protocol", "aner_worker", "aner_coord"):
        shutil.copytree(ROOT / package, wheel / package, ignore=shutil.ignore_patterns("*.pyc"))
    shutil.move(wheel / "aner_coord/aner", wheel / "aner")  # pyproject.toml's mapping
    names = set(result_files(wheel))
    assert {"aner/__init__.py", "aner/parallel.py"} <= names
    assert names == {
        name.removeprefix("aner_coord/") if name.startswith("aner_coord/aner/") else name
        for name in in_tree
    }
