"""Float64 reference: global gradient norm and clipping."""
from __future__ import annotations

import numpy as np


def global_norm(grads):
    """sqrt of the sum over tensors (parameter order) of each tensor's squared entries."""
    return float(np.sqrt(sum(float(np.sum(np.asarray(g, np.float64) ** 2)) for g in grads)))


def clip(grads, limit, enabled=True):
    """-> (grads scaled by limit/(norm + 1e-6) when enabled and norm > limit, norm)."""
    grads = [np.asarray(g, np.float64) for g in grads]
    norm = global_norm(grads)
    if enabled and norm > limit:
        factor = limit / (norm + 1e-6)
        grads = [g * factor for g in grads]
    return grads, norm
