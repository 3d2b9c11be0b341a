"""The aner coordinator: execution contexts, the job machine, transports, job files, CLI.

The documented entry point for Python is `from aner_coord import parallel`.
"""

__version__ = "0.1.0"
