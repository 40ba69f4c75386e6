"""Floor(tensor) = max |fp32 - float64| over the tensor's elements: how far PyTorch's fp32
run may be from its own float64 run (docs/pytorch-tier.md)."""
from __future__ import annotations

import numpy as np


def floor(a32, a64) -> float:
    """max |fp32 - float64| over the elements (0 for an empty tensor)."""
    a32 = np.asarray(a32, np.float64)
    a64 = np.asarray(a64, np.float64)
    if a32.size == 0:
        return 0.0
    return float(np.max(np.abs(a32 - a64)))


def floors(e32: dict, e64: dict, names=None) -> dict:
    """{tensor: Floor} for the float tensors of e32 (integer tensors have no Floor)."""
    out = {}
    for k in (names or e32):
        a = np.asarray(e32[k])
        if a.dtype.kind == "f":
            out[k] = floor(a, e64[k])
    return out
