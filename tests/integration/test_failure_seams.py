"""Workers that fail the way real machines and hostile peers do: silent, half a frame and
then nothing, dead with a child still holding the pipe, lying about their results. Each job
must fail naming the worker within a bounded time, and a worker whose coordinator is gone
must stop at its kernel's next boundary whatever the chunk size."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest
from hostile import fake_worker, group, short_silence
from support import process_gone, read_status, run_aner, wait_for, write_pipe_pair

from aner_coord import parallel
from aner_coord.errors import JobFailed

__all__ = ["short_silence"]  # a fixture, used by name


def test_a_silent_worker_fails_the_job_naming_it(tmp_path: Path, short_silence: float) -> None:
    exe = fake_worker(tmp_path, "silent", "time.sleep(3600)\n")
    with pytest.raises(JobFailed) as failure:
        parallel.monte_carlo(samples=10**6, seed=1, execution=group(tmp_path, exe))
    assert str(failure.value) == (
        'worker "bad-1" failed during run: sent nothing for 1 s, not even an answer to a ping '
        "(stalled, or its link is cut)"
    )


def test_half_a_frame_then_nothing_fails_the_job(tmp_path: Path, short_silence: float) -> None:
    exe = fake_worker(tmp_path, "half", "os.write(1, b'\\x00\\x00'); time.sleep(3600)\n")
    with pytest.raises(JobFailed) as failure:
        parallel.monte_carlo(samples=10**6, seed=1, execution=group(tmp_path, exe))
    assert str(failure.value) == (
        'worker "bad-1" failed during run: sent 2 bytes of a frame and not the rest within 1 s '
        "(stalled mid-frame, or a corrupted length)"
    )


def test_a_worker_that_exits_while_its_child_holds_stdout_fails_the_job(
    tmp_path: Path, short_silence: float
) -> None:
    pid_file = tmp_path / "child.pid"
    exe = fake_worker(
        tmp_path,
        "orphaning",
        f"""
        import subprocess
        child = subprocess.Popen(["sleep", "3600"], stdout=1)
        open({str(pid_file)!r}, "w").write(str(child.pid))
        os._exit(0)
        """,
    )
    try:
        with pytest.raises(JobFailed) as failure:
            parallel.monte_carlo(samples=10**6, seed=1, execution=group(tmp_path, exe))
        assert 'worker "bad-1" failed during run: sent nothing for 1 s' in str(failure.value)
    finally:
        if pid_file.exists():
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_a_worker_claiming_every_sample_a_hit_is_rejected(tmp_path: Path) -> None:
    exe = fake_worker(
        tmp_path,
        "liar",
        """
        from aner_worker.kernels import encode
        from aner_worker.kernels.montecarlo import McStats
        from protocol import TaskReceived
        while True:
            data = os.read(0, 65536)
            if not data:
                break
            for event in conn.receive(data):
                if isinstance(event, TaskReceived):
                    task = event.task
                    os.write(1, conn.result(task, encode(McStats(task.count)), 0.0))
        """,
    )
    with pytest.raises(JobFailed) as failure:
        parallel.monte_carlo(samples=10**6, seed=1, execution=group(tmp_path, exe, "liar"))
    message = str(failure.value)
    assert 'worker "liar" failed during run: inconsistent result rejected' in message
    assert "standard deviations from pi/4: not the stream's samples" in message


def test_an_audit_catches_a_subtle_liar(tmp_path: Path) -> None:
    # One hit too many in every chunk is statistically invisible; recomputing a fraction of
    # the chunks on the coordinator is not.
    exe = fake_worker(
        tmp_path,
        "subtle",
        """
        from aner_worker.kernels import KERNELS, decode, encode
        from aner_worker.kernels.montecarlo import McParams, McStats
        from protocol import TaskReceived
        kernel = KERNELS["monte-carlo"]
        while True:
            data = os.read(0, 65536)
            if not data:
                break
            for event in conn.receive(data):
                if isinstance(event, TaskReceived):
                    task = event.task
                    params = decode(McParams, conn.params_for(task.pass_id).body)
                    hits = kernel.run(params, task.start, task.count, None).hits + 1
                    os.write(1, conn.result(task, encode(McStats(hits)), 0.0))
        """,
    )
    execution = group(tmp_path, exe, "subtle")
    honest = parallel.monte_carlo(samples=10**6, seed=1)
    fooled = parallel.monte_carlo(samples=10**6, seed=1, execution=execution)
    assert fooled.hits == honest.hits + 10  # ten chunks, each one hit too many
    with pytest.raises(JobFailed) as failure:
        parallel.monte_carlo(samples=10**6, seed=1, execution=execution, audit=0.25)
    message = str(failure.value)
    assert message.startswith('worker "subtle" failed during audit: its result for task ')
    assert "differs from the coordinator's own" in message


def _cpu_seconds(process: psutil.Process) -> float | None:
    try:
        times = process.cpu_times()
    except psutil.Error:
        return None
    return float(times.user + times.system)


def test_workers_of_a_killed_coordinator_stop_within_a_kernel_boundary(
    tmp_path: Path, coordinators: object
) -> None:
    cluster = write_pipe_pair(tmp_path / "cluster")
    job = tmp_path / "job"
    # Chunks of 4 * 10**9 samples: about 20 CPU-seconds each, far more than the bound below.
    done = run_aner(
        "parallel", "run", "--samples", "10000000000", "--seed", "3", "--chunk", "4000000000",
        "--cluster", str(cluster), "--output", str(job), "--background",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    pid = read_status(job).pid
    coordinators.add(pid)  # type: ignore[attr-defined]

    def workers() -> list[psutil.Process]:
        try:
            children = psutil.Process(pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        return [p for p in children if "worker" in " ".join(p.cmdline())]

    # Generous waits: on a loaded machine two workers take a while to start.
    running = wait_for(lambda: len(workers()) == 2 and workers(), 300, "two workers")
    wait_for(lambda: read_status(job).in_flight == 2, 300, "both workers computing")
    before = {p.pid: _cpu_seconds(p) for p in running}
    os.kill(pid, signal.SIGKILL)
    # Their stdin ends with the coordinator: each stops at its next sub-range boundary. The
    # bound is on work, not on time, so that a busy machine cannot fail it: after the kill a
    # worker may use well under a CPU-second, where finishing its chunk would take many.
    last = dict(before)

    def stopped() -> bool:
        for process in running:
            seconds = _cpu_seconds(process)
            if seconds is not None and not process_gone(process.pid):
                last[process.pid] = seconds
        return all(process_gone(p.pid) for p in running)

    wait_for(stopped, 300, "the workers to stop")
    for process in running:
        start, end = before[process.pid], last[process.pid]
        assert start is not None and end is not None
        assert end - start < 1.0, f"worker {process.pid} computed {end - start:.2f} s on"


def test_a_diverging_fit_fails_as_a_divergence_naming_the_step(tmp_path: Path) -> None:
    done = run_aner(
        "parallel", "regression", "--samples", "10000", "--steps", "5", "--rate", "1e308",
        "--seed", "1", "--workers", "1", "--output", str(tmp_path / "job"),
    )  # fmt: skip
    assert done.returncode == 3
    assert "numerical divergence" in done.stderr
    assert "step 1 of 5" in done.stderr
    assert "lower --rate" in done.stderr
    assert "inconsistent" not in done.stderr
    assert "Traceback" not in done.stderr
