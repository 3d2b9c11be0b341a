"""The one canonical optimizer of ``aner-dense/v1`` (docs/contracts.md, section 9): Adam or SGD,
binary64.

Optimizer state lives on the coordinator only and is applied once per committed step to the
flat parameter vector (the layout of ``network.flatten``). Updates are pure: they return new
arrays and a new state, so a step that is abandoned halfway leaves the committed parameters
and state untouched. ``OptimizerState.to_arrays`` / ``from_arrays`` give
a checkpoint as plain arrays for an ``.npz`` file.

The Adam update is written exactly in the contract's order of operations; every operation is
elementwise and correctly rounded, so any implementation that follows the text gets the
same bits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from aner_worker.kernels.dense.params import OPTIMIZERS

Floats = npt.NDArray[np.float64]
OptimizerName = Literal["adam", "sgd"]

BETA1 = 0.9
BETA2 = 0.999
EPS = 1e-8


@dataclass(frozen=True)
class OptimizerState:
    """What an optimizer carries between steps: ``t`` committed steps and Adam's moments.

    For SGD ``m`` and ``v`` are empty; ``t`` still counts steps, for the checkpoint.
    """

    name: OptimizerName
    t: int
    m: Floats
    v: Floats

    def to_arrays(self) -> dict[str, npt.NDArray[np.generic]]:
        """Arrays for ``numpy.savez``: ``optimizer``, ``t``, ``m``, ``v``."""
        return {
            "optimizer": np.array(self.name),
            "t": np.array(self.t, dtype=np.int64),
            "m": self.m.copy(),
            "v": self.v.copy(),
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, npt.NDArray[np.generic]]) -> OptimizerState:
        name = str(arrays["optimizer"])
        if name not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {name!r} in checkpoint")
        m = np.asarray(arrays["m"], dtype=np.float64)
        v = np.asarray(arrays["v"], dtype=np.float64)
        if m.shape != v.shape or m.ndim != 1:
            raise ValueError(f"checkpoint moments disagree: m {m.shape}, v {v.shape}")
        t = int(arrays["t"])
        if t < 0:
            raise ValueError(f"checkpoint step count must be >= 0, got {t}")
        return cls(name="adam" if name == "adam" else "sgd", t=t, m=m.copy(), v=v.copy())


def initial_state(name: OptimizerName, n_params: int) -> OptimizerState:
    """State before the first step: ``t = 0``, Adam's moments zero."""
    if name == "adam":
        return OptimizerState("adam", 0, np.zeros(n_params), np.zeros(n_params))
    if name == "sgd":
        return OptimizerState("sgd", 0, np.zeros(0), np.zeros(0))
    raise ValueError(f"optimizer must be 'adam' or 'sgd', got {name!r}")


def adam_step(
    params: Floats, grad: Floats, state: OptimizerState, lr: float, *, n: float = 1.0
) -> tuple[Floats, OptimizerState]:
    """One Adam step on the mean gradient ``grad / n`` (``n`` the step's valid rows, or 1.0
    for a gradient already averaged); ``t`` of the step is ``state.t + 1``.

    The contract's expressions evaluated in their order, element by element in one numba loop
    (`loops.adam`) into fresh arrays: per element ``g = grad / n``,
    ``m' = (beta1 * m) + ((1 - beta1) * g)``, ``v' = (beta2 * v) + (((1 - beta2) * g) * g)``,
    ``p' = p - ((m' / (1 - beta1**t)) * lr) / (sqrt(v' / (1 - beta2**t)) + eps)``, each
    operation correctly rounded (multiplication and addition of two operands commute in IEEE
    arithmetic), so these are the bits of the numpy form, one operation over the whole vector
    at a time, without its twelve passes and temporaries.
    """
    from aner_worker.kernels.dense.loops import adam

    t = state.t + 1
    # Bias corrections are scalars: Python's float power (C pow), once per step.
    constants = np.array(
        [BETA1, 1.0 - BETA1, BETA2, 1.0 - BETA2, 1.0 - BETA1**t, 1.0 - BETA2**t, lr, EPS]
    )
    new, m, v = np.empty_like(params), np.empty_like(params), np.empty_like(params)
    adam(params, grad, float(n), state.m, state.v, constants, (new, m, v))
    return new, OptimizerState("adam", t, m, v)


def sgd_step(
    params: Floats, grad: Floats, state: OptimizerState, lr: float, *, n: float = 1.0
) -> tuple[Floats, OptimizerState]:
    """``p - lr * g`` with ``g = grad / n`` (divided only when ``n`` is not 1.0)."""
    g = grad / n if n != 1.0 else grad
    return params - lr * g, OptimizerState("sgd", state.t + 1, state.m, state.v)


def step(
    params: Floats, grad: Floats, state: OptimizerState, lr: float, *, n: float = 1.0
) -> tuple[Floats, OptimizerState]:
    """One update by the optimizer the state belongs to on the mean gradient ``grad / n``
    (`n`: the step's valid rows; 1.0 for a mean gradient); inputs are never modified."""
    if params.shape != grad.shape or params.ndim != 1:
        raise ValueError(
            f"params and grad must be equal flat vectors: {params.shape}, {grad.shape}"
        )
    if not (math.isfinite(lr) and lr > 0.0):
        raise ValueError(f"learning rate must be a positive finite number, got {lr}")
    if state.name == "adam":
        if state.m.shape != params.shape:
            raise ValueError(
                f"Adam state holds {state.m.size} moments for {params.size} parameters"
            )
        return adam_step(params, grad, state, lr, n=n)
    return sgd_step(params, grad, state, lr, n=n)
