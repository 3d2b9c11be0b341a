"""What ships points to contracts a user can read (issue 17, item 5): no shipped file
(the packages, deploy/, samples/) refers to SPEC.md, which is not shipped, and every
"docs/contracts.md, section N" reference names a section that docs/contracts.md has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support import ROOT

SHIPPED = ("protocol", "aner_coord", "aner_worker", "deploy", "samples")
REFERENCE = re.compile(r"docs/contracts\.md,\s+sections?\s+(\d+(?:\s*(?:,|and)\s*\d+)*)")


def shipped_files() -> list[Path]:
    files = [
        path
        for folder in SHIPPED
        for path in sorted((ROOT / folder).rglob("*"))
        if path.is_file()
        and "__pycache__" not in path.parts
        and path.suffix not in (".pyc", ".nbi", ".nbc")
    ]
    assert len(files) > 100
    return files


def sections() -> set[int]:
    text = (ROOT / "docs" / "contracts.md").read_text()
    return {int(n) for n in re.findall(r"^## (\d+)\. ", text, flags=re.MULTILINE)}


def flowed(text: str) -> str:
    """The text with line breaks (and a comment's `#` after one) as spaces, so that a
    reference wrapped over two lines reads as one."""
    return re.sub(r"\s*\n\s*(#\s*)?", " ", text)


def test_contracts_has_the_sections_the_code_refers_to() -> None:
    assert sections() >= set(range(1, 13))


def test_every_section_of_the_contracts_is_numbered_and_in_order() -> None:
    # Issue 37: three sections stood unnumbered between numbered ones while the code cites
    # sections by number.
    text = (ROOT / "docs" / "contracts.md").read_text()
    headings = re.findall(r"^## (.*)$", text, flags=re.MULTILINE)
    numbers = [re.match(r"(\d+)\. ", h) for h in headings]
    assert all(numbers), [h for h, n in zip(headings, numbers, strict=True) if not n]
    assert [int(n.group(1)) for n in numbers if n] == list(range(1, len(headings) + 1))


@pytest.mark.parametrize("path", shipped_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_shipped_file_refers_to_the_contracts_not_to_the_spec(path: Path) -> None:
    text = path.read_text(errors="replace")
    assert not re.search(r"\bSPEC\b|SPEC\.md", text), f"{path}: mentions SPEC"
    known = sections()
    for match in REFERENCE.finditer(flowed(text)):
        for number in re.findall(r"\d+", match.group(1)):
            assert int(number) in known, f"{path}: {match.group(0)!r}: no such section"


def test_the_references_are_found() -> None:
    # The check above is only as good as its pattern: it must see the references there are.
    found = sum(
        len(REFERENCE.findall(flowed(p.read_text(errors="replace")))) for p in shipped_files()
    )
    assert found >= 60
    assert REFERENCE.findall(flowed("see docs/contracts.md,\n    # sections 2 and 9")) == [
        "2 and 9"
    ]


def test_no_file_names_where_a_copy_of_the_contracts_lay_on_some_machine() -> None:
    # The contracts are named by their place in the repository (docs/contracts.md) or as
    # "the project's SPEC", never by a development machine's path (a reader has no /work).
    machine = re.compile("/" + "work/")  # spelled apart: this file would match itself
    files = [
        path
        for folder in (*SHIPPED, "tests", "docs")
        for path in sorted((ROOT / folder).rglob("*"))
        if path.is_file() and path.suffix in (".py", ".md", ".toml", ".txt", ".sh", "")
    ] + sorted(ROOT.glob("*.md"))
    named = [str(p.relative_to(ROOT)) for p in files if machine.search(p.read_text("latin-1"))]
    assert named == []
