"""What a plugin's entry point names: a light, frozen declaration of a computation.

A distribution adds a computation by declaring an entry point in the group
"aner.computations" (docs/contracts.md, section 15): its name is the computation's, and its
object is one of the two declarations below. Both name code by `module:attribute` strings,
so that listing what exists (`status`, a worker's handshake) imports only the module that
holds the declaration, never numpy or numba:

- `Plugin`: the general interface, both halves written by the author (a `Kernel` for the
  worker, a `Computation` for the coordinator, and its request type);
- `Simulation`: the simulation kit, one numba function of a sample's uniforms and its
  parameters; aner derives both halves (`aner_worker.kernels.simulation`,
  `aner_coord.computations.simulation`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

# A computation's name: what `--computation`, the request's `kind` and the kernel use.
NAME = re.compile(r"[a-z][a-z0-9-]{0,38}[a-z0-9]")
# `package.module:attribute`
PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
# A simulation's draws and outputs per sample, and its parameters, at most.
MAX_DRAWS = 4096
MAX_OUTPUTS = 64
MAX_PARAMS = 64


@dataclass(frozen=True)
class Plugin:
    """Both halves of a computation, by `module:attribute` path: `kernel` makes the worker
    half (`aner_worker.kernels.base.Kernel`), `computation` the coordinator half
    (`aner_coord.computations.base.Computation`), `request` is its request type (a tagged
    `ComputationRequest` whose tag is the computation's name); `contract` names what it
    computes (`my-lab/transport/v1`); `summary` and `progress` (`module:function`) show its
    results and running jobs without importing the computation."""

    kernel: str
    computation: str
    request: str
    contract: str
    summary: str | None = None
    progress: str | None = None

    def problem(self) -> str | None:
        """What is wrong with the declaration itself, in a few words, or None."""
        for what, path in (("kernel", self.kernel), ("computation", self.computation),
                           ("request", self.request), ("summary", self.summary),
                           ("progress", self.progress)):  # fmt: skip
            if path is not None and not (isinstance(path, str) and PATH.fullmatch(path)):
                return f"its {what} {path!r} is not a `module:attribute` path"
        if not (isinstance(self.contract, str) and self.contract.strip()):
            return "it declares no contract identity"
        return None


@dataclass(frozen=True)
class Param:
    """One parameter of a simulation: a float (or an int) with its default and the closed
    range `[ge, le]` it must lie in; `description` is its help."""

    name: str
    default: float
    ge: float
    le: float
    description: str = ""
    kind: Literal["float", "int"] = "float"

    def problem(self) -> str | None:
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,30}", self.name or ""):
            return f"parameter {self.name!r} is not a lowercase identifier"
        if self.kind not in ("float", "int"):
            return f"parameter {self.name}: kind {self.kind!r} is neither 'float' nor 'int'"
        values = (self.default, self.ge, self.le)
        if not all(isinstance(v, int | float) and math.isfinite(v) for v in values):
            return f"parameter {self.name}: default and bounds must be finite numbers"
        if not self.ge <= self.default <= self.le:
            return (
                f"parameter {self.name}: default {self.default} is outside [{self.ge}, {self.le}]"
            )
        if self.kind == "int" and not all(float(v).is_integer() for v in values):
            return f"parameter {self.name}: an int parameter needs whole default and bounds"
        return None


@dataclass(frozen=True)
class Simulation:
    """Independent samples of one numba function (docs/contracts.md, section 15).

    `function` (`module:function`) is `@numba.njit` code `f(u, p)` of a sample's `draws`
    uniforms `u` (float64 in [0, 1), from the contract's Philox stream) and the parameters
    `p` (float64, in the order of `params`), returning `len(outputs)` float64 values (a
    tuple, or a float for one output). `contract` names what it computes."""

    function: str
    draws: int
    outputs: tuple[str, ...]
    params: tuple[Param, ...]
    contract: str
    description: str = ""

    def problem(self) -> str | None:
        if not (isinstance(self.function, str) and PATH.fullmatch(self.function)):
            return f"its function {self.function!r} is not a `module:function` path"
        if not (isinstance(self.draws, int) and 1 <= self.draws <= MAX_DRAWS):
            return f"its draws {self.draws!r} are not a whole number in 1..{MAX_DRAWS}"
        if not (1 <= len(self.outputs) <= MAX_OUTPUTS) or not all(
            isinstance(o, str) and re.fullmatch(r"[a-z_][a-z0-9_]{0,30}", o) for o in self.outputs
        ):
            return f"its outputs must be 1..{MAX_OUTPUTS} lowercase identifiers"
        if len(set(self.outputs)) != len(self.outputs):
            return "it names an output twice"
        if len(self.params) > MAX_PARAMS:
            return f"it declares more than {MAX_PARAMS} parameters"
        for param in self.params:
            if not isinstance(param, Param):
                return f"its parameter {param!r} is not an aner Param"
            problem = param.problem()
            if problem is not None:
                return problem
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            return "it names a parameter twice"
        if not (isinstance(self.contract, str) and self.contract.strip()):
            return "it declares no contract identity"
        return None


Declaration = Plugin | Simulation
