"""A registry by name whose entries are imported on first use.

The kernel registry (`aner_worker.kernels.KERNELS`) and the computation registry
(`aner_coord.computations.COMPUTATIONS`) are both of this kind: an entry is either an object
registered as it is, or the `module:Class` path of one, declared up front and instantiated
the first time someone asks for it. Listing the names imports nothing, so a command that only
needs to know what exists (`status`, a worker's handshake) never pays for numba or numpy,
and a worker loads the implementations its job names and no others.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterator, MutableMapping
from typing import Generic, TypeVar

V = TypeVar("V")


class LazyRegistry(MutableMapping[str, V], Generic[V]):
    """`populate`, if given, declares the registry's entries the first time anyone looks
    (the computations installed are read from their entry points then, not at import)."""

    def __init__(self, what: str, populate: Callable[[], None] | None = None) -> None:
        self._what = what
        self._populate = populate
        self._paths: dict[str, str | Callable[[], V]] = {}  # declared, not yet made
        self._items: dict[str, V] = {}
        self._order: dict[str, None] = {}  # every name, in the order it became known
        self._lock = threading.RLock()

    def ensure_declared(self) -> None:
        """Run `populate` if it has not run yet (what every lookup does first)."""
        if self._populate is not None:
            with self._lock:
                populate, self._populate = self._populate, None
                if populate is not None:
                    populate()

    def declare(self, name: str, path: str | Callable[[], V]) -> None:
        """`name` is the instance of `path` (`package.module:Class`, or a function that
        makes it), made when first asked for; a name already loaded keeps its object."""
        self.ensure_declared()
        if name not in self._items:
            self._paths[name] = path
        self._order[name] = None

    def loaded(self, name: str) -> bool:
        """Whether `name`'s implementation has been imported (for tests and diagnostics)."""
        self.ensure_declared()
        return name in self._items

    def __getitem__(self, name: str) -> V:
        self.ensure_declared()
        item = self._items.get(name)
        if item is not None:
            return item
        with self._lock:  # a worker's slot threads may all ask for a new kernel at once
            item = self._items.get(name)
            if item is not None:
                return item
            path = self._paths.get(name)
            if path is None:
                raise KeyError(name)
            item = self._make(name, path)
            self._items[name] = item
            del self._paths[name]
            return item

    def _make(self, name: str, path: str | Callable[[], V]) -> V:
        if not isinstance(path, str):
            return path()
        module, _, attribute = path.partition(":")
        try:
            factory: Callable[[], V] = getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError) as exc:
            raise ImportError(f"{self._what} {name!r}: cannot import {path}: {exc}") from exc
        return factory()

    def __setitem__(self, name: str, item: V) -> None:
        self.ensure_declared()
        self._paths.pop(name, None)
        self._items[name] = item
        self._order[name] = None

    def __delitem__(self, name: str) -> None:
        self.ensure_declared()
        if name not in self._order:
            raise KeyError(name)
        self._paths.pop(name, None)
        self._items.pop(name, None)
        del self._order[name]

    def __iter__(self) -> Iterator[str]:
        self.ensure_declared()
        return iter(list(self._order))

    def __len__(self) -> int:
        self.ensure_declared()
        return len(self._order)

    def __contains__(self, name: object) -> bool:
        self.ensure_declared()
        return name in self._order
