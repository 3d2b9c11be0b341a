"""The `aner` command line: one parser, built here from the table of commands; each command's
flags and function live in its own module (`add_<command>_arguments`, `<command>_command`).

Only the module of the command being run is imported, so `aner parallel status` and
`inventory` start fast; heavy modules (numba, numpy, asyncio machinery) are imported by the
commands that need them. Errors are one line on stderr naming the flag to change; no
traceback for a user's mistake.

How every command ends (the `aner` program; `main(argv)` called from Python changes nothing):

- **A reader that goes away** (`aner ... | head -1`, a closed pipe): the first write that
  finds standard output's reader gone points it at /dev/null, so that nothing later, the
  flush at exit included, can fail. A command that writes once finishes its work and exits
  with its own status, exactly as if its output had been read (a completed job still leaves
  `result.json` and exits 0; `status` of an offline job exits 5). A command that streams
  (one given `--watch`) is told, by the BrokenPipeError of that write, and stops then. No
  traceback, no "Exception ignored", never exit 120 or death by SIGPIPE.
- **An OS refusal** that a command did not turn into its own message (a file or directory it
  could not read or write: permission denied, read-only file system, no such file) is one
  line, `aner: <what the system said>: <path>`, exit 2.
- **A bug** (any other exception) is one line that says it is an internal error, names the
  exception and asks for ANER_DEBUG=1, with which the traceback is printed instead; exit 1,
  a status no documented outcome uses.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import io
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from aner_coord.errors import EXIT_INVALID, AnerError, bounded_message, cli_name
from aner_coord.interrupts import release

EXIT_INTERNAL = 1  # a bug in aner: no documented outcome uses it
SHELLS = ("bash", "zsh")  # what `aner completion` writes for (shtab's shells, less tcsh)
DEBUG_ENV = "ANER_DEBUG"
# These speak their own protocol on standard output (frames, a readiness handshake) or have
# none: their output is never guarded.
_UNGUARDED = {"worker", "coordinate"}
# These take SIGINT from `aner_coord.interrupts`' hold themselves: those that run a job (or
# trials of jobs) here once their cancel handler is in place (Ctrl-C cancels the job), and
# the worker, which ignores it (its coordinator stops it in order).
_TAKE_SIGINT = {"run", "regression", "train", "search", "cv", "resume", "scaling", "worker"}

# command: (help, the module that holds add_<command>_arguments and <command>_command)
COMMANDS: dict[str, tuple[str, str]] = {
    "inventory": ("the CPUs this process may really use", "aner_coord.cli.inventory"),
    "capabilities": (
        "what this build can do and where it came from",
        "aner_coord.cli.capabilities",
    ),
    "run": (
        "Monte Carlo estimate of pi, or an installed computation (--computation)",
        "aner_coord.cli.jobs",
    ),
    "regression": ("the logistic-regression training fixture", "aner_coord.cli.jobs"),
    "train": ("train a Dense classifier (docs/contracts.md)", "aner_coord.cli.dense"),
    "predict": ("labels and class probabilities from a trained model", "aner_coord.cli.dense"),
    "search": (
        "model search: Dense candidates cross-validated, the best refit",
        "aner_coord.cli.search",
    ),
    "cv": ("K-fold cross-validation of one Dense configuration", "aner_coord.cli.search"),
    "status": ("report a job directory's state", "aner_coord.cli.monitor"),
    "timeline": ("where a job's time went: summary, Gantt chart, trace", "aner_coord.cli.timeline"),
    "jobs": ("this user's jobs on this host: queued, running, finished", "aner_coord.cli.joblist"),
    "cancel": ("ask a running job to stop", "aner_coord.cli.monitor"),
    "resume": ("continue a job whose coordinator is gone, from its ledger", "aner_coord.cli.jobs"),
    "scaling": ("timed scaling experiment: trials, records, charts", "aner_coord.cli.scaling"),
    "plan": ("probe the machines, predict plans, recommend one", "aner_coord.cli.scaling"),
    "worker": ("serve as a worker on stdin/stdout (started by a coordinator)", "aner_worker.cli"),
}


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line on stderr and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_INVALID, f"aner: error: {message} (see `{self.prog} --help`)\n")


def _part(command: str, kind: str) -> Callable[..., object]:
    module = importlib.import_module(COMMANDS[command][1])
    name = f"add_{command}_arguments" if kind == "add" else f"{command}_command"
    part: Callable[..., object] = getattr(module, name)
    return part


def _overview() -> str:
    """Every command with its one line, for `aner --help`."""
    width = max(map(len, COMMANDS))
    lines = [f"  aner parallel {name:<{width}}  {words}" for name, (words, _) in COMMANDS.items()]
    lines += [
        f"  aner {'completion bash|zsh':<{width + 9}}  a shell completion script",
        f"  aner {'manpage':<{width + 9}}  the manual page (troff), from this parser",
    ]
    return "commands:\n" + "\n".join(lines) + "\n\n`aner parallel COMMAND --help` for each."


def build_parser(command: str | None = None, *, every: bool = False) -> argparse.ArgumentParser:
    """The parser; the flags of `command` alone (the one being run) are added, so that only
    its module is imported (`every`: the flags of every command, for the reference, the
    completion and the manual page). Every command is listed in the help whatever."""
    parser = _Parser(
        prog="aner",
        description="Native parallel scientific computing.",
        epilog=_overview(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument(
        "--json",
        dest="version_json",
        action="store_true",
        help="with --version: the version, source fingerprint and build, as JSON",
    )
    top = parser.add_subparsers(dest="group", metavar="GROUP", parser_class=_Parser)
    group = top.add_parser("parallel", help="reproducible parallel computations")
    sub = group.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (words, _module) in COMMANDS.items():
        parser_of_command = sub.add_parser(name, help=words, description=words)
        if name == command or every:
            _part(name, "add")(parser_of_command)
    shells = top.add_parser("completion", help="print a shell completion script")
    shells.add_argument("shell", choices=SHELLS, help="the shell to complete for")
    top.add_parser("manpage", help="print the manual page (troff), made from this parser")
    return parser


def _coordinate_parser() -> argparse.ArgumentParser:
    """The detached coordinator's own entry (started by `--background`); never in any help."""
    parser = _Parser(prog="aner parallel coordinate")
    how = parser.add_mutually_exclusive_group(required=True)
    how.add_argument("--spec-json")
    how.add_argument("--resume-job")
    parser.add_argument("--ready-fd", type=int, required=True)
    parser.add_argument("--no-wait", action="store_true")
    parser.add_argument("--strict-bits", action="store_true")  # with --resume-job
    return parser


