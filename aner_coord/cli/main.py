"""The `aner` command line: parse arguments into a request, call one function, map exit codes.

Heavy modules (numba, asyncio machinery) are imported only by the subcommands that need
them, so `aner parallel status` and `inventory` start fast. Errors are one line on stderr
naming the flag to change; no traceback for a user's mistake.
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Sequence
from typing import NoReturn

import msgspec

from aner_coord.cli.arguments import add_execution_arguments, count, fraction, number
from aner_coord.errors import EXIT_INVALID, AnerError, cli_name


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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="aner", description="Native parallel scientific computing.")
    parser.add_argument("--version", action=_Version, nargs=0, help="print the version and exit")
    top = parser.add_subparsers(dest="group", metavar="parallel", parser_class=_Parser)
    par = top.add_parser("parallel", help="reproducible parallel computations")
    sub = par.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    inv = sub.add_parser("inventory", help="the CPUs this process may really use")
    inv.add_argument("--json", action="store_true", help="machine-readable output")

    def job_arguments(p: argparse.ArgumentParser, regression: bool) -> None:
        what = "rows" if regression else "samples"
        p.add_argument("--samples", type=count, help=f"number of {what} (1e9, 1,000,000...)")
        if regression:
            p.add_argument("--steps", type=count, help="gradient steps")
            p.add_argument("--rate", type=number, help="learning rate")
        p.add_argument("--seed", type=count, help="seed in [0, 2**64)")
        add_execution_arguments(p, what, 65536)
        p.add_argument(
            "--audit",
            type=fraction,
            default=0.0,
            metavar="FRACTION",
            help="recompute this fraction of chunks on the coordinator and fail on any mismatch",
        )
        p.add_argument(
            "--resume",
            action="store_true",
            help="if --output already holds this same job, resume it instead of refusing "
            "(for units that restart on failure)",
        )

    run = sub.add_parser("run", help="Monte Carlo estimate of pi")
    job_arguments(run, regression=False)
    run.add_argument("--spec", metavar="FILE", help="run the job described by a TOML spec file")
    reg = sub.add_parser("regression", help="the logistic-regression training fixture")
    job_arguments(reg, regression=True)

    from aner_coord.cli.dense import add_train_arguments

    train = sub.add_parser("train", help="train a Dense classifier (SPEC section 9)")
    add_train_arguments(train)
    pr = sub.add_parser("predict", help="labels and class probabilities from a trained model")
    pr.add_argument("--model", required=True, metavar="JOBDIR", help="a train job's directory")
    pr.add_argument("--data", required=True, metavar="FILE", help="CSV or NPZ feature rows")
    pr.add_argument("--output", metavar="FILE", help="CSV to write (default: standard output)")

    st = sub.add_parser("status", help="report a job directory's state")
    st.add_argument("--job", required=True, metavar="DIR")
    st.add_argument("--json", action="store_true")
    st.add_argument("--watch", action="store_true", help="follow the job until it ends")

    ca = sub.add_parser("cancel", help="ask a running job to stop")
    ca.add_argument("--job", required=True, metavar="DIR")

    re_ = sub.add_parser("resume", help="continue a job whose coordinator is gone, from its ledger")
    re_.add_argument("--job", required=True, metavar="DIR")
    re_.add_argument("--background", action="store_true", help="detach; watch with `status`")
    re_.add_argument("--quiet", action="store_true", help="print nothing on success")

    sc = sub.add_parser("scaling", help="timed scaling experiment: trials, records, charts")
    sc.add_argument("--experiment", metavar="FILE.toml", help="the experiment to run")
    sc.add_argument("--auto", action="store_true", help="the standard matrix (see README)")
    sc.add_argument("--cluster", metavar="FILE", help="with --auto: its records alone and all")
    sc.add_argument("--samples", type=count, help="with --auto: Monte Carlo samples (2e8)")
    sc.add_argument("--seed", type=count, default=1, help="with --auto: seed (1)")
    sc.add_argument("--repetitions", type=count, default=3, help="with --auto: at least 3")
    sc.add_argument("--output", required=True, metavar="DIR", help="directory to create")
    sc.add_argument("--registry", metavar="FILE", help="configuration registry to use")
    sc.add_argument("--no-predict", action="store_true", help="skip the probe and predictions")

    pl = sub.add_parser("plan", help="probe the machines, predict plans, recommend one")
    pl.add_argument("--cluster", metavar="FILE", help="probe the workers of this cluster file")
    pl.add_argument("--samples", type=count, help="a Monte Carlo job of this many samples")
    pl.add_argument("--experiment", metavar="FILE.toml", help="the computation of an experiment")
    pl.add_argument("--json", action="store_true", help="machine-readable output")
    pl.add_argument("--save", default="probe.json", metavar="FILE", help="probe file to write")

    wk = sub.add_parser(
        "worker", help="serve as a worker on stdin/stdout (started by a coordinator)"
    )
    wk.add_argument("--stdio", action="store_true", required=True)
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
        parser = build_parser()
        args = parser.parse_args(args_list)
        if args.group is None or args.command is None:
            parser.parse_args([*args_list, "--help"])  # prints the help and exits 0
        return _dispatch(args)
    except AnerError as exc:
        print(f"aner: {exc.render(cli_name)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


def _dispatch(args: argparse.Namespace) -> int:
    command = args.command
    if command == "inventory":
        from aner_worker.inventory import current, format_table

        inv = current()
        if args.json:
            sys.stdout.buffer.write(msgspec.json.format(msgspec.json.encode(inv.to_dict())) + b"\n")
        else:
            print(format_table(inv))
        return 0
    if command in ("run", "regression"):
        from aner_coord.cli.jobs import job_command

        return job_command(args)
    if command == "train":
        from aner_coord.cli.dense import train_command

        return train_command(args)
    if command == "predict":
        from aner_coord.cli.dense import predict_command

        return predict_command(args.model, args.data, args.output)
    if command == "status":
        from aner_coord.cli.monitor import status_command

        return status_command(args.job, as_json=args.json, watch=args.watch)
    if command == "cancel":
        from aner_coord.cli.monitor import cancel_command

        return cancel_command(args.job)
    if command == "resume":
        from aner_coord.cli.jobs import resume_command

        return resume_command(args)
    if command == "scaling":
        from aner_coord.scaling.command import scaling_command

        return scaling_command(
            experiment_file=args.experiment,
            auto=args.auto,
            cluster=args.cluster,
            samples=args.samples,
            seed=args.seed,
            repetitions=args.repetitions,
            output=args.output,
            registry_file=args.registry,
            predict=not args.no_predict,
        )
    if command == "plan":
        from aner_coord.scaling.command import plan_command

        return plan_command(
            cluster=args.cluster,
            samples=args.samples,
            experiment_file=args.experiment,
            as_json=args.json,
            save=args.save,
        )
    if command == "worker":
        from aner_worker.worker import main as worker_main

        return worker_main()
    raise AssertionError(command)


if __name__ == "__main__":
    sys.exit(main())
