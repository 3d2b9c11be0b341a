"""The cluster file `ANER_CLUSTER 1` (docs/contracts.md, section 5): where workers are and how to
reach them.

Grammar, one item per line (lines end at "\\n"; a trailing "\\r" is ignored):

    ANER_CLUSTER 1
    # comment lines and blank lines are ignored
    worker "<identity>" <local|ssh|slurm> "<endpoint>" "<executable>" <slots> [options]

- Fields are separated by spaces or tabs. `worker`, the transport and the slots are bare words;
  identity, endpoint and executable are double-quoted. There are no escapes: a quoted string
  ends at the next `"`, so it cannot contain `"` or `\\`. Comments take a whole line.
- identity: 1-64 characters of `A-Z a-z 0-9 . _ -`, unique ignoring case (identities end up in
  file names and public output, where `Atlas-01` and `atlas-01` would be confused).
- endpoint: `"-"` for `local`; for `ssh` an alias of the user's OpenSSH config or
  `[user@]host[:port]` (host a name or IPv4 address of `A-Z a-z 0-9 . _ -`, or an IPv6
  address in brackets; user of `A-Z a-z 0-9 . _ -`; port 1-65535). Nothing may start with
  `-`, so an endpoint can never be taken for an option.  For `slurm`, `"-"` (the current
  allocation, or the cluster's defaults) or space-separated `key=value` pairs with keys from
  `SLURM_KEYS`, each at most once; they become srun options (`SlurmEndpoint`).
- executable: an absolute path (spaces allowed, control characters not).
  No line may contain control characters; tabs separate fields like spaces.
- slots: a decimal integer from 1 to 256.
- options (none, or several bare `key=value` words, each key at most once): how the worker's
  OpenBLAS is set (`BlasChoice`). By default the coordinator passes its own
  `OPENBLAS_CORETYPE` and `OPENBLAS_L2_SIZE` (or their absence) to the worker;
  `coretype=NAME` and `l2size=KB` set the record's own (`-`: unset), and `blas=own` leaves
  both to the worker's own environment (`blas=coordinator` is the default said aloud).
- At least one and at most 32 records.

Endpoints and executables are private, so no error message repeats them; it says which field
is wrong and how.  Identities are public and are quoted back.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from typing import Literal

from aner_coord.errors import RequestError
from aner_coord.limits import MAX_WORKER_RECORDS

MAX_SLOTS = 256
MAX_CLUSTER_FILE_BYTES = 1 << 20

HEADER = "ANER_CLUSTER 1"
RECORD_SHAPE = (
    'worker "<identity>" <local|ssh|slurm> "<endpoint>" "<absolute executable path>" <slots>'
    " [blas=own | coretype=NAME l2size=KB]"
)
# The options a record may end with, and the OpenBLAS variable each of the last two sets.
RECORD_OPTIONS = ("blas", "coretype", "l2size")
_OPTION_VARIABLES = {"coretype": "OPENBLAS_CORETYPE", "l2size": "OPENBLAS_L2_SIZE"}
_BLAS_CHOICES = ("coordinator", "own")
# The srun options a slurm endpoint may set (docs/contracts.md, section 5), in the order they are
# passed.
SLURM_KEYS = ("partition", "nodelist", "account", "qos", "constraint", "time")

_IDENTITY = re.compile(r"[A-Za-z0-9._-]{1,64}", re.ASCII)
_NAME = re.compile(r"[A-Za-z0-9._-]+", re.ASCII)
_IPV6 = re.compile(r"\[[0-9A-Fa-f:.]+(%[A-Za-z0-9._-]+)?\]", re.ASCII)
_DECIMAL = re.compile(r"[0-9]+", re.ASCII)
# A value is one srun option argument: printable ASCII without spaces, quotes or backslashes
# (node lists like node[01-04],gpu7 and constraints like intel&ib|amd need the punctuation).
_SLURM_VALUE = re.compile(r"[!#-\[\]-~]{1,256}", re.ASCII)
# Slurm's time formats: minutes, M:S, H:M:S, D-H, D-H:M, D-H:M:S, or unlimited.
_SLURM_TIME = re.compile(
    r"[0-9]+(:[0-9]+){0,2}|[0-9]+-[0-9]+(:[0-9]+){0,2}|UNLIMITED|INFINITE|unlimited|infinite",
    re.ASCII,
)
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")


class ClusterFileError(RequestError):
    """The cluster file is refused; `line` is None when the file as a whole is at fault."""

    def __init__(self, path: str, line: int | None, reason: str) -> None:
        where = f"cluster file {path}" if line is None else f"cluster file {path}, line {line}"
        super().__init__(f"{where}: {reason}")
        self.path = path
        self.line = line
        self.reason = reason


Transport = Literal["local", "ssh", "slurm"]


@dataclass(frozen=True)
class SlurmEndpoint:
    """The srun options of a slurm worker; None leaves an option to Slurm (or the allocation)."""

    partition: str | None = None
    nodelist: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    time: str | None = None

    def srun_options(self) -> tuple[str, ...]:
        """One `--key=value` argument per set option, in SLURM_KEYS order."""
        return tuple(
            f"--{key}={value}" for key in SLURM_KEYS if (value := getattr(self, key)) is not None
        )

    def values(self) -> tuple[str, ...]:
        """The option values, which are private (partition and node names, accounts)."""
        return tuple(v for key in SLURM_KEYS if (v := getattr(self, key)) is not None)


@dataclass(frozen=True)
class BlasChoice:
    """How a record's worker sets OpenBLAS's variables (`aner_worker.blasenv`): with `own`
    as its own environment has them; else each as the coordinator has it, unless `values`
    gives the record's own (variable, value; "" for unset)."""

    own: bool = False
    values: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class WorkerRecord:
    identity: str
    transport: Transport
    endpoint: str
    executable: str
    slots: int
    line: int
    # The parsed endpoint of a slurm record; None for the other transports.
    slurm: SlurmEndpoint | None = None
    blas: BlasChoice = BlasChoice()


