"""Byte pipes to a worker process, behind one small interface.

- `base`: the contract every transport keeps (`Transport`, `TransportError`), and what
  they share (the stderr tail, words for exits and OS errors);
- `process`: a local child process's stdio as a transport (used by `pipe` and `slurm`);
- `pipe`, `ssh`, `slurm`: the three kinds of worker record of a cluster file;
- `registry`: `open_transport(record)`, which imports `ssh` (asyncssh) or `slurm` only
  for a record that names it.

One contract test suite (tests/contract/test_transports.py) runs against all three.
"""

from aner_coord.transports.base import Transport, TransportError
from aner_coord.transports.registry import open_transport

__all__ = ["Transport", "TransportError", "open_transport"]
