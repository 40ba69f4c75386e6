"""Clipping's error model: the global norm and the clipped gradients (docs/tolerances.md).

Each tensor's sum of squares is one binary32 sum of its g*g terms (any order); the sum over
tensors and the square root are binary64 (exact at this scale). The factor
f = float32(limit / (norm + 1e-6)) carries the norm's error, one number shared by every
element: for the clipped gradients it is a systematic error, f's bound being
|f| * allowance(norm) / (norm + 1e-6) plus its own rounding. A norm within its allowance of
the limit could be decided either way: the gradients' bound then also covers the other
outcome (the clipped one with its factor's and product's roundings, could_be_clipped).
"""
from __future__ import annotations

import numpy as np

from . import params
from .errors import ULP, Err
from .sums import total


def norm_errors(grads) -> Err:
    """The global norm (shape ()) of a list of gradient Errs."""
    sq = None
    for g in grads:
        s = total(g.reshape(-1).square(), 0)
        sq = s if sq is None else sq.plus(s)
    return sq.sqrt_exact()


def clip_errors(grads, limit: float, enabled: bool):
    """-> (clipped gradient Errs, norm Err)."""
    norm = norm_errors(grads)
    nv = float(norm.v)
    f = limit / (nv + 1e-6)
    a_norm = float(norm.allowance(params.lam()))
    s_f = abs(f) * a_norm / (nv + 1e-6) + ULP * abs(f)
    if not (enabled and nv > limit):
        if enabled and nv + a_norm > limit:          # could have been clipped
            return [could_be_clipped(g, f, s_f) for g in grads], norm
        return list(grads), norm
    if nv - a_norm <= limit:                          # could have stayed unclipped
        s_f = max(s_f, abs(1.0 - f))
    return [scaled(g, f, s_f) for g in grads], norm


def could_be_clipped(g: Err, f: float, s_f: float) -> Err:
    """The unclipped g, whose bound also covers the clipped outcome float32(g * float32(f')),
    f' the port's factor: its distance from g plus that outcome's own bound (f's error and
    rounding, the product's rounding). Near the limit f is 1 - 1e-6/norm, and f's and the
    product's roundings (up to 2^-24 each) are larger than |1 - f| itself above a norm of 17."""
    other = scaled(Err.exact(g.v), f, s_f)
    return g.plus_systematic(np.abs(g.v - other.v) + other.allowance(params.lam()))


def scaled(g: Err, f: float, s_f: float) -> Err:
    """float32(g * f) with f's error bound s_f shared by every element."""
    return g.scaled(f).plus_systematic(np.abs(g.v) * s_f).rounded()


def case_errors(case) -> dict:
    grads = np.asarray(case.inputs["grads"], np.float64)
    out, at = [], 0
    for n in (int(v) for v in case.inputs["sizes"]):
        out.append(Err.exact(grads[at:at + n]))
        at += n
    clipped, norm = clip_errors(out, float(case.inputs["limit"][0]), bool(case.inputs["enabled"][0]))
    res = {name: c.reshape(shape) for name, shape, c in
           zip(case.params["names"], case.params["shapes"], clipped)}
    res["norm"] = norm.reshape(1)
    return res
