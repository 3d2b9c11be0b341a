"""Chunk plans and admission limits (SPEC section 3).

A plan cuts `total` items (samples or rows) into chunks of `chunk`, the last one keeping the
remainder. Chunk `i` is computed on demand, so a plan of a million chunks costs no memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from aner_coord.errors import AdmissionError, RequestError

MAX_SAMPLES = 10_000_000_000
MAX_CHUNKS = 1_000_000
MAX_LOCAL_WORKERS = 256
MAX_WORKER_RECORDS = 32
SEED_LIMIT = 2**64
DEFAULT_CHUNK = 65_536


@dataclass(frozen=True)
class ChunkPlan:
    total: int
    chunk: int

    @property
    def n_chunks(self) -> int:
        return -(-self.total // self.chunk)

    def chunk_range(self, index: int) -> tuple[int, int]:
        start = index * self.chunk
        return start, min(self.chunk, self.total - start)


def check_int(name: str, value: object) -> int:
    # bool is an int subclass; True samples is a mistake, not 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"{name} must be an integer, got {value!r}")
    return value


def admit_plan(*, total: int, chunk: int, what: str, min_chunks: int = 1) -> ChunkPlan:
    """Check the request's size against the limits and return its plan, or explain the fix."""
    total = check_int(what, total)
    chunk = check_int("chunk", chunk)
    if total <= 0:
        raise RequestError(f"{what} must be positive, got {total}")
    if total > MAX_SAMPLES:
        raise AdmissionError(f"{what} is {total:,}; the limit is {MAX_SAMPLES:,}: ask for fewer")
    if chunk <= 0:
        raise RequestError(f"chunk must be positive, got {chunk}")
    plan = ChunkPlan(total, chunk)
    if plan.n_chunks > MAX_CHUNKS:
        smallest = -(-total // MAX_CHUNKS)
        raise AdmissionError(
            f"{total:,} {what} in chunks of {chunk:,} make {plan.n_chunks:,} chunks; the limit is "
            f"{MAX_CHUNKS:,}: use a chunk of at least {smallest} (--chunk)"
        )
    if plan.n_chunks < min_chunks:
        raise AdmissionError(
            f"{total:,} {what} in chunks of {chunk:,} make {plan.n_chunks} chunk(s), fewer than "
            f"the {min_chunks} configured workers (each needs at least one): "
            f"use a chunk of at most {max(1, total // min_chunks)} (--chunk)"
        )
    return plan


def check_seed(seed: object) -> int:
    seed = check_int("seed", seed)
    if not 0 <= seed < SEED_LIMIT:
        raise RequestError(f"seed must be in [0, 2**64), got {seed}")
    return seed
