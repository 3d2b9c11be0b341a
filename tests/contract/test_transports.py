"""One contract suite for every worker transport: local pipes, SSH through a real sshd and
Slurm job steps on a real single-node Slurm.

The worker is a small Python echo program: it says hello on stderr, prints its pid on stdout,
then copies stdin to stdout until end of file.  The loopback sshd runs it as the current user,
and the Slurm node is this machine, so the test can see (and kill) the very process behind
each transport.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import sys
import time
import warnings
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest
from slurm_support import HELD_PARTITION, SlurmCluster
from sshd_support import SshServer, free_port
from support import process_gone, wait_for

from aner_coord.clusterfile import SlurmEndpoint
from aner_coord.transports.base import Transport, TransportError
from aner_coord.transports.pipe import open_pipe
from aner_coord.transports.registry import open_slurm, open_ssh
from aner_coord.transports.slurm import (
    SLURM_START_TIMEOUT_ENV,
    SLURM_START_TIMEOUT_S,
    slurm_start_timeout,
    srun_command,
)

T = TypeVar("T")
Opener = Callable[[Sequence[str]], Awaitable[Transport]]

ECHO = [
    sys.executable,
    "-c",
    """\
import os, sys
sys.stderr.write("echo worker ready\\n")
sys.stderr.flush()
os.write(1, b"%d\\n" % os.getpid())
while chunk := os.read(0, 65536):
    while chunk:
        chunk = chunk[os.write(1, chunk):]
""",
]
STUBBORN = [
    sys.executable,
    "-c",
    """\