class _ReaderGuard(io.RawIOBase):
    """Standard output's file descriptor, written directly; see the module docstring. On
    EPIPE the descriptor is pointed at /dev/null and the write counts as done, unless this
    is the first such write of a streaming command, which is told by the BrokenPipeError."""

    def __init__(self, fd: int, *, streaming: bool) -> None:
        super().__init__()
        self._fd = fd
        self._tell = streaming
        self.reader_gone = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        try:
            return os.write(self._fd, data)
        except BrokenPipeError:
            if not self.reader_gone:
                self.reader_gone = True
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, self._fd)
                os.close(devnull)
            if self._tell:
                self._tell = False
                raise
            return len(data)


def _guard_stdout(streaming: bool) -> None:
    """Put `_ReaderGuard` under sys.stdout, with the same encoding and buffering."""
    old = sys.stdout
    if old is None:
        return
    try:
        fd = old.fileno()
    except (OSError, ValueError, io.UnsupportedOperation):
        return  # not a file (redirected in-process): nothing to guard
    old.flush()
    guard = _ReaderGuard(fd, streaming=streaming)
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(guard),
        encoding=old.encoding,
        errors=old.errors,
        line_buffering=bool(getattr(old, "line_buffering", False)),
    )


def _say(line: str) -> None:
    """One line on stderr, if anyone still reads it."""
    with contextlib.suppress(OSError):
        print(line, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    program = argv is None  # the `aner` program itself, not a caller of this function
    if program:
        from aner_worker.startup import own_process

        own_process()
        command = args_list[1] if args_list[:1] == ["parallel"] and len(args_list) > 1 else None
        if command not in _UNGUARDED:
            _guard_stdout(streaming="--watch" in args_list)
    try:
        code = _main(args_list)
        if program and sys.stdout is not None:
            sys.stdout.flush()  # here, not at exit, where a failure could only be ignored
        return code
    finally:
        if program:
            # The process ends next: with numba loaded, the collections of interpreter
            # shutdown would walk several hundred thousand objects (~0.15 s) to free memory
            # the exit frees anyway. Frozen objects are left to it.
            gc.freeze()


def _main(args_list: list[str]) -> int:
    try:
        if args_list[:2] == ["parallel", "coordinate"]:
            from aner_coord.cli.background import coordinate_command

            hidden = _coordinate_parser().parse_args(args_list[2:])
            release()
            return coordinate_command(
                hidden.spec_json,
                hidden.resume_job,
                hidden.ready_fd,
                wait=not hidden.no_wait,
                strict_bits=hidden.strict_bits,
            )
        named = args_list[1] if args_list[:1] == ["parallel"] and len(args_list) > 1 else None
        parser = build_parser(named if named in COMMANDS else None)
        args = parser.parse_args(args_list)
        if args.version or args.version_json:
            return _version(parser, args.version, args.version_json)
        if args.group in ("completion", "manpage"):
            from aner_coord.cli.shell import completion, manpage

            full = build_parser(every=True)
            print(completion(full, args.shell) if args.group == "completion" else manpage(full))
            return 0
        if args.group is None or args.command is None:
            parser.parse_args([*args_list, "--help"])  # prints the help and exits 0
        if args.command not in _TAKE_SIGINT or getattr(args, "background", False):
            release()  # a held Ctrl-C ends this command now, as KeyboardInterrupt (130)
        code = _part(args.command, "run")(args)
        assert isinstance(code, int)
        return code
    except AnerError as exc:
        # One bounded line, as a job's failure is (docs/contracts.md, section 7).
        _say(f"aner: {bounded_message(exc.render(cli_name), None)}")
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        _say(f"aner: {_describe_os_error(exc)}")
        return EXIT_INVALID
    except Exception as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        _say(
            f"aner: internal error (a bug in aner, not in your request): "
            f"{type(exc).__name__}: {_first_line(exc)}; run again with {DEBUG_ENV}=1 for the "
            "traceback, and please report it"
        )
        return EXIT_INTERNAL


def _version(parser: argparse.ArgumentParser, version: bool, as_json: bool) -> int:
    """`--version`, reading the package metadata only when asked (it costs ~20 ms); with
    `--json`, the provenance report (`aner_coord.capabilities`)."""
    if not version:
        parser.error("--json before the command goes with --version")
    if as_json:
        import json

        from aner_coord.capabilities import provenance

        print(json.dumps(provenance(), indent=2))
    else:
        from aner_coord import __version__

        print(f"aner {__version__}")
    return 0


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    return line[:300] + ("..." if len(line) > 300 or "\n" in text else "")


def _describe_os_error(exc: OSError) -> str:
    """What the system refused, and where: `strerror: path` (`-> other` for a rename)."""
    what = exc.strerror or _first_line(exc) or type(exc).__name__
    where = [os.fsdecode(name) for name in (exc.filename, exc.filename2) if name is not None]
    return f"{what}: {' -> '.join(where)}" if where else what


if __name__ == "__main__":
    sys.exit(main())
