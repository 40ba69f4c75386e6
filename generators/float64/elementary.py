"""exp, log and the functions built on them for the float64 reference, the same bits everywhere.

NumPy's np.exp / np.log / np.tanh / np.logaddexp run SIMD kernels chosen by CPU (or libm),
whose last bits differ between machines. These use the project's DetMath exp and log
(generators/spec/detmath.py: range reduction and fixed polynomials in plain + - * /, < 0.53 ulp)
and correctly rounded element-wise operations only:

- expm1(x) = (u - 1) * x / log(u) with u = exp(x), x itself when u == 1 and -1 when u - 1 == -1
  (Kahan's formula: the division by log(u) cancels the rounding of u, so tiny |x| keeps its
  relative accuracy); log1p(x) = log(u) * (x / (u - 1)) with u = 1 + x, the same idea.
- tanh(z) = -m / (2 + m) with m = expm1(-2|z|), the sign of z restored: no cancellation at any
  |z|, tanh(z) -> z for tiny z, 1 from |z| ~ 19.
- sigmoid(z) = 1 / (1 + exp(-z)) for z >= 0, e / (1 + e) with e = exp(z) below: no overflow.
- logaddexp(a, b) = max + log1p(exp(min - max)); -inf when both are -inf.

Each is within a few ulp of the exact function (tests/test_exactsum.py measures them against
mpmath): nine orders of magnitude below binary32 rounding.
"""
from __future__ import annotations

import numpy as np

from ..spec import detmath

exp = detmath.exp
log = detmath.log


def expm1(x):
    x = np.asarray(x, np.float64)
    with np.errstate(all="ignore"):
        u = exp(x)
        um1 = u - 1.0
        r = (um1 * x) / log(u)
        r = np.where(um1 == -1.0, -1.0, r)
        r = np.where(u == np.inf, np.inf, r)
        return np.where(u == 1.0, x, r)


def log1p(x):
    x = np.asarray(x, np.float64)
    with np.errstate(all="ignore"):
        u = 1.0 + x
        r = log(u) * (x / (u - 1.0))
        r = np.where(u == np.inf, np.inf, r)
        return np.where(u == 1.0, x, r)


def tanh(z):
    z = np.asarray(z, np.float64)
    with np.errstate(all="ignore"):
        m = expm1(-2.0 * np.abs(z))
        return np.copysign(-m / (2.0 + m), z)


def sigmoid(z):
    z = np.asarray(z, np.float64)
    with np.errstate(all="ignore"):
        e = exp(-np.abs(z))
        return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def logaddexp(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    with np.errstate(all="ignore"):
        hi, lo = np.maximum(a, b), np.minimum(a, b)
        r = hi + log1p(exp(lo - hi))
        return np.where((lo == -np.inf) | (hi == np.inf), hi, r)