@dataclass(frozen=True)
class ClusterConfig:
    path: str
    workers: tuple[WorkerRecord, ...]

    @property
    def total_slots(self) -> int:
        return sum(worker.slots for worker in self.workers)


@dataclass(frozen=True)
class SshEndpoint:
    """An ssh endpoint split into parts; `user` and `port` are None when left to the config."""

    host: str
    user: str | None
    port: int | None


def parse_ssh_endpoint(endpoint: str) -> SshEndpoint:
    """Split `[user@]host[:port]` (or a bare alias); ValueError says what is wrong, privately."""
    user: str | None = None
    rest = endpoint
    if "@" in rest:
        user, rest = rest.split("@", 1)
        if not _NAME.fullmatch(user):
            raise ValueError("the user part before '@' must be 1 or more of A-Z a-z 0-9 . _ -")
        if user.startswith("-"):
            raise ValueError("the user part must not start with '-'")
    port: int | None = None
    if rest.startswith("["):
        host, bracket, tail = rest.partition("]")
        host += bracket
        if not _IPV6.fullmatch(host):
            raise ValueError("a bracketed host must be an IPv6 address like [2001:db8::1]")
        host = host[1:-1]
        if tail:
            if not tail.startswith(":"):
                raise ValueError("only ':port' may follow a bracketed IPv6 address")
            port = _parse_port(tail[1:])
    else:
        host, colon, port_text = rest.partition(":")
        if colon:
            port = _parse_port(port_text)
        if not _NAME.fullmatch(host):
            raise ValueError(
                "the host must be an alias, a name or an address of A-Z a-z 0-9 . _ - "
                "(IPv6 in brackets)"
            )
        if host.startswith("-"):
            raise ValueError("the host must not start with '-'")
    return SshEndpoint(host=host, user=user, port=port)


