"""Every block of the README and the documentation site runs as written (issue 37, item 3),
and the site builds with warnings as errors (item 2): `tests/doc_blocks.py` has the rules.

One test per page: its blocks run in order in a fresh directory, in a child process (as a
reader's terminal and interpreter would), and what each shows it prints is compared with
what it printed. A block that cannot run here says why (`<!-- not run: ... -->`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import doc_blocks
import pytest
from support import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUNNABLE = [p for p in PAGES if any(not b.not_run for b in doc_blocks.parse(p.read_text()))]


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


@pytest.mark.slow
@pytest.mark.parametrize("page", RUNNABLE, ids=_name)
def test_every_block_of_the_page_runs_and_prints_what_it_shows(page: Path, tmp_path: Path) -> None:
    blocks = doc_blocks.parse(page.read_text())
    given, results = tmp_path / "blocks.json", tmp_path / "results.json"
    given.write_text(doc_blocks.encode(blocks))
    work = tmp_path / "page"
    work.mkdir()
    script = Path(doc_blocks.__file__)
    subprocess.run(
        [sys.executable, str(script), _name(page), str(given), str(results)], cwd=work, check=True
    )
    done = {r["line"]: r for r in json.loads(results.read_text())}
    failures = []
    for block in blocks:
        if block.not_run:
            continue
        shown = [(block.line, block.expected, 0)] if block.kind == "python" else [
            (c.line, c.expected, c.exit_status()) for c in block.commands
        ]  # fmt: skip
        for line, expected, status in shown:
            got = done[line]
            if got["status"] != status:
                failures.append(f"line {line}: exit {got['status']}, not {status}\n{got['output']}")
            elif expected.strip() and not doc_blocks.matches(expected, str(got["output"])):
                failures.append(f"line {line}: shows\n{expected}but printed\n{got['output']}")
    assert not failures, f"{_name(page)}:\n" + "\n".join(failures)


def test_a_block_that_is_not_run_says_why() -> None:
    for page in PAGES:
        for block in doc_blocks.parse(page.read_text()):
            assert block.not_run is None or block.not_run.strip(), (_name(page), block.line)


def test_the_rules_see_a_wrong_output_and_a_reason() -> None:
    page = "```console\n$ echo 1\n2\n```\n<!-- not run: needs a host -->\n```python\nx\n```\n"
    console, python = doc_blocks.parse(page)
    assert console.commands[0].text == "echo 1" and console.commands[0].expected == "2\n"
    assert python.not_run == "needs a host"
    assert not doc_blocks.matches("2\n", "1\n")
    assert doc_blocks.matches("a ... c\n", "a b  c\n")
    (cancel,) = doc_blocks.parse("```console\n$ aner parallel cancel --job j  # exits 4\n```\n")
    assert cancel.commands[0].exit_status() == 4


def test_the_site_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    mkdocs = Path(sys.executable).parent / "mkdocs"
    done = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    assert "aner parallel train" in cli and "--teacher" in cli  # made from the parser
    design = (tmp_path / "site" / "explanation" / "design" / "index.html").read_text()
    assert "<code>aner_coord.localplan</code>" in design  # the house, read from the code
