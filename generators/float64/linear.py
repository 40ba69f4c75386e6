"""Float64 reference: linear layer y = x W^T + b (x[T][I], W[O][I], b[O]).

Every sum is a compensated dot (exactsum): the bits do not depend on the machine. y is one
dot over the I inputs and the bias, rounded once.
"""
from __future__ import annotations

import numpy as np

from . import exactsum as xs


def forward(x, W, b):
    """y[t][o] = sum_i x[t][i] W[o][i] + b[o]."""
    x, W, b = (np.asarray(a, np.float64) for a in (x, W, b))
    return xs.affine(x, W, b)


def backward(x, W, dY):
    """Gradients of a loss with dL/dy = dY[T][O]: (dx[T][I], dW[O][I], db[O])."""
    x, W, dY = (np.asarray(a, np.float64) for a in (x, W, dY))
    dx = xs.matmul(dY, W)
    dW = xs.matmul(dY.T, x)
    db = xs.total(dY, axis=0)
    return dx, dW, db
