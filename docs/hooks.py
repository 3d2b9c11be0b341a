"""MkDocs hooks of the documentation site (mkdocs.yml): the pages made from the code, so they
cannot fall behind it.

- `reference/cli.md`: its marker `<!-- aner:cli-reference -->` becomes every command's usage,
  flags, defaults and choices, read from the one parser (`aner_coord.cli.main.build_parser`),
  and the exit codes from `aner_coord.errors`;
- `explanation/design.md`: its marker `<!-- aner:house -->` becomes the house as it is, every
  folder of the packages and the folders its modules import, read from the code;
- `changes.md`: the repository's CHANGES.md, as a page of the site.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
MARKER = "<!-- aner:cli-reference -->"

EXIT_CODES = (
    ("EXIT_OK", "completed (and, for `status` and `cancel`, a job still starting or running)"),
    ("EXIT_INVALID", "invalid request, configuration or admission: nothing started"),
    ("EXIT_FAILED", "the job failed"),
    ("EXIT_CANCELLED", "the job was cancelled"),
    ("EXIT_OFFLINE", "`status`: the coordinator is offline (COORDINATOR_OFFLINE)"),
)


def on_files(files: Files, config: Any) -> Files:
    text = (ROOT / "CHANGES.md").read_text(encoding="utf-8")
    files.append(File.generated(config, "changes.md", content=text))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, cli_reference())
    if HOUSE in markdown:
        markdown = markdown.replace(HOUSE, house())
    return markdown


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        names = ", ".join(f"`{n}`" for n in action.option_strings) or f"`{action.dest}`"
        if action.metavar or (action.option_strings and action.nargs != 0):
            names += f" `{action.metavar or action.dest.upper()}`"
        default = action.default
        shown = "" if default in (None, False, argparse.SUPPRESS) else f"`{default}`"
        if action.choices is not None and not isinstance(action.choices, dict):
            shown += " one of " + ", ".join(f"`{c}`" for c in action.choices)
        help_text = (action.help or "") % {"default": default} if action.help else ""
        rows.append(f"| {names} | {_cell(shown)} | {_cell(help_text)} |")
    if not rows:
        return ["No flags."]
    # Which flags a command requires its usage line shows (no brackets): some are required
    # only without --spec, which argparse cannot say.
    return ["| flag | default | meaning |", "| --- | --- | --- |", *rows]


def cli_reference() -> str:
    from aner_coord import errors
    from aner_coord.cli.main import COMMANDS, build_parser

    parser = build_parser(every=True)
    out = ["## Exit status", "", "| code | meaning |", "| --- | --- |"]
    out += [f"| {getattr(errors, name)} | {words} |" for name, words in EXIT_CODES]
    out += ["| 1 | an internal error: a bug in aner (`ANER_DEBUG=1` prints the traceback) |"]
    out += ["| 130 | interrupted (Ctrl-C) before a job could be cancelled in order |", ""]
    groups = _subcommands(parser)
    commands = _subcommands(groups["parallel"])
    for name in COMMANDS:
        command = commands[name]
        out += [f"## `aner parallel {name}`", "", COMMANDS[name][0] + ".", ""]
        usage = command.format_usage().removeprefix("usage: ").strip()
        out += ["```text", usage, "```", "", *_flags(command), ""]
    for name in ("completion", "manpage"):
        command = groups[name]
        out += [f"## `aner {name}`", "", "```text", command.format_usage().strip(), "```", ""]
        out += [*_flags(command), ""]
    return "\n".join(out)


HOUSE = "<!-- aner:house -->"
PACKAGES = ("protocol", "aner_worker", "aner_coord")


def _room(module: str) -> str:
    """The room of a dotted module: its package folder (`aner_coord.job`), or the module itself
    where it stands loose at a package's top (`aner_coord.admission`)."""
    parts = module.split(".")
    path = ROOT.joinpath(*parts)
    if path.is_dir():
        return module
    return (
        ".".join(parts[:-1])
        if (path.parent / "__init__.py").is_file() and len(parts) > 2
        else module
    )


def house() -> str:
    """Every folder of the three packages (a room) and the rooms its modules import, read from
    the code with `ast` when the site is built: the house as it is."""
    import ast

    arrows: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).with_suffix("")
            parts = [p for p in relative.parts if p != "__init__"]
            room = _room(".".join(parts)) if len(parts) > 1 else package
            targets = arrows.setdefault(room, set())
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names = [node.module]
                for name in names:
                    if name.split(".")[0] in PACKAGES:
                        target = _room(name)
                        if target != room:
                            targets.add(target)
    rows = ["| room | imports |", "| --- | --- |"]
    for room in sorted(arrows):
        inside = ", ".join(f"`{t}`" for t in sorted(arrows[room])) or "nothing of aner's"
        rows.append(f"| `{room}` | {inside} |")
    return "\n".join(rows)
