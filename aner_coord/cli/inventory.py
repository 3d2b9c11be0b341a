"""`aner parallel inventory`: the CPUs and memory this process may really use (docs/contracts.md,
section 4)."""

from __future__ import annotations

import argparse
import sys


def add_inventory_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--json", action="store_true", help="machine-readable output (docs/contracts.md, section 4)"
    )


def inventory_command(args: argparse.Namespace) -> int:
    import msgspec

    from aner_coord.localplan import choice_lines, choices_dict
    from aner_worker.inventory import current, format_table

    inv = current()
    if args.json:
        report = {**inv.to_dict(), "local_execution": choices_dict(inv.auto_workers)}
        sys.stdout.buffer.write(msgspec.json.format(msgspec.json.encode(report)) + b"\n")
    else:
        print(format_table(inv))
        print("\n".join(choice_lines(inv.auto_workers)))
    return 0
