"""AdamW, bit-exact binary32 (docs/backward.md, "AdamW").

For step t (from 1) the caller keeps the running binary64 products b1t = beta1^t and
b2t = beta2^t (b1t = b1t * beta1 before each step, starting from 1.0). Every scalar is
computed in binary64 and rounded once to binary32:

    omb1 = float(1 - beta1)    b2 = float(beta2)    omb2 = float(1 - beta2)    eps = float(eps)
    decay = float(1 - lr*wd)   stepSize = float(lr / (1 - b1t))   sqrtC2 = float(sqrt(1 - b2t))

Per element, every operation a separate binary32 rounding, no fma:

    p = p * decay                      (only for tensors flagged for decay)
    m = m + omb1 * (g - m)
    v = (v * b2) + (omb2 * (g * g))
    p = p - stepSize * (m / ((sqrt(v) / sqrtC2) + eps))

Decay is applied to weight matrices; biases by a setting (default off, model.param_specs).
"""
from __future__ import annotations

import math

import numpy as np

F = np.float32


def scalars(lr, beta1, beta2, eps, wd, b1t, b2t) -> dict:
    return {"omb1": F(1.0 - beta1), "b2": F(beta2), "omb2": F(1.0 - beta2), "eps": F(eps),
            "decay": F(1.0 - lr * wd), "stepSize": F(lr / (1.0 - b1t)),
            "sqrtC2": F(math.sqrt(1.0 - b2t))}


def step(p, m, v, g, lr, beta1, beta2, eps, wd, decay, b1t, b2t):
    """One step on one tensor -> new (p, m, v), binary32."""
    s = scalars(lr, beta1, beta2, eps, wd, b1t, b2t)
    p, m, v, g = (np.asarray(a, F).copy() for a in (p, m, v, g))
    if decay:
        p = p * s["decay"]
    m = m + s["omb1"] * (g - m)
    v = (v * s["b2"]) + (s["omb2"] * (g * g))
    p = p - s["stepSize"] * (m / ((np.sqrt(v) / s["sqrtC2"]) + s["eps"]))
    return p, m, v


class AdamW:
    """AdamW over a list of tensors with per-tensor decay flags; keeps m, v and beta^t."""

    def __init__(self, params, decay_flags, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, wd=0.01):
        self.p = [np.asarray(a, F).copy() for a in params]
        self.m = [np.zeros_like(a) for a in self.p]
        self.v = [np.zeros_like(a) for a in self.p]
        self.decay = list(decay_flags)
        self.lr, self.beta1, self.beta2, self.eps, self.wd = lr, beta1, beta2, eps, wd
        self.b1t = self.b2t = 1.0
        self.t = 0

    def step(self, grads):
        self.t += 1
        self.b1t = self.b1t * self.beta1
        self.b2t = self.b2t * self.beta2
        for i, g in enumerate(grads):
            self.p[i], self.m[i], self.v[i] = step(
                self.p[i], self.m[i], self.v[i], g, self.lr, self.beta1, self.beta2, self.eps,
                self.wd, self.decay[i], self.b1t, self.b2t)
