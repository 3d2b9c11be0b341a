"""An aner plugin: the arithmetic-average Asian call option under geometric Brownian motion,
priced by Monte Carlo with aner's simulation kit.

This module is what the entry point names: it declares the computation and imports nothing
heavy (aner lists computations without loading numba). The numba function is in `model`,
with the closed-form price of the geometric-average option, the control check.
"""

from __future__ import annotations

from aner_worker.plugins import Param, Simulation

MAX_STEPS = 32  # monitoring dates; each takes one normal, two per pair of uniforms

ASIAN = Simulation(
    function="aner_asian.model:payoffs",
    draws=MAX_STEPS,
    outputs=("arithmetic", "geometric"),
    params=(
        Param("spot", 100.0, 1e-6, 1e6, "initial price S0"),
        Param("strike", 100.0, 0.0, 1e6, "strike K"),
        Param("rate", 0.05, -0.5, 0.5, "continuously compounded risk-free rate r"),
        Param("sigma", 0.2, 1e-6, 5.0, "volatility"),
        Param("maturity", 1.0, 1e-6, 100.0, "years to maturity T"),
        Param("steps", 12, 1, MAX_STEPS, "equally spaced monitoring dates", kind="int"),
    ),
    contract="aner-asian/gbm-call/v1",
    description="discounted payoffs of arithmetic- and geometric-average Asian calls",
)
