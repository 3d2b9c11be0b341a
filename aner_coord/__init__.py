"""The aner coordinator: execution contexts, the job machine, transports, job files, CLI.

The documented entry point for Python is `from aner_coord import parallel`.

- `parallel`, `session`, `calls`: the Python API, one-off calls and sessions; `cli/`: the
  command line, one module per command group;
- `requests`, `specfile`: the one request type and its file forms; `admission`, `limits`:
  the one place that admits a request, and every limit; `clusterfile`: the cluster file;
- `computations/`: the coordinator halves of the computations; `job/`: the job engine (the
  machine, the coordinator, local threads and worker processes); `transports/`: byte pipes
  to worker processes; `jobdir/`: the job directory's files; `scaling/`: `aner parallel
  scaling` and `plan`;
- `runner`: a coroutine run from synchronous code, interruptibly; `errors`: whose fault a
  failure is, and the exit codes; `userfiles`: the bounded reading of every small file a
  user names; `posix`: what needs POSIX, and its refusal where it is missing.
- `program`: the `aner` program's first line; `interrupts`: who takes SIGINT while a
  command starts, runs and ends.
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
