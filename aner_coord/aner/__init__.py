"""`aner`, the name a user imports: `import aner.parallel` is the Python API, and
`python -m aner` the `aner` command.

- `parallel`: `aner_coord.parallel` itself (`aner.parallel is aner_coord.parallel`);
- `testing`: `check_computation`, the conformance suite a plugin's tests call
  (`aner_coord.conformance`);
- `__main__`: `python -m aner`, the `aner` command.

This folder is installed as the top-level package `aner` (pyproject.toml, `packages.find`), so
that the repository's top level keeps its design: `protocol/`, `aner_worker/`, `aner_coord/`.
"""

from __future__ import annotations

import importlib
from typing import Any

# First of all: importing `aner_coord` makes sure that our own `protocol` and `aner_worker`
# are the ones imported, whatever files of those names lie in the user's working directory.
import aner_coord


def __getattr__(name: str) -> Any:
    # `aner.parallel` without importing it first, as `import aner; aner.parallel...` spells it;
    # only then, so that `python -m aner parallel inventory` does not load the whole API.
    if name == "parallel":
        return importlib.import_module(f"{__name__}.parallel")
    if name == "__version__":
        return aner_coord.__version__
    raise AttributeError(name)
