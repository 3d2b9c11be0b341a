"""Checkpoints of a run's committed state (a Dense training's, `Checkpoints`), written and
read through the job directory, vouched for by the ledger.

Writing (`Checkpointer`, on the coordinator's event loop, at a pass barrier): when a
checkpoint is due (`Policy`: every `every_s` seconds since the last one ended, by default
`DEFAULT_EVERY_S`, and/or every `every_steps` committed steps) and always as soon as the
job is cancelled (`aner parallel cancel`, and what SIGTERM, SIGINT and SIGHUP ask of a
coordinator; not on a failure, which may have stopped a pass halfway through its commit),
the run's state is encoded; its `Checkpointed` record (size,
SHA256, passes, steps) is appended to the ledger and made durable; only then is the file
written as `CHECKPOINT` (temporary file, fsync, rename, fsync of the directory, all through
the directory's descriptor). A coordinator killed at any moment therefore leaves a
`CHECKPOINT` that the ledger vouches for: the new one, or the one before it (whose record
is durable too), or none.

Reading (`vouched`, by `resume`): the file must be a regular file of the job directory, no
larger than the run's own bound, and its size and SHA256 those of a `Checkpointed` record
of the ledger; anything else is refused (`CheckpointError`, one line). No file at all
resumes from the start. The bytes are then restored into a fresh run, which checks them
against the request.

The cost is an encode, a hash and three fsyncs per checkpoint (a few milliseconds for a
model of 10**5 parameters); at one every 30 s it is far below a percent of any training
(`bench/checkpoints.py` measures it), while a kill loses at most 30 s of work.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from aner_coord.computations.base import Checkpoints
from aner_coord.errors import RequestError
from aner_coord.jobdir import CHECKPOINT, JobDir, JobFileError
from aner_coord.jobdir.ledger import Checkpointed, LedgerWriter, Recovered

DEFAULT_EVERY_S = 30.0
ENV_EVERY_S = "ANER_CHECKPOINT_S"
ENV_EVERY_STEPS = "ANER_CHECKPOINT_STEPS"


class CheckpointError(Exception):
    """A checkpoint file that resume cannot use: the message says why (exit 2)."""


@dataclass(frozen=True)
class Policy:
    """When a checkpoint is due: `every_s` seconds after the last one (None: never by
    time; 0: at every committed pass) or `every_steps` committed steps after it (None:
    never by steps), whichever comes first."""

    every_s: float | None = DEFAULT_EVERY_S
    every_steps: int | None = None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> Policy:
        """The policy `ANER_CHECKPOINT_S` (seconds, or `off`) and `ANER_CHECKPOINT_STEPS`
        set (RequestError for a value that is not one): the defaults where they are unset."""
        every_s: float | None = DEFAULT_EVERY_S
        every_steps: int | None = None
        raw = environ.get(ENV_EVERY_S)
        if raw == "off":
            every_s = None  # checkpoints by steps only, or on a cancel only
        elif raw:
            try:
                every_s = float(raw)
                if not every_s >= 0 or every_s == float("inf"):
                    raise ValueError(raw)
            except ValueError:
                raise RequestError(
                    f"{ENV_EVERY_S}={raw!r} is not a number of seconds >= 0 or `off`: set it to, "
                    f"say, {DEFAULT_EVERY_S:g}"
                ) from None
        raw = environ.get(ENV_EVERY_STEPS)
        if raw:
            try:
                every_steps = int(raw)
                if every_steps < 1:
                    raise ValueError(raw)
            except ValueError:
                raise RequestError(
                    f"{ENV_EVERY_STEPS}={raw!r} is not a whole number of steps >= 1"
                ) from None
        return cls(every_s, every_steps)


@dataclass(frozen=True)
class Restored:
    """A checkpoint that the ledger vouches for: its bytes, and the passes and steps it
    holds."""

    passes: int
    steps: int
    data: bytes
    items: int = 0  # the items of those passes (`Checkpointed.items`)


class Checkpointer:
    """Writes a run's checkpoints as the module docstring says; `committed` at every pass
    barrier, `final` when the job is cancelled."""

    def __init__(
        self,
        directory: JobDir,
        ledger: LedgerWriter,
        policy: Policy,
        *,
        restored: Restored | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._directory = directory
        self._ledger = ledger
        self._policy = policy
        self._clock = clock
        self._last_at = clock()
        self._run: Checkpoints | None = None
        self._passes = self._written = restored.passes if restored is not None else 0
        self._items = restored.items if restored is not None else 0
        self._steps_at_last = self._steps = restored.steps if restored is not None else 0
        # The committed steps the job's latest checkpoint holds (None: none yet).
        self.steps: int | None = restored.steps if restored is not None else None
        self.written = 0  # checkpoints this coordinator wrote

    def committed(self, run: Checkpoints, passes: int, steps: int, items: int) -> None:
        """`passes` passes (`steps` steps, `items` items) are committed: write a checkpoint
        if one is due."""
        self._run, self._passes, self._steps, self._items = run, passes, steps, items
        policy = self._policy
        due_s = policy.every_s is not None and self._clock() - self._last_at >= policy.every_s
        due_steps = (
            policy.every_steps is not None and steps - self._steps_at_last >= policy.every_steps
        )
        if due_s or due_steps:
            self._write(steps)

    def final(self) -> None:
        """The job was cancelled: keep what was committed since the last checkpoint."""
        if self._run is not None and self._passes > self._written:
            self._write(self._steps)

    def _write(self, steps: int) -> None:
        run = self._run
        assert run is not None
        data = run.checkpoint()
        digest = hashlib.sha256(data).digest()
        record = Checkpointed(self._passes, steps, len(data), digest, time.time(), self._items)
        self._ledger.append(record)
        self._ledger.sync()  # vouched for before it is in place: see the module docstring
        self._directory.write_bytes(CHECKPOINT, data)
        self._written = self._passes
        self._steps_at_last = steps
        self.steps = steps
        self.written += 1
        self._last_at = self._clock()


def vouched(directory: JobDir, recovered: Recovered, limit: int) -> Restored | None:
    """The checkpoint in `directory` that the ledger vouches for (None if there is no
    file); CheckpointError for a file that is not a regular file, is over `limit` bytes
    or is none that the ledger vouches for."""
    where = directory.path / CHECKPOINT
    try:
        data = directory.read_bytes(CHECKPOINT, limit)
    except FileNotFoundError:
        return None
    except JobFileError as exc:
        raise CheckpointError(str(exc)) from None
    digest = hashlib.sha256(data).digest()
    for record in reversed(recovered.checkpoints):
        if record.sha256 == digest and record.size == len(data):
            return Restored(record.passes, record.steps, data, record.items)
    raise CheckpointError(
        f"{where} (SHA256 {digest.hex()}) is not a checkpoint its ledger vouches for: it was "
        "changed or comes from another job; remove it to retrain from the start"
    )
