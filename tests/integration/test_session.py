"""Sessions keep a group's worker processes across calls (aner_coord/session.py): real
`aner` workers over local pipes. Each call is its own job (its own accounting and job
directory) with the same hits as a one-off call; the workers are the same processes from
call to call; they end on leaving `with`, on garbage collection and at interpreter exit; a
worker killed between calls is reported by the next call and started again (or, without
`restart`, fails that call naming it); an interrupted session call is cancelled and leaves
no worker computing."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path
from typing import Any

import psutil
import pytest
from suite_env import child_env
from support import ROOT, process_gone, wait_for, write_pipe_pair

from aner_coord import parallel

HITS_10M = 7_856_672  # docs/contracts.md, section 1, seed 42
HITS_20M_CHUNK = 15_712_228  # 2 * 10**7 samples of seed 42, as a one-off call gives them


def _workers() -> list[psutil.Process]:
    """This process's live `aner parallel worker` descendants (not, say, the suite's sshd)."""
    workers = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            if child.status() != psutil.STATUS_ZOMBIE and _is_worker(child.cmdline()):
                workers.append(child)
    return workers


def _is_worker(argv: list[str]) -> bool:
    # `<exec> parallel worker --stdio`, then the coordinator's --blas-env settings.
    return ["parallel", "worker", "--stdio"] in (argv[i : i + 3] for i in range(len(argv)))


def _no_workers() -> bool:
    return not _workers()


@pytest.fixture
def group(tmp_path: Path) -> parallel.ClusterExecution:
    cluster = write_pipe_pair(tmp_path / "cluster")
    return parallel.cluster(str(cluster), chunk=10**6)


def test_calls_on_one_session_share_workers_and_keep_their_own_accounting(
    group: parallel.ClusterExecution, tmp_path: Path
) -> None:
    one_off = parallel.monte_carlo(samples=2 * 10**7, seed=42, execution=group)
    assert one_off.hits == HITS_20M_CHUNK
    wait_for(_no_workers, 30, "the one-off call's workers to exit")
    with parallel.session(group) as s:
        first = s.monte_carlo(samples=10**7, seed=42, output=tmp_path / "first")
        pids = sorted(p.pid for p in _workers())
        second = s.monte_carlo(samples=2 * 10**7, seed=42, output=tmp_path / "second")
        assert sorted(p.pid for p in _workers()) == pids
        assert len(pids) == 2
    wait_for(_no_workers, 30, "the session's workers to exit after `with`")
    assert all(process_gone(pid) for pid in pids)

    assert first.hits == HITS_10M
    assert second.hits == one_off.hits
    assert sum(w.items for w in first.workers) == 10**7
    assert sum(w.chunks for w in first.workers) == 10
    assert sum(w.items for w in second.workers) == 2 * 10**7
    assert sum(w.chunks for w in second.workers) == 20
    assert first.losses == [] and second.losses == []
    for name, result in (("first", first), ("second", second)):
        stored = json.loads((tmp_path / name / "result.json").read_text())
        assert stored["hits"] == result.hits
        assert sum(w["items"] for w in stored["workers"]) == result.samples


def test_a_session_that_is_garbage_collected_ends_its_workers(
    group: parallel.ClusterExecution,
) -> None:
    s = parallel.session(group)
    assert s.monte_carlo(samples=10**7, seed=42).hits == HITS_10M
    pids = [p.pid for p in _workers()]
    assert len(pids) == 2
    del s
    gc.collect()
    wait_for(_no_workers, 30, "the collected session's workers to exit")
    assert all(process_gone(pid) for pid in pids)


def test_a_worker_killed_between_calls_is_reported_and_started_again(
    group: parallel.ClusterExecution,
) -> None:
    with parallel.session(group) as s:
        assert s.monte_carlo(samples=10**7, seed=42).hits == HITS_10M
        victim, survivor = _workers()
        victim.send_signal(signal.SIGKILL)
        wait_for(lambda: process_gone(victim.pid), 30, "the killed worker to be reaped")
        result = s.monte_carlo(samples=10**7, seed=42)
        assert result.hits == HITS_10M
        assert [(loss.phase, loss.during) for loss in result.losses] == [("idle", "between calls")]
        assert "killed" in result.losses[0].detail
        assert result.losses[0].identity in {"w1", "w2"}
        assert s.losses == result.losses
        now = [p.pid for p in _workers()]
        assert survivor.pid in now and victim.pid not in now and len(now) == 2
        # Reported once: the next call has nothing to add.
        assert s.monte_carlo(samples=10**7, seed=42).losses == []
    wait_for(_no_workers, 30, "the session's workers to exit")


def test_without_restart_a_worker_lost_between_calls_fails_the_next_call(
    group: parallel.ClusterExecution,
) -> None:
    with parallel.session(group, restart=False) as s:
        for retries in (0, 1):
            assert s.monte_carlo(samples=10**7, seed=42).hits == HITS_10M
            victim = _workers()[0].pid
            os.kill(victim, signal.SIGKILL)
            wait_for(lambda: process_gone(victim), 30, "the killed worker to be reaped")  # noqa: B023
            if retries == 0:
                with pytest.raises(parallel.JobFailed, match="lost between calls"):
                    s.monte_carlo(samples=10**7, seed=42)
            else:  # the call's retries allow the loss: it goes on, and counts it
                result = s.monte_carlo(samples=10**7, seed=42, retries=1)
                assert result.hits == HITS_10M
                assert [loss.phase for loss in result.losses] == ["idle"]
                assert "lost between calls" in result.losses[0].detail
        assert s.losses == []  # nothing was started again behind the calls' backs
    wait_for(_no_workers, 30, "the session's workers to exit")


def _bounded(call: Any, seconds: float) -> Any:
    """`call()` in a daemon thread; its value or exception, or a failure if it has not
    returned within `seconds` (generous: the point is that it returns at all)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"the call did not return within {seconds} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


