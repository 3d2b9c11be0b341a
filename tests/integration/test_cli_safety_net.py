"""The command line's safety net (aner_coord/cli/main.py): whatever escapes a command ends
in one line with a documented exit status. An OS refusal is the user's environment (exit 2,
what the system said and where); anything else is a bug, said to be one, with ANER_DEBUG=1
to see its traceback (exit 1). The `aner` program itself runs here, with one extra command
registered by a small launcher, so that the whole path (the guard on standard output, the
final flush, the exit) is the real one."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from suite_env import child_env
from support import ROOT

LAUNCHER = textwrap.dedent(
    """
    import errno, sys, types
    import importlib
    cli = importlib.import_module("aner_coord.cli.main")

    def add_boom_arguments(parser):
        parser.add_argument("what")

    def boom_command(args):
        if args.what == "denied":
            raise PermissionError(errno.EACCES, "Permission denied", "/some/where/file.csv")
        if args.what == "rename":
            raise OSError(errno.EXDEV, "Invalid cross-device link", "/a", None, "/b")
        if args.what == "bug":
            raise ZeroDivisionError("division by zero\\nsecond line")
        print("fine")
        return 0

    module = types.ModuleType("boom_commands")
    module.add_boom_arguments = add_boom_arguments
    module.boom_command = boom_command
    sys.modules["boom_commands"] = module
    cli.COMMANDS["boom"] = ("raise on purpose", "boom_commands")
    sys.argv = ["aner", "parallel", "boom", *sys.argv[1:]]
    sys.exit(cli.main())
    """
)


def boom(tmp_path: Path, what: str, *, debug: bool = False) -> subprocess.CompletedProcess[str]:
    env = child_env(dict(PATH="/usr/bin:/bin", PYTHONPATH=str(ROOT), HOME=str(tmp_path)))
    if debug:
        env["ANER_DEBUG"] = "1"
    return subprocess.run(
        [sys.executable, "-c", LAUNCHER, what],
        capture_output=True, text=True, timeout=120, env=env, check=False, cwd=tmp_path,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("what", "line"),
    [
        ("denied", "aner: Permission denied: /some/where/file.csv"),
        ("rename", "aner: Invalid cross-device link: /a -> /b"),
    ],
)
def test_an_os_refusal_is_one_line_and_exit_2(tmp_path: Path, what: str, line: str) -> None:
    done = boom(tmp_path, what)
    assert (done.returncode, done.stderr, done.stdout) == (2, line + "\n", "")


def test_a_bug_says_it_is_one_in_one_line_and_exit_1(tmp_path: Path) -> None:
    done = boom(tmp_path, "bug")
    assert done.returncode == 1
    assert done.stderr == (
        "aner: internal error (a bug in aner, not in your request): ZeroDivisionError: "
        "division by zero...; run again with ANER_DEBUG=1 for the traceback, and please "
        "report it\n"
    )


def test_aner_debug_shows_the_traceback(tmp_path: Path) -> None:
    for what in ("bug", "denied"):
        done = boom(tmp_path, what, debug=True)
        assert done.returncode == 1
        assert done.stderr.startswith("Traceback (most recent call last):")
        assert "boom_command" in done.stderr


def test_a_command_that_works_is_untouched(tmp_path: Path) -> None:
    done = boom(tmp_path, "fine")
    assert (done.returncode, done.stdout, done.stderr) == (0, "fine\n", "")
