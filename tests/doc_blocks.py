"""The code blocks of the README and the documentation site, read and run as a reader would
(tests/integration/test_docs.py).

The rules a page follows (docs/explanation/design.md says them for authors):
- A ```` ```console ```` block is a shell session: each line starting with `$ ` is a command
  (a trailing backslash continues it), run by bash in the page's directory; the lines after a
  command, up to the next one, are what it prints (stdout and stderr together). A command
  must exit 0, except one whose shown output is an `aner:` error line, which must exit 2,
  and one whose comment says `# exits N`, which must exit N.
- A ```` ```python ```` block runs in one interpreter per page, in page order, sharing one
  namespace, so a later block can use what an earlier one made; an ```` ```output ```` block
  right after it is what it prints.
- Shown output is compared as doctest compares (`...` stands for any text, runs of white
  space are equal); a command or block that shows nothing is not compared, only run.
- `<!-- not run: REASON -->` on the line before a block leaves it out, with the reason said
  (an SSH host or a Slurm cluster the reader has and the suite does not).
- Each page runs in a fresh temporary directory, with the virtualenv's `bin` first on PATH:
  files a block needs are made by an earlier block of the same page, which the reader sees.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import json
import os
import re
import subprocess
import sys
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

FENCE = re.compile(r"^```(\w*)\s*$")
NOT_RUN = re.compile(r"^<!--\s*not run:\s*(.+?)\s*-->\s*$")
RUN = ("console", "python")


EXITS = re.compile(r"#\s*exits\s+(\d+)")


@dataclass
class Command:
    line: int
    text: str
    expected: str

    def exit_status(self) -> int:
        """The status the command must end with."""
        said = EXITS.search(self.text)
        if said:
            return int(said.group(1))
        return 2 if self.expected.lstrip().startswith("aner:") else 0


@dataclass
class Block:
    kind: str  # console or python
    line: int  # of the opening fence, 1-based
    text: str
    expected: str = ""  # python: the output block after it
    not_run: str | None = None
    commands: list[Command] = field(default_factory=list)


def _commands(text: str, first_line: int) -> list[Command]:
    commands: list[Command] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("$ "):
            if commands:
                commands[-1].expected += line + "\n"
            elif line.strip():
                raise ValueError(f"line {first_line + i}: output before any `$ ` command")
            i += 1
            continue
        start = i
        command = line[2:]
        while command.endswith("\\") and i + 1 < len(lines):
            i += 1
            command = command + "\n" + lines[i]  # bash continues the line, as it would typed
        commands.append(Command(first_line + start, command, ""))
        i += 1
    return commands


def parse(text: str) -> list[Block]:
    """The runnable blocks of a Markdown page, in order."""
    lines = text.split("\n")
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        kind, start = match.group(1), i
        i += 1
        body: list[str] = []
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        content = "\n".join(body)
        if kind == "output":
            if not blocks or blocks[-1].kind != "python" or blocks[-1].expected:
                raise ValueError(f"line {start + 1}: an output block not after a python block")
            blocks[-1].expected = content + "\n"
            continue
        if kind not in RUN:
            continue
        previous = lines[start - 1] if start else ""
        skipped = NOT_RUN.match(previous)
        block = Block(kind, start + 1, content, not_run=skipped.group(1) if skipped else None)
        if kind == "console":
            block.commands = _commands(content, start + 2)
        blocks.append(block)
    return blocks


def matches(expected: str, got: str) -> bool:
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    return doctest.OutputChecker().check_output(expected, got, flags)


# -- the child: runs one page's blocks and reports what each printed -------------------------


def _run_python(code: str, name: str, namespace: dict[str, object]) -> tuple[str, int]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            exec(compile(code, name, "exec"), namespace)
            status = 0
        except BaseException:  # a block's failure, KeyboardInterrupt too, is its report
            traceback.print_exc()
            status = 1
    return out.getvalue(), status


def run_page(page: str, blocks: list[Block]) -> list[dict[str, object]]:
    """Run `blocks` here (the current directory is the page's), in order."""
    namespace: dict[str, object] = {"__name__": "__main__"}
    results: list[dict[str, object]] = []
    for block in blocks:
        if block.not_run:
            continue
        if block.kind == "python":
            output, status = _run_python(block.text, f"{page}:{block.line}", namespace)
            results.append({"line": block.line, "output": output, "status": status})
            continue
        for command in block.commands:
            done = subprocess.run(
                command.text,
                shell=True,
                executable="/bin/bash",
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                stdin=subprocess.DEVNULL,
            )
            results.append({"line": command.line, "output": done.stdout, "status": done.returncode})
    return results


def main() -> int:
    """`doc_blocks.py PAGE BLOCKS.json RESULTS.json`: run the blocks, write what they did."""
    page, given, results = sys.argv[1:4]
    blocks = [
        Block(**{**b, "commands": [Command(**c) for c in b["commands"]]})
        for b in json.loads(Path(given).read_text())
    ]
    bin_dir = str(Path(sys.executable).parent)
    os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    Path(results).write_text(json.dumps(run_page(page, blocks)))
    return 0


def encode(blocks: list[Block]) -> str:
    return json.dumps([asdict(b) for b in blocks])


if __name__ == "__main__":
    sys.exit(main())
