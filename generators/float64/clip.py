"""Float64 reference: global gradient norm and clipping.

The sum of squares is one compensated dot over every element of every tensor (exactsum), so
its bits do not depend on the machine.
"""
from __future__ import annotations

import numpy as np

from . import exactsum as xs


def global_norm(grads):
    """sqrt of the sum over all tensors' entries (parameter order) of their squares."""
    flat = np.concatenate([np.asarray(g, np.float64).ravel() for g in grads] + [np.zeros(0)])
    return float(np.sqrt(xs.dot(flat, flat)))


def clip(grads, limit, enabled=True):
    """-> (grads scaled by limit/(norm + 1e-6) when enabled and norm > limit, norm)."""
    grads = [np.asarray(g, np.float64) for g in grads]
    norm = global_norm(grads)
    if enabled and norm > limit:
        factor = limit / (norm + 1e-6)
        grads = [g * factor for g in grads]
    return grads, norm
