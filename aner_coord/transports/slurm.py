"""Slurm workers: each record of transport `slurm` is one job step, `srun --unbuffered`
speaking the frames on its stdio (docs/contracts.md, section 5). It implements the contract in
`aner_coord.transports` and is imported only when a job has a Slurm record.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import shutil
import signal
from collections.abc import Mapping, Sequence

from aner_coord.clusterfile import SlurmEndpoint
from aner_coord.transports.base import EXIT_STATUS_WAIT, Transport, TransportError
from aner_coord.transports.process import ProcessTransport, spawn

# --------------------------------------------------------------------------- Slurm job steps

# How long a slurm worker may wait for Slurm to start its job step (a queued allocation, or a
# step waiting for the resources of the current one) before the worker is given up, in
# seconds.  The environment variable overrides the default; tests lower it.
SLURM_START_TIMEOUT_ENV = "ANER_SLURM_START_TIMEOUT"
SLURM_START_TIMEOUT_S = 60.0
# squeue is asked whether the step runs after 50 ms, then at doubling intervals up to 2 s:
# a step that starts at once costs one or two queries, a queued one little load on slurmctld.
_SQUEUE_FIRST_POLL = 0.05
_SQUEUE_MAX_POLL = 2.0
_SQUEUE_TIMEOUT = 10.0
_SLURM_WORD = re.compile(r"[A-Za-z][A-Za-z_]*", re.ASCII)
_STEP_RETRY = re.compile(r"step creation temporarily disabled, retrying \(([A-Za-z ]{1,80})\)")
# slurmstepd's words when it could not execute the worker program.
_EXECVE_FAILED = "execve():"


def slurm_start_timeout(env: Mapping[str, str] | None = None) -> float:
    """The start timeout from $ANER_SLURM_START_TIMEOUT, else SLURM_START_TIMEOUT_S."""
    text = (os.environ if env is None else env).get(SLURM_START_TIMEOUT_ENV, "").strip()
    if not text:
        return SLURM_START_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 1e7:
        raise ValueError(
            f"{SLURM_START_TIMEOUT_ENV} must be a positive number of seconds, got {text[:20]!r}"
        )
    return value


def srun_command(
    endpoint: SlurmEndpoint,
    slots: int,
    argv: Sequence[str],
    *,
    job_name: str,
    job_id: str | None,
    srun: str = "srun",
) -> list[str]:
    """srun's argument vector for one worker step; every value is a separate argument."""
    command = [
        srun,
        "--unbuffered",  # without it srun forwards output line by line and frames stall
        "--ntasks=1",
        "--nodes=1",
        f"--cpus-per-task={slots}",
        f"--job-name={job_name}",
    ]
    if job_id is not None:
        command.append(f"--jobid={job_id}")
    return [*command, *endpoint.srun_options(), "--", *argv]


