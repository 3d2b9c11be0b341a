"""`aner parallel worker --stdio`: the command a coordinator starts on each worker machine."""

from __future__ import annotations

import argparse


def add_worker_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--stdio", action="store_true", required=True, help="speak the frames on stdin/stdout"
    )


def worker_command(args: argparse.Namespace) -> int:
    from aner_worker.worker import main

    return main()
