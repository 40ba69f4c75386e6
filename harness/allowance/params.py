"""The error model's few parameters, read from harness/tolerances.toml ([[parameter]]
entries, each with its reason)."""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from ..tolerances import parameters



def value(name: str) -> float:
    try:
        return parameters()[name].value
    except KeyError:
        raise KeyError(f"harness/tolerances.toml has no model parameter {name!r}") from None


def lam() -> float:
    """The multiplier of an element's standard deviation: the Gaussian tail bound at the
    table's per-element probability p, P(|e| > lambda sigma) <= 2 exp(-lambda^2 / 2) = p for a
    sub-Gaussian error e (docs/tolerances.md, "The rounding model")."""
    return float(np.sqrt(2.0 * np.log(2.0 / value("p_element"))))


def ulp(y) -> np.ndarray:
    """The binary32 spacing at |y| (2^-149 below the normal range)."""
    _, e = np.frexp(np.abs(np.asarray(y, np.float64)))
    return np.where(np.abs(y) >= 2.0 ** -126, np.ldexp(1.0, e - 24), 2.0 ** -149)


def act_bound(y, which: str) -> np.ndarray:
    """The error bound of the sigmoid or tanh a port may use, exact result y: K ulps of
    max(|y|, 1/2), i.e. K ulps of y, or K ulps of 1/2 absolutely where |y| is smaller (a
    library's rational approximation of the whole function is accurate absolutely). All of it
    may keep its sign over many evaluations (an approximation's error is a smooth function of
    the argument): lstm.py carries it as systematic."""
    return value(f"{which}_ulps") * ulp(np.maximum(np.abs(np.asarray(y, np.float64)), 0.5))


@lru_cache(maxsize=1)
def all_values() -> tuple:
    """(name, value) of every parameter: part of the cache key."""
    return tuple(sorted((k, p.value) for k, p in parameters().items()))