class _SlurmTransport(ProcessTransport):
    """srun's stdio, which carries its step's task's stdio, as a pipe transport.

    srun ends when its task ends, so end of file and srun's exit are a lost worker like any
    other.  SIGTERM makes srun cancel its step (or revoke a queued allocation) and wait for
    it, so `close()`'s escalation also ends the process on the node.
    """

    def __init__(
        self,
        identity: str,
        process: asyncio.subprocess.Process,
        transport: asyncio.SubprocessTransport,
        private: Sequence[str],
        *,
        job_name: str,
        job_id: str | None,
        env: Mapping[str, str] | None,
    ) -> None:
        super().__init__(identity, process, transport, private)
        self._job_name = job_name
        self._job_id = job_id
        self._env = env
        self._started = False

    async def wait_started(self, timeout: float) -> None:
        """Return once Slurm lists the step, or srun has ended (read() then reports it).

        Raises TransportError(phase="start") with Slurm's state and reason when the step has
        not started within `timeout` seconds; srun is then stopped, which withdraws the
        request.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        interval = _SQUEUE_FIRST_POLL
        while True:
            listed = await self._step_listed()
            if listed is None or listed:
                # Listed, or squeue cannot tell: from here the handshake's timeout applies.
                self._started = True
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            if await self._wait(min(interval, remaining)):
                return
            interval = min(2 * interval, _SQUEUE_MAX_POLL)
        reason = await self._pending_reason()
        await self.close()
        raise TransportError(
            self.identity,
            "start",
            f"Slurm did not start its job step within {timeout:g} s ({reason}); "
            f"check the record's partition and limits, or raise {SLURM_START_TIMEOUT_ENV}",
        )

    async def _step_listed(self) -> bool | None:
        # squeue ignores --name for steps, so the step name is matched here, among our own
        # steps (of the allocation, when in one) rather than every step of the cluster.
        jobs = () if self._job_id is None else (f"--jobs={self._job_id}",)
        listed = await self._squeue("--steps", f"--user={os.getuid()}", *jobs, "--format=%j %i")
        if listed is None:
            return None
        return any(line.split()[:1] == [self._job_name] for line in listed.splitlines())

    async def _pending_reason(self) -> str:
        if self._job_id is not None:
            state = await self._squeue(f"--jobs={self._job_id}", "--format=%T")
            words = _SLURM_WORD.findall(state or "")
            shown = words[0] if words else "unknown"
            # srun says why it keeps retrying: "step creation temporarily disabled, retrying
            # (Requested nodes are busy)".
            said = _STEP_RETRY.findall(self._tail.text())
            why = f": {said[-1]}" if said else ""
            return f"the step waits for resources of allocation {self._job_id}, state {shown}{why}"
        queued = await self._squeue(f"--name={self._job_name}", "--format=%T %r")
        words = _SLURM_WORD.findall(queued or "")
        if not words:
            return "its job is not in the queue"
        # Only Slurm's state and reason words: a reason's details may name nodes.
        reason = words[1] if len(words) > 1 else "unknown"
        return f"job {words[0]}, reason {reason}"

    async def _squeue(self, *args: str) -> str | None:
        """squeue's output for these filters, or None when squeue could not answer."""
        try:
            process = await asyncio.create_subprocess_exec(
                "squeue",
                "--noheader",
                *args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
                env=None if self._env is None else dict(self._env),
            )
        except OSError:
            return None
        try:
            out, _ = await asyncio.wait_for(process.communicate(), _SQUEUE_TIMEOUT)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            return None
        return out.decode("ascii", "replace") if process.returncode == 0 else None

    async def _raise_if_never_started(self) -> None:
        # srun exits 2 when slurmstepd cannot execute the worker, and says why on stderr.
        if self._received:
            return
        if not await self._wait(EXIT_STATUS_WAIT):
            return
        await asyncio.wait([self._stderr_task], timeout=1.0)
        for line in self._tail.text().splitlines():
            if _EXECVE_FAILED in line:
                if line.endswith("No such file or directory"):
                    detail = "executable not found on the Slurm node; check the executable path"
                elif line.endswith("Permission denied"):
                    detail = "executable cannot be run on the Slurm node; check its permissions"
                else:
                    detail = "the Slurm node could not execute the worker program"
                raise TransportError(self.identity, "start", detail)

    async def close(self, timeout: float = 5.0) -> None:
        if not self._started and not self._closing and self._process.returncode is None:
            # Nothing runs yet, so nothing can read end of input: withdraw the request now.
            self._signal(signal.SIGTERM)
        await super().close(timeout)


async def open_slurm(
    identity: str,
    endpoint: SlurmEndpoint,
    slots: int,
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    start_timeout: float | None = None,
) -> Transport:
    """Run `argv` as one Slurm job step with `slots` CPUs, speaking on srun's stdio.

    Within an allocation ($SLURM_JOB_ID set) the step is a new step of it, otherwise srun
    asks for an allocation of its own.  Returns once Slurm lists the step (see
    `_SlurmTransport.wait_started`); the start timeout is `start_timeout`, else
    $ANER_SLURM_START_TIMEOUT, else SLURM_START_TIMEOUT_S.
    """
    environ = os.environ if env is None else env
    try:
        timeout = slurm_start_timeout(environ) if start_timeout is None else start_timeout
    except ValueError as exc:
        raise TransportError(identity, "start", str(exc)) from None
    srun = shutil.which("srun", path=environ.get("PATH"))
    if srun is None:
        raise TransportError(
            identity,
            "start",
            "srun not found on PATH (run the coordinator where Slurm's commands are installed)",
        )
    job_id = environ.get("SLURM_JOB_ID") or None
    if job_id is not None and not job_id.isdigit():
        raise TransportError(identity, "start", "SLURM_JOB_ID is not a job number")
    job_name = f"aner-{identity}-{secrets.token_hex(4)}"
    command = srun_command(endpoint, slots, argv, job_name=job_name, job_id=job_id, srun=srun)
    process, subprocess_transport = await spawn(identity, command, env)
    transport = _SlurmTransport(
        identity,
        process,
        subprocess_transport,
        private=[*endpoint.values(), *argv[:1]],
        job_name=job_name,
        job_id=job_id,
        env=env,
    )
    try:
        await transport.wait_started(timeout)
    except BaseException:
        await transport.close()
        raise
    return transport
