"""The aner coordinator: execution contexts, the job machine, transports, job files, CLI.

The documented entry point for Python is `from aner_coord import parallel`.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("aner")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
