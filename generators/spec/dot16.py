"""dot16, the 16-lane dot product, in exact float32 emulation (docs/numerics.md).

16 partials start at +0; term k is added into lane k mod 16 with an fma, k ascending; then
the tree: for s = 8, 4, 2, 1: p[i] = p[i] + p[i+s] for i < s; the result is p[0]. A dot has
exactly n terms: a lane that receives no further term keeps its value (no zero padding).
"""
from __future__ import annotations

import numpy as np

from .fma import fma


def tree16(p: np.ndarray) -> np.ndarray:
    """Reduces the last axis (16 lanes) with the fixed halving tree."""
    p = p.copy()
    for s in (8, 4, 2, 1):
        p[..., :s] = p[..., :s] + p[..., s:2 * s]
    return p[..., 0]


def gemm16(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """C[i][j] = dot16(A[i], B[j]) for row-major A[M][K], B[N][K]; exactly K terms each."""
    A = np.ascontiguousarray(A, np.float32)
    B = np.ascontiguousarray(B, np.float32)
    M, K = A.shape
    N, K2 = B.shape
    assert K == K2, (A.shape, B.shape)
    p = np.zeros((M, N, 16), np.float32)
    full = K // 16 * 16
    for k0 in range(0, full, 16):
        p = fma(A[:, None, k0:k0 + 16], B[None, :, k0:k0 + 16], p)
    r = K - full
    if r:
        p[:, :, :r] = fma(A[:, None, full:], B[None, :, full:], p[:, :, :r])
    return tree16(p)


def dot16(a: np.ndarray, b: np.ndarray) -> np.float32:
    a = np.asarray(a, np.float32).reshape(1, -1)
    b = np.asarray(b, np.float32).reshape(1, -1)
    return np.float32(gemm16(a, b)[0, 0])