def parse_slurm_endpoint(endpoint: str) -> SlurmEndpoint:
    """Parse `"-"` or `key=value ...`; ValueError says what is wrong without repeating values."""
    if endpoint == "-":
        return SlurmEndpoint()
    words = endpoint.split()
    if not words:
        raise ValueError(
            'the slurm endpoint is empty (use "-" for the current allocation, or key=value '
            f"pairs with keys {' '.join(SLURM_KEYS)})"
        )
    options: dict[str, str] = {}
    for position, word in enumerate(words, start=1):
        key, equals, value = word.partition("=")
        if not equals:
            raise ValueError(
                f"item {position} of the slurm endpoint is not key=value "
                f"(keys: {' '.join(SLURM_KEYS)})"
            )
        if key not in SLURM_KEYS:
            shown = _show(key) if _NAME.fullmatch(key) else f"at item {position}"
            raise ValueError(
                f"slurm endpoint key {shown} is not allowed (allowed: {' '.join(SLURM_KEYS)})"
            )
        if key in options:
            raise ValueError(f'slurm endpoint key "{key}" is given twice')
        if not _SLURM_VALUE.fullmatch(value):
            raise ValueError(
                f'the value of "{key}" must be 1 to 256 printable characters without spaces, '
                "quotes or backslashes"
            )
        if key == "time" and not _SLURM_TIME.fullmatch(value):
            raise ValueError(
                'the value of "time" must be a Slurm time limit: minutes, M:S, H:M:S, D-H, '
                "D-H:M, D-H:M:S or UNLIMITED"
            )
        options[key] = value
    return SlurmEndpoint(**options)


def _parse_port(text: str) -> int:
    if not _DECIMAL.fullmatch(text) or len(text) > 5 or not 1 <= int(text) <= 65535:
        raise ValueError("the port after ':' must be a number from 1 to 65535")
    return int(text)


@dataclass(frozen=True)
class _Token:
    text: str
    quoted: bool