@pytest.mark.parametrize(("restart", "retries"), [(True, 0), (False, 1)])
def test_calls_after_workers_killed_and_reaped_between_them_end_exactly_or_name_them(
    group: parallel.ClusterExecution, restart: bool, retries: int
) -> None:
    # The reported hang: a worker killed between calls and reaped by someone else in this
    # process (psutil's wait() here; os.waitpid or subprocess do the same) never has its
    # exit reported to uvloop, whose transport then raised from close(), so that the next
    # call waited for ever on a close that would never finish. Now every call returns,
    # exactly or naming a worker, however many are lost.
    rng = random.Random(17)
    outcomes = []
    with warnings.catch_warnings():
        # uvloop keeps the vanished children's handles until its loop closes, and warns then.
        warnings.simplefilter("ignore", ResourceWarning)
        with parallel.session(group, restart=restart) as s:
            for _ in range(12):
                try:
                    result = _bounded(
                        lambda: s.monte_carlo(samples=10**7, seed=42, retries=retries), 300
                    )
                except parallel.JobFailed as exc:
                    assert re.match(r'worker "w[12]" failed during ', str(exc)), str(exc)
                    outcomes.append("failed")
                else:
                    assert result.hits == HITS_10M
                    outcomes.append(len(result.losses))
                workers = _workers()
                for victim in rng.sample(workers, rng.randint(1, len(workers))) if workers else []:
                    with contextlib.suppress(psutil.NoSuchProcess):
                        victim.kill()
                        victim.wait(30)  # reaps it
        wait_for(_no_workers, 30, "the session's workers to exit")
    # Both kinds of outcome were seen: losses survived with the exact hits, and (with two
    # workers lost at once, or without retries) calls that failed naming a worker.
    assert any(isinstance(o, int) and o > 0 for o in outcomes) or "failed" in outcomes, outcomes


def test_a_local_session_and_the_async_forms(group: parallel.ClusterExecution) -> None:
    with parallel.session(parallel.local(2, chunk=10**6)) as s:
        assert s.monte_carlo(samples=10**7, seed=42).hits == HITS_10M
        assert s.monte_carlo(samples=10**7, seed=42).hits == HITS_10M

    async def main() -> tuple[int, int, int]:
        with parallel.session(group) as s:
            first = await s.monte_carlo_async(samples=10**7, seed=42)
            pids = len(_workers())
            # The synchronous form works inside a running loop too.
            second = s.monte_carlo(samples=10**7, seed=42)
            return first.hits, second.hits, pids

    assert asyncio.run(main()) == (HITS_10M, HITS_10M, 2)
    wait_for(_no_workers, 30, "the session's workers to exit")


