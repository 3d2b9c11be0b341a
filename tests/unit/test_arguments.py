"""Every public call of the API refuses what it does not take (aner_coord/arguments.py): each
function of `parallel` and each method of a session, sync and async, called with a misspelt
keyword, with each required argument left out, and with one positional too many, raises one
line naming the argument and those the call takes, before anything starts: no worker process,
no job directory, no job thread."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import psutil
import pytest
from support import write_pipe_pair

from aner_coord import parallel
from aner_coord.arguments import ArgumentError

_KEYWORDS = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


# `submit` hands its arguments to the call it names, whose refusals they are (checked with
# `submit` in tests/integration/test_handle.py).
_FORWARDS = {"submit"}


def _public(session: parallel.Session) -> Iterator[tuple[str, Callable[..., Any]]]:
    """Every public callable of the API: `parallel`'s functions, its Session type, and the
    methods of a session."""
    for name in parallel.__all__:
        member = getattr(parallel, name)
        if (not inspect.isclass(member) or member is parallel.Session) and name not in _FORWARDS:
            yield f"parallel.{name}", member
    for name, member in inspect.getmembers(parallel.Session):
        if not name.startswith("_") and callable(member) and name not in _FORWARDS:
            yield f"Session.{name}", getattr(session, name)


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> parallel.ClusterExecution:
    return parallel.cluster(write_pipe_pair(tmp_path_factory.mktemp("cluster") / "c"))


@pytest.fixture(scope="module")
def session(group: parallel.ClusterExecution) -> Iterator[parallel.Session]:
    with parallel.session(group) as kept:
        yield kept


def _calls(session: parallel.Session) -> list[tuple[str, Callable[..., Any]]]:
    return sorted(_public(session), key=lambda named: named[0])


def _refusal(call: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
    with pytest.raises(parallel.RequestError) as caught:
        if inspect.iscoroutinefunction(call):
            asyncio.run(call(*args, **kwargs))
        else:
            call(*args, **kwargs)
    assert isinstance(caught.value, ArgumentError) and isinstance(caught.value, TypeError)
    message = str(caught.value)
    assert "\n" not in message and "_" + call.__name__ not in message, message
    return message


def _keywords(call: Callable[..., Any]) -> list[str]:
    parameters = inspect.signature(call).parameters.values()
    return [p.name for p in parameters if p.kind in _KEYWORDS]


def _required(call: Callable[..., Any]) -> list[str]:
    parameters = inspect.signature(call).parameters.values()
    return [p.name for p in parameters if p.kind in _KEYWORDS and p.default is p.empty]


# Session fixtures of this test process (an sshd, a Slurm's daemons under pytest-xdist)
# are its children too: only a child none of them could be counts.
_FIXTURE_DAEMONS = frozenset(
    {"sshd", "munged", "slurmctld", "slurmscriptd", "slurmd", "slurmstepd"}
)


def _nothing_started(output: Path) -> None:
    assert not output.exists()
    assert [t.name for t in threading.enumerate() if t.name.startswith("aner-coord")] == []
    children = psutil.Process().children(recursive=True)
    assert [c for c in children if c.name() not in _FIXTURE_DAEMONS] == []


def _placed(call: Callable[..., Any], output: Path, **kwargs: Any) -> dict[str, Any]:
    """`kwargs`, with a job directory where the call takes one (it must never appear)."""
    return {**kwargs, "output": output} if "output" in _keywords(call) else kwargs


def test_the_enumeration_finds_every_call(session: parallel.Session) -> None:
    names = {name for name, _ in _calls(session)}
    assert {"parallel.monte_carlo_async", "parallel.local", "parallel.cluster"} <= names
    assert {"parallel.session", "parallel.Session", "parallel.inventory"} <= names
    assert {"Session.search_async", "Session.dense_fit", "Session.close"} <= names
    assert len(names) >= 2 * 12 + 6  # the twelve calls on both sides, and the others


def test_a_misspelt_keyword_is_refused_naming_it_and_the_keywords_taken(
    session: parallel.Session, tmp_path: Path
) -> None:
    output = tmp_path / "job"
    for name, call in _calls(session):
        keywords = _keywords(call)
        wrong = keywords[0][::-1] + "x" if keywords else "verbose"
        message = _refusal(call, **_placed(call, output, **{wrong: 5}))
        assert message.startswith(f"{call.__qualname__}() has no argument {wrong}="), name
        if keywords:
            assert message.endswith("it takes " + ", ".join(f"{k}=" for k in keywords)), name
        else:
            assert message.endswith("it takes no arguments"), name
    _nothing_started(output)


def test_each_missing_required_argument_is_refused_naming_it(
    session: parallel.Session, tmp_path: Path
) -> None:
    output = tmp_path / "job"
    checked = 0
    for name, call in _calls(session):
        required = _required(call)
        for missing in required:
            others = {k: 1 for k in required if k != missing}
            message = _refusal(call, **_placed(call, output, **others))
            assert message.startswith(f"{call.__qualname__}() needs {missing}=: it takes "), name
            checked += 1
    # run, monte_carlo, regression, dense_fit, cross_validate (search's spec= may stand for
    # its options), sync and async, and cluster's config
    assert checked >= 2 * (1 + 2 + 4 + 1 + 1) + 1
    _nothing_started(output)


def test_one_positional_too_many_is_refused(session: parallel.Session, tmp_path: Path) -> None:
    for name, call in _calls(session):
        parameters = inspect.signature(call).parameters.values()
        positional = [
            p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        message = _refusal(call, *range(len(positional) + 1))
        assert f"got {len(positional) + 1}" in message, (name, message)
    _nothing_started(tmp_path / "job")


def test_the_reproductions() -> None:
    # Issue 24: the misspelt keyword ran and was ignored; the missing one named a private
    # method in a raw TypeError.
    message = _refusal(parallel.monte_carlo, samples=10**6, seed=4, sampels=5)
    assert message.startswith("monte_carlo() has no argument sampels= (did you mean samples=?)")
    message = _refusal(parallel.regression, samples=10**5, steps=2, seed=1)
    assert message == (
        "regression() needs rate=: it takes seed=, samples=, steps=, rate=, replicates=, "
        "execution=, "
        "output=, audit=, retries=, task_timeout=, chunk=, progress="
    )
    message = _refusal(parallel.dense_fit, teacher=(300, 4, 2), seed=1, epoch=3)
    assert message.startswith("dense_fit() has no argument epoch= (did you mean epochs=?)")
    for search in (parallel.search, parallel.search_async):
        message = _refusal(search, teacher=(300, 4, 2), grid={"lr": [0.1]})
        assert message == "search() needs seed=, or spec= (a file of them all)"
    message = _refusal(parallel.local, 1, workers=2)
    assert message == "local() got workers twice, by position and as workers="


def test_the_signatures_are_the_request_types_options() -> None:
    # Declared once: a call takes its request type's fields, and the placement keywords.
    from aner_coord.calls import PLACEMENT, ROW_ARRAYS
    from aner_coord.computations.dense.request import DenseRequest

    fields = [f.name for f in msgspec.structs.fields(DenseRequest)]
    assert _keywords(parallel.dense_fit) == ["X", "y", *fields, *ROW_ARRAYS, *PLACEMENT]
    assert _required(parallel.dense_fit) == ["seed"]
    assert _required(parallel.monte_carlo) == ["seed", "samples"]


def test_a_valid_call_still_runs() -> None:
    result = parallel.monte_carlo(samples=10**6, seed=42, execution=parallel.local(workers=1))
    assert result.hits == 785_882  # 10**6 samples of seed 42


@pytest.mark.parametrize("form", ["sync", "async"])
@pytest.mark.parametrize("call", ["cross_validate", "search"])
def test_validation_arrays_are_refused_where_folds_validate_saying_why(
    tmp_path: Path, call: str, form: str
) -> None:
    # dense_fit takes validation=(X_val, y_val); a search's folds validate: the refusal says
    # so and what to do instead, not "did you mean validation_fraction=?".
    import numpy as np

    x = np.arange(40.0).reshape(20, 2)
    y = np.arange(20) % 2
    extra = {"grid": {"lr": [1e-3]}} if call == "search" else {}
    output = tmp_path / "job"
    function = getattr(parallel, call if form == "sync" else f"{call}_async")
    name = function.__name__
    with pytest.raises(ArgumentError) as caught:
        result = function(x, y, seed=1, validation=(x, y), output=output, **extra)
        if form == "async":
            asyncio.run(result)
    message = str(caught.value)
    assert message.startswith(f"{name}() takes no validation=: its folds validate")
    assert "split=" in message and "folds=1" in message and "\n" not in message
    assert "did you mean" not in message and not output.exists()
