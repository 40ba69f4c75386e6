"""Global gradient norm and clipping, bit-exact (docs/backward.md, "Batch gradient, clipping").

norm = sqrt(sum over tensors, in parameter order, of double(dot16(g, g))): each tensor is
flattened row-major in its stored layout (conv weights with their padding columns) and dotted
with itself by the 16-lane dot (binary32), widened to binary64 and added in binary64 starting
from +0. When clipping is enabled and norm > limit (strictly), every element is multiplied
(binary32) by f = float32(limit / (norm + 1e-6)), the quotient computed in binary64.
"""
from __future__ import annotations

import numpy as np

from .dot16 import gemm16


def tensor_sumsq(g) -> np.float32:
    """dot16(g, g) over the flattened tensor, binary32."""
    g = np.ascontiguousarray(g, np.float32).reshape(1, -1)
    if g.size == 0:
        return np.float32(0.0)
    return np.float32(gemm16(g, g)[0, 0])


def global_norm(grads) -> float:
    total = 0.0
    for g in grads:
        total = total + float(tensor_sumsq(g))
    return float(np.sqrt(total))


def factor(limit: float, norm: float) -> np.float32:
    return np.float32(float(limit) / (norm + 1e-6))


def clip(grads, limit, enabled=True):
    """-> (list of binary32 gradients, clipped when enabled and norm > limit; norm)."""
    grads = [np.asarray(g, np.float32) for g in grads]
    norm = global_norm(grads)
    if enabled and norm > limit:
        f = factor(limit, norm)
        grads = [g * f for g in grads]
    else:
        grads = [g.copy() for g in grads]
    return grads, norm
