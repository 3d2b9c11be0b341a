"""The user's job key: the secret that keys the MACs of a job's ledger records
(docs/contracts.md, section 7, "Keyed job files").

One file per user, outside every job directory: `$ANER_JOB_KEY` if set (a path), else
`$XDG_CONFIG_HOME/aner/job-key`, else `~/.config/aner/job-key`. It is made on first use:
32 random bytes, written as 64 hex digits and a newline, created `0600` (never over an
existing file, never through a link) in a directory created `0700`. A key file that is not
a regular file of the user's with no group or other permission bits, or that does not hold
64 hex digits, is refused in one line naming it (`JobKeyError`).

Each job gets a key of its own from it, `HMAC-SHA256(secret, "aner-job-key/1" + job
identity)`, so a record MACed for one job is no record of another. Someone who can write a
job directory but not read this file cannot make a record that its owner's `resume`
accepts. A job directory moved to another account or machine resumes there only with this
file copied to that account's key path (mode 0600).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path

from aner_coord.errors import RequestError

KEY_ENV = "ANER_JOB_KEY"
SECRET_BYTES = 32
MAC_BYTES = 16  # a record's MAC: HMAC-SHA256 cut to 128 bits
_LABEL = b"aner-job-key/1"
_ID_LABEL = b"aner-job-id/1"


class JobKeyError(RequestError):
    """The user's job key cannot be used: one line naming the file and what to change."""


def key_path(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    given = env.get(KEY_ENV)
    if given:
        return Path(given).expanduser().absolute()
    config = env.get("XDG_CONFIG_HOME")
    base = Path(config) if config and os.path.isabs(config) else Path.home() / ".config"
    return base / "aner" / "job-key"


def user_secret(*, create: bool) -> bytes | None:
    """The user's secret; made first if `create` and it does not exist (None when it does
    not and `create` is false)."""
    path = key_path()
    try:
        return _read(path)
    except FileNotFoundError:
        if not create:
            return None
    return _create(path)


def job_mac_key(secret: bytes, job: bytes) -> bytes:
    """The key of job `job`'s MACs."""
    return hmac.new(secret, _LABEL + job, hashlib.sha256).digest()


def identity_tag(secret: bytes, half: bytes) -> bytes:
    """The second half of a job identity begun keyed, from its first half."""
    return hmac.new(secret, _ID_LABEL + half, hashlib.sha256).digest()[: len(half)]


def mac(key: bytes, offset: int, body: bytes) -> bytes:
    """The MAC of a record whose body is `body`, at byte `offset` of its file (so that a
    record moved elsewhere in the file, or to another job, is caught)."""
    message = offset.to_bytes(8, "big") + body
    return hmac.new(key, message, hashlib.sha256).digest()[:MAC_BYTES]


def _read(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as exc:
        why = f"job key {path} cannot be read: {exc.strerror} ({_what_to_do()})"
        raise JobKeyError(why) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise JobKeyError(f"job key {path} is not a regular file: remove it")
        if info.st_uid != os.getuid():
            raise JobKeyError(f"job key {path} is owned by uid {info.st_uid}, not by you")
        if info.st_mode & 0o077:
            mode = stat.S_IMODE(info.st_mode)
            raise JobKeyError(f"job key {path} has mode {mode:o}: `chmod 600` it")
        data = os.read(fd, 4 * SECRET_BYTES)
    finally:
        os.close(fd)
    text = data.strip()
    try:
        secret = bytes.fromhex(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        secret = b""
    if len(secret) != SECRET_BYTES:
        raise JobKeyError(
            f"job key {path} does not hold {2 * SECRET_BYTES} hex digits: restore it from "
            "where you copied it (jobs it keyed resume only with it)"
        )
    return secret


def _create(path: Path) -> bytes:
    secret = secrets.token_bytes(SECRET_BYTES)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
    except FileExistsError:
        return _read(path)  # another coordinator made it first
    except OSError as exc:
        raise JobKeyError(
            f"job key {path} cannot be created: {exc.strerror} ({_what_to_do()})"
        ) from None
    try:
        os.write(fd, secret.hex().encode() + b"\n")
        os.fsync(fd)
    except OSError as exc:
        os.close(fd)
        os.unlink(path)
        raise JobKeyError(f"job key {path} cannot be written: {exc.strerror}") from None
    os.close(fd)
    return secret


def _what_to_do() -> str:
    return f"set {KEY_ENV} to a file of yours"
