"""The aner coordinator: execution contexts, the job machine, transports, job files, CLI.

The documented entry point for Python is `import aner.parallel` (the package `aner`, in
`aner/`, installed under that name); `from aner_coord import parallel` is the same module.

- `parallel`, `session`, `calls`: the Python API, one-off calls and sessions; `handle`: a
  submitted call's handle and `progress=`, kept off the computing path; `progressbar`: the
  bar of `progress=True`, in a terminal or a notebook; `estimator`: `DenseClassifier`, Dense
  training as a scikit-learn estimator; `cli/`: the command line, one module per command
  group;
- `requests`, `specfile`: the one request type and its file forms; `admission`, `limits`:
  the one place that admits a request, and every limit; `clusterfile`: the cluster file;
- `computations/`: the coordinator halves of the computations; `job/`: the job engine (the
  machine, the coordinator, local threads and worker processes); `transports/`: byte pipes
  to worker processes; `jobdir/`: the job directory's files; `scaling/`: `aner parallel
  scaling` and `plan`; `timeline/`: a job's timeline read back (`aner parallel timeline`);
- `runner`: a coroutine run from synchronous code, interruptibly; `errors`: whose fault a
  failure is, and the exit codes; `arguments`: the signature of each call of the API, and
  the refusal of any other argument; `userfiles`: the bounded reading of every small file a
  user names; `posix`: what needs POSIX, and its refusal where it is missing;
- `capabilities`: the capability and provenance report of this build and its workers;
  `hosts`: which workers share a host, in the words of `status`, `plan` and the reports;
  `kernelsets`: which workers compute with other BLAS kernel sets, in those words too;
  `localplan`: whether a local job's workers are threads or worker processes, per kernel;
- `program`: the `aner` program's first line; `interrupts`: who takes SIGINT while a
  command starts, runs and ends;
- `conformance`: the conformance suite of a plugin's simulation (`aner.testing`);
- `aner/`: the package `aner` (`aner.parallel`, `aner.testing`, `python -m aner`);
  `shadowing`: our own `protocol` and `aner_worker`, whatever a user's files are named.
"""

from typing import Any

from aner_coord import shadowing

shadowing.pin()  # before any module of ours imports `protocol` or `aner_worker`


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
