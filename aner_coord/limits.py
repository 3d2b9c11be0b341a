"""Admission limits (docs/contracts.md, section 3) and the checks every request field goes through.

Each limit is defined here once; `aner_coord.admission` applies them, and the protocol's
`MAX_ITEMS` (what a worker accepts in one task) is the same number as `MAX_SAMPLES`.
"""

from __future__ import annotations

import math

from aner_coord.errors import AdmissionError, RequestError
from aner_worker.kernels.identities import SEED_LIMIT
from protocol import MAX_ITEMS

MAX_SAMPLES = MAX_ITEMS
MAX_CHUNKS = 1_000_000
MAX_LOCAL_WORKERS = 256
MAX_WORKER_RECORDS = 32
DEFAULT_CHUNK = 65_536
MAX_STEPS = 100_000


def check_int(name: str, value: object) -> int:
    # bool is an int subclass; True samples is a mistake, not 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"{{{name}}} must be an integer, got {value!r}", name)
    return value


def check_positive(name: str, value: object) -> int:
    value = check_int(name, value)
    if value <= 0:
        raise RequestError(f"{{{name}}} must be positive, got {value}", name)
    return value


def check_items(name: str, value: object, unit: str) -> int:
    """A count of samples or rows: positive and within MAX_SAMPLES."""
    items = check_positive(name, value)
    if items > MAX_SAMPLES:
        raise AdmissionError(
            f"{{{name}}} is {items:,} {unit}; the limit is {MAX_SAMPLES:,}: ask for fewer", name
        )
    return items


def check_seed(value: object, name: str = "seed") -> int:
    """A seed in [0, 2**64) (`name`: the option that holds it, `seed` or a search's `seeds`)."""
    seed = check_int(name, value)
    if not 0 <= seed < SEED_LIMIT:
        raise RequestError(f"{{{name}}} must be in [0, 2**64), got {seed}", name)
    return seed


def check_positive_number(name: str, value: object) -> float:
    """A finite positive number (a rate, a learning rate)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RequestError(f"{{{name}}} must be a finite number, got {value!r}", name)
    if value <= 0:
        raise RequestError(f"{{{name}}} must be positive, got {value}", name)
    return float(value)


def check_rate(value: object) -> float:
    return check_positive_number("rate", value)


MAX_TASK_TIMEOUT_S = 86_400.0  # a day: a task's deadline beyond it is no deadline


def check_seconds(name: str, value: object) -> float:
    """A positive, finite number of seconds of at most MAX_TASK_TIMEOUT_S."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value <= MAX_TASK_TIMEOUT_S
    ):
        raise RequestError(
            f"{{{name}}} must be a number of seconds in (0, {MAX_TASK_TIMEOUT_S:g}], got {value!r}",
            name,
        )
    return float(value)


def check_fraction(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise RequestError(f"{{{name}}} must be a fraction in [0, 1], got {value!r}", name)
    return float(value)
