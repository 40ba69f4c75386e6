"""Linear layer, y = x Wᵀ + b, and its backward, bit-exact float32 (docs/backward.md)."""
from __future__ import annotations

import numpy as np

from .dot16 import gemm16


def forward(x, W, b) -> np.ndarray:
    """y[t][o] = dot16(x[t], W[o]) + b[o]."""
    return gemm16(x, W) + np.asarray(b, np.float32)


def backward(x, W, dY):
    """dW[o][i] = dot over t of dY[t][o], x[t][i]; db[o] = dot over t of dY[t][o], 1;
    dx[t][i] = dot over o of dY[t][o], W[o][i]. The operands are read as rows of the
    transposed matrices, so term t (or o) lands in lane t mod 16 (or o mod 16)."""
    x = np.asarray(x, np.float32)
    W = np.asarray(W, np.float32)
    dY = np.asarray(dY, np.float32)
    dYT = dY.T
    dW = gemm16(dYT, x.T)
    db = gemm16(dYT, np.ones((1, dY.shape[0]), np.float32))[:, 0]
    dx = gemm16(dY, W.T)
    return dx, dW, db
