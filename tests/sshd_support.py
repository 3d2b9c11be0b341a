"""A real OpenSSH sshd on 127.0.0.1 for the SSH tests, run as the current user.

`start_sshd(directory)` generates a host key and a user key, writes an sshd_config of its own,
starts `sshd -D -e` as a child on a free loopback port and waits for its banner.  It also
writes a HOME for the client side: `~/.ssh/config` with the alias `aner-peer`, the user key as
`~/.ssh/id_ed25519` and a `known_hosts` that trusts the host key.  Asyncssh reads `~` from
$HOME, so tests point HOME at `SshServer.home`; OpenSSH's own `ssh` would look up the home in
the password database instead and needs `-F` and `-o UserKnownHostsFile=`.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from suite_env import child_env, isolation
from support import reap, wait_for

SSHD = "/usr/sbin/sshd"
ALIAS = "aner-peer"
_START_TIMEOUT = 10.0


class SshdUnavailable(Exception):
    """sshd is missing or would not start; the message says why."""


@dataclass
class SshServer:
    home: Path
    alias: str
    port: int
    user: str
    env: dict[str, str]
    directory: Path
    process: subprocess.Popen[bytes] = field(repr=False)
    _host_public_key: str = field(repr=False)
    _wrong_public_key: str = field(repr=False)
    _user_key: Path = field(repr=False)

    def write_home(
        self,
        home: Path,
        *,
        wrong_host_key: bool = False,
        with_user_key: bool = True,
        proxy_command: str | None = None,
    ) -> Path:
        """Write a client HOME at `home`: the alias, the user key and a known_hosts.

        With `wrong_host_key` the known_hosts trusts a different key for this server, so a
        connection must be refused; without `with_user_key` there is nothing to log in with;
        with `proxy_command` the alias is reached through it (e.g. tests/delay_relay.py).
        """
        ssh_dir = home / ".ssh"
        ssh_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(home, 0o700)
        key = self._wrong_public_key if wrong_host_key else self._host_public_key
        _write_private(ssh_dir / "known_hosts", f"[127.0.0.1]:{self.port} {key}\n")
        config = (
            f"Host {ALIAS}\n    HostName 127.0.0.1\n    Port {self.port}\n    User {self.user}\n"
        )
        if with_user_key:
            identity = ssh_dir / "id_ed25519"
            shutil.copyfile(self._user_key, identity)
            os.chmod(identity, 0o600)
            config += f"    IdentityFile {identity}\n"
        if proxy_command is not None:
            config += f"    ProxyCommand {proxy_command}\n"
        _write_private(ssh_dir / "config", config)
        return home

    def log_tail(self, lines: int = 30) -> str:
        log = self.directory / "sshd.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        reap(self.process, grace=5)


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(path, 0o600)


def _keygen(path: Path) -> str:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "aner-test", "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    algorithm, key = path.with_suffix(".pub").read_text().split()[:2]
    return f"{algorithm} {key}"


def _session_environment() -> list[str]:
    """`SetEnv` lines giving SSH sessions the suite's isolation (tests/suite_env.py): a granted
    worker started over SSH takes its slots in the suite's own runtime directory, not in the
    user's lease table. No OPENBLAS_ variable: a coordinator passes its kernel set to the
    workers it starts itself, and the suite's sshd is stock so that tests see it do so."""
    return [f"SetEnv {k}={v}" for k, v in sorted(isolation().items()) if v and " " not in v]


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _banner(port: int, process: subprocess.Popen[bytes]) -> str | None:
    """ "ready" once sshd greets on `port`, "exited" if it died, None while neither."""
    if process.poll() is not None:
        return "exited"
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            if sock.recv(64).startswith(b"SSH-2.0-"):
                return "ready"
    except OSError:
        pass
    return None


def _started(port: int, process: subprocess.Popen[bytes]) -> bool:
    try:
        outcome = wait_for(lambda: _banner(port, process), _START_TIMEOUT, "sshd's banner")
    except AssertionError:  # timed out: the caller tries another port
        return False
    return bool(outcome == "ready")


def start_sshd(directory: Path) -> SshServer:
    """Start sshd for the current user on a free loopback port; the caller must stop() it."""
    if not os.access(SSHD, os.X_OK):
        raise SshdUnavailable(f"{SSHD} is missing: run .ci/ensure-sshd")
    if shutil.which("ssh-keygen") is None:
        raise SshdUnavailable("ssh-keygen is missing: run .ci/ensure-sshd")
    if os.geteuid() == 0:
        # Debian's sshd insists on its privilege separation directory when run as root.
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    server_dir = directory / "server"
    server_dir.mkdir(mode=0o700)
    host_public_key = _keygen(server_dir / "host_ed25519")
    wrong_public_key = _keygen(server_dir / "other_host_ed25519")
    _keygen(server_dir / "user_ed25519")
    authorized = (server_dir / "user_ed25519.pub").read_text()
    _write_private(server_dir / "authorized_keys", authorized)
    user = getpass.getuser()

    for _attempt in range(3):
        port = free_port()
        config = server_dir / "sshd_config"
        _write_private(
            config,
            "\n".join(
                [
                    f"Port {port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {server_dir / 'host_ed25519'}",
                    f"PidFile {server_dir / 'sshd.pid'}",
                    f"AuthorizedKeysFile {server_dir / 'authorized_keys'}",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PermitRootLogin prohibit-password",
                    "UsePAM no",
                    "StrictModes no",
                    "PrintMotd no",
                    f"AllowUsers {user}",
                    "LogLevel VERBOSE",
                    *_session_environment(),
                    "",
                ]
            ),
        )
        log = open(directory / "sshd.log", "ab")  # noqa: SIM115 - handed to the child
        try:
            process = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        finally:
            log.close()
        if _started(port, process):
            break
        reap(process)
    else:
        text = (directory / "sshd.log").read_text(errors="replace")
        raise SshdUnavailable("sshd did not start; its log ends:\n" + text[-2000:])

    home = directory / "home"
    env = child_env(HOME=str(home))
    env.pop("SSH_AUTH_SOCK", None)
    server = SshServer(
        home=home,
        alias=ALIAS,
        port=port,
        user=user,
        env=env,
        directory=directory,
        process=process,
        _host_public_key=host_public_key,
        _wrong_public_key=wrong_public_key,
        _user_key=server_dir / "user_ed25519",
    )
    server.write_home(home)
    return server
