"""The layers of the source tree, read from the modules' own import statements (with `ast`,
so nothing is imported to check them): the wire knows nothing of ours, the worker never
needs the coordinator, and the kernels know nothing of the wire (nor of scikit-learn)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from support import ROOT

PACKAGES = ("protocol", "aner_worker", "aner_coord")
# The numerical kernels: arrays and numbers in, numbers out; no wire, no coordinator.
KERNELS = (
    "aner_worker/philox.py",
    "aner_worker/fixture.py",
    "aner_worker/dense_kernel.py",
    "aner_worker/dense_streams.py",
    "aner_worker/dense_data.py",
    "aner_worker/dense_task.py",
    "aner_worker/dense_rows.py",
)


def imported_modules(path: Path, text: str | None = None) -> set[str]:
    """Every module the source at `path` (relative to the tree: `text` if given, else the
    file) imports, absolute, wherever the statement is (inside functions too)."""
    package = path.relative_to(ROOT).with_suffix("").parts[:-1]
    source = path.read_text() if text is None else text
    found: set[str] = set()
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the module's own package
                base = list(package[: len(package) - node.level + 1])
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def roots(modules: set[str]) -> set[str]:
    return {name.split(".")[0] for name in modules}


def sources(package: str) -> list[Path]:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"no sources under {package}/"
    return files


def offending(files: list[Path], forbidden: set[str]) -> dict[str, set[str]]:
    bad: dict[str, set[str]] = {}
    for path in files:
        hits = {m for m in imported_modules(path) if m.split(".")[0] in forbidden}
        if hits:
            bad[str(path.relative_to(ROOT))] = hits
    return bad


def test_protocol_imports_nothing_of_ours() -> None:
    assert offending(sources("protocol"), {"aner_coord", "aner_worker"}) == {}


def test_worker_never_imports_the_coordinator() -> None:
    assert offending(sources("aner_worker"), {"aner_coord"}) == {}


@pytest.mark.parametrize("kernel", KERNELS)
def test_kernels_do_not_import_the_protocol(kernel: str) -> None:
    path = ROOT / kernel
    assert path.is_file()
    assert offending([path], {"protocol", "aner_coord"}) == {}


@pytest.mark.parametrize("module", [k for k in KERNELS if "dense" in k])
def test_dense_worker_modules_do_not_import_sklearn(module: str) -> None:
    # digits is read from scikit-learn's data file; importing it would cost about a second.
    assert offending([ROOT / module], {"sklearn"}) == {}


# -- the checker itself must be able to fail ----------------------------------------------


def test_the_checker_sees_every_form_of_import() -> None:
    text = (
        "import os\n"
        "import aner_coord.jobs as jobs\n"
        "from aner_worker import kernels\n"
        "from . import framing\n"
        "def late():\n"
        "    from aner_coord.status import JobState\n"
        "    return JobState\n"
    )
    found = imported_modules(ROOT / "protocol" / "probe.py", text)  # parsed, never written
    assert roots(found) == {"os", "aner_coord", "aner_worker", "protocol"}
    assert "protocol.framing" in found  # a relative import, resolved
    assert "aner_coord.status" in found  # an import inside a function counts too
