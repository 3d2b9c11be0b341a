"""Detached background jobs, for real: `--background`, the readiness handshake, `cancel`,
`kill -9` of a coordinator, the job lock across processes.

Every test starts real `aner` processes and sends real signals; the `coordinators` fixture
kills whatever coordinator a test leaves behind. Shared helpers live in
support.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from suite_env import child_env
from support import (
    ANER,
    CHUNK,
    FEW_SECONDS,
    HANG_S,
    LONG,
    Coordinators,
    finish,
    lock_held,
    process_gone,
    reap,
    result_of,
    run_aner,
    spawned,
    status_of,
    submit,
    wait_for,
    wait_running,
    write_cluster_file,
)

from aner_coord.admission import Job, admit
from aner_coord.computations.montecarlo import MonteCarloRequest
from aner_coord.jobdir.status import JobState
from aner_coord.requests import JobRequest, LocalExecution


def mc_job(samples: int, seed: int, output: Path, workers: int = 0) -> Job:
    return admit(
        JobRequest(
            computation=MonteCarloRequest(samples=samples, seed=seed),
            execution=LocalExecution(workers=workers),
            output=str(output),
        )
    )


# --------------------------------------------------------------------------- runs


def test_background_run_is_ready_at_once_and_watch_follows_it_to_completion(
    tmp_path: Path, coordinators: Coordinators
) -> None:
    job = tmp_path / "job"
    started = time.monotonic()
    done = run_aner(
        "parallel", "run", "--samples", FEW_SECONDS, "--seed", "1", "--workers", "1",
        "--chunk", CHUNK, "--output", str(job), "--background",
    )  # fmt: skip
    submit_s = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    pid = coordinators.add(status_of(job).pid)
    # Ready means: locked, manifest and first status written, and the job still ahead.
    assert lock_held(job)
    status = status_of(job)
    assert status.state in (JobState.STARTING, JobState.RUNNING)
    assert status.accepted < int(FEW_SECONDS)
    assert (job / "run-manifest.json").is_file()
    assert (job / "coordinator.log").is_file()
    assert not (job / "result.json").exists()
    assert submit_s < 10, submit_s
    # The submitter says where the job is and how to follow and cancel it.
    assert str(job) in done.stdout
    assert f"aner parallel status --job {job} --watch" in done.stdout
    assert f"aner parallel cancel --job {job}" in done.stdout
    assert f"coordinator pid {pid}" in done.stdout
    # Owner-only, as docs/contracts.md, section 7 says.
    assert (job.stat().st_mode & 0o777) == 0o700
    for name in ("run-manifest.json", "status.json", "coordinator.log", "coordinator.lock"):
        assert ((job / name).stat().st_mode & 0o777) == 0o600, name
    assert (job / "coordinator.lock").read_text().strip() == str(pid)

    watch = run_aner("parallel", "status", "--job", str(job), "--watch", timeout=60)
    assert watch.returncode == 0, watch.stderr
    lines = watch.stdout.splitlines()
    assert lines[-1].startswith(f"COMPLETED {int(FEW_SECONDS):,} of {int(FEW_SECONDS):,}")
    result = json.loads((job / "result.json").read_text())
    assert result["samples"] == int(FEW_SECONDS)
    assert result["seed"] == 1
    assert 3.14 < result["estimate"] < 3.143
    assert status_of(job).state is JobState.COMPLETED
    # The coordinator let go: no lock file, no process.
    assert not (job / "coordinator.lock").exists()
    wait_for(lambda: process_gone(pid), 10, "the coordinator to exit")
    log = (job / "coordinator.log").read_text()
    assert "ready: lock held" in log
    assert "completed:" in log
    assert f"{int(FEW_SECONDS):,} samples" in log


def test_background_hits_equal_the_foreground_run(
    tmp_path: Path, coordinators: Coordinators
) -> None:
    args = ("parallel", "run", "--samples", "3000000", "--seed", "12345", "--chunk", "100000")
    fg = run_aner(*args, "--workers", "1", "--output", str(tmp_path / "fg"))
    assert fg.returncode == 0, fg.stderr
    bg = run_aner(*args, "--workers", "2", "--output", str(tmp_path / "bg"), "--background")
    assert bg.returncode == 0, bg.stderr
    coordinators.add(status_of(tmp_path / "bg").pid)
    watch = run_aner("parallel", "status", "--job", str(tmp_path / "bg"), "--watch")
    assert watch.returncode == 0, watch.stderr
    fg_result = json.loads((tmp_path / "fg" / "result.json").read_text())
    bg_result = json.loads((tmp_path / "bg" / "result.json").read_text())
    assert bg_result["samples"] == fg_result["samples"] == 3_000_000
    assert bg_result["hits"] == fg_result["hits"]
    assert bg_result["execution"]["workers"] == 2


def test_cancel_mid_run_ends_cancelled_with_no_result_and_no_process(
    tmp_path: Path, coordinators: Coordinators
) -> None:
    job = tmp_path / "job"
    pid = coordinators.add(submit(job, LONG, "--workers", "1"))
    wait_running(job)
    cancel = run_aner("parallel", "cancel", "--job", str(job))
    assert cancel.returncode == 4, (cancel.stdout, cancel.stderr)
    assert "CANCELLED" in cancel.stdout
    status = status_of(job)
    assert status.state is JobState.CANCELLED
    assert 0 < status.accepted < int(LONG)
    assert not (job / "result.json").exists()
    assert (job / "cancel-request").exists()
    assert not (job / "coordinator.lock").exists()
    wait_for(lambda: process_gone(pid), 10, "the coordinator to exit")
    assert "cancel requested through cancel-request" in (job / "coordinator.log").read_text()
    # Asking again reports the finished state plainly.
    again = run_aner("parallel", "cancel", "--job", str(job))
    assert again.returncode == 4
    assert "already ended: CANCELLED" in again.stdout


def test_sigterm_to_a_background_coordinator_cancels_gracefully(
    tmp_path: Path, coordinators: Coordinators
) -> None:
    job = tmp_path / "job"
    pid = coordinators.add(submit(job, LONG, "--workers", "1"))
    wait_running(job)
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: process_gone(pid), 20, "the coordinator to exit")
    assert status_of(job).state is JobState.CANCELLED
    assert not (job / "result.json").exists()
    assert "SIGTERM received: cancelling" in (job / "coordinator.log").read_text()
    status = run_aner("parallel", "status", "--job", str(job))
    assert status.returncode == 4


def test_kill_9_of_the_coordinator_is_observed_as_offline(
    tmp_path: Path, coordinators: Coordinators
) -> None:
    job = tmp_path / "job"
    pid = coordinators.add(submit(job, LONG, "--workers", "1"))
    wait_running(job)
    with spawned([ANER, "parallel", "status", "--job", str(job), "--watch"]) as watch:
        assert watch.stdout is not None
        first = watch.stdout.readline()  # the watcher is following the live job
        assert first.startswith("RUNNING"), first
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: process_gone(pid), 10, "the killed coordinator to disappear")
        code, out, _err = finish(watch, timeout=20)
    assert code == 5
    out = first + out
    assert out.splitlines()[-1].startswith("COORDINATOR_OFFLINE: last confirmed snapshot ")

    last = status_of(job)
    status = run_aner("parallel", "status", "--job", str(job))
    assert status.returncode == 5, status.stderr
    assert "COORDINATOR_OFFLINE (last confirmed snapshot: RUNNING" in status.stdout
    assert f"{last.accepted:,} of {int(LONG):,} samples" in status.stdout
    assert "ETA" not in status.stdout  # an offline job has no ETA
    assert f"aner parallel resume --job {job}" in status.stdout
    as_json = run_aner("parallel", "status", "--job", str(job), "--json")
    assert as_json.returncode == 5
    observed = json.loads(as_json.stdout)
    assert observed["observed_state"] == "COORDINATOR_OFFLINE"
    assert observed["state"] == "RUNNING"
    assert observed["seq"] == last.seq
    assert observed["snapshot_age_s"] > 0
    cancel = run_aner("parallel", "cancel", "--job", str(job))
    assert cancel.returncode == 5
    assert "no coordinator to cancel" in cancel.stderr


def test_kill_9_of_a_cluster_coordinator_leaves_no_worker(
    tmp_path: Path, coordinators: Coordinators
) -> None:
    cluster = write_cluster_file(tmp_path / "cluster")
    job = tmp_path / "job"
    pid = coordinators.add(submit(job, LONG, "--cluster", str(cluster)))
    wait_running(job)
    workers = [p for p in psutil.Process(pid).children() if "worker" in p.cmdline()]
    assert len(workers) == 1, [p.cmdline() for p in workers]
    worker = workers[0]
    # The worker inherited neither the job lock nor the readiness pipe.
    open_paths = [
        os.readlink(f"/proc/{worker.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{worker.pid}/fd")
    ]
    assert not any("coordinator.lock" in path for path in open_paths), open_paths
    try:
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: process_gone(worker.pid), 10, "the orphaned worker to exit by itself")
    finally:
        if not process_gone(worker.pid):
            worker.kill()
    status = run_aner("parallel", "status", "--job", str(job))
    assert status.returncode == 5
    assert "w1: 1 slot" in status.stdout
    # Public output names the worker by identity, never by executable path.
    for name in ("coordinator.log", "status.json", "run-manifest.json"):
        assert ANER not in (job / name).read_text(), name


def test_submit_from_python_returns_once_ready_and_lets_the_coordinator_go(
    tmp_path: Path, coordinators: Coordinators, capsys: pytest.CaptureFixture[str]
) -> None:
    from aner_coord.cli.background import submit as submit_job

    job = tmp_path / "job"
    # Warnings are errors here: a Popen left to warn "still running" would fail the test.
    assert submit_job(mc_job(2_000_000, 4, job, workers=1), quiet=True) == 0
    pid = coordinators.add(status_of(job).pid)
    assert pid != os.getpid()
    assert capsys.readouterr() == ("", "")
    wait_for(lambda: (job / "result.json").exists() and not lock_held(job), 30, "the result")
    assert json.loads((job / "result.json").read_text())["samples"] == 2_000_000


# --------------------------------------------------------------------------- admission

# A teacher set large enough that admitting it whole (every row's role) grows a process by
# about 45 MB (measured: 197 MB against 152 MB for 200 rows before `precheck`, 1 MB apart
# after), small enough that its one-epoch job is a few seconds of training.
_LARGE_TEACHER = 4_000_000
_RSS_SLACK_KB = 8 << 10  # between two runs of the same foreground, whatever their rows


def _train_teacher(rows: int, output: Path, *extra: str) -> list[str]:
    return [
        ANER, "parallel", "train", "--teacher", f"{rows},1,2", "--seed", "3", "--epochs", "1",
        "--hidden", "1", "--batch", "1000000", "--chunk", "1000000", "--workers", "1",
        # most rows only validate or test: one forward pass each, where training takes two
        "--test-fraction", "0.45", "--validation-fraction", "0.45",
        "--output", str(output), "--quiet", *extra,
    ]  # fmt: skip


def _foreground_rss_kb(argv: list[str]) -> int:
    """Run `argv` (a --background command) to its exit; the peak RSS of that process alone
    (`wait4`: the detached coordinator is not its waited child, and is not counted)."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    try:
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    finally:
        reap(proc)
    assert proc.returncode == 0, argv
    return usage.ru_maxrss


