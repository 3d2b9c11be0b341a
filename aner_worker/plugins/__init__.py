"""Computations as installed plugins (docs/contracts.md, section 15): a distribution that
declares an entry point in the group "aner.computations" adds a computation by name, both
halves, with no edit to aner; aner's own are declared the same way.

- `declaration`: what an entry point names (`Plugin`: both halves by path; `Simulation`:
  the simulation kit's one numba function and its typed, bounded `Param`s);
- `discovery`: the entry points read once per process, and the one-line problems of the
  plugins left out;
- `identity`: a plugin's distribution, version and the SHA256 of its installed files, as
  the handshake and the manifest compare them;
- `builtins`: aner's own computations, as its `pyproject.toml` names them.
"""

from __future__ import annotations

from aner_worker.plugins.declaration import Declaration, Param, Plugin, Simulation
from aner_worker.plugins.discovery import (
    GROUP,
    Discovery,
    Found,
    discover,
    identities,
    identity,
    installed_identities,
)

__all__ = [
    "GROUP",
    "Declaration",
    "Discovery",
    "Found",
    "Param",
    "Plugin",
    "Simulation",
    "discover",
    "identities",
    "identity",
    "installed_identities",
]
