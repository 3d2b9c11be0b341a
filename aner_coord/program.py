"""The `aner` program's first line: SIGINT is held (`aner_coord.interrupts`) before the
command line is even imported, so that no Ctrl-C lands in an import as a traceback."""

from __future__ import annotations


def main() -> int:
    """The console script (and `python -m aner_coord`)."""
    from aner_coord import interrupts

    interrupts.start()
    from aner_coord.cli.main import main as command_line

    return command_line()
