"""What a plugin's code is, as the handshake and the manifest compare it: its distribution's
name and version and the SHA256 of each of its installed files (docs/contracts.md,
section 15).

The files are those its `RECORD` lists (as pip installed them), hashed as they are now on
disk, so a file edited in place after installation differs too; the distribution's own
metadata folder (`*.dist-info`, whose INSTALLER and direct_url.json say how it was
installed, not what runs) and anything outside its install root (console scripts, whose
first line names this machine's Python) take no part. An editable install's RECORD lists
only the hook that points at the author's source tree: there the files are the `.py` files
of the top-level packages its entry points name, found where the import system finds them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from importlib.metadata import Distribution
from pathlib import Path

from protocol import PluginIdentity


def _sha256(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def is_editable(dist: Distribution) -> bool:
    """Whether pip installed `dist` in editable mode (PEP 660's direct_url.json says so)."""
    text = dist.read_text("direct_url.json")
    if not text:
        return False
    try:
        return bool(json.loads(text).get("dir_info", {}).get("editable", False))
    except (ValueError, AttributeError):
        return False


def identity_of(dist: Distribution, modules: tuple[str, ...]) -> PluginIdentity:
    """The identity of `dist`, whose entry points name code in `modules` (dotted names); the
    wire's own type, so the handshake and the manifest compare the same thing
    (`protocol.connection.plugin_difference`, `plugin_digest`)."""
    name = dist.metadata["Name"] or "?"
    files = _source_files(modules) if is_editable(dist) else _recorded_files(dist)
    return PluginIdentity(name, dist.version, files)


def _recorded_files(dist: Distribution) -> dict[str, str]:
    files: dict[str, str] = {}
    for entry in dist.files or ():
        parts = entry.parts
        if parts[0] == ".." or any(p.endswith(".dist-info") or p == "__pycache__" for p in parts):
            continue
        located = Path(str(entry.locate()))
        if located.is_file():
            files[entry.as_posix()] = _sha256(located)
    return files


def _source_files(modules: tuple[str, ...]) -> dict[str, str]:
    files: dict[str, str] = {}
    for top in sorted({m.split(".")[0] for m in modules}):
        spec = importlib.util.find_spec(top)
        if spec is None:
            continue
        if spec.submodule_search_locations:
            for folder in spec.submodule_search_locations:
                root = Path(folder).parent
                for directory, folders, names in os.walk(folder):
                    folders[:] = sorted(f for f in folders if f != "__pycache__")
                    for filename in names:
                        if filename.endswith(".py"):
                            path = Path(directory) / filename
                            files[path.relative_to(root).as_posix()] = _sha256(path)
        elif spec.origin:
            path = Path(spec.origin)
            files[path.name] = _sha256(path)
    return files
