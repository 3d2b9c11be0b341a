"""`aner parallel worker --stdio`: the command a coordinator starts on each worker machine."""

from __future__ import annotations

import argparse


def add_worker_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--stdio", action="store_true", required=True, help="speak the frames on stdin/stdout"
    )
    p.add_argument(
        "--max-slots",
        type=_positive,
        default=None,
        metavar="N",
        help="the CPU slots this host grants its coordinators: a Hello assigning more is "
        "refused, and every computing task holds one of this host's first N lease slots "
        "(an authorized_keys forced command can fix it)",
    )
    p.add_argument(
        "--blas-env",
        type=_blas_setting,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="OPENBLAS_CORETYPE or OPENBLAS_L2_SIZE to compute with, empty for unset, set "
        "before numpy loads OpenBLAS (default: none, the environment as it is; the "
        "coordinator passes its own, docs/contracts.md, section 5)",
    )


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _blas_setting(text: str) -> tuple[str, str]:
    from aner_worker.blasenv import parse_setting

    try:
        return parse_setting(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def worker_command(args: argparse.Namespace) -> int:
    from aner_worker import blasenv

    # Before the worker module, which imports the kernels and so numpy and its OpenBLAS.
    blasenv.apply(args.blas_env)
    from aner_worker.worker import main

    return main(max_slots=args.max_slots)