@pytest.mark.slow
def test_background_admission_leaves_the_rows_to_the_coordinator(
    tmp_path: Path, coordinators: Coordinators
) -> None:
    tiny, large, here = tmp_path / "tiny", tmp_path / "large", tmp_path / "here"
    baseline = _foreground_rss_kb(_train_teacher(200, tiny, "--background"))
    coordinators.add(status_of(tiny).pid)
    peak = _foreground_rss_kb(_train_teacher(_LARGE_TEACHER, large, "--background"))
    coordinators.add(status_of(large).pid)
    assert peak <= baseline + _RSS_SLACK_KB, (peak, baseline)
    # The coordinator admitted it whole: the job is the one a foreground run trains.
    with spawned(_train_teacher(_LARGE_TEACHER, here)) as proc:
        code, _, err = finish(proc, HANG_S)
    assert code == 0, err
    wait_for(lambda: (large / "result.json").exists() and not lock_held(large), HANG_S, "result")
    assert (large / "model.npz").read_bytes() == (here / "model.npz").read_bytes()
    ours, theirs = result_of(large), result_of(here)
    assert ours["roles"] == theirs["roles"] and ours["roles"]["train"] > 350_000
    assert ours["roles_sha256"] == theirs["roles_sha256"]
    assert ours["test_loss"] == theirs["test_loss"]


