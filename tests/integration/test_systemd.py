"""The systemd user unit and sd_notify, for real: `systemd-analyze verify` on the shipped unit,
its ExecStart command line run as systemd would run it, and notifications received on real
unix datagram sockets (a path and an abstract one)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from suite_env import child_env
from support import (
    ANER,
    CHUNK,
    DEPLOY,
    LONG,
    finish,
    process_gone,
    spawned,
    status_of,
    wait_for,
    wait_running,
    write_cluster_file,
)

from aner_coord.admission import admit
from aner_coord.cli.jobs import load_spec_file
from aner_coord.computations.montecarlo import MonteCarloRequest
from aner_coord.computations.regression import RegressionRequest
from aner_coord.errors import RequestError
from aner_coord.jobdir.status import JobState
from aner_coord.requests import ClusterExecution, LocalExecution

UNIT = DEPLOY / "aner-job@.service"
EXAMPLE = DEPLOY / "example-job.toml"


def unit_settings() -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if line.strip() and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            settings.setdefault(key, []).append(value)
    return settings


def expand(value: str, home: Path, instance: str) -> str:
    return value.replace("%h", str(home)).replace("%i", instance)


# --------------------------------------------------------------------------- the unit


def _verify(unit: Path) -> tuple[int, list[str]]:
    done = subprocess.run(
        ["systemd-analyze", "verify", str(unit)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    # It may also grumble about unrelated units of this machine: keep what concerns ours.
    ours = [line for line in (done.stdout + done.stderr).splitlines() if "aner-job@" in line]
    return done.returncode, ours


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze absent")
def test_the_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    # verify loads an instance, not a bare template; the file is copied under that name.
    instance = tmp_path / "aner-job@demo.service"
    shutil.copy(UNIT, instance)
    returncode, complaints = _verify(instance)
    assert returncode == 0, complaints
    assert complaints == []
    # ...and it does notice what we would get wrong.
    broken = tmp_path / "broken"
    broken.mkdir()
    copy = broken / "aner-job@demo.service"
    copy.write_text(UNIT.read_text().replace("Type=notify", "Type=notifyy"))
    assert any("service type" in line for line in _verify(copy)[1])
    copy.write_text(UNIT.read_text().replace("KillMode=", "KilMode="))
    assert any("Unknown key 'KilMode'" in line for line in _verify(copy)[1])
    copy.write_text(UNIT.read_text().replace("/usr/bin/env ", "/nonexistent/env "))
    returncode, complaints = _verify(copy)
    assert returncode != 0
    assert any("is not executable" in line for line in complaints)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze absent")
def test_the_resume_unit_passes_verify_and_runs_resume_interrupted(tmp_path: Path) -> None:
    """deploy/aner-resume.service (issue 36, item 4): what resumes interrupted jobs at boot."""
    unit = tmp_path / "aner-resume.service"
    shutil.copy(DEPLOY / "aner-resume.service", unit)
    done = subprocess.run(
        ["systemd-analyze", "verify", str(unit)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    ours = [line for line in (done.stdout + done.stderr).splitlines() if "aner-resume" in line]
    assert done.returncode == 0 and ours == [], ours
    text = unit.read_text()
    assert "\nExecStart=/usr/bin/env aner parallel jobs --resume-interrupted\n" in text
    assert "\nType=oneshot\n" in text and "\nWantedBy=default.target\n" in text
    assert "\nKillMode=process\n" in text  # the resumed coordinators outlive the unit


def test_the_unit_says_what_the_contract_needs() -> None:
    settings = unit_settings()
    assert settings["Type"] == ["notify"]
    assert settings["NotifyAccess"] == ["main"]
    assert settings["KillSignal"] == ["SIGTERM"]
    assert settings["KillMode"] == ["mixed"]
    assert int(settings["TimeoutStopSec"][0]) > 0
    assert settings["SuccessExitStatus"] == ["4"]
    # A dead coordinator or a failed job is restarted, and the restart resumes the job.
    assert settings["Restart"] == ["on-failure"]
    assert settings["RestartPreventExitStatus"] == ["2"]
    command = shlex.split(settings["ExecStart"][0])
    assert command[-6:] == [
        "aner", "parallel", "run", "--spec", "%h/.config/aner/jobs/%i.toml", "--resume"
    ]  # fmt: skip


def test_the_example_spec_runs_as_shipped(tmp_path: Path) -> None:
    # Copied into a working directory as a user would, run as it is: no directory to make.
    done = subprocess.run(
        [ANER, "parallel", "run", "--spec", str(EXAMPLE), "--quiet"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "aner-job-pi-2e9-seed1" / "result.json").read_text())
    assert result["samples"] == 2_000_000_000 and result["seed"] == 1
    assert 0 < result["hits"] < result["samples"]


def test_the_example_spec_describes_both_computations(tmp_path: Path) -> None:
    request = load_spec_file(str(EXAMPLE))
    assert request.computation == MonteCarloRequest(samples=2_000_000_000, seed=1)
    assert request.execution == LocalExecution(workers=0, chunk=4_000_000)
    assert request.output == "aner-job-pi-2e9-seed1"
    assert request.audit == 0.0
    text = EXAMPLE.read_text()
    # The commented-out alternatives, swapped in: the regression fixture on a cluster.
    computation = text[text.index("[computation]") : text.index("[execution]")]
    alternative = re.findall(r"^# (kind = \"regression\"$.*?)(?=^\n|\Z)", computation, re.M | re.S)
    assert alternative, computation
    body = re.sub(r"^# ", "", alternative[0], flags=re.MULTILINE)
    regression = tmp_path / "regression.toml"
    regression.write_text(f'output = "out"\n\n[computation]\n{body}\n')
    request = load_spec_file(str(regression))
    assert request.computation == RegressionRequest(samples=1_000_000, steps=50, rate=0.5, seed=7)
    assert request.execution == LocalExecution()
    execution = text[text.index("[execution]") :]
    cluster = re.sub(r"^# ", "", execution[execution.index('# kind = "cluster"') :], flags=re.M)
    clustered = tmp_path / "cluster.toml"
    clustered.write_text(
        f'[computation]\nkind = "monte-carlo"\nsamples = 10\nseed = 1\n\n[execution]\n{cluster}'
    )
    assert load_spec_file(str(clustered)).execution == ClusterExecution(
        config="/home/me/.config/aner/cluster", chunk=4_000_000
    )
    # Both computations are admissible requests as they stand (given an output that may be
    # created).
    from msgspec.structs import replace

    for path in (EXAMPLE, regression):
        job = admit(replace(load_spec_file(str(path)), output=str(tmp_path / "out")))
        assert job.admitted.items > 0
        assert job.output == tmp_path / "out"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("samples = 10\nseed = 1\n", "missing [computation]"),
        ('[computation]\nkind = "fixture"\nsamples = 10\nseed = 1\n', "fixture"),
        ('[computation]\nkind = "monte-carlo"\nsamples = 10\nseed = 1\nsurprise = 1\n', "surprise"),
        ('colour = "red"\n[computation]\nkind = "monte-carlo"\nsamples = 10\nseed = 1\n', "colour"),
        (
            '[computation]\nkind = "monte-carlo"\nsamples = 10\nseed = 1\n'
            '[execution]\nkind = "local"\nworkers = "many"\n',
            "workers",
        ),
        ("computation = [", "spec file"),
    ],
    ids=["flat", "old-kind", "unknown-computation-key", "unknown-top-key", "bad-type", "syntax"],
)
def test_a_bad_spec_is_refused_naming_the_file(tmp_path: Path, text: str, words: str) -> None:
    spec = tmp_path / "bad.toml"
    spec.write_text(text)
    with pytest.raises(RequestError) as caught:
        load_spec_file(str(spec))
    message = str(caught.value)
    assert message.startswith(f"spec file {spec}: ")
    assert words in message


# --------------------------------------------------------------------------- sd_notify


class NotifySocket:
    """A bound unix datagram socket collecting what a service sends, as systemd would."""

    def __init__(self, address: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address)
        self.sock.settimeout(0.1)
        self.messages: list[str] = []
        self.ready_saw_status: bool | None = None
        self.job: Path | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive)
        self._thread.start()

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            message = data.decode()
            if "READY=1" in message.splitlines() and self.job is not None:
                self.ready_saw_status = (self.job / "status.json").exists()
            self.messages.append(message)

    def fields(self) -> list[str]:
        return [field for message in self.messages for field in message.splitlines()]

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


@pytest.fixture
def path_socket(tmp_path: Path) -> Iterator[tuple[NotifySocket, str]]:
    address = str(tmp_path / "notify")
    notify = NotifySocket(address)
    try:
        yield notify, address
    finally:
        notify.close()


@pytest.fixture
def abstract_socket() -> Iterator[tuple[NotifySocket, str]]:
    name = f"aner-test-{os.getpid()}-{time.monotonic_ns()}"
    notify = NotifySocket("\0" + name)
    try:
        yield notify, "@" + name
    finally:
        notify.close()


def test_the_units_command_runs_a_job_and_notifies_systemd(
    tmp_path: Path, path_socket: tuple[NotifySocket, str]
) -> None:
    notify, address = path_socket
    home = tmp_path / "home"
    jobs = home / ".config" / "aner" / "jobs"
    jobs.mkdir(parents=True)
    (jobs / "demo.toml").write_text(
        'output = "aner-jobs/demo"\n\n'
        '[computation]\nkind = "monte-carlo"\nsamples = 400_000_000\nseed = 5\n\n'
        f'[execution]\nkind = "local"\nworkers = 1\nchunk = {CHUNK}\n'
    )
    (home / "aner-jobs").mkdir()
    settings = unit_settings()
    # Run what systemd would: ExecStart in WorkingDirectory, with the unit's PATH and our
    # virtualenv first (as its comment tells a virtualenv user to do).
    command = shlex.split(expand(settings["ExecStart"][0], home, "demo"))
    unit_path = expand(settings["Environment"][0].removeprefix("PATH="), home, "demo")
    env = child_env(
        dict(HOME=str(home), PATH=f"{Path(ANER).parent}:{unit_path}", NOTIFY_SOCKET=address)
    )
    job = home / "aner-jobs" / "demo"
    notify.job = job
    done = subprocess.run(
        command, cwd=expand(settings["WorkingDirectory"][0], home, "demo"), env=env,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    wait_for(lambda: "STOPPING=1" in notify.fields(), 5, "STOPPING=1")
    fields = notify.fields()
    assert fields.count("READY=1") == 1
    assert notify.ready_saw_status is True  # READY only once the first status was written
    statuses = [f for f in fields if f.startswith("STATUS=")]
    assert any(s.startswith("STATUS=RUNNING ") for s in statuses), statuses
    assert statuses[-1].startswith("STATUS=COMPLETED 400,000,000 of 400,000,000 samples")
    assert fields.index("READY=1") < fields.index("STOPPING=1")
    assert fields.count("STOPPING=1") == 1
    assert json.loads((job / "result.json").read_text())["samples"] == 400_000_000


def test_sigterm_under_systemd_is_a_graceful_cancel(
    tmp_path: Path, abstract_socket: tuple[NotifySocket, str]
) -> None:
    notify, address = abstract_socket
    cluster = write_cluster_file(tmp_path / "cluster")
    spec = tmp_path / "job.toml"
    job = tmp_path / "job"
    spec.write_text(
        f'output = "{job}"\n\n'
        f'[computation]\nkind = "monte-carlo"\nsamples = {LONG}\nseed = 9\n\n'
        f'[execution]\nkind = "cluster"\nconfig = "{cluster}"\nchunk = {CHUNK}\n'
    )
    argv = [ANER, "parallel", "run", "--spec", str(spec)]
    env = child_env(NOTIFY_SOCKET=address)
    with spawned(argv, env=env) as service:
        wait_for(lambda: "READY=1" in notify.fields(), 30, "READY=1")
        wait_running(job)
        workers = [p for p in psutil.Process(service.pid).children() if "worker" in p.cmdline()]
        assert len(workers) == 1
        worker_pid = workers[0].pid
        # The notify socket is the service's alone: its workers do not inherit it.
        assert b"NOTIFY_SOCKET=" not in Path(f"/proc/{worker_pid}/environ").read_bytes()
        service.send_signal(signal.SIGTERM)
        code, _out, err = finish(service, timeout=30)
    assert code == 4, err
    assert "job cancelled" in err
    assert status_of(job).state is JobState.CANCELLED
    assert not (job / "result.json").exists()
    assert "STOPPING=1" in notify.fields()
    assert any(f.startswith("STATUS=CANCELLED") for f in notify.fields()), notify.fields()
    wait_for(lambda: process_gone(worker_pid), 10, "the worker to be reaped")


def test_a_regression_spec_runs_the_fixture(tmp_path: Path) -> None:
    spec = tmp_path / "regression.toml"
    job = tmp_path / "job"
    spec.write_text(
        f'output = "{job}"\n\n'
        '[computation]\nkind = "regression"\nsamples = 100_000\nsteps = 3\nrate = 0.5\n'
        'seed = 7\n\n[execution]\nkind = "local"\nworkers = 1\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "aner_coord", "parallel", "run", "--spec", str(spec)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads((job / "result.json").read_text())
    assert result["steps"] == 3
    assert result["samples"] == 100_000
    assert result["final_loss"] < result["initial_loss"]
    assert result["computation"] == "regression"
    assert status_of(job).kind == "regression"


def test_the_units_resume_after_a_cancel_continues_the_job_and_says_ready(
    tmp_path: Path, path_socket: tuple[NotifySocket, str]
) -> None:
    """`aner parallel cancel`, then the unit started again (`run --spec F --resume`): the
    job goes on from its ledger (the cancel request is not obeyed a second time), systemd
    hears READY once the resumed job's first status is on disk, and the hits are exact."""
    notify, address = path_socket
    job = tmp_path / "job"
    spec = tmp_path / "job.toml"
    spec.write_text(
        f'output = "{job}"\n\n[computation]\nkind = "monte-carlo"\nsamples = 1_000_000_000\n'
        'seed = 42\n\n[execution]\nkind = "local"\nworkers = 1\nchunk = 10_000_000\n'
    )
    argv = [ANER, "parallel", "run", "--spec", str(spec), "--resume"]
    with spawned(argv) as first:
        wait_running(job, min_accepted=100_000_000, timeout=120)
        cancel = subprocess.run(
            [ANER, "parallel", "cancel", "--job", str(job)],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert cancel.returncode == 4, cancel.stderr
        code, _out, _err = finish(first, timeout=60)
    assert code == 4
    assert status_of(job).state is JobState.CANCELLED
    notify.job = job
    again = subprocess.run(
        argv, env=child_env(NOTIFY_SOCKET=address),
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "785,386,550 hits" in again.stdout  # docs/contracts.md, section 1, seed 42
    final = status_of(job)
    assert (final.state, final.resumes) == (JobState.COMPLETED, 1)
    assert final.recovered >= 100_000_000
    assert not (job / "cancel-request").exists()
    wait_for(lambda: "STOPPING=1" in notify.fields(), 5, "STOPPING=1")
    assert notify.fields().count("READY=1") == 1
    assert notify.ready_saw_status is True
