"""Our own top-level packages, `protocol` and `aner_worker`, whatever a user's files are named.

The working directory (or a script's folder) comes first on `sys.path`, so a user's own
`protocol.py` or `aner_worker.py` there would be imported in place of ours, and aner would
break far from the cause. `pin()`, run by `aner_coord/__init__.py` before anything else of
ours is imported, puts a finder at the head of `sys.meta_path` that answers for these two
names only, with the packages installed beside `aner_coord`; their submodules then resolve
inside them, and `sys.path` is never touched. The finder imports nothing itself, so a command
that needs neither package (`aner parallel status`) still loads neither.

A foreign module of either name imported before aner cannot be replaced without breaking
whoever imported it: `pin()` refuses it in one line, naming the file that shadows the package
and what to rename.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

# Where this installation's top-level packages lie: beside `aner_coord` (site-packages, or the
# source tree of an editable install).
ROOT = Path(__file__).resolve().parent.parent
OWN = ("protocol", "aner_worker")


class OwnPackages(importlib.abc.MetaPathFinder):
    """Finds `protocol` and `aner_worker` in this installation, and nothing else."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in OWN:
            return None
        folder = ROOT / fullname
        return importlib.util.spec_from_file_location(
            fullname, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )


def pin() -> None:
    """Make `protocol` and `aner_worker` ours from now on; refuse a foreign one already
    imported (ImportError)."""
    for name in OWN:
        module = sys.modules.get(name)
        if module is not None and not _is_ours(module, name):
            where = getattr(module, "__file__", None) or ", ".join(getattr(module, "__path__", []))
            raise ImportError(
                f"{where} shadows aner's own package `{name}` ({ROOT / name}) and was imported "
                f"before aner: rename {where}"
            )
    if not any(isinstance(finder, OwnPackages) for finder in sys.meta_path):
        sys.meta_path.insert(0, OwnPackages())


def _is_ours(module: ModuleType, name: str) -> bool:
    file = getattr(module, "__file__", None)
    return file is not None and Path(file).resolve() == (ROOT / name / "__init__.py").resolve()
