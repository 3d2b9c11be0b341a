"""The prose about the tree stays true (issue 26, item 3; STYLE 20): every folder's face (its
`__init__.py` docstring) names exactly its modules, the README's layout table names exactly
the folders and modules there are, and every module a docstring, a help text, a test or a
document names in backticks (`aner_coord.job.execute`, `aner_coord/job/pool.py`, or
`jobs.execute` relative to a module of that name) exists. Read with `ast` and the file
system; a dotted name is resolved by importing it."""

from __future__ import annotations

import ast
import functools
import importlib
import re
from pathlib import Path

import pytest
from support import ROOT

from aner_coord.cli.main import COMMANDS as COMMAND_TABLE

PACKAGES = ("protocol", "aner_worker", "aner_coord")
# Where backticked references are read: the product, its tests, documents and examples.
READ = ("protocol", "aner_worker", "aner_coord", "tests", "docs", "deploy", "samples", "bench")
TICKED = re.compile(r"``?([^`\s][^`]*?)``?")
IDENTIFIER = re.compile(r"[a-z][a-z0-9_]*")
COMMANDS = set(COMMAND_TABLE)  # `train`, `status`: commands, not modules
TOP = {"aner", *PACKAGES, *(p + "/" for p in PACKAGES)}  # the program and its packages


def folders() -> list[Path]:
    """Every package folder of the product, its own included."""
    return sorted(p.parent for package in PACKAGES for p in (ROOT / package).rglob("__init__.py"))


def modules_of(folder: Path) -> set[str]:
    """The folder's modules and subpackages, as its face names them (`name`, `name/`)."""
    names = {p.stem for p in folder.glob("*.py") if p.stem not in ("__init__", "__main__")}
    return names | {p.name + "/" for p in folder.iterdir() if (p / "__init__.py").is_file()}


@functools.cache
def defined_in(folder: Path) -> frozenset[str]:
    """Every name a module of the folder defines or imports at its top level, or as a
    member of a class there: what a face may mention besides the modules."""
    names: set[str] = set()
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.alias):
                names.add((node.asname or node.name).split(".")[-1])
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
    return frozenset(names)


def ticked(text: str) -> list[str]:
    return [m.group(1).strip() for m in TICKED.finditer(text)]


def stale_in(text: str, folder: Path, own: set[str]) -> list[str]:
    """Backticked names in `text` that look like modules of `folder` but are none of its
    modules, subfolders or names."""
    stale = []
    for token in ticked(text):
        name = token.removesuffix(".py")
        if name in TOP:
            continue
        if name.endswith("/"):
            if name not in own:
                stale.append(token)
        elif IDENTIFIER.fullmatch(name) and name not in own | COMMANDS | defined_in(folder):
            stale.append(token)
    return stale


def face(folder: Path) -> str:
    return ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""


def named(text: str, module: str, folder: Path) -> bool:
    dotted = ".".join((folder / module.rstrip("/")).relative_to(ROOT).parts)
    tokens = {t.removesuffix(".py") for t in ticked(text)}
    return module in tokens or module.rstrip("/") in tokens or dotted in tokens


FOLDERS = folders()


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: str(f.relative_to(ROOT)))
def test_a_folder_face_names_exactly_its_modules(folder: Path) -> None:
    text = face(folder)
    assert text, f"{folder.relative_to(ROOT)}/__init__.py has no docstring"
    own = modules_of(folder)
    missing = sorted(m for m in own if not named(text, m, folder))
    assert missing == [], f"the face of {folder.relative_to(ROOT)}/ does not name {missing}"
    assert stale_in(text, folder, own) == []


LAYOUT = ROOT / "docs" / "explanation" / "design.md"  # the layout table's page


def layout_rows() -> dict[str, str]:
    """The layout table (docs/explanation/design.md): folder (`path/`) -> what it holds."""
    text = LAYOUT.read_text()
    table = text[text.index("| path | holds |") :]
    rows: dict[str, str] = {}
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        path, holds = (cell.strip() for cell in line.strip("|").split("|", 1))
        rows[path.strip("`")] = holds
    return rows


def test_the_layout_table_names_exactly_the_folders() -> None:
    rows = layout_rows()
    top = {p.name + "/" for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")}
    top -= {"aner.egg-info/", "build/", "dist/"}
    assert {row for row in rows if row.count("/") == 1} == top
    for row in rows:
        assert (ROOT / row).is_dir(), f"layout table: {row} does not exist"
    described = set(rows)
    for folder in FOLDERS:
        path = str(folder.relative_to(ROOT)) + "/"
        parent = str(folder.parent.relative_to(ROOT)) + "/"
        # A small folder may be described in its parent's row, as `name/` there.
        if path not in rows:
            assert parent in rows and f"`{folder.name}/`" in rows[parent], path
            described.add(path)


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: str(f.relative_to(ROOT)))
def test_the_layout_table_names_every_module_of_a_folder(folder: Path) -> None:
    rows = layout_rows()
    path = str(folder.relative_to(ROOT)) + "/"
    parent = str(folder.parent.relative_to(ROOT)) + "/"
    holds = rows.get(path)
    if holds is None:  # described in its parent's row
        holds = rows[parent]
    own = modules_of(folder)
    # A subfolder with its own row need not be named in this one.
    needed = {m for m in own if not (m.endswith("/") and path + m in rows)}
    missing = sorted(m for m in needed if not named(holds, m, folder))
    assert missing == [], f"layout table, {path}: {missing} not named"
    if path in rows:
        children = {
            name for child in folder.iterdir() if (child / "__init__.py").is_file()
            for name in modules_of(child)
        }  # fmt: skip
        assert stale_in(holds, folder, own | children) == []


