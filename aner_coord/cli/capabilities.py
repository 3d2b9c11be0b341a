"""`aner parallel capabilities`: what this build can do and where it came from, and with
`--cluster` each worker's own report from its handshake (`aner_coord.capabilities`)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from aner_coord.errors import EXIT_FAILED, EXIT_OK


def add_capabilities_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--cluster", metavar="FILE", help="also greet each worker of this cluster file")


def capabilities_command(args: argparse.Namespace) -> int:
    from aner_coord.capabilities import capabilities

    report = capabilities(args.cluster)
    print(json.dumps(report, indent=2) if args.json else "\n".join(_lines(report)))
    failed = [w for w in report["workers"] or () if w.get("error")]
    return EXIT_FAILED if failed else EXIT_OK


def _lines(report: dict[str, Any]) -> list[str]:
    build = report["build"]
    lines = [
        f"aner         {report['aner']} (protocol {report['protocol']})",
        f"fingerprint  {report['fingerprint']}",
        f"build        install {build['install_hash']}, editable {_editable(build['editable'])}",
        f"numeric      numpy {build['numpy']}, numba {build['numba']}, BLAS {build['blas']} "
        f"({build['blas_threads']} threads)",
        f"precisions   {', '.join(report['precisions'])}",
    ]
    for entry in report["computations"]:
        plugin = entry["plugin"]
        origin = (
            ""
            if plugin is None
            else (f" (plugin {plugin['distribution']} {plugin['version']}, {plugin['digest']})")
        )
        lines.append(f"computation  {entry['kind']:<12} {entry['contract']}{origin}")
    for problem in report["problems"]:
        lines.append(f"left out     {problem}")
    for name, transport in report["transports"].items():
        state = "available" if transport["available"] else f"unavailable: {transport['reason']}"
        lines.append(f"transport    {name:<12} {state}")
    for flag, why in report["reasons"].items():
        lines.append(f"{flag:<28} {str(report[flag]).lower()}: {why}")
    for worker in report["workers"] or ():
        if worker["error"]:
            lines.append(f"worker       {worker['identity']}: {worker['error']}")
            continue
        b, m = worker["build"], worker["machine"]
        lines.append(
            f"worker       {worker['identity']} ({worker['transport']}, {worker['slots']} "
            f"slots): {m.get('cpu_model', '?')}, numpy {b.get('numpy', '?')}, BLAS "
            f"{b.get('blas', '?')}, kernels "
            f"{', '.join(worker['kernels'])}, precisions {', '.join(worker['precisions'])}"
        )
    if report.get("bits"):
        lines.append(f"kernel sets  {report['bits']}")
    return lines


def _editable(value: bool | None) -> str:
    return "unknown" if value is None else str(value).lower()
