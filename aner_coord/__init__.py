"""The aner coordinator: execution contexts, the job machine, transports, job files, CLI.

The documented entry point for Python is `from aner_coord import parallel`.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    # `__version__` reads the package metadata, which costs a few tens of milliseconds: only
    # on demand, so `aner parallel status` and `inventory` do not pay for it.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("aner")
        except PackageNotFoundError:  # a source tree that was never installed
            return "0+unknown"
    raise AttributeError(name)
