"""Package boundaries of the Dense modules: a worker never imports the coordinator."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKER_MODULES = sorted((ROOT / "aner_worker").glob("*.py"))


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", WORKER_MODULES, ids=lambda p: p.name)
def test_worker_modules_do_not_import_the_coordinator(path: Path) -> None:
    offending = {n for n in _imports(path) if n == "aner_coord" or n.startswith("aner_coord.")}
    assert offending == set()


def test_the_dense_worker_modules_are_covered() -> None:
    names = {p.name for p in WORKER_MODULES}
    assert {"dense_data.py", "dense_kernel.py", "dense_streams.py"} <= names


@pytest.mark.parametrize("name", ["dense_data.py", "dense_kernel.py", "dense_streams.py"])
def test_dense_worker_modules_do_not_import_sklearn(name: str) -> None:
    # digits is read from scikit-learn's data file; importing it would cost about a second.
    assert not {n for n in _imports(ROOT / "aner_worker" / name) if n.startswith("sklearn")}
