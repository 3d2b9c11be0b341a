"""The Asian call's payoffs on one path, and the geometric-average option's closed form.

A path has `steps` monitoring dates `t_k = k T / steps`; its log-price moves by
`(r - sigma**2 / 2) dt + sigma sqrt(dt) z_k`, each `z_k` a standard normal made by the
Box-Muller transform from the sample's uniforms `u[2j]`, `u[2j + 1]` (two normals a pair).
"""

from __future__ import annotations

import math

import numba

SPOT, STRIKE, RATE, SIGMA, MATURITY, STEPS = range(6)  # the order the declaration gives


@numba.njit(nogil=True, cache=True)
def payoffs(u, p):  # type: ignore[no-untyped-def]
    """The discounted payoffs (arithmetic, geometric) of one path from uniforms `u`."""
    steps = int(p[STEPS])
    dt = p[MATURITY] / steps
    drift = (p[RATE] - 0.5 * p[SIGMA] * p[SIGMA]) * dt
    vol = p[SIGMA] * math.sqrt(dt)
    log_s = math.log(p[SPOT])
    total = 0.0
    log_total = 0.0
    for k in range(steps):
        j = k // 2
        radius = math.sqrt(-2.0 * math.log(1.0 - u[2 * j]))
        angle = 2.0 * math.pi * u[2 * j + 1]
        z = radius * (math.cos(angle) if k % 2 == 0 else math.sin(angle))
        log_s += drift + vol * z
        total += math.exp(log_s)
        log_total += log_s
    discount = math.exp(-p[RATE] * p[MATURITY])
    arithmetic = discount * max(total / steps - p[STRIKE], 0.0)
    geometric = discount * max(math.exp(log_total / steps) - p[STRIKE], 0.0)
    return arithmetic, geometric


def _normal_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def geometric_price(
    spot: float, strike: float, rate: float, sigma: float, maturity: float, steps: int
) -> float:
    """The exact price of the discretely monitored geometric-average Asian call (Kemna and
    Vorst, 1990): the log of the average is normal with the mean and variance below."""
    mean = math.log(spot) + (rate - 0.5 * sigma**2) * maturity * (steps + 1) / (2 * steps)
    var = sigma**2 * maturity * (steps + 1) * (2 * steps + 1) / (6 * steps**2)
    sd = math.sqrt(var)
    d2 = (mean - math.log(strike)) / sd
    forward = math.exp(mean + 0.5 * var)
    return math.exp(-rate * maturity) * (forward * _normal_cdf(d2 + sd) - strike * _normal_cdf(d2))
