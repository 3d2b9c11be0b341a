"""A whole ``aner-dense/v1`` training in this process: the `Training` state machine driven
chunk by chunk, each chunk computed exactly as a worker's task computes it (`rows`), so the
parameters are bitwise those of any worker group with the same chunk.

The frozen parameters of each pass are prepared once (rounded once in float32) and shared
by the threads that compute its chunks, as a worker shares them between its slots.

It is the reference the tests compare every plan with (`aner_coord.computations.dense.single`
wraps it), and it is how one worker slot trains a whole fit of a model search.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import numpy.typing as npt

from aner_worker.kernels.dense.data import Dataset
from aner_worker.kernels.dense.network import prepare
from aner_worker.kernels.dense.params import TRAIN, DenseStats
from aner_worker.kernels.dense.plan import bounds
from aner_worker.kernels.dense.rows import Frozen, statistics
from aner_worker.kernels.dense.training import EpochRecord, Training, TrainingPass

Ints = npt.NDArray[np.int64]
_EMPTY: npt.NDArray[np.float64] = np.empty(0)


def fit_whole(
    training: Training,
    dataset: Dataset,
    *,
    threads: int = 1,
    max_steps: int | None = None,
    on_epoch: Callable[[EpochRecord], None] | None = None,
) -> Training:
    """Drive `training` to its end over `dataset`; `threads` compute a pass's chunks (the bits
    do not depend on it). `max_steps` stops right after that many committed steps (no test
    pass; 0 keeps the initial parameters, after the normalisation). Raises
    `training.Divergence` on a non-finite loss."""
    if threads < 1:
        raise ValueError("threads must be >= 1")
    epochs_seen = 0
    with ThreadPoolExecutor(max_workers=threads) as pool:
        while (spec := training.next_pass()) is not None:
            if spec.step == TRAIN and max_steps is not None and training.committed >= max_steps:
                break
            pieces = [spec.rows[c0:c1] for c0, c1 in bounds(spec.items, training.options.chunk)]
            frozen = _frozen(training, spec)

            def one(rows: Ints, step: str = spec.step, frozen: Frozen = frozen) -> DenseStats:
                return statistics(step, dataset, rows, frozen)

            # map() returns results in submission order: each chunk lands in its slot. One
            # thread needs no hand-off; the bits are the same either way.
            results = [one(p) for p in pieces] if threads == 1 else list(pool.map(one, pieces))
            for index, (stats, piece) in enumerate(zip(results, pieces, strict=True)):
                problem = training.check(0, int(piece.size), stats)
                if problem is not None:
                    raise ValueError(f"chunk {index} of {spec.label}: {problem}")
                training.accept(index, stats)
            training.commit()
            if on_epoch is not None and len(training.history) > epochs_seen:
                epochs_seen = len(training.history)
                on_epoch(training.history[-1])
    return training


def _frozen(training: Training, spec: TrainingPass) -> Frozen:
    """The pass's frozen parameters in the training's precision, prepared once per pass.
    The normalisation pass needs no parameters and no normalisation."""
    norm = training.normalisation
    mean, std = (norm.mean, norm.std) if norm is not None else (_EMPTY, _EMPTY)
    if spec.flat is None:
        return Frozen(None, mean, std)
    return Frozen(prepare(spec.flat, training.sizes, training.options.precision), mean, std)
