"""`run-manifest.json`: written once, before any work (SPEC section 7).

Schema `aner-manifest/2`: the request, the stream or fixture identity, the execution plan
(worker identities and slots, never endpoints), the local inventory, the `aner` version and
the source fingerprint. Files of schema 1 keep reading (checked-in examples in tests/data).
"""

from __future__ import annotations

import os
import time
from typing import Any

import msgspec

MANIFEST_SCHEMA = "aner-manifest/2"


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


def manifest_of(job: Any) -> Manifest:
    """The manifest of an admitted `admission.Job`."""
    from aner_coord import __version__
    from aner_worker.contract import source_fingerprint
    from aner_worker.inventory import current

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
    )


def decode_manifest(data: bytes) -> Manifest:
    manifest = msgspec.json.decode(data, type=Manifest)
    if manifest.computation == "fixture":  # schema 1 before the names were unified
        manifest = msgspec.structs.replace(manifest, computation="regression")
    return manifest


def encode_manifest(manifest: Manifest) -> bytes:
    return msgspec.json.format(msgspec.json.encode(manifest), indent=2) + b"\n"
