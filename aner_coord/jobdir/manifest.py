"""`run-manifest.json`: written once, before any work (docs/contracts.md, section 7).

Schema `aner-manifest/3`: the request, the stream or fixture identity, the execution plan
(worker identities and slots, never endpoints), the local inventory, the `aner` version and
the source fingerprint; since schema 3 also the job's identity (`job`: random, 32 hex
digits, carried by every record of its ledger) and the SHA256 of `request.json` as it was
written, which `resume` holds the job directory to (`aner_coord.job.resume`). Files of
schemas 1 and 2 keep reading, without those two (checked-in examples in tests/data). Since
schema 4 also `sources`: the SHA256 of source files, which `resume` holds the installation to;
older files read without it. Schema 4 recorded the files of a rule that named the code
computing numbers by where it lived, and missed some (the ledger's replay among them); since
schema 5 `sources` names every source file of aner's packages (`aner_coord.jobdir.sources`).
`plugins` (appended with a default) records the plugin a job's computation comes from.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

import msgspec

from aner_coord.jobdir.sources import first_difference

MANIFEST_SCHEMA = "aner-manifest/5"

# The schemas whose `sources` name some of the installation's files (4) or none (1 to 3).
_PARTIAL_SOURCES = frozenset(f"aner-manifest/{n}" for n in (1, 2, 3, 4))


class PluginRecord(msgspec.Struct, frozen=True):
    version: str
    files: dict[str, str]


class Manifest(msgspec.Struct, frozen=True):
    schema: str
    computation: str
    identity: str
    request: dict[str, Any]
    plan: dict[str, Any]
    inventory: dict[str, Any]
    aner_version: str
    source_fingerprint: str
    created_at: float
    pid: int
    audit: float = 0.0
    job: str = ""  # the job's identity, as its ledger's records carry it (hex)
    request_sha256: str = ""  # of request.json's bytes: "sha256:..."
    # Path -> "sha256:..." of every source file of aner's packages (schema 4: some of them).
    sources: dict[str, str] = msgspec.field(default_factory=dict)
    # The plugin the job's computation comes from (docs/contracts.md, section 15), by
    # distribution: its version and files (path -> "sha256:..."). Empty for aner's own.
    plugins: dict[str, PluginRecord] = msgspec.field(default_factory=dict)


def manifest_of(job: Any, *, job_key: bytes = b"", request_sha256: str = "") -> Manifest:
    """The manifest of an admitted `admission.Job` whose identity is `job_key` and whose
    request.json has that SHA256."""
    from aner_coord import __version__
    from aner_coord.jobdir.sources import installed_result_sources
    from aner_worker.contract import source_fingerprint
    from aner_worker.inventory import current
    from aner_worker.plugins import identities

    return Manifest(
        schema=MANIFEST_SCHEMA,
        computation=job.kind,
        identity=job.admitted.identity,
        request=job.admitted.describe,
        plan={
            **job.describe_execution(),
            "chunks": -(-job.admitted.items // job.chunk),
            "passes": job.admitted.passes,
        },
        inventory=current().to_dict(),
        aner_version=__version__,
        source_fingerprint=source_fingerprint(),
        created_at=time.time(),
        pid=os.getpid(),
        audit=job.request.audit,
        job=job_key.hex(),
        request_sha256=request_sha256,
        sources=installed_result_sources(),
        plugins={p.distribution: PluginRecord(p.version, p.files) for p in identities((job.kind,))},
    )


def sources_difference(manifest: Manifest, installed: Mapping[str, str]) -> str | None:
    """How the installation whose `sources` are `installed` differs from the one that began
    the job, in a few words (None: not at all). An older manifest holds the installation to
    the files it recorded: those may not differ or be gone, and a file it did not name (all of
    them before schema 4) is no difference."""
    if manifest.schema in _PARTIAL_SOURCES:
        installed = {name: installed[name] for name in manifest.sources if name in installed}
    return first_difference(manifest.sources, installed)


def decode_manifest(data: bytes) -> Manifest:
    manifest = msgspec.json.decode(data, type=Manifest)
    if manifest.computation == "fixture":  # schema 1 before the names were unified
        manifest = msgspec.structs.replace(manifest, computation="regression")
    return manifest


def encode_manifest(manifest: Manifest) -> bytes:
    return msgspec.json.format(msgspec.json.encode(manifest), indent=2) + b"\n"
