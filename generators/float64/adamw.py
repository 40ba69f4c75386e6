"""Float64 reference: one AdamW step (Loshchilov & Hutter 2019, algorithm 2),
in PyTorch's single-tensor order: decoupled decay first, then the moments, then
the bias-corrected update. beta^t is a product of t factors (not pow, whose last bit is libm's),
so the bits do not depend on the machine."""
from __future__ import annotations

import numpy as np


def step(p, m, v, g, t, lr, beta1=0.9, beta2=0.999, eps=1e-8, wd=0.01, decay=True):
    """Step t (from 1). -> (p, m, v) in float64."""
    p, m, v, g = (np.asarray(a, np.float64) for a in (p, m, v, g))
    if decay:
        p = p * (1.0 - lr * wd)
    m = m + (1.0 - beta1) * (g - m)
    v = v * beta2 + (1.0 - beta2) * (g * g)
    b1t = b2t = 1.0
    for _ in range(int(t)):
        b1t, b2t = b1t * beta1, b2t * beta2
    c1 = 1.0 - b1t
    c2 = 1.0 - b2t
    p = p - (lr / c1) * (m / (np.sqrt(v) / np.sqrt(c2) + eps))
    return p, m, v
