"""The files whose code computes a result's numbers (`aner_coord.jobdir.sources`), which the
manifest records and `resume` holds an installation to (issue 25 item 7).

The rule names the coordinator's numerical code by where it lives; this test keeps the rule
honest: every `aner_coord` module that a result file imports (read with `ast`, imports inside
functions included) is a result file itself or is declared here as orchestration, with the
reason it computes none of the result's numbers. A new numerical module cannot be forgotten:
below `aner_coord/computations/` it joins by being there; anywhere else, importing it from a
computation fails this test until it is placed in one list or the other.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

from support import ROOT

from aner_coord.jobdir.sources import (
    RESULT_MODULES,
    first_difference,
    installed_result_sources,
    result_files,
    sources_of,
)

# aner_coord modules a computation imports that compute none of the result's numbers.
ORCHESTRATION = {
    "aner_coord/__init__.py": "the package's version and face",
    "aner_coord/errors.py": "exception types",
    "aner_coord/requests.py": "the request's envelope: paths, execution options, encoding",
    "aner_coord/limits.py": "admission limits, checked before any work",
    "aner_coord/jobdir/__init__.py": "the job directory's face",
    "aner_coord/jobdir/status.py": "the status file's types and states",
    "aner_coord/admission.py": "admits a request (the chunk plan it makes is the manifest's, "
    "which resume checks); the computation's own admission is below computations/",
    "aner_coord/calls.py": "the API's calls: run a job, raise its failure",
}


def _imported_files(path: Path) -> set[str]:
    """The `aner_coord` source files that `path` imports, relative to the tree."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: a relative import"
            module = node.module or ""
            names = [module, *(f"{module}.{alias.name}" for alias in node.names)]
        else:
            continue
        for name in names:
            if not name.startswith("aner_coord"):
                continue
            base = name.replace(".", "/")
            for candidate in (f"{base}.py", f"{base}/__init__.py"):
                if (ROOT / candidate).is_file():
                    found.add(candidate)
    return found


def test_every_aner_coord_module_a_result_file_imports_is_declared() -> None:
    results = set(result_files(ROOT))
    undeclared: dict[str, set[str]] = {}
    for name in sorted(results):
        if not name.startswith("aner_coord/"):
            continue
        extra = _imported_files(ROOT / name) - results - ORCHESTRATION.keys()
        if extra:
            undeclared[name] = extra
    assert not undeclared, (
        "aner_coord modules imported by result code, in neither RESULT_MODULES (it computes a "
        f"number the result holds) nor this test's ORCHESTRATION (it does not): {undeclared}"
    )
    assert not ORCHESTRATION.keys() & results
    assert all((ROOT / name).is_file() for name in ORCHESTRATION)


def test_the_result_files_span_the_contract_and_each_computation() -> None:
    names = set(result_files(ROOT))
    assert set(RESULT_MODULES) <= names
    for required in (
        "protocol/messages.py",
        "aner_worker/kernels/dense/network.py",
        "aner_coord/computations/regression.py",
        "aner_coord/computations/dense/run.py",
        "aner_coord/computations/search/aggregate.py",
        "aner_coord/computations/montecarlo.py",
    ):
        assert required in names, required
    assert not any("__pycache__" in name or not name.endswith(".py") for name in names)
    assert installed_result_sources() == sources_of(ROOT)


def test_a_new_computation_file_joins_and_one_changed_line_is_named(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    for package in ("protocol", "aner_worker", "aner_coord"):
        shutil.copytree(ROOT / package, copy / package, ignore=shutil.ignore_patterns("*.pyc"))
    before = sources_of(copy)
    assert before == installed_result_sources()
    (copy / "aner_coord/computations/dense/newstep.py").write_text("STEP = 2.0\n")
    target = copy / "aner_coord/computations/regression.py"
    target.write_text(target.read_text().replace("\n", "\n# one more line\n", 1))
    after = sources_of(copy)
    assert "aner_coord/computations/dense/newstep.py" in after
    said = first_difference(before, after)
    assert said is not None and said.startswith("aner_coord/computations/dense/newstep.py ")
    del after["aner_coord/computations/dense/newstep.py"]
    said = first_difference(before, after)
    assert said == (
        f"aner_coord/computations/regression.py differs "
        f"({before['aner_coord/computations/regression.py']} when it began, "
        f"{after['aner_coord/computations/regression.py']} installed)"
    )
    assert first_difference(before, before) is None
