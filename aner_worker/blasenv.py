"""The OpenBLAS settings a worker computes with (docs/contracts.md, sections 5 and 6).

OpenBLAS picks a kernel set by CPU unless `OPENBLAS_CORETYPE` names one, and
`OPENBLAS_L2_SIZE` overrides the cache size it plans its blocks for; kernel sets round a
matrix product differently in its last bits. A coordinator therefore starts every worker
with its own values of both (or their absence) as arguments of the worker's command
(`--blas-env NAME=VALUE`, an empty value for unset), not as environment variables: sshd
refuses environment requests unless its `AcceptEnv` allows them, and a login may preset
its own. OpenBLAS reads them once, when numpy loads it, so `apply` must run before numpy
is imported; it refuses to change them after.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence

# The variables, in the order they are passed and reported.
VARIABLES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
# A core name (Haswell, SkylakeX, NEOVERSEN1) or a size in kilobytes: nothing a shell, a
# command line or a report could take for anything else.
_VALUES = {
    "OPENBLAS_CORETYPE": (
        re.compile(r"[A-Za-z0-9_]{1,32}", re.ASCII),
        "a core name (1 to 32 letters, digits or _, like Haswell)",
    ),
    "OPENBLAS_L2_SIZE": (
        re.compile(r"[1-9][0-9]{0,7}", re.ASCII),
        "a size in kilobytes (a whole number from 1, like 512)",
    ),
}


def value_problem(name: str, value: str) -> str | None:
    """Why `value` cannot be `name`'s (None: it can); the empty value means unset."""
    if name not in _VALUES:
        return f"{name} is not one of {', '.join(VARIABLES)}"
    pattern, what = _VALUES[name]
    if value and not pattern.fullmatch(value):
        return f"{name} must be {what}"
    return None


def parse_setting(text: str) -> tuple[str, str]:
    """`NAME=VALUE` as the worker's `--blas-env` takes it; ValueError says what is wrong."""
    name, equals, value = text.partition("=")
    problem = value_problem(name, value) if equals else f"{text[:40]!r} is not NAME=VALUE"
    if problem is not None:
        raise ValueError(f"{problem} (an empty value unsets it)")
    return name, value


def own_settings(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's values of the variables, "" for each one unset."""
    env = os.environ if environ is None else environ
    return {name: env.get(name, "") for name in VARIABLES}


def apply(settings: Sequence[tuple[str, str]]) -> None:
    """Set (or, for "", unset) each variable in this process before numpy loads OpenBLAS.
    RuntimeError if numpy is loaded already and a value would change: too late to matter."""
    wanted = dict(settings)
    if not wanted:
        return
    current = own_settings()
    if "numpy" in sys.modules and any(current[k] != v for k, v in wanted.items()):
        raise RuntimeError("numpy is loaded already: --blas-env can no longer take effect")
    for name, value in wanted.items():
        if value:
            os.environ[name] = value
        else:
            os.environ.pop(name, None)


def describe(environ: Mapping[str, str] | None = None) -> str:
    """The settings as the machine identity reports them: `OPENBLAS_CORETYPE=Haswell
    OPENBLAS_L2_SIZE=512`, only those set; "none" where neither is."""
    set_ = [f"{k}={v}" for k, v in own_settings(environ).items() if v]
    return " ".join(set_) or "none"
