"""Reads the source-contract files of this installation and fingerprints them."""

from __future__ import annotations

import functools
from pathlib import Path

from protocol import fingerprint_sources

_ROOT = Path(__file__).resolve().parent.parent


@functools.cache
def source_fingerprint() -> str:
    return fingerprint_sources(lambda name: (_ROOT / name).read_bytes())