# -- references anywhere --------------------------------------------------------------------


def read_files() -> list[Path]:
    found = [ROOT / "README.md"]
    for folder in READ:
        for path in sorted((ROOT / folder).rglob("*")):
            if "__pycache__" in path.parts or not path.is_file():
                continue
            if path.suffix in (".py", ".md", ".toml", ".sh", ".service", ".sbatch", ""):
                found.append(path)
    return found


DOTTED = re.compile(r"(?:aner_coord|aner_worker|protocol)(?:\.[A-Za-z_]\w*)+")
PATH = re.compile(r"(?:aner_coord|aner_worker|protocol|tests|bench|deploy|samples|docs)/[\w./@-]*")


def resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


@functools.cache
def last_names() -> dict[str, list[str]]:
    """Each product module's last name -> its dotted names (`jobs` -> aner_coord.cli.jobs)."""
    names: dict[str, list[str]] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            dotted = dotted.removesuffix(".__init__")
            names.setdefault(dotted.rsplit(".", 1)[-1], []).append(dotted)
    return names


def broken(token: str) -> bool:
    token = token.rstrip(".,:;)")
    if token.endswith(".py") and token.removesuffix(".py") in TOP:
        return False  # `protocol.py`: a user's file that shadows our package, not a module
    if DOTTED.fullmatch(token):
        return not resolves(token)
    if PATH.fullmatch(token) and "NAME" not in token and "*" not in token:
        # (`bench/c/pi_ref` is built from its `.c` by `make bench`)
        return not ((ROOT / token).exists() or (ROOT / f"{token}.c").exists())
    # `jobs.execute`: a module named relative to another (both names of product modules;
    # `result.json` or `fit.seconds` name a file or an attribute, not a module).
    head, _, rest = token.partition(".")
    if head in last_names() and rest in last_names() and rest != "lock":  # `coordinator.lock`
        return not any(resolves(f"{c}.{rest}") for c in last_names()[head])
    return False


@pytest.mark.parametrize("path", read_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_named_module_exists(path: Path) -> None:
    text = path.read_text(errors="replace")
    bad = sorted({t for t in ticked(text) if broken(t)})
    assert bad == [], f"{path.relative_to(ROOT)} names what does not exist: {bad}"


def test_the_checks_see_a_stale_name() -> None:
    # The controls: each check finds the kinds of pointer the issue found stale.
    assert broken("aner_coord.jobdir.checkpoint") and not broken("aner_coord.job.execute")
    assert broken("jobdir.checkpoint") and not broken("jobdir.ledger")
    assert broken("aner_coord/pool.py") and not broken("aner_coord/job/pool.py")
    folder = ROOT / "aner_worker" / "kernels" / "dense"
    assert stale_in("`kernel` (`dense_task`)", folder, modules_of(folder)) == ["dense_task"]
    assert not named("`params`, `rows`", "network", folder)


CITES_SPEC = re.compile(r"\bSPEC\s+(sections?\s+\d|\d+(?![\d.e]))")


def test_every_contracts_section_named_anywhere_exists() -> None:
    # test_contract_references checks what ships; the tests, README and documents too.
    from test_contract_references import REFERENCE, flowed, sections

    known = sections()
    for path in read_files():
        text = flowed(path.read_text(errors="replace"))
        for match in REFERENCE.finditer(text):
            for number in re.findall(r"\d+", match.group(1)):
                assert int(number) in known, f"{path}: {match.group(0)!r}: no such section"
        # The tests cite the contracts a reader has, not the spec they were written from.
        assert not CITES_SPEC.search(text), f"{path}: cites SPEC"


def test_the_tests_readme_maps_every_test_file_and_names_only_files_that_exist() -> None:
    text = (ROOT / "tests" / "README.md").read_text()
    named = set(re.findall(r"`tests/((?:unit|protocol|contract|integration)/test_\w+\.py)`", text))
    present = {p.relative_to(ROOT / "tests").as_posix() for p in ROOT.glob("tests/*/test_*.py")}
    assert sorted(present - named) == [], "test files tests/README.md does not map"
    assert sorted(named - present) == [], "tests/README.md names test files that do not exist"
    for package in PACKAGES:
        assert f"`{package}/" in text, package
