"""The lazy registries behind `KERNELS` and `COMPUTATIONS`: names without imports."""

from __future__ import annotations

import threading

import pytest

from aner_coord.computations import COMPUTATIONS, computation_for, request_types, summarize
from aner_coord.computations.dense.request import DenseRequest
from aner_coord.computations.montecarlo import MonteCarloRequest
from aner_worker.kernels import KERNELS
from aner_worker.registry import LazyRegistry


class Thing:
    pass


def test_a_declared_entry_is_made_once_on_first_use() -> None:
    registry: LazyRegistry[object] = LazyRegistry("thing")
    registry.declare("t", f"{__name__}:Thing")
    assert list(registry) == ["t"] and "t" in registry and len(registry) == 1
    assert not registry.loaded("t")
    first = registry["t"]
    assert isinstance(first, Thing) and registry.loaded("t")
    assert registry["t"] is first


def test_registered_objects_and_deletion() -> None:
    registry: LazyRegistry[object] = LazyRegistry("thing")
    registry.declare("a", f"{__name__}:Thing")
    registry["b"] = marker = object()
    assert list(registry) == ["a", "b"] and registry["b"] is marker
    del registry["a"]
    assert list(registry) == ["b"]
    with pytest.raises(KeyError):
        registry["a"]


def test_a_bad_path_names_the_entry() -> None:
    registry: LazyRegistry[object] = LazyRegistry("kernel")
    registry.declare("ghost", "aner_worker.no_such_module:Kernel")
    with pytest.raises(ImportError, match="kernel 'ghost': cannot import"):
        registry["ghost"]


def test_the_builtin_registries_list_names_without_loading() -> None:
    assert {"monte-carlo", "regression", "dense"} <= set(KERNELS)
    assert {"monte-carlo", "regression", "dense"} <= set(COMPUTATIONS)
    assert DenseRequest in request_types().__args__
    assert computation_for(MonteCarloRequest(samples=1, seed=1)).kind == "monte-carlo"


def test_a_dense_summary_needs_no_dense_computation() -> None:
    result = {
        "history": [{"validation_accuracy": 0.5}, {"validation_accuracy": 0.75}],
        "best_epoch": 2,  # from 1 (schema aner-result/3)
        "test_accuracy": 0.7,
        "test_loss": 0.9,
    }
    lines = summarize("dense", result)
    assert lines is not None
    assert lines[0] == "epochs    2 run, the best was epoch 2 (validation accuracy 0.7500)"
    assert summarize("no-such-kind", result) is None


def test_threads_asking_at_once_get_one_instance() -> None:
    registry: LazyRegistry[object] = LazyRegistry("thing")
    registry.declare("t", f"{__name__}:Thing")
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(registry["t"])) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(got) == 8 and all(item is got[0] for item in got)