import os, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
os.write(1, b"%d\\n" % os.getpid())
time.sleep(60)
""",
]
MISSING = "/nonexistent/aner-worker-bin"


def run(coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def use_home(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)


@pytest.fixture(
    params=[
        "pipe",
        pytest.param("ssh", marks=pytest.mark.ssh),
        pytest.param("slurm", marks=pytest.mark.slurm),
    ]
)
def open_worker(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Opener:
    if request.param == "pipe":
        return lambda argv: open_pipe("Atlas-01", argv)
    if request.param == "slurm":
        cluster: SlurmCluster = request.getfixturevalue("slurm")
        return lambda argv: open_slurm("Atlas-03", SlurmEndpoint(), 1, argv, env=cluster.env)
    server: SshServer = request.getfixturevalue("sshd")
    use_home(monkeypatch, server.home)
    return lambda argv: open_ssh("Atlas-02", server.alias, argv)


async def read_exactly(transport: Transport, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = await transport.read(min(65536, size - len(data)))
        assert chunk, f"end of stream after {len(data)} of {size} bytes"
        data += chunk
    return bytes(data)


async def read_pid(transport: Transport) -> int:
    line = b""
    while not line.endswith(b"\n"):
        chunk = await transport.read(1)
        assert chunk, "the worker ended before printing its pid"
        line += chunk
    return int(line)


async def read_to_end(transport: Transport) -> bytes:
    data = bytearray()
    while chunk := await transport.read():
        data += chunk
    return bytes(data)


def wait_gone(pid: int, timeout: float = 5.0) -> bool:
    return bool(wait_for(lambda: not psutil.pid_exists(pid), timeout, f"process {pid} to go"))


def test_bytes_round_trip_exactly(open_worker: Opener) -> None:
    payload = secrets.token_bytes(1 << 20) + bytes(4096) + b"\x00\xff\n\r"

    async def main() -> tuple[bytes, bytes]:
        transport = await open_worker(ECHO)
        try:
            await read_pid(transport)
            await transport.write(b"\x00hello\x00")
            small = await read_exactly(transport, 7)
            # Write and read at once: the echo would block on a full stdout otherwise.
            writer = asyncio.create_task(transport.write(payload))
            big = await read_exactly(transport, len(payload))
            await writer
            return small, big
        finally:
            await transport.close()

    small, big = run(main())
    assert small == b"\x00hello\x00"
    assert big == payload


def test_end_of_input_gives_end_of_output_and_stderr_tail(open_worker: Opener) -> None:
    async def main() -> tuple[bytes, bytes, str]:
        transport = await open_worker(ECHO)
        try:
            await read_pid(transport)
            await transport.write(b"last words")
            await transport.write_eof()
            with pytest.raises(TransportError, match="input is already closed"):
                await transport.write(b"too late")
            rest = await read_to_end(transport)
            again = await transport.read()
            await transport.close()
            return rest, again, transport.stderr_tail()
        finally:
            await transport.close()

    rest, again, tail = run(main())
    assert rest == b"last words"
    assert again == b""
    assert tail == "echo worker ready"


def test_close_reaps_the_worker_and_is_idempotent(open_worker: Opener) -> None:
    async def main() -> int:
        transport = await open_worker(ECHO)
        pid = await read_pid(transport)
        await transport.close()
        await transport.close()
        assert await transport.read() == b""
        with pytest.raises(TransportError) as info:
            await transport.write(b"x")
        assert info.value.phase == "send"
        return pid

    assert wait_gone(run(main()))


def test_close_terminates_then_kills_a_stubborn_worker(
    open_worker: Opener, request: pytest.FixtureRequest
) -> None:
    async def main() -> tuple[int, float]:
        transport = await open_worker(STUBBORN)
        pid = await read_pid(transport)
        started = time.monotonic()
        await transport.close(timeout=0.3)
        return pid, time.monotonic() - started

    pid, elapsed = run(main())
    assert wait_gone(pid)
    if request.node.callspec.params["open_worker"] == "slurm":
        # srun answers SIGTERM by cancelling its step (Slurm kills the task) and exits.
        assert 0.3 <= elapsed < 5.0
    else:
        assert 0.6 <= elapsed < 5.0  # waited after end of input and after SIGTERM, then killed


def test_nonexistent_executable_fails_at_start(open_worker: Opener) -> None:
    tails: list[str] = []

    async def main() -> None:
        transport = await open_worker([MISSING, "parallel", "worker"])
        try:
            await transport.read()
        finally:
            await transport.close()
            tails.append(transport.stderr_tail())

    with pytest.raises(TransportError) as info:
        run(main())
    assert info.value.phase == "start"
    assert "executable not found" in str(info.value)
    assert MISSING not in str(info.value)
    assert all(MISSING not in tail for tail in tails)


def test_killed_worker_ends_the_stream(open_worker: Opener) -> None:
    async def main() -> tuple[int, bytes, TransportError]:
        transport = await open_worker(ECHO)
        try:
            pid = await read_pid(transport)
            await transport.write(b"ping")
            assert await read_exactly(transport, 4) == b"ping"
            os.kill(pid, signal.SIGKILL)
            end = await asyncio.wait_for(transport.read(), 10)
            with pytest.raises(TransportError) as info:
                for _ in range(100):  # the first writes may still fit in a buffer
                    await transport.write(b"x" * 65536)
            return pid, end, info.value
        finally:
            await transport.close()

    pid, end, error = run(main())
    assert end == b""
    assert error.phase == "send"
    assert str(error).startswith('worker "Atlas-0')
    assert wait_gone(pid)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_pipe_worker_reaped_by_someone_else_still_closes(loop: str) -> None:
    # psutil's wait(), os.waitpid or a subprocess call may reap our child behind the loop's
    # back: uvloop then never hears of its exit, and its transport raises when it signals
    # the child. close() must still end, every time it is called, and signal nothing.
    import uvloop

    async def main() -> int:
        transport = await open_pipe("Atlas-01", STUBBORN)
        pid = await read_pid(transport)
        child = psutil.Process(pid)  # one handle: asyncio's own child watcher may reap first
        child.kill()
        child.wait(10)  # reaps it (unless that watcher did): no process, no zombie, is left
        assert await asyncio.wait_for(transport.read(), 10) == b""
        await transport.close(timeout=0.3)
        await transport.close(timeout=0.3)  # a second closer (a session's next call) too
        return pid

    factory = uvloop.new_event_loop if loop == "uvloop" else None
    with warnings.catch_warnings():
        # uvloop still tracks the vanished child's process handle; closing the loop closes
        # it, warning of an unclosed resource (and, with warnings as errors, never ends).
        warnings.simplefilter("ignore", ResourceWarning)
        with asyncio.Runner(loop_factory=factory) as runner:
            pid = runner.run(asyncio.wait_for(main(), 60))
    assert not psutil.pid_exists(pid) or process_gone(pid)


def test_stderr_flood_never_blocks_the_worker(open_worker: Opener) -> None:
    flood = [
        sys.executable,
        "-c",
        "import sys\n"
        "for i in range(20000): sys.stderr.write(f'noise {i:05d} ' + 'x' * 50 + '\\n')\n"
        "sys.stderr.write('no newline at the end')\n"
        "sys.stdout.write('done')\n",
    ]

    async def main() -> tuple[bytes, str]:
        transport = await open_worker(flood)
        try:
            out = await read_to_end(transport)
        finally:
            await transport.close()
        return out, transport.stderr_tail()

    out, tail = run(main())
    assert out == b"done"
    lines = tail.splitlines()
    assert len(lines) == 20
    assert lines[0].startswith("noise 19981 ")
    assert lines[-1] == "no newline at the end"


def test_close_ends_a_pending_read(open_worker: Opener) -> None:
    async def main() -> bytes | TransportError:
        transport = await open_worker(STUBBORN)
        await read_pid(transport)
        reader = asyncio.create_task(transport.read())
        await asyncio.sleep(0)  # one turn of the loop: the read is now waiting for data
        assert not reader.done()
        await transport.close(timeout=0.2)
        try:
            return await asyncio.wait_for(reader, 5)
        except TransportError as error:
            return error

    outcome = run(main())
    assert outcome == b"" or (isinstance(outcome, TransportError) and outcome.phase == "receive")


def test_transport_error_names_the_worker_only() -> None:
    error = TransportError("Atlas-02", "connect", "host key not trusted")
    assert str(error) == 'worker "Atlas-02" failed during connect: host key not trusted'
    assert (error.identity, error.phase, error.detail) == (
        "Atlas-02",
        "connect",
        "host key not trusted",
    )


# --------------------------------------------------------------------------- SSH only


def ssh_error(identity: str, endpoint: str, connect_timeout: float = 15.0) -> TransportError:
    async def main() -> None:
        transport = await open_ssh(identity, endpoint, ECHO, connect_timeout=connect_timeout)
        await transport.close()

    with pytest.raises(TransportError) as info:
        run(main())
    return info.value


def assert_private(error: TransportError, server: SshServer, endpoint: str) -> None:
    text = str(error)
    for secret in (endpoint, "127.0.0.1", str(server.port), server.alias, sys.executable):
        assert secret not in text
    assert f" {server.user}" not in text and f"{server.user}@" not in text


@pytest.mark.ssh
def test_ssh_endpoint_as_user_at_host_port(
    sshd: SshServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_home(monkeypatch, sshd.home)

    async def main() -> bytes:
        transport = await open_ssh("Atlas-02", f"{sshd.user}@127.0.0.1:{sshd.port}", ECHO)
        try:
            await read_pid(transport)
            await transport.write(b"direct")
            return await read_exactly(transport, 6)
        finally:
            await transport.close()

    assert run(main()) == b"direct"


@pytest.mark.ssh
def test_ssh_wrong_host_key_is_refused(
    sshd: SshServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    use_home(monkeypatch, sshd.write_home(tmp_path / "home", wrong_host_key=True))
    for endpoint in (sshd.alias, f"{sshd.user}@127.0.0.1:{sshd.port}"):
        error = ssh_error("Atlas-02", endpoint)
        assert error.phase == "connect"
        assert str(error).startswith('worker "Atlas-02" failed during connect: host key not')
        assert "known_hosts" in str(error)
        assert_private(error, sshd, endpoint)


@pytest.mark.ssh
def test_ssh_host_key_checking_cannot_be_switched_off(
    sshd: SshServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    home = sshd.write_home(tmp_path / "home", wrong_host_key=True)
    with (home / ".ssh" / "config").open("a") as config:
        config.write("    UserKnownHostsFile none\n")
    use_home(monkeypatch, home)
    error = ssh_error("Atlas-02", sshd.alias)
    assert error.phase == "connect"
    assert "aner requires a known_hosts file" in str(error)


@pytest.mark.ssh
def test_ssh_without_an_accepted_key_fails_authentication(
    sshd: SshServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    use_home(monkeypatch, sshd.write_home(tmp_path / "home", with_user_key=False))
    error = ssh_error("Atlas-02", sshd.alias)
    assert error.phase == "connect"
    assert "authentication failed" in str(error)
    assert_private(error, sshd, sshd.alias)


@pytest.mark.ssh
def test_ssh_closed_port_is_refused(sshd: SshServer, monkeypatch: pytest.MonkeyPatch) -> None:
    use_home(monkeypatch, sshd.home)
    port = free_port()
    endpoint = f"{sshd.user}@127.0.0.1:{port}"
    error = ssh_error("Atlas-03", endpoint, connect_timeout=5)
    assert error.phase == "connect"
    assert str(error).startswith('worker "Atlas-03" failed during connect: connection refused')
    assert str(port) not in str(error)
    assert_private(error, sshd, endpoint)


@pytest.mark.ssh
def test_ssh_stderr_tail_masks_private_names(
    sshd: SshServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_home(monkeypatch, sshd.home)
    argv = [sys.executable, "-c", f"import sys; sys.stderr.write('at {sshd.alias}\\n')"]

    async def main() -> str:
        transport = await open_ssh("Atlas-02", sshd.alias, argv)
        try:
            assert await read_to_end(transport) == b""
        finally:
            await transport.close()
        return transport.stderr_tail()

    assert run(main()) == "at <private>"


# --------------------------------------------------------------------------- Slurm only


def test_srun_command_is_an_argument_vector_with_unbuffered_io() -> None:
    endpoint = SlurmEndpoint(partition="cpu", nodelist="node[01-02]", time="1-00:00")
    argv = ["/opt/aner bin/aner", "parallel", "worker", "--stdio"]
    command = srun_command(endpoint, 4, argv, job_name="aner-A-1", job_id=None)
    assert command == [
        "srun",
        "--unbuffered",
        "--ntasks=1",
        "--nodes=1",
        "--cpus-per-task=4",
        "--job-name=aner-A-1",
        "--partition=cpu",
        "--nodelist=node[01-02]",
        "--time=1-00:00",
        "--",
        *argv,
    ]
    inside = srun_command(SlurmEndpoint(), 2, argv, job_name="n", job_id="77")
    assert inside[: inside.index("--")][-1] == "--jobid=77"


def test_slurm_start_timeout_comes_from_the_environment() -> None:
    assert slurm_start_timeout({}) == SLURM_START_TIMEOUT_S
    assert slurm_start_timeout({SLURM_START_TIMEOUT_ENV: "2.5"}) == 2.5
    for bad in ("0", "-1", "soon", "nan"):
        with pytest.raises(ValueError, match=SLURM_START_TIMEOUT_ENV):
            slurm_start_timeout({SLURM_START_TIMEOUT_ENV: bad})


@pytest.mark.slurm
def test_slurm_step_that_stays_pending_fails_at_start_with_slurms_reason(
    slurm: SlurmCluster,
) -> None:
    endpoint = SlurmEndpoint(partition=HELD_PARTITION)

    async def main() -> None:
        await open_slurm("Atlas-04", endpoint, 1, ECHO, env=slurm.env, start_timeout=1.0)

    with pytest.raises(TransportError) as info:
        run(main())
    assert info.value.phase == "start"
    message = str(info.value)
    assert message.startswith('worker "Atlas-04" failed during start: Slurm did not start')
    assert "job PENDING, reason PartitionDown" in message
    assert HELD_PARTITION not in message
    # Stopping srun withdrew the queued request.
    queued = wait_for(
        lambda: (
            (done := slurm.command("squeue", "--noheader", "--format=%j")).returncode == 0
            and "aner-Atlas-04" not in done.stdout
        ),
        10,
        "the pending job to leave the queue",
    )
    assert queued


@pytest.mark.slurm
def test_slurm_stderr_tail_masks_endpoint_values(slurm: SlurmCluster) -> None:
    secret_node = slurm.node
    shout = [sys.executable, "-c", f"import sys; sys.stderr.write('on {secret_node} now\\n')"]

    async def main() -> str:
        endpoint = SlurmEndpoint(nodelist=secret_node)
        transport = await open_slurm("Atlas-05", endpoint, 1, shout, env=slurm.env)
        try:
            assert await read_to_end(transport) == b""
        finally:
            await transport.close()
        return transport.stderr_tail()

    tail = run(main())
    assert "on <private> now" in tail
    assert secret_node not in tail


@pytest.mark.slurm
def test_cancelling_a_queued_slurm_start_withdraws_the_request(slurm: SlurmCluster) -> None:
    def queued() -> list[str]:
        listed = slurm.command("squeue", "--noheader", "--format=%j %T").stdout.split("\n")
        return [line for line in listed if line.startswith("aner-Atlas-06-")]

    async def main() -> list[str]:
        endpoint = SlurmEndpoint(partition=HELD_PARTITION)
        opening = asyncio.create_task(
            open_slurm("Atlas-06", endpoint, 1, ECHO, env=slurm.env, start_timeout=600)
        )
        seen = await asyncio.to_thread(wait_for, queued, 10, "the job in the queue")
        opening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await opening
        return list(seen)

    seen = run(main())
    assert seen[0].endswith(" PENDING")
    wait_for(lambda: not queued(), 10, "the cancelled request to leave the queue")
