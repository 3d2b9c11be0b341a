"""The shell's conveniences (issue 37, item 5), each made from the one parser: `aner --help`
lists every command with its line, `aner completion bash|zsh` completes every command's
flags, and `aner manpage` is a manual page troff reads without a warning."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from support import ANER

from aner_coord.cli.main import COMMANDS, build_parser
from aner_coord.cli.shell import completion, manpage


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ANER, *args], capture_output=True, text=True, check=False)


def test_help_lists_every_command_with_its_line() -> None:
    done = _run("--help")
    assert done.returncode == 0, done.stderr
    for name, (words, _module) in COMMANDS.items():
        line = next(x for x in done.stdout.splitlines() if f"aner parallel {name} " in x)
        assert line.split(None, 3)[3] == words
    assert "aner completion bash|zsh" in done.stdout and "aner manpage" in done.stdout


def test_bash_completion_offers_a_commands_flags() -> None:
    script = completion(build_parser(every=True), "bash")
    probe = (
        script
        + "\nCOMP_WORDS=(aner parallel train --tea); COMP_CWORD=3; COMP_LINE='aner parallel train"
        " --tea'; COMP_POINT=${#COMP_LINE}; _shtab_aner; printf '%s\\n' \"${COMPREPLY[@]}\"\n"
    )
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True)
    assert "--teacher" in done.stdout.split()
    commands = subprocess.run(
        ["bash", "-c", script + "\nCOMP_WORDS=(aner parallel ''); COMP_CWORD=2;"
         " COMP_LINE='aner parallel '; COMP_POINT=${#COMP_LINE}; _shtab_aner;"
         " printf '%s\\n' \"${COMPREPLY[@]}\"\n"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert set(COMMANDS) <= set(commands.stdout.split())


def test_zsh_completion_names_every_command() -> None:
    script = completion(build_parser(every=True), "zsh")
    assert script.startswith("#compdef aner")
    assert all(name in script for name in COMMANDS)


@pytest.mark.skipif(shutil.which("groff") is None, reason="groff is not installed")
def test_the_manual_page_renders_without_a_warning_and_names_every_flag() -> None:
    page = manpage(build_parser(every=True))
    done = subprocess.run(
        ["groff", "-man", "-Tutf8", "-ww"], input=page, capture_output=True, text=True, check=True
    )
    assert done.stderr == ""
    assert "--teacher" in done.stdout and "--samples" in done.stdout


def test_the_commands_refuse_a_shell_they_do_not_write_for() -> None:
    done = _run("completion", "fish")
    assert done.returncode == 2 and "invalid choice: 'fish'" in done.stderr
    assert _run("manpage").stdout.startswith(".TH ANER")
