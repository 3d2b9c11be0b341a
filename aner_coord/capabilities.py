"""What this build can do and where it came from: `aner --version --json`,
`aner parallel capabilities [--json] [--cluster FILE]` and `aner_coord.parallel.capabilities()`
(docs/contracts.md, section 17).

`provenance()` is the version, the protocol, the source fingerprint and the build
(`aner_worker.build`). `capabilities()` adds the computations with their contract identities
and options, the precisions, the transports usable here (and why the others are not), the
seed's flags with their reasons and, for a cluster file, each worker's own report, read from
its handshake: a worker is started, greeted and shut down, and runs no task.
"""

from __future__ import annotations

import importlib.util
import shutil
from typing import Any

SCHEMA = "aner-capabilities/1"
# The flags the project's seed names, each with why it holds or not.
FLAGS: dict[str, tuple[bool, str]] = {
    "analytic_training": (
        True,
        "the logistic-regression fixture aner-fixture/logistic/v1 (`aner parallel regression`), "
        "trained data-parallel and checked against its analytic reference",
    ),
    "distributed_neural_training": (
        True,
        "Dense classifiers aner-dense/v1 (`aner parallel train`): each step's batch is split "
        "into chunks computed by the workers, one optimizer update on the coordinator",
    ),
    "gpu": (
        False,
        "every kernel is a numba CPU kernel (nogil, cached); no GPU code is built or shipped, "
        "so a GPU on a worker is never used",
    ),
}


# The numeric stack of a build, as the machine identity names it (`aner_worker.machine`):
# `blas` is the library, version, kernel set (its core type) and threading layer.
NUMERIC_FIELDS = ("numpy", "numba", "blas", "blas_threads")


# `editable` travels as a string on the wire (`Welcome.build` is a dict of strings); the
# report gives JSON its own booleans, null where the build cannot tell.
_EDITABLE: dict[str, bool | None] = {"true": True, "false": False}


def build_of(build: dict[str, str], machine: dict[str, str]) -> dict[str, Any]:
    """A build as the report shows it: its own fields and its machine's numeric stack."""
    shown: dict[str, Any] = {**build, **{k: machine.get(k, "unknown") for k in NUMERIC_FIELDS}}
    if "editable" in shown:
        shown["editable"] = _EDITABLE.get(shown["editable"])
    return shown


def provenance() -> dict[str, Any]:
    """Version, protocol, source fingerprint and build of this installation."""
    from aner_coord import __version__
    from aner_worker.build import build_identity
    from aner_worker.contract import source_fingerprint
    from aner_worker.machine import machine_identity
    from protocol import PROTOCOL_VERSION

    return {
        "schema": SCHEMA,
        "aner": __version__,
        "protocol": PROTOCOL_VERSION,
        "fingerprint": source_fingerprint(),
        "build": build_of(build_identity(), machine_identity()),
    }


def transports() -> dict[str, dict[str, Any]]:
    """Each cluster-file transport: usable here or not, and why not."""
    from aner_coord import posix

    no_posix = posix.missing()

    def entry(reason: str | None) -> dict[str, Any]:
        return {"available": reason is None, "reason": reason}

    ssh = None if importlib.util.find_spec("asyncssh") is not None else "asyncssh is not installed"
    slurm = None if shutil.which("srun") is not None else "srun is not on PATH (no Slurm here)"
    posix_reason = None if no_posix is None else f"workers need POSIX: {no_posix}"
    return {
        "local": entry(posix_reason),
        "ssh": entry(posix_reason or ssh),
        "slurm": entry(posix_reason or slurm),
    }


def computations() -> list[dict[str, Any]]:
    """Each registered computation: its kind, contract identity and options, and for a
    plugin's its distribution, version and digest (docs/contracts.md, section 15)."""
    import msgspec

    from aner_coord.computations import COMPUTATIONS, contract_of, plugin_of, request_type_of
    from aner_worker.plugins import Simulation, identity
    from protocol.connection import plugin_digest

    out = []
    for kind in COMPUTATIONS:
        fields = msgspec.structs.fields(request_type_of(kind))
        found = plugin_of(kind)
        plugin = None
        if found is not None:
            own = identity(kind)
            plugin = {
                "distribution": found.distribution,
                "version": found.version,
                "digest": plugin_digest(own) if own else None,
                "kit": isinstance(found.declaration, Simulation),
            }
        out.append(
            {
                "kind": kind,
                "contract": contract_of(kind),
                "options": [field.name for field in fields],
                "plugin": plugin,
            }
        )
    return out


def capabilities(cluster: str | None = None) -> dict[str, Any]:
    """The whole report; with `cluster` (a cluster file) each worker's handshake report."""
    from aner_coord.kernelsets import bits_note
    from aner_worker.kernels.base import PRECISIONS

    report = provenance()
    workers = None if cluster is None else _workers(cluster)
    from aner_coord.computations import problems

    report.update(
        computations=computations(),
        problems=problems(),
        precisions=list(PRECISIONS),
        transports=transports(),
        **{name: value for name, (value, _) in FLAGS.items()},
        reasons={name: why for name, (_, why) in FLAGS.items()},
        workers=workers,
        # The kernel-set warning where the workers that answered report different BLAS
        # (docs/contracts.md, section 6, "Kernel sets"); None without --cluster or where not.
        bits=None
        if workers is None
        else bits_note({w["identity"]: w["machine"] for w in workers if not w["error"]}),
    )
    return report


def _workers(path: str) -> list[dict[str, Any]]:
    from aner_coord.admission import check_blas_environment
    from aner_coord.clusterfile import load_cluster_file
    from aner_coord.runner import run_sync

    config = load_cluster_file(path)
    check_blas_environment(config)
    return [run_sync(_worker(record)) for record in config.workers]


async def _worker(record: Any) -> dict[str, Any]:
    """One worker's report from its handshake, or the error that stopped it."""
    from aner_coord.errors import AnerError
    from aner_coord.job.link import connect
    from aner_worker.contract import source_fingerprint
    from protocol import CoordinatorConnection

    entry: dict[str, Any] = {
        "identity": record.identity,
        "transport": record.transport,
        "slots": record.slots,
    }
    connection = CoordinatorConnection(record.identity, record.slots, source_fingerprint(), ())
    try:
        link = await connect(record, connection)
    except AnerError as exc:
        return {**entry, "error": str(exc)}
    try:
        entry.update(
            fingerprint=source_fingerprint(),
            machine=dict(link.machine),
            build=build_of(dict(link.build), link.machine),
            kernels=list(link.kernels),
            precisions=list(link.precisions),
            host=link.host,  # docs/contracts.md, section 18
            error=None,
        )
        await link.transport.write(connection.shutdown("capabilities reported"))
    finally:
        await link.transport.close()
    return entry
