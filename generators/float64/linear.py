"""Float64 reference: linear layer y = x W^T + b (x[T][I], W[O][I], b[O])."""
from __future__ import annotations

import numpy as np


def forward(x, W, b):
    """y[t][o] = sum_i x[t][i] W[o][i] + b[o]."""
    x, W, b = (np.asarray(a, np.float64) for a in (x, W, b))
    return x @ W.T + b


def backward(x, W, dY):
    """Gradients of a loss with dL/dy = dY[T][O]: (dx[T][I], dW[O][I], db[O])."""
    x, W, dY = (np.asarray(a, np.float64) for a in (x, W, dY))
    dx = dY @ W
    dW = dY.T @ x
    db = dY.sum(axis=0)
    return dx, dW, db
