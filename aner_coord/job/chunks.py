"""The chunks of a pass still to dispatch, for the job machine (`aner_coord.job.machine`).

Pure bookkeeping, apart from the machine so that its one file keeps to the transitions.
"""

from __future__ import annotations

from collections import deque


class ChunkQueue:
    """The chunks of a pass still to dispatch, in chunk order: requeued chunks (a lost
    worker's) first, then fresh ones from a counter, so that a pass of a million chunks
    costs no memory; chunks a resumed job recovered from its ledger are skipped."""

    def __init__(self, n_chunks: int, recovered: set[int]) -> None:
        self._n = n_chunks
        self._next = 0
        self._recovered = recovered
        self._recovered_ahead = len(recovered)
        self._requeued: deque[int] = deque()

    def __len__(self) -> int:
        return len(self._requeued) + self._n - self._next - self._recovered_ahead

    def pop(self) -> int:
        if self._requeued:
            return self._requeued.popleft()
        while self._next in self._recovered:
            self._next += 1
            self._recovered_ahead -= 1
        chunk = self._next
        self._next += 1
        return chunk

    def requeue(self, chunks: list[int]) -> None:
        self._requeued.extendleft(reversed(chunks))
