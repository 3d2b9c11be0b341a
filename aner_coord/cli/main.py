"""The `aner` command line: one parser, built here from the table of commands; each command's
flags and function live in its own module (`add_<command>_arguments`, `<command>_command`).

Only the module of the command being run is imported, so `aner parallel status` and
`inventory` start fast; heavy modules (numba, numpy, asyncio machinery) are imported by the
commands that need them. Errors are one line on stderr naming the flag to change; no
traceback for a user's mistake.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from aner_coord.errors import EXIT_INVALID, AnerError, cli_name

# command: (help, the module that holds add_<command>_arguments and <command>_command)
COMMANDS: dict[str, tuple[str, str]] = {
    "inventory": ("the CPUs this process may really use", "aner_coord.cli.inventory"),
    "run": ("Monte Carlo estimate of pi", "aner_coord.cli.jobs"),
    "regression": ("the logistic-regression training fixture", "aner_coord.cli.jobs"),
    "train": ("train a Dense classifier (docs/contracts.md)", "aner_coord.cli.dense"),
    "predict": ("labels and class probabilities from a trained model", "aner_coord.cli.dense"),
    "search": (
        "model search: Dense candidates cross-validated, the best refit",
        "aner_coord.cli.search",
    ),
    "cv": ("K-fold cross-validation of one Dense configuration", "aner_coord.cli.search"),
    "status": ("report a job directory's state", "aner_coord.cli.monitor"),
    "cancel": ("ask a running job to stop", "aner_coord.cli.monitor"),
    "resume": ("continue a job whose coordinator is gone, from its ledger", "aner_coord.cli.jobs"),
    "scaling": ("timed scaling experiment: trials, records, charts", "aner_coord.scaling.command"),
    "plan": ("probe the machines, predict plans, recommend one", "aner_coord.scaling.command"),
    "worker": ("serve as a worker on stdin/stdout (started by a coordinator)", "aner_worker.cli"),
}


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line on stderr and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_INVALID, f"aner: error: {message} (see `{self.prog} --help`)\n")


class _Version(argparse.Action):
    """`--version`, reading the package metadata only when asked (it costs ~20 ms)."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from aner_coord import __version__

        print(f"aner {__version__}")
        parser.exit()


def _part(command: str, kind: str) -> Callable[..., object]:
    module = importlib.import_module(COMMANDS[command][1])
    name = f"add_{command}_arguments" if kind == "add" else f"{command}_command"
    part: Callable[..., object] = getattr(module, name)
    return part


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; the flags of `command` alone (the one being run) are added, so that only
    its module is imported. Every command is listed in the help whatever."""
    parser = _Parser(prog="aner", description="Native parallel scientific computing.")
    parser.add_argument("--version", action=_Version, nargs=0, help="print the version and exit")
    top = parser.add_subparsers(dest="group", metavar="parallel", parser_class=_Parser)
    group = top.add_parser("parallel", help="reproducible parallel computations")
    sub = group.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (words, _module) in COMMANDS.items():
        parser_of_command = sub.add_parser(name, help=words, description=words)
        if name == command:
            _part(name, "add")(parser_of_command)
    return parser


def _coordinate_parser() -> argparse.ArgumentParser:
    """The detached coordinator's own entry (started by `--background`); never in any help."""
    parser = _Parser(prog="aner parallel coordinate")
    how = parser.add_mutually_exclusive_group(required=True)
    how.add_argument("--spec-json")
    how.add_argument("--resume-job")
    parser.add_argument("--ready-fd", type=int, required=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if argv is None:  # the `aner` program itself, not a caller of this function
        from aner_worker.startup import own_process

        own_process()
    try:
        return _main(args_list)
    finally:
        if argv is None:
            # The process ends next: with numba loaded, the collections of interpreter
            # shutdown would walk several hundred thousand objects (~0.15 s) to free memory
            # the exit frees anyway. Frozen objects are left to it.
            gc.freeze()


def _main(args_list: list[str]) -> int:
    try:
        if args_list[:2] == ["parallel", "coordinate"]:
            from aner_coord.cli.background import coordinate_command

            hidden = _coordinate_parser().parse_args(args_list[2:])
            return coordinate_command(hidden.spec_json, hidden.resume_job, hidden.ready_fd)
        named = args_list[1] if args_list[:1] == ["parallel"] and len(args_list) > 1 else None
        parser = build_parser(named if named in COMMANDS else None)
        args = parser.parse_args(args_list)
        if args.group is None or args.command is None:
            parser.parse_args([*args_list, "--help"])  # prints the help and exits 0
        code = _part(args.command, "run")(args)
        assert isinstance(code, int)
        return code
    except AnerError as exc:
        print(f"aner: {exc.render(cli_name)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
