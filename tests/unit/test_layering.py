"""The layers of the source tree, read from the modules' own import statements (with `ast`,
so nothing is imported to check them): the wire knows nothing of ours, the worker never
needs the coordinator, the kernels know nothing of the wire (nor of scikit-learn), the
generic worker process imports no computation, no module imports another's private names,
and no import closes a circle, not even one inside a function or under TYPE_CHECKING."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from support import ROOT

PACKAGES = ("protocol", "aner_worker", "aner_coord")
# The kernels: arrays and numbers in, numbers out; no wire, no coordinator.
KERNELS = sorted(
    str(path.relative_to(ROOT)) for path in (ROOT / "aner_worker" / "kernels").rglob("*.py")
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


# The API and the command line sit above the computations, which they admit and run: a
# computation that imports them is an arrow back up (`DenseClassifier` is an API object,
# `aner_coord/estimator.py`, beside `parallel`).
API_LAYER = (
    "aner_coord.admission",
    "aner_coord.arguments",
    "aner_coord.calls",
    "aner_coord.cli",
    "aner_coord.estimator",
    "aner_coord.parallel",
    "aner_coord.program",
    "aner_coord.session",
)


def above(modules: set[str], layer: tuple[str, ...]) -> set[str]:
    return {m for m in modules if any(m == top or m.startswith(top + ".") for top in layer)}


def test_computations_never_import_the_api_layer() -> None:
    bad = {}
    for path in sources("aner_coord/computations"):
        hits = above(imported_modules(path), API_LAYER)
        if hits:
            bad[str(path.relative_to(ROOT))] = hits
    assert bad == {}


# -- the checker itself must be able to fail ----------------------------------------------


def test_the_generic_worker_imports_no_computation() -> None:
    # A kernel declares what staged data it needs; the worker process only asks it.
    found = import_edges(ROOT / "aner_worker" / "worker.py", project_modules())
    kernels = {m for m in found if m.startswith("aner_worker.kernels")}
    assert kernels <= {"aner_worker.kernels", "aner_worker.kernels.base"}, kernels


def project_modules() -> dict[str, Path]:
    """Every module of the three packages by dotted name (a package by its `__init__`)."""
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sources(package):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def import_edges(path: Path, modules: dict[str, Path], text: str | None = None) -> set[str]:
    """The project modules that `path` imports, wherever the statement is: `from a.b import c`
    names module `a.b.c` when that is a module, else `a.b` (a parent package that Python
    initialises on the way is not an edge: a face re-exporting its own modules is no circle)."""
    source = path.read_text() if text is None else text
    package = path.relative_to(ROOT).with_suffix("").parts[:-1]
    named: set[str] = set()
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *base.split(".")])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                named.add(full if full in modules else base)
    edges: set[str] = set()
    for name in named:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name:
            edges.add(name)
    return edges


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module, or of one importing
    itself (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_closes_a_circle() -> None:
    modules = project_modules()
    graph = {name: import_edges(path, modules) - {name} for name, path in modules.items()}
    assert cycles(graph) == []


def private_imports(path: Path, text: str | None = None) -> set[str]:
    """`module._name` for each private name that `path` imports from a project module."""
    source = path.read_text() if text is None else text
    found: set[str] = set()
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.add(f"{node.module}.{alias.name}")
    return found


def test_no_module_imports_another_modules_private_names() -> None:
    bad = {
        str(path.relative_to(ROOT)): names
        for path in project_modules().values()
        if (names := private_imports(path))
    }
    assert bad == {}


# -- the checkers themselves must be able to fail -----------------------------------------


def test_the_api_layer_checker_sees_a_late_import() -> None:
    text = "def fit():\n    from aner_coord.calls import OneOff\n    import aner_coord.cli.jobs\n"
    found = imported_modules(ROOT / "aner_coord" / "computations" / "probe.py", text)
    assert above(found, API_LAYER) == {
        "aner_coord.calls",
        "aner_coord.calls.OneOff",
        "aner_coord.cli.jobs",
    }
    assert above({"aner_coord.callsign", "aner_coord.errors"}, API_LAYER) == set()


def test_the_cycle_checker_finds_circles_through_late_imports() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}, "f": set()}
    assert cycles(graph) == [["a", "b", "c"], ["e"]]
    modules = project_modules()
    text = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from aner_coord.session import Session\n"
        "def late():\n"
        "    from aner_coord import jobdir\n"
    )
    edges = import_edges(ROOT / "aner_coord" / "probe.py", modules, text)
    assert edges == {"aner_coord.session", "aner_coord.jobdir"}


def test_the_private_name_checker_sees_private_imports() -> None:
    text = "from aner_coord.job.threads import Handover, _hidden\nfrom os import _exit\n"
    assert private_imports(ROOT / "aner_coord" / "probe.py", text) == {
        "aner_coord.job.threads._hidden"
    }


def test_the_checker_sees_every_form_of_import() -> None:
    text = (
        "import os\n"
        "import aner_coord.job.execute as jobs\n"
        "from aner_worker import kernels\n"
        "from . import framing\n"
        "def late():\n"
        "    from aner_coord.jobdir.status import JobState\n"
        "    return JobState\n"
    )
    found = imported_modules(ROOT / "protocol" / "probe.py", text)  # parsed, never written
    assert roots(found) == {"os", "aner_coord", "aner_worker", "protocol"}
    assert "protocol.framing" in found  # a relative import, resolved
    assert "aner_coord.jobdir.status" in found  # an import inside a function counts too


def test_the_coordinator_builds_no_backend_of_its_own() -> None:
    # Backends are chosen by name (`aner_coord.job.backend.BACKENDS`), as kernels,
    # computations and transports are: the coordinator imports neither implementation.
    from aner_coord.job.backend import BACKENDS

    imported = imported_modules(ROOT / "aner_coord" / "job" / "coordinator.py")
    assert not imported & {"aner_coord.job.threads", "aner_coord.job.processes"}
    assert list(BACKENDS) == ["threads", "processes"]


def test_every_command_starts_its_job_one_way() -> None:
    # `aner_coord.cli.jobs.start` alone detaches (`submit`) or runs in the foreground, so
    # --background, resume, sd_notify and the plan's notes behave alike for every command.
    callers = set()
    for path in sources("aner_coord"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef):
                continue
            for call in ast.walk(node):
                name = (
                    call.func.id
                    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                    else ""
                )
                if name in ("submit", "run_foreground"):
                    callers.add(f"{path.relative_to(ROOT)}:{node.name}")
    assert callers == {"aner_coord/cli/jobs.py:start"}
