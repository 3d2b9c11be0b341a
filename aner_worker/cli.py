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


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def worker_command(args: argparse.Namespace) -> int:
    from aner_worker.worker import main

    return main(max_slots=args.max_slots)