class _LineError(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _tokenize(line: str) -> list[_Token]:
    if _CONTROL.search(line):
        raise _LineError("contains a control character (only spaces and tabs may separate fields)")
    tokens: list[_Token] = []
    i = 0
    while i < len(line):
        char = line[i]
        if char in " \t":
            i += 1
        elif char == '"':
            end = line.find('"', i + 1)
            if end < 0:
                raise _LineError('unterminated quoted string (add the closing ")')
            text = line[i + 1 : end]
            if "\\" in text:
                raise _LineError("quoted strings take no backslash escapes")
            i = end + 1
            if i < len(line) and line[i] not in " \t":
                raise _LineError('a closing " must be followed by a space or the end of the line')
            tokens.append(_Token(text, quoted=True))
        else:
            end = i
            while end < len(line) and line[end] not in ' \t"':
                end += 1
            if end < len(line) and line[end] == '"':
                raise _LineError('a " may only start a field (put a space before it)')
            tokens.append(_Token(line[i:end], quoted=False))
            i = end
    return tokens


def _show(text: str) -> str:
    """Quote a bare word from the file for an error message, shortened."""
    return '"' + (text if len(text) <= 24 else text[:21] + "...") + '"'


def _parse_record(tokens: list[_Token], line: int) -> WorkerRecord:
    if tokens[0].quoted or tokens[0].text != "worker":
        raise _LineError(f"unknown record {_show(tokens[0].text)} (expected {RECORD_SHAPE})")
    if len(tokens) < 6:
        raise _LineError(f"worker record has {len(tokens)} fields, expected 6: {RECORD_SHAPE}")
    identity_tok, transport_tok, endpoint_tok, executable_tok, slots_tok = tokens[1:6]
    # Field by field, in the order of the line, so the first wrong field is the one named.
    identity = _identity(identity_tok)
    transport = _transport(transport_tok)
    endpoint, slurm = _endpoint(transport, endpoint_tok)
    return WorkerRecord(
        identity=identity,
        transport=transport,
        endpoint=endpoint,
        executable=_executable(executable_tok),
        slots=_slots(slots_tok),
        line=line,
        slurm=slurm,
        blas=_options(tokens[6:]),
    )


def _options(tokens: list[_Token]) -> BlasChoice:
    """The options after the slots: `blas=own|coordinator`, `coretype=`, `l2size=`."""
    from aner_worker.blasenv import value_problem

    given: dict[str, str] = {}
    for position, token in enumerate(tokens, start=7):
        key, equals, value = token.text.partition("=")
        if token.quoted or not equals or key not in RECORD_OPTIONS:
            hint = " (comments must be on their own line)" if token.text.startswith("#") else ""
            raise _LineError(
                f"unexpected field after the slots (field {position}){hint}; options are "
                f"{', '.join(k + '=' for k in RECORD_OPTIONS)}: {RECORD_SHAPE}"
            )
        if key in given:
            raise _LineError(f'option "{key}" is given twice')
        given[key] = value
    blas = given.pop("blas", "coordinator")
    if blas not in _BLAS_CHOICES:
        raise _LineError("blas= takes own or coordinator")
    if blas == "own" and given:
        raise _LineError(
            f"blas=own leaves OpenBLAS to the worker's environment: drop "
            f"{' and '.join(k + '=' for k in given)}, or blas=own"
        )
    values = []
    for key, value in given.items():
        variable = _OPTION_VARIABLES[key]
        setting = "" if value == "-" else value
        problem = value_problem(variable, setting) if value else f"{variable} needs a value"
        if problem is not None:
            raise _LineError(f"{key}=: {problem}, or - for unset")
        values.append((variable, setting))
    return BlasChoice(own=blas == "own", values=tuple(values))


def _identity(token: _Token) -> str:
    if not token.quoted:
        raise _LineError('the identity must be in double quotes, like "Atlas-01"')
    identity = token.text
    if not _IDENTITY.fullmatch(identity):
        raise _LineError(
            "the identity must be 1 to 64 characters of A-Z a-z 0-9 . _ - (got "
            f"{len(identity)} characters{', some not allowed' if identity else ''})"
        )
    return identity


def _transport(token: _Token) -> Transport:
    transport = token.text
    if token.quoted or transport not in _TRANSPORTS:
        shown = f'"{transport}"' if token.quoted else _show(transport)
        raise _LineError(f"unknown transport {shown} (use local, ssh or slurm, without quotes)")
    return _TRANSPORTS[transport]


def _endpoint(transport: Transport, token: _Token) -> tuple[str, SlurmEndpoint | None]:
    """The endpoint as written, and its parsed form for a slurm record."""
    if not token.quoted:
        raise _LineError('the endpoint must be in double quotes ("-" for local)')
    endpoint = token.text
    if transport == "local":
        if endpoint != "-":
            raise _LineError('a local worker takes the endpoint "-"')
        return endpoint, None
    if transport == "slurm":
        try:
            return endpoint, parse_slurm_endpoint(endpoint)
        except ValueError as exc:
            raise _LineError(str(exc)) from None
    if not endpoint:
        raise _LineError("the ssh endpoint is empty (use an ssh config alias or user@host)")
    if endpoint.startswith("-"):
        raise _LineError("the ssh endpoint must not start with '-' (it would read as an option)")
    if any(c.isspace() for c in endpoint):
        raise _LineError("the ssh endpoint must not contain whitespace")
    try:
        parse_ssh_endpoint(endpoint)
    except ValueError as exc:
        raise _LineError(f"bad ssh endpoint: {exc}") from None
    return endpoint, None


def _executable(token: _Token) -> str:
    if not token.quoted:
        raise _LineError("the executable must be an absolute path in double quotes")
    executable = token.text
    if not executable.startswith("/") or len(executable) < 2:
        raise _LineError("the executable must be an absolute path (starting with /)")
    return executable


def _slots(token: _Token) -> int:
    text = token.text
    if token.quoted or not _DECIMAL.fullmatch(text):
        raise _LineError(
            f"slots must be a whole number from 1 to {MAX_SLOTS} without quotes, got {_show(text)}"
        )
    slots = int(text) if len(text) <= 6 else MAX_SLOTS + 1
    if slots < 1:
        raise _LineError("slots must be at least 1")
    if slots > MAX_SLOTS:
        raise _LineError(f"slots must be at most {MAX_SLOTS}, got {_show(text)}")
    return slots


_TRANSPORTS: dict[str, Transport] = {"local": "local", "ssh": "ssh", "slurm": "slurm"}


def parse_cluster_text(text: str, path: str) -> ClusterConfig:
    """Parse the text of a cluster file; `path` only names the file in errors."""
    text = text.removeprefix("\ufeff")
    header_seen = False
    workers: list[WorkerRecord] = []
    first_line: dict[str, WorkerRecord] = {}
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.removesuffix("\r").strip(" \t")
        if not line or line.startswith("#"):
            continue
        try:
            tokens = _tokenize(line)
            if not header_seen:
                words = [t.text for t in tokens]
                if tokens[0].quoted or words[0] != "ANER_CLUSTER":
                    raise _LineError(f'the first non-comment line must be "{HEADER}"')
                if len(tokens) != 2 or tokens[1].quoted or words[1] != "1":
                    raise _LineError(f'unsupported header; this aner reads exactly "{HEADER}"')
                header_seen = True
                continue
            record = _parse_record(tokens, number)
            if len(workers) == MAX_WORKER_RECORDS:
                raise _LineError(
                    f"too many worker records (at most {MAX_WORKER_RECORDS}; remove some)"
                )
            previous = first_line.get(record.identity.casefold())
            if previous is not None:
                same = (
                    ""
                    if previous.identity == record.identity
                    else f', same as "{previous.identity}" ignoring case'
                )
                raise _LineError(
                    f'duplicate worker identity "{record.identity}" (line {previous.line} '
                    f"already uses it{same}; identities must be unique)"
                )
        except _LineError as exc:
            raise ClusterFileError(path, number, exc.reason) from None
        first_line[record.identity.casefold()] = record
        workers.append(record)
    if not header_seen:
        raise ClusterFileError(path, None, f'the file is empty; it must start with "{HEADER}"')
    if not workers:
        raise ClusterFileError(path, None, f"no worker records; add at least one: {RECORD_SHAPE}")
    return ClusterConfig(path=path, workers=tuple(workers))


def load_cluster_file(path: str | os.PathLike[str]) -> ClusterConfig:
    """Refuse an unprotected file before reading it, then parse it (docs/contracts.md, section
    5)."""
    name = os.fspath(path)
    if "\0" in name:  # os.lstat would raise ValueError: say it as of any other bad path
        raise ClusterFileError(
            name.replace("\0", "\\0"), None, "the path holds a NUL character, which no path can"
        )
    try:
        before = os.lstat(name)
    except FileNotFoundError:
        raise ClusterFileError(name, None, "no such file (check the path)") from None
    except OSError as exc:
        raise ClusterFileError(name, None, f"cannot be inspected: {exc.strerror}") from None
    _check_protected(name, before)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(name, flags | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise ClusterFileError(name, None, f"cannot be opened: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        after = os.fstat(handle.fileno())
        if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
            raise ClusterFileError(name, None, "the file was replaced while being opened; retry")
        _check_protected(name, after)
        data = handle.read(MAX_CLUSTER_FILE_BYTES + 1)
    if len(data) > MAX_CLUSTER_FILE_BYTES:
        raise ClusterFileError(name, None, "the file is larger than 1 MiB; is it the right file?")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ClusterFileError(name, line, "not valid UTF-8 text (save it as UTF-8)") from None
    return parse_cluster_text(text, name)


def _check_protected(name: str, st: os.stat_result) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise ClusterFileError(
            name,
            None,
            "is a symbolic link; give the path of the real file (owned by you, mode 600)",
        )
    if stat.S_ISDIR(st.st_mode):
        raise ClusterFileError(name, None, "is a directory; give the path of the cluster file")
    if not stat.S_ISREG(st.st_mode):
        raise ClusterFileError(name, None, "is not a regular file")
    if os.name != "posix":
        return
    uid = os.getuid()
    if st.st_uid != uid:
        raise ClusterFileError(
            name,
            None,
            f"is owned by uid {st.st_uid}, not by you (uid {uid}); "
            f"copy it to a file of your own and run: chmod 600 {name}",
        )
    if st.st_mode & 0o077:
        mode = stat.S_IMODE(st.st_mode)
        raise ClusterFileError(
            name,
            None,
            f"has mode {mode:04o}, which lets group or others read or change it; "
            f"run: chmod 600 {name}",
        )
