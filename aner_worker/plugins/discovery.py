"""Finding the computations installed: every entry point of the group "aner.computations"
(docs/contracts.md, section 15), aner's own among them, read once per process.

An entry point's name is its computation's; its object a `Plugin` or a `Simulation`
(`declaration`). Loading one imports only the module that holds the declaration. A plugin
that cannot be imported, declares something else, names a computation another distribution
already has, or whose code would come from somewhere its distribution does not hold (the
current directory, say) is left out and reported in one line naming its distribution;
aner's own computations come first, so no plugin can take or break their names.

Distributions are searched on `sys.path` without the current directory (`''`, `.` or the
working directory itself, where `python -m` and `python -c` put it): a folder a command
happens to start in, or a job directory, is never a source of code.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from aner_worker.plugins.declaration import NAME, Declaration, Plugin, Simulation
from aner_worker.plugins.identity import identity_of, is_editable
from protocol import PluginIdentity

GROUP = "aner.computations"
OWN = "aner"  # the distribution whose entry points are aner's own computations


@dataclass(frozen=True)
class Found:
    """One computation an installed distribution declares."""

    name: str
    distribution: str
    version: str
    declaration: Declaration
    dist: importlib.metadata.Distribution

    @property
    def builtin(self) -> bool:
        return self.distribution == OWN

    @property
    def modules(self) -> tuple[str, ...]:
        """The modules its declaration names (dotted), the declaration's own first."""
        d = self.declaration
        paths = (
            (d.kernel, d.computation, d.request, d.summary, d.progress)
            if isinstance(d, Plugin)
            else (d.function,)
        )
        return tuple(p.partition(":")[0] for p in paths if p)


@dataclass(frozen=True)
class Discovery:
    found: tuple[Found, ...]
    problems: tuple[str, ...]  # one line each, naming the distribution

    def get(self, name: str) -> Found | None:
        return next((f for f in self.found if f.name == name), None)

    def plugins(self) -> tuple[Found, ...]:
        """The computations of distributions other than aner."""
        return tuple(f for f in self.found if not f.builtin)


def trusted_path() -> list[str]:
    """`sys.path` without the current directory."""
    here = os.path.realpath(os.getcwd())
    return [p for p in sys.path if p not in ("", ".") and os.path.realpath(p) != here]


def _dist_name(dist: importlib.metadata.Distribution) -> str:
    return str(dist.metadata["Name"] or "?")


def _origin_problem(dist: importlib.metadata.Distribution, modules: tuple[str, ...]) -> str | None:
    """Why the code in `modules` would not come from `dist`, or None; nothing is imported
    to tell. An editable install points into its author's source tree, wherever that is."""
    if is_editable(dist) or _dist_name(dist) == OWN:  # aner's own: `aner_coord.shadowing`
        return None
    root = Path(str(dist.locate_file(""))).resolve()
    for top in sorted({m.split(".")[0] for m in modules}):
        spec = importlib.util.find_spec(top)
        where = None
        if spec is not None:
            where = spec.origin or next(iter(spec.submodule_search_locations or ()), None)
        if where is None:
            return f"its module {top} cannot be found"
        if not Path(where).resolve().is_relative_to(root):
            return (
                f"its module {top} would be imported from {where}, not from the installed "
                f"distribution in {root}: rename or remove that file"
            )
    return None


def _load(
    entry: importlib.metadata.EntryPoint, dist: importlib.metadata.Distribution
) -> Found | str:
    """The computation `entry` declares, or the one line that says why it is left out."""
    who = f"plugin {_dist_name(dist)} {dist.version}: computation {entry.name!r}"
    if not NAME.fullmatch(entry.name):
        return f"{who}: the name is not lowercase letters, digits and '-' (2 to 40)"
    problem = _origin_problem(dist, (entry.module,))
    if problem is not None:
        return f"{who}: {problem}"
    try:
        declaration = entry.load()
    except Exception as exc:  # a plugin's bug must not break aner's own computations
        return f"{who}: cannot import {entry.value}: {type(exc).__name__}: {exc}"
    if not isinstance(declaration, Plugin | Simulation):
        return (
            f"{who}: {entry.value} is a {type(declaration).__name__}, not an aner Plugin or "
            "Simulation (aner_worker.plugins)"
        )
    found = Found(entry.name, _dist_name(dist), dist.version, declaration, dist)
    problem = declaration.problem() or _origin_problem(dist, found.modules)
    if problem is not None:
        return f"{who}: {problem}"
    return found


def discover_in(path: list[str]) -> Discovery:
    """Every computation declared by the distributions found on `path`."""
    entries = []
    seen: set[str] = set()
    for dist in importlib.metadata.distributions(path=path):
        name = _dist_name(dist)
        if name in seen:  # the first on the path is the one imported
            continue
        seen.add(name)
        for entry in dist.entry_points:
            if entry.group == GROUP:
                entries.append((name != OWN, name, entry.name, entry, dist))
    # aner's own first, then by distribution; a distribution's in the order it lists them
    found: list[Found] = []
    problems: list[str] = []
    taken: dict[str, str] = {}
    for _, name, _, entry, dist in sorted(entries, key=lambda e: e[:2]):
        loaded = _load(entry, dist)
        if isinstance(loaded, str):
            problems.append(loaded)
            continue
        if loaded.name in taken:
            problems.append(
                f"plugin {name} {dist.version}: computation {loaded.name!r}: the name is "
                f"taken by {taken[loaded.name]}: rename its entry point"
            )
            continue
        taken[loaded.name] = name
        found.append(loaded)
    if OWN in seen and not any(f.builtin for f in found):
        problems.append(
            "aner's own computations are not declared: reinstall aner (pip install -e .)"
        )
    return Discovery(tuple(sorted(found, key=_rank)), tuple(problems))


def _rank(found: Found) -> tuple[int, int]:
    """aner's own in their order (`builtins.ORDER`), then the plugins as discovered."""
    from aner_worker.plugins.builtins import ORDER

    if found.builtin and found.name in ORDER:
        return (0, ORDER.index(found.name))
    return (1, 0)


@functools.cache
def discover() -> Discovery:
    """This process's computations (read once: a plugin installed later takes part in the
    next process)."""
    return discover_in(trusted_path())


@functools.cache
def identity(name: str) -> PluginIdentity | None:
    """The identity of plugin computation `name`'s distribution (None: aner's own, whose
    code the source fingerprint covers, or not a plugin)."""
    found = discover().get(name)
    if found is None or found.builtin:
        return None
    return identity_of(found.dist, found.modules)


def identities(kernels: tuple[str, ...]) -> tuple[PluginIdentity, ...]:
    """The identities of the plugins whose computations are among `kernels`, one each."""
    found = {i.distribution: i for i in (identity(k) for k in kernels) if i is not None}
    return tuple(found[name] for name in sorted(found))


def installed_identities() -> dict[str, PluginIdentity]:
    """Every installed plugin's identity, by distribution (what a worker offers)."""
    return {i.distribution: i for i in identities(tuple(f.name for f in discover().plugins()))}
