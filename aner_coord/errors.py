"""Errors that say whose fault a failure is, and map to the exit codes of docs/contracts.md, section
8."""

from __future__ import annotations

from collections.abc import Callable

EXIT_OK = 0
EXIT_INVALID = 2
EXIT_FAILED = 3
EXIT_CANCELLED = 4
EXIT_OFFLINE = 5

# A job's failure message as stderr, status.json, `status` and the API show it: one line of
# at most this many characters (a longer one is cut, its whole text kept in a file).
MAX_MESSAGE_CHARS = 500

# How the command line spells an argument that the API calls otherwise.
_FLAG_NAMES = {"config": "cluster"}


def api_name(name: str) -> str:
    return f"{name}="


def cli_name(name: str) -> str:
    return "--" + _FLAG_NAMES.get(name, name).replace("_", "-")


def bounded_message(message: str, kept_in: str | None) -> str:
    """`message` as one line of at most MAX_MESSAGE_CHARS characters: control characters
    become spaces, and a longer one is cut, saying how long it was and where the whole of it
    is kept (`kept_in`, None: nowhere)."""
    line = "".join(" " if ord(c) < 32 or ord(c) == 127 else c for c in message)
    if len(line) <= MAX_MESSAGE_CHARS:
        return line
    where = f"; the whole message is in {kept_in}" if kept_in else ""
    tail = f" [... cut: {len(line):,} characters in all{where}]"
    return line[: MAX_MESSAGE_CHARS - len(tail)] + tail


# A request's refusal echoes what it refuses; a word longer than this (a value, a key or a
# path of a user's file) is shown by its ends, so the line keeps what to change.
MAX_ECHOED_WORD = 200


def _elided(text: str) -> str:
    words = text.split(" ")
    for i, word in enumerate(words):
        if len(word) > MAX_ECHOED_WORD:
            words[i] = f"{word[:100]}[... {len(word) - 140:,} characters ...]{word[-40:]}"
    return " ".join(words)


class AnerError(Exception):
    """Base of every error a user may see as one line on stderr."""

    exit_code = EXIT_FAILED

    def render(self, style: Callable[[str], str] = api_name) -> str:
        """The message, naming arguments as the caller knows them (see RequestError)."""
        return str(self)


class RequestError(AnerError, ValueError):
    """The request itself is invalid (bad number, existing output...): nothing was started.
    Its message is one bounded line (`bounded_message`), a long echoed word shown by its ends.

    A message may name request arguments as `{name}` for each name in `arguments`; they are
    rendered as the API spells them (`workers=`) or, by the command line, as flags
    (`--workers`)."""

    exit_code = EXIT_INVALID

    def __init__(self, message: str, *arguments: str) -> None:
        self.template = message
        self.arguments = arguments
        super().__init__(self.render())

    def render(self, style: Callable[[str], str] = api_name) -> str:
        text = self.template
        for name in self.arguments:
            text = text.replace("{" + name + "}", style(name))
        return bounded_message(_elided(text), None)


class AdmissionError(RequestError):
    """The request is well-formed but exceeds what this machine or the limits admit."""


class JobFailed(AnerError):
    """The job failed: a worker could not be reached, was refused, died, misbehaved or
    failed a task, the fit diverged, or the job directory could not be written. The message
    says where, in at most MAX_MESSAGE_CHARS characters; `detail` is the whole of it."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail if detail is not None else message


class JobCancelled(AnerError):
    """The job was cancelled before it completed; partial counts are diagnostic only."""

    exit_code = EXIT_CANCELLED


class WorkerFailure(JobFailed):
    """One named worker failed in a named phase."""

    def __init__(self, identity: str, phase: str, detail: str) -> None:
        super().__init__(f'worker "{identity}" failed during {phase}: {detail}')
        self.identity = identity
        self.phase = phase
        self.detail = detail
