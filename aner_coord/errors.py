"""Errors that say whose fault a failure is, and map to the exit codes of docs/contracts.md, section
8."""

from __future__ import annotations

from collections.abc import Callable

EXIT_OK = 0
EXIT_INVALID = 2
EXIT_FAILED = 3
EXIT_CANCELLED = 4
EXIT_OFFLINE = 5

# How the command line spells an argument that the API calls otherwise.
_FLAG_NAMES = {"config": "cluster"}


def api_name(name: str) -> str:
    return f"{name}="


def cli_name(name: str) -> str:
    return "--" + _FLAG_NAMES.get(name, name).replace("_", "-")


class AnerError(Exception):
    """Base of every error a user may see as one line on stderr."""

    exit_code = EXIT_FAILED

    def render(self, style: Callable[[str], str] = api_name) -> str:
        """The message, naming arguments as the caller knows them (see RequestError)."""
        return str(self)


class RequestError(AnerError, ValueError):
    """The request itself is invalid (bad number, existing output...): nothing was started.

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
        return text


class AdmissionError(RequestError):
    """The request is well-formed but exceeds what this machine or the limits admit."""


class JobFailed(AnerError):
    """The job failed: a worker could not be reached, was refused, died, misbehaved or
    failed a task, the fit diverged, or the job directory could not be written. The message
    says where."""

    exit_code = EXIT_FAILED


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
