"""The events a connection reports, one set per side: what `CoordinatorConnection.receive`
and `WorkerConnection.receive` make of the bytes they are given (see `protocol.connection`).
`CoordinatorEvent` and `WorkerEvent` are their unions, for shells that dispatch on them
exhaustively.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.messages import Hello, Params, Result, Task, TaskFailed, Welcome


# -- events seen by the coordinator ------------------------------------------------------
@dataclass(frozen=True)
class Accepted:
    welcome: Welcome


@dataclass(frozen=True)
class Rejected:
    reason: str


@dataclass(frozen=True)
class Answered:
    message: Result | TaskFailed
    task: Task


@dataclass(frozen=True)
class Ponged:
    nonce: int
    clock: float = 0.0  # the worker's clock at its answer (0: not said)


@dataclass(frozen=True)
class BlocksWanted:
    dataset: str
    blocks: tuple[str, ...]


@dataclass(frozen=True)
class DataStaged:
    dataset: str


@dataclass(frozen=True)
class Computing:
    """A slot of the worker is still computing `task` (outstanding on this connection)."""

    task: Task
    elapsed_s: float
    waiting_s: float = 0.0  # waited for a granted slot, before computing


CoordinatorEvent = Accepted | Rejected | Answered | Ponged | BlocksWanted | DataStaged | Computing


# -- events seen by the worker -----------------------------------------------------------
@dataclass(frozen=True)
class HelloReceived:
    hello: Hello
    refusal: str | None  # None: accepted; else why the worker refuses


@dataclass(frozen=True)
class ParamsReceived:
    params: Params


@dataclass(frozen=True)
class TaskReceived:
    task: Task


@dataclass(frozen=True)
class PingReceived:
    nonce: int


@dataclass(frozen=True)
class ShutdownReceived:
    reason: str


@dataclass(frozen=True)
class StageReceived:
    dataset: str
    blocks: tuple[str, ...]


@dataclass(frozen=True)
class BlockReceived:
    digest: str
    data: bytes
    complete: bool  # every block named missing has now arrived


WorkerEvent = (
    HelloReceived
    | ParamsReceived
    | TaskReceived
    | PingReceived
    | ShutdownReceived
    | StageReceived
    | BlockReceived
)
