"""The multiplier lambda(phi) of the probabilistic part of an allowance (docs/tolerances.md,
"The probability of a false failure").

An element's random rounding error e has, under the model, a sub-Gaussian distribution whose
variance proxy is r^2 * (G + F): G collects the roundings whose size the data fix (elementwise
operations, products, the mean profile of a sum), F the part of a sum's rounding variance that
depends on how the unknown order of summation meets the data (the fluctuation of its partial
sums). For F the order is modelled as a random permutation of the terms: the partial sums'
fluctuation is then a Brownian bridge, and the ratio of the order's actual sum of squared
partial sums to its expectation is rho^2 = (1 - phi) + 6*phi*int_0^1 B(t)^2 dt,
phi = F / (G + F). Chernoff's bound with the bridge's moment generating function,

    E[exp(s * int B^2)] = (sqrt(2s) / sin(sqrt(2s)))^(1/2),   s < pi^2 / 2,

gives P(|e| > lambda * sigma) <= 2 * inf_theta exp(theta^2 (1 - phi) / 2) *
E[exp(3 phi theta^2 int B^2)] * exp(-theta * lambda). lambda(phi) is the smallest lambda that
makes this at most p (the per-element probability of a false failure, harness/tolerances.toml).
phi = 0 gives the Gaussian sqrt(2 ln(2/p)).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

GRID = 101          # phi = 0, 0.01, ..., 1; an element takes the next grid point up (lambda increases)


def _exponent(phi: float):
    """theta grid and f(theta) = log of E[exp(theta^2 rho^2 / 2)] for the mixture of phi."""
    tmax = 60.0 if phi <= 0.0 else min(60.0, np.pi / np.sqrt(6.0 * phi) * (1.0 - 1e-9))
    th = np.linspace(1e-6, tmax, 4001)
    s = 3.0 * phi * th * th
    x = np.sqrt(2.0 * np.maximum(s, 1e-300))
    log_mgf = np.where(s > 1e-10, 0.5 * (np.log(x) - np.log(np.sin(x))), s / 6.0)
    return th, th * th * (1.0 - phi) / 2.0 + log_mgf


def _solve(phi: float, p: float) -> float:
    """The smallest lambda with 2 * inf_theta exp(f(theta) - theta * lambda) <= p."""
    th, f = _exponent(phi)
    target = np.log(p / 2.0)
    lo, hi = 0.0, 400.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if np.min(f - th * mid) > target:
            lo = mid
        else:
            hi = mid
    return hi


@lru_cache(maxsize=8)
def table(p: float) -> np.ndarray:
    """lambda at phi = i/(GRID-1), i = 0..GRID-1, for per-element probability p."""
    return np.array([_solve(i / (GRID - 1), p) for i in range(GRID)])


def lam(phi, p: float) -> np.ndarray:
    """lambda(phi) for an array of phi in [0, 1]: the table's value at the next grid point up,
    so never below the exact lambda(phi)."""
    t = table(float(p))
    x = np.clip(np.asarray(phi, np.float64), 0.0, 1.0) * (GRID - 1)
    return t[np.ceil(x - 1e-12).astype(np.int64)]
