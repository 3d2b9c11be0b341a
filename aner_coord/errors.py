"""Errors that say whose fault a failure is, and map to the exit codes of SPEC section 8."""

from __future__ import annotations

EXIT_OK = 0
EXIT_INVALID = 2
EXIT_FAILED = 3
EXIT_CANCELLED = 4
EXIT_OFFLINE = 5


class AnerError(Exception):
    """Base of every error a user may see as one line on stderr."""

    exit_code = EXIT_FAILED


class RequestError(AnerError, ValueError):
    """The request itself is invalid (bad number, existing output...): nothing was started."""

    exit_code = EXIT_INVALID


class AdmissionError(RequestError):
    """The request is well-formed but exceeds what this machine or the limits admit."""


class JobFailed(AnerError):
    """The job failed: a worker could not be reached, was refused, died, misbehaved or
    failed a task. The message names the worker and the phase."""

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