def test_regression_on_a_session_matches_a_one_off_call(
    group: parallel.ClusterExecution,
) -> None:
    arguments = {"samples": 20_000, "steps": 3, "rate": 0.5, "seed": 7}
    alone = parallel.regression(**arguments, execution=parallel.local(1, chunk=5_000))
    with parallel.session(group) as s:
        first = s.regression(**arguments, chunk=5_000)
        second = s.regression(**arguments, chunk=5_000)
    assert first.theta == second.theta
    assert first.theta == pytest.approx(alone.theta, abs=1e-10)
    wait_for(_no_workers, 30, "the session's workers to exit")


SCRIPT = """
import os, sys
from aner_coord import parallel
s = parallel.session(parallel.cluster(CLUSTER, chunk=10**6))
assert s.monte_carlo(samples=10**7, seed=42).hits == 7_856_672
import psutil
print(" ".join(str(p.pid) for p in psutil.Process().children()), flush=True)
"""


def test_a_process_that_exits_without_closing_its_session_leaves_no_workers(
    tmp_path: Path,
) -> None:
    cluster = write_pipe_pair(tmp_path / "cluster")
    script = f"CLUSTER = {str(cluster)!r}\n" + textwrap.dedent(SCRIPT)
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    pids = [int(word) for word in done.stdout.split()]
    assert len(pids) == 2
    wait_for(lambda: all(process_gone(pid) for pid in pids), 30, "the workers to exit")


INTERRUPTED = """
import os, signal, threading, time
import psutil
from aner_coord import parallel

with parallel.session(parallel.cluster(CLUSTER, chunk=10**9)) as s:
    assert s.monte_carlo(samples=10**7, seed=42, chunk=10**6).hits == 7_856_672
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    try:
        s.monte_carlo(samples=10**10, seed=1)
    except parallel.JobCancelled as exc:
        assert isinstance(exc.__cause__, KeyboardInterrupt), repr(exc.__cause__)
    else:
        raise AssertionError("the call was not cancelled")
    workers = [c for c in psutil.Process().children() if c.status() != psutil.STATUS_ZOMBIE]
    before = sum(sum(w.cpu_times()[:2]) for w in workers)
    time.sleep(1.0)
    busy = sum(sum(w.cpu_times()[:2]) for w in workers if w.is_running()) - before
    print("busy", round(busy, 3), flush=True)
    assert busy < 0.5, busy
    # The session goes on: the next call runs (on workers started again where needed).
    assert s.monte_carlo(samples=10**7, seed=42, chunk=10**6).hits == 7_856_672
print("children", len(psutil.Process().children()))
"""


def test_an_interrupted_session_call_is_cancelled_and_the_session_goes_on(
    tmp_path: Path,
) -> None:
    cluster = write_pipe_pair(tmp_path / "cluster")
    script = f"CLUSTER = {str(cluster)!r}\n" + textwrap.dedent(INTERRUPTED)
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
        env=child_env(PYTHONPATH=str(ROOT)),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "children 0" in done.stdout, done.stdout


def test_dense_training_on_a_session_stages_its_data_and_matches_a_one_off_call(
    tmp_path: Path,
) -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    features = rng.normal(size=(400, 4))
    labels = (features[:, 0] + features[:, 1] > 0).astype(int)
    data = tmp_path / "data.csv"
    rows = (
        ",".join([*map(repr, row.tolist()), str(label)])
        for row, label in zip(features, labels, strict=True)
    )
    data.write_text("a,b,c,d,label\n" + "\n".join(rows) + "\n")
    cluster = write_pipe_pair(tmp_path / "cluster")
    group = parallel.cluster(str(cluster), chunk=32)
    arguments: dict[str, Any] = {"data": data, "hidden": (8,), "batch": 64, "epochs": 2, "seed": 1}
    alone = parallel.dense_fit(**arguments, execution=group)
    with parallel.session(group) as s:
        fits = [s.dense_fit(**arguments)]
        assert s.monte_carlo(samples=10**6, seed=42, chunk=10**5).hits == 785_882
        fits.append(s.dense_fit(**arguments))  # the kernel changed and changed back
    for fit in fits:
        assert fit.test_loss == alone.test_loss
        assert all(
            np.array_equal(mine, theirs)
            for mine, theirs in zip(fit.model.params, alone.model.params, strict=True)
        )
        assert sorted(record.identity for record in fit.staging) == ["w1", "w2"]
    wait_for(_no_workers, 30, "the session's workers to exit")
