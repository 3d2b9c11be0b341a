"""A real single-node Slurm cluster in a temporary directory, for the Slurm tests and
bench/slurm_bench.py.

`start_slurm(directory)` writes its own munge key and `slurm.conf` (free loopback ports, state,
spool, pid and log files all under `directory`), starts `munged`, `slurmctld -D` and `slurmd -D`
as children of this process and waits until the node is `idle`.  The node is named
`aner-node` and runs on this host (`NodeHostname` is the real host name, `NodeAddr`
127.0.0.1); it offers every CPU of this machine.  Two partitions: `debug` (default, up) and
`parked` (down), where any job stays PENDING with reason `PartitionDown`.

Plugins are those that need no privileges beyond what a container gives: `proctrack/linuxproc`,
`task/none`, no accounting, no cgroups.  Client commands find the cluster through `env`
(`SLURM_CONF`); `stop()` ends every daemon by its process id, SIGTERM then SIGKILL.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from suite_env import child_env
from support import reap, wait_for

SLURMCTLD = "/usr/sbin/slurmctld"
SLURMD = "/usr/sbin/slurmd"
MUNGED = "/usr/sbin/munged"
CLIENTS = ("srun", "squeue", "scontrol", "sinfo", "scancel", "sbatch", "salloc")
NODE = "aner-node"
HELD_PARTITION = "parked"
_START_TIMEOUT = 30.0


class SlurmUnavailable(Exception):
    """Slurm or munge is missing or would not start; the message says why."""


@dataclass
class SlurmCluster:
    directory: Path
    conf: Path
    env: dict[str, str]
    cpus: int
    node: str = NODE
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)

    def command(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command against this cluster."""
        return subprocess.run(
            list(argv), capture_output=True, text=True, env=self.env, timeout=timeout
        )

    def node_state(self) -> str:
        done = self.command("sinfo", "--noheader", "--nodes", self.node, "--format", "%T")
        return done.stdout.strip().splitlines()[0] if done.stdout.strip() else ""

    def log_tail(self, lines: int = 20) -> str:
        parts = []
        for name in ("munged", "slurmctld", "slurmd"):
            log = self.directory / f"{name}.log"
            text = log.read_text(errors="replace") if log.exists() else "(no log)"
            parts.append(f"--- {name}\n" + "\n".join(text.splitlines()[-lines:]))
        return "\n".join(parts)

    def stop(self) -> None:
        # Reverse order of start: the node first, munge last (the others talk through it).
        for name in ("slurmd", "slurmctld", "munged"):
            process = self.processes.get(name)
            if process is not None:
                reap(process, grace=10)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _slurm_conf(directory: Path, socket_path: Path, cpus: int) -> str:
    host = socket.gethostname().split(".")[0]
    ctld_port = free_port()
    slurmd_port = free_port()
    return "\n".join(
        [
            f"ClusterName=aner-test-{secrets.token_hex(3)}",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={slurmd_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={socket_path}",
            f"StateSaveLocation={directory / 'state'}",
            f"SlurmdSpoolDir={directory / 'spool'}",
            f"SlurmctldPidFile={directory / 'slurmctld.pid'}",
            f"SlurmdPidFile={directory / 'slurmd.pid'}",
            f"SlurmctldLogFile={directory / 'slurmctld.log'}",
            f"SlurmdLogFile={directory / 'slurmd.log'}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "SwitchType=switch/none",
            "MpiDefault=none",
            "SchedulerType=sched/backfill",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "ReturnToService=2",
            # Fast start and end of steps, so the tests stay short.
            "KillWait=2",
            "MessageTimeout=10",
            "SchedulerParameters=sched_interval=1",
            f"NodeName={NODE} NodeHostname={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN",
            f"PartitionName=debug Nodes={NODE} Default=YES MaxTime=INFINITE State=UP",
            f"PartitionName={HELD_PARTITION} Nodes={NODE} MaxTime=INFINITE State=DOWN",
            "",
        ]
    )


def _start(
    name: str, argv: list[str], directory: Path, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    log = open(directory / f"{name}.out", "ab")  # noqa: SIM115 - handed to the child
    try:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, cwd=directory
        )
    finally:
        log.close()


def start_slurm(directory: Path) -> SlurmCluster:
    """Start munged, slurmctld and slurmd in `directory`; the caller must stop() it."""
    for program in (SLURMCTLD, SLURMD, MUNGED):
        if not os.access(program, os.X_OK):
            raise SlurmUnavailable(f"{program} is missing: run .ci/ensure-slurm")
    for client in CLIENTS:
        if shutil.which(client) is None:
            raise SlurmUnavailable(f"the Slurm client {client} is missing: run .ci/ensure-slurm")
    if os.geteuid() != 0:
        raise SlurmUnavailable("the test cluster runs slurmd, which needs root")
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    for sub in ("state", "spool", "munge"):
        (directory / sub).mkdir(mode=0o700)
    munge_dir = directory / "munge"
    socket_path = munge_dir / "munge.socket"
    _write_private(munge_dir / "munge.key", secrets.token_bytes(1024))
    cpus = os.cpu_count() or 1
    conf = directory / "slurm.conf"
    conf.write_text(_slurm_conf(directory, socket_path, cpus))
    env = child_env(SLURM_CONF=str(conf))
    for variable in list(env):
        # Inside a real allocation, these would make srun join it instead of this cluster.
        if variable.startswith(("SLURM_", "SRUN_", "SALLOC_", "SBATCH_")) and variable != (
            "SLURM_CONF"
        ):
            del env[variable]
    cluster = SlurmCluster(directory=directory, conf=conf, env=env, cpus=cpus)
    try:
        cluster.processes["munged"] = _start(
            "munged",
            [
                MUNGED,
                "--foreground",
                "--force",
                f"--socket={socket_path}",
                f"--key-file={munge_dir / 'munge.key'}",
                f"--pid-file={munge_dir / 'munged.pid'}",
                f"--log-file={directory / 'munged.log'}",
                f"--seed-file={munge_dir / 'munged.seed'}",
            ],
            directory,
            env,
        )
        _wait(lambda: socket_path.exists(), cluster, "munged's socket")
        cluster.processes["slurmctld"] = _start(
            "slurmctld", [SLURMCTLD, "-D", "-i", "-f", str(conf)], directory, env
        )
        cluster.processes["slurmd"] = _start(
            "slurmd", [SLURMD, "-D", "-N", NODE, "-f", str(conf)], directory, env
        )
        _wait(lambda: cluster.node_state() == "idle", cluster, f"node {NODE} idle")
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _wait(predicate: Callable[[], bool], cluster: SlurmCluster, what: str) -> None:
    def ready() -> bool:
        if predicate():
            return True
        for name, process in cluster.processes.items():
            if process.poll() is not None:
                raise SlurmUnavailable(
                    f"{name} exited with status {process.returncode} while waiting for "
                    f"{what}:\n{cluster.log_tail()}"
                )
        return False

    try:
        wait_for(ready, _START_TIMEOUT, what)
    except AssertionError:
        raise SlurmUnavailable(f"timed out waiting for {what}:\n{cluster.log_tail()}") from None