@pytest.mark.parametrize("command", ["train", "search"])
def test_a_refusal_only_the_whole_admission_finds_is_still_the_commands_own(
    tmp_path: Path, command: str
) -> None:
    # Too few teacher rows leave a role empty: found when the rows get their roles, which
    # with --background is the coordinator's work; the command still says it, as the
    # foreground does (a search file's keys named as the file writes them), exit 2.
    spec = tmp_path / "search.toml"
    spec.write_text("teacher = [3, 2, 2]\nseed = 7\nfolds = 2\nhidden = [4]\n[grid]\nlr = [0.01]\n")

    def argv(output: Path, *extra: str) -> list[str]:
        if command == "train":
            return _train_teacher(2, output, *extra)[1:]
        return ["parallel", "search", "--spec", str(spec), "--output", str(output), *extra]

    here = run_aner(*argv(tmp_path / "here"))
    job = tmp_path / "job"
    there = run_aner(*argv(job, "--background"))
    assert (here.returncode, there.returncode) == (2, 2)
    assert there.stderr == here.stderr
    assert there.stderr.count("\n") == 1 and "leave no" in there.stderr
    assert there.stdout == "" and not job.exists()


def test_the_plans_notes_come_back_from_the_coordinator_that_admitted_it(
    tmp_path: Path, coordinators: Coordinators
) -> None:
    from aner_coord.computations.dense.request import DenseRequest

    # A step of 64 rows is one chunk of 128 for two worker slots: one slot idles. The note
    # is the whole admission's, made in the coordinator; the command says it, as in the
    # foreground.
    job = tmp_path / "job"
    options = {"teacher": (1000, 4, 2), "seed": 1, "batch": 64, "epochs": 1}
    done = run_aner(
        "parallel", "train", "--teacher", "1000,4,2", "--seed", "1", "--batch", "64",
        "--epochs", "1", "--workers", "2", "--output", str(job), "--background",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    coordinators.add(status_of(job).pid)
    notes = admit(
        JobRequest(computation=DenseRequest(**options), execution=LocalExecution(workers=2))  # type: ignore[arg-type]
    ).notes
    assert len(notes) == 1 and "1 slot(s) idle" in notes[0]
    assert done.stderr == f"aner: note: {notes[0]}\n"
    assert status_of(job).notes == list(notes)


def test_a_mistake_in_the_options_is_refused_before_any_coordinator_starts(
    tmp_path: Path,
) -> None:
    job = tmp_path / "job"
    # A missing file: the submitter's own check (a coordinator would have logged its pid).
    done = run_aner(
        "parallel", "train", "--data", str(tmp_path / "absent.csv"), "--seed", "1",
        "--output", str(job), "--background",
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("aner: --data: cannot read") and "coordinator" not in done.stderr
    assert not job.exists()


# --------------------------------------------------------------------------- submit errors


def test_background_with_an_existing_output_is_refused_and_starts_nothing(
    tmp_path: Path,
) -> None:
    job = tmp_path / "exists"
    job.mkdir()
    before = sorted(os.listdir(tmp_path))
    done = run_aner(
        "parallel", "run", "--samples", "1000000", "--seed", "1", "--output", str(job),
        "--background",
    )  # fmt: skip
    assert done.returncode == 2
    assert "is an existing directory" in done.stderr
    assert done.stdout == ""
    assert os.listdir(job) == []
    assert sorted(os.listdir(tmp_path)) == before


def _sitecustomize(tmp_path: Path, body: str) -> dict[str, str]:
    """An environment whose Python runs `body` at start-up in the detached coordinator only
    (recognised by its `coordinate` subcommand): a real failure injected before readiness."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os, sys, time\n"
        "_argv = open('/proc/self/cmdline', 'rb').read().split(b'\\0')\n"
        "if b'coordinate' in _argv:\n" + textwrap.indent(textwrap.dedent(body), "    ")
    )
    return child_env(PYTHONPATH=str(hook))


def test_a_coordinator_failing_before_ready_fails_submit_with_its_message(
    tmp_path: Path,
) -> None:
    job = tmp_path / "job"
    # The output appears between the submitter's check and the coordinator's own.
    env = _sitecustomize(tmp_path, f"os.mkdir({str(job)!r})\n")
    done = run_aner(
        "parallel", "run", "--samples", "1000000", "--seed", "1", "--output", str(job),
        "--background", env=env,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        f"aner: output {job} is an existing directory: choose a path that does not exist yet"
    )
    assert os.listdir(job) == []


def test_a_coordinator_dying_before_ready_fails_submit_with_its_last_words(
    tmp_path: Path,
) -> None:
    job = tmp_path / "job"
    env = _sitecustomize(
        tmp_path, "sys.stderr.write('simulated crash at start-up\\n'); os._exit(7)\n"
    )
    done = run_aner(
        "parallel", "run", "--samples", "1000000", "--seed", "1", "--output", str(job),
        "--background", env=env,
    )  # fmt: skip
    assert done.returncode == 3
    assert "exited (status 7) before it was ready: simulated crash at start-up" in done.stderr
    assert not job.exists()


def test_a_coordinator_never_ready_is_killed_after_the_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aner_coord.cli.background import submit as submit_job
    from aner_coord.errors import AnerError

    job = tmp_path / "job"
    pid_file = tmp_path / "stuck.pid"
    env = _sitecustomize(
        tmp_path, f"open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)\n"
    )
    monkeypatch.setenv("PYTHONPATH", env["PYTHONPATH"])
    prepared = mc_job(1000, 1, job)
    with pytest.raises(AnerError, match="not ready after 1 s and was stopped") as caught:
        submit_job(prepared, quiet=True, ready_timeout_s=1.0)
    assert caught.value.exit_code == 3
    stuck = int(pid_file.read_text())
    assert process_gone(stuck)


# --------------------------------------------------------------------------- the job lock

_HOLDER = """
import subprocess, sys, time
from pathlib import Path
from aner_coord.jobdir import JobLock
JobLock(Path(sys.argv[1])).acquire()
# close_fds=False: the child inherits every inheritable descriptor, so only O_CLOEXEC
# keeps the lock from it.
child = subprocess.Popen(["sleep", "60"], close_fds=False)
print(child.pid, flush=True)
time.sleep(60)
"""


def test_one_coordinator_per_job_and_the_lock_is_never_inherited(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    with spawned([sys.executable, "-c", _HOLDER, str(job)], stderr=None) as holder:
        assert holder.stdout is not None
        grandchild = int(holder.stdout.readline())
        try:
            _check_the_lock(job, holder, grandchild)
        finally:
            if not process_gone(grandchild):
                os.kill(grandchild, signal.SIGKILL)


def _open_files(pid: int) -> list[str]:
    """What `pid`'s descriptors point at. One that vanishes between listing and reading was
    being closed by the exec (O_CLOEXEC), so it is not inherited and is left out."""
    targets = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):
            targets.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return targets


def _check_the_lock(job: Path, holder: subprocess.Popen[str], grandchild: int) -> None:
    from aner_coord.errors import RequestError
    from aner_coord.jobdir import JobLock, lock_is_held

    assert lock_is_held(job)
    assert (job / "coordinator.lock").read_text().strip() == str(holder.pid)
    with pytest.raises(RequestError, match="already has a live coordinator"):
        JobLock(job).acquire()
    # After its exec: between fork and exec the child briefly holds a pipe of its own.
    wait_for(lambda: psutil.Process(grandchild).name() == "sleep", 30, "the child's exec")
    targets = _open_files(grandchild)
    assert not any(t.endswith("coordinator.lock") for t in targets), targets
    # Its holder killed, the lock is free although the child it spawned lives on.
    reap(holder)
    assert not process_gone(grandchild)
    assert not lock_is_held(job)
    second = JobLock(job)
    second.acquire()
    assert (job / "coordinator.lock").read_text().strip() == str(os.getpid())
    second.release()
    assert not (job / "coordinator.lock").exists()
