"""AdamW's error model: three (or any number of) steps per element, every operation rounded
once, the binary32-rounded scalars' errors shared by every element (systematic)
(docs/tolerances.md, "AdamW")."""
from __future__ import annotations

import math

import numpy as np

from .errors import ULP, Err


def scalar(c: float) -> Err:
    """A scalar computed in binary64 and rounded once to binary32: the rounding is one error
    shared by every element it multiplies."""
    c = np.float64(c)
    return Err(c, np.float64(0.0), ULP * abs(c), ULP * abs(c))


def step(p: Err, m: Err, v: Err, g: Err, lr, beta1, beta2, eps, wd, decay, b1t, b2t):
    """-> (p, m, v) after one step (docs/backward.md's order)."""
    omb1, b2, omb2 = scalar(1.0 - beta1), scalar(beta2), scalar(1.0 - beta2)
    if decay:
        p = p * scalar(1.0 - lr * wd)
    m = m + omb1 * (g - m)
    v = (v * b2) + (omb2 * g.square())
    denom = (v.sqrt() / scalar(math.sqrt(1.0 - b2t))) + scalar(eps)
    p = p - scalar(lr / (1.0 - b1t)) * (m / denom)
    return p, m, v


def case_errors(case) -> dict:
    p = Err.exact(case.inputs["p"])
    grads = np.asarray(case.inputs["grads"], np.float64)
    lr, beta1, beta2, eps, wd = (float(x) for x in case.inputs["hparams"])
    decay = bool(case.inputs["decay"][0])
    m = v = Err.exact(np.zeros(p.shape))
    b1t = b2t = 1.0
    for t in range(grads.shape[0]):
        b1t, b2t = b1t * beta1, b2t * beta2
        p, m, v = step(p, m, v, Err.exact(grads[t]), lr, beta1, beta2, eps, wd, decay, b1t, b2t)
    return {"p": p, "m": m, "v": v}
