"""Conv block (stride 1, channels-last) + fused ReLU + max pool, forward and backward,
bit-exact float32 (docs/numerics.md and docs/backward.md, "Convolution block").

Layouts (docs/architecture.md): x[H][W][C]; W[Out][KPadded] with tap index
k = (ky*kw + kx)*C + c and padding columns K..KPadded-1 (zeros in the container);
conv[P][Out] with p = y*Wc + x; pooled and winners [Hp][Wp][Out]; winners = p*Out + o or -1.

Every sum over many terms is a dot16 through `gemm16` (rows of A against rows of B); the pool
and the dx gather are element-wise float32 operations (comparisons and plain additions).
"""
from __future__ import annotations

import numpy as np

from .dot16 import gemm16
from ..geometry import conv_size

# gemm16 builds an [M][N][16] partial array; rows of A are fed in blocks so that the exact
# fma emulation (several float64 temporaries of that size) stays within a few hundred MB.
_GEMM_ELEMENTS = 1 << 21


def _as_hwc(x) -> np.ndarray:
    x = np.asarray(x, np.float32)
    return x[:, :, None] if x.ndim == 2 else x


def _gemm(A, B) -> np.ndarray:
    """gemm16(A, B) in row blocks: each output is one whole dot16, so blocking changes nothing."""
    A = np.ascontiguousarray(A, np.float32)
    B = np.ascontiguousarray(B, np.float32)
    rows = max(1, _GEMM_ELEMENTS // max(1, B.shape[0] * 16))
    if A.shape[0] <= rows:
        return gemm16(A, B)
    return np.concatenate([gemm16(A[i:i + rows], B) for i in range(0, A.shape[0], rows)])


def im2col(x, kh, kw, padH, padW, KPadded) -> np.ndarray:
    """col[p][k] = x[y + ky - padH][x + kx - padW][c], +0 outside the image and in the
    padding columns k >= kh*kw*C."""
    x = _as_hwc(x)
    H, W, C = x.shape
    Hc, Wc = conv_size(H, W, kh, kw, padH, padW)
    xp = np.zeros((H + 2 * padH, W + 2 * padW, C), np.float32)
    xp[padH:padH + H, padW:padW + W] = x
    col = np.zeros((Hc * Wc, KPadded), np.float32)
    for ky in range(kh):
        for kx in range(kw):
            k = (ky * kw + kx) * C
            col[:, k:k + C] = xp[ky:ky + Hc, kx:kx + Wc].reshape(Hc * Wc, C)
    return col


def relu_maxpool(conv, Hc, Wc, poolH, poolW):
    """The pool rule on conv[P][Out]: per window a running maximum from +0, cells visited
    window row by window row, columns inner; a cell replaces it only when strictly greater
    (the first of equal maxima wins, -0 and NaN never win). The winner is p*Out + o over the
    whole conv output, -1 when nothing was positive. Trailing partial windows are dropped."""
    conv = np.asarray(conv, np.float32)
    Out = conv.shape[1]
    Hp, Wp = Hc // poolH, Wc // poolW
    grid = conv.reshape(Hc, Wc, Out)
    pooled = np.zeros((Hp, Wp, Out), np.float32)
    winners = np.full((Hp, Wp, Out), -1, np.int64)
    oy = np.arange(Hp)[:, None, None]
    ox = np.arange(Wp)[None, :, None]
    o = np.arange(Out)[None, None, :]
    with np.errstate(invalid="ignore"):
        for dy in range(poolH):
            for dx in range(poolW):
                v = grid[dy:Hp * poolH:poolH, dx:Wp * poolW:poolW]
                p = (oy * poolH + dy) * Wc + (ox * poolW + dx)
                gt = v > pooled
                pooled = np.where(gt, v, pooled)
                winners = np.where(gt, p * Out + o, winners)
    return pooled, winners.astype(np.int32)


def forward(x, W, b, kh, kw, padH, padW, poolH, poolW):
    """-> (conv[P][Out], pooled[Hp][Wp][Out], winners int32 [Hp][Wp][Out]).

    conv[p][o] = dot16(col[p], W[o], KPadded) + b[o]: the padding zeros are terms."""
    x = _as_hwc(x)
    W = np.asarray(W, np.float32)
    b = np.asarray(b, np.float32)
    H, Wd, _ = x.shape
    Hc, Wc = conv_size(H, Wd, kh, kw, padH, padW)
    col = im2col(x, kh, kw, padH, padW, W.shape[1])
    conv = _gemm(col, W) + b
    pooled, winners = relu_maxpool(conv, Hc, Wc, poolH, poolW)
    return conv, pooled, winners


def pool_backward(dPooled, winners, P, Out) -> np.ndarray:
    """dC[p][o]: dPooled at each window's winner, +0 everywhere else (losers, cells of dead
    windows, positions only a dropped partial window holds). Windows do not overlap, so each
    cell receives at most one value: an assignment, no addition."""
    winners = np.asarray(winners).ravel()
    dPooled = np.asarray(dPooled, np.float32).ravel()
    live = winners >= 0
    dC = np.zeros(P * Out, np.float32)
    dC[winners[live]] = dPooled[live]
    return dC.reshape(P, Out)


def backward(x, W, kh, kw, padH, padW, poolH, poolW, dPooled, winners, want_dx=True):
    """-> (dW[Out][KPadded], db[Out], dx[H][W][C] or None when want_dx is false).

    db[o]      = dot16 over p of (dC[p][o], 1)          P terms, p ascending
    dW[o][k]   = dot16 over p of (dC[p][o], col[p][k])  P terms, all KPadded columns
    dcol[p][k] = dot16 over o of (dC[p][o], W[o][k])    Out terms
    dx[iy][ix][c] = +0, then + dcol[p][(ky*kw + kx)*C + c] for ky, kx ascending over the
                    taps whose p = (iy + padH - ky, ix + padW - kx) lies in the conv output."""
    x = _as_hwc(x)
    W = np.asarray(W, np.float32)
    H, Wd, C = x.shape
    Out, KPadded = W.shape
    Hc, Wc = conv_size(H, Wd, kh, kw, padH, padW)
    P = Hc * Wc
    dC = pool_backward(dPooled, winners, P, Out)
    col = im2col(x, kh, kw, padH, padW, KPadded)
    dCT = dC.T
    db = _gemm(dCT, np.ones((1, P), np.float32))[:, 0]
    dW = _gemm(dCT, col.T)
    if not want_dx:
        return dW, db, None
    dcol = _gemm(dC, W.T).reshape(Hc, Wc, KPadded)
    return dW, db, col2im(dcol, H, Wd, C, kh, kw, padH, padW)


def col2im(dcol, H, W, C, kh, kw, padH, padW) -> np.ndarray:
    """The dx gather: every input element starts at +0 and adds, with plain float32
    additions in ascending ky then kx, the dcol entry of each tap whose conv position lies
    inside the conv output (positions of dropped pool windows included)."""
    Hc, Wc, _ = dcol.shape
    dx = np.zeros((H, W, C), np.float32)
    for ky in range(kh):
        iy0, iy1 = max(0, ky - padH), min(H, ky - padH + Hc)
        if iy0 >= iy1:
            continue
        for kx in range(kw):
            ix0, ix1 = max(0, kx - padW), min(W, kx - padW + Wc)
            if ix0 >= ix1:
                continue
            k = (ky * kw + kx) * C
            py0, px0 = iy0 + padH - ky, ix0 + padW - kx
            dx[iy0:iy1, ix0:ix1] = dx[iy0:iy1, ix0:ix1] + dcol[py0:py0 + iy1 - iy0,
                                                               px0:px0 + ix1 - ix0, k:k + C]
    return dx
