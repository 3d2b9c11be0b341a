"""The `aner` command line: parse arguments into a frozen spec, call one function, map exit codes.

Heavy modules (numba, asyncio machinery) are imported only by the subcommands that need them,
so `aner parallel status` and `inventory` start fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from aner_coord.errors import EXIT_INVALID, AnerError


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line on stderr and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_INVALID, f"aner: error: {message} (see `{self.prog} --help`)\n")


def _positive_or_zero_int(text: str) -> int:
    try:
        return int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="aner", description="Native parallel scientific computing.")
    top = parser.add_subparsers(dest="group", required=True, parser_class=_Parser)
    par = top.add_parser("parallel", help="reproducible parallel computations")
    sub = par.add_subparsers(dest="command", required=True, parser_class=_Parser)

    inv = sub.add_parser("inventory", help="the CPUs this process may really use")
    inv.add_argument("--json", action="store_true", help="machine-readable output")

    def job_arguments(p: argparse.ArgumentParser, regression: bool) -> None:
        what = "rows" if regression else "samples"
        p.add_argument("--samples", type=_positive_or_zero_int, help=f"number of {what}")
        if regression:
            p.add_argument("--steps", type=_positive_or_zero_int, help="gradient steps")
            p.add_argument("--rate", type=_number, help="learning rate")
        p.add_argument("--seed", type=_positive_or_zero_int, help="seed in [0, 2**64)")
        p.add_argument(
            "--workers",
            type=_positive_or_zero_int,
            default=0,
            help="local workers (0: automatic, see inventory)",
        )
        p.add_argument(
            "--chunk",
            type=_positive_or_zero_int,
            default=65536,
            help=f"{what} per task (default 65536)",
        )
        p.add_argument("--cluster", metavar="FILE", help="run on the workers of this cluster file")
        p.add_argument("--output", metavar="DIR", help="job directory to create (must not exist)")
        p.add_argument("--background", action="store_true", help="detach; watch with `status`")
        p.add_argument("--quiet", action="store_true", help="print nothing on success")

    run = sub.add_parser("run", help="Monte Carlo estimate of pi")
    job_arguments(run, regression=False)
    run.add_argument("--spec", metavar="FILE", help="run the job described by a TOML spec file")
    reg = sub.add_parser("regression", help="the logistic-regression training fixture")
    job_arguments(reg, regression=True)

    st = sub.add_parser("status", help="report a job directory's state")
    st.add_argument("--job", required=True, metavar="DIR")
    st.add_argument("--json", action="store_true")
    st.add_argument("--watch", action="store_true", help="follow the job until it ends")

    ca = sub.add_parser("cancel", help="ask a running job to stop")
    ca.add_argument("--job", required=True, metavar="DIR")

    wk = sub.add_parser(
        "worker", help="serve as a worker on stdin/stdout (started by a coordinator)"
    )
    wk.add_argument("--stdio", action="store_true", required=True)

    co = sub.add_parser("coordinate", help=argparse.SUPPRESS)
    co.add_argument("--spec-json", required=True)
    co.add_argument("--ready-fd", type=int, required=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _dispatch(args)
    except AnerError as exc:
        print(f"aner: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


def _dispatch(args: argparse.Namespace) -> int:
    command = args.command
    if command == "inventory":
        from aner_coord.commands import inventory_command

        return inventory_command(as_json=args.json)
    if command in ("run", "regression"):
        from aner_coord.commands import job_command

        return job_command(args)
    if command == "status":
        from aner_coord.monitor import status_command

        return status_command(args.job, as_json=args.json, watch=args.watch)
    if command == "cancel":
        from aner_coord.monitor import cancel_command

        return cancel_command(args.job)
    if command == "worker":
        from aner_worker.worker import main as worker_main

        return worker_main()
    if command == "coordinate":
        from aner_coord.background import coordinate_command

        return coordinate_command(args.spec_json, args.ready_fd)
    raise AssertionError(command)


if __name__ == "__main__":
    sys.exit(main())
