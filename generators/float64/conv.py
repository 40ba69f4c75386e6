"""Float64 reference: conv (stride 1, channels-last) + fused ReLU + max pool.

Layouts (docs/architecture.md): x[H][W][C]; W[Out][KPadded] with tap index
k = (ky*kw + kx)*C + c and zero padding columns K..KPadded-1; conv[P][Out] with
p = y*Wc + x; pooled and winners [Hp][Wp][Out]; winners = p*Out + o or -1.

Every sum is a compensated dot (exactsum), so the bits do not depend on the machine: the conv
value is one dot over the KPadded taps and the bias (rounded once), db, dW and dcol are dots
over P and Out; dx adds each element's taps in (ky, kx) order.
"""
from __future__ import annotations

import numpy as np

from . import exactsum as xs
from ..geometry import conv_size


def _as_hwc(x):
    x = np.asarray(x, np.float64)
    return x[:, :, None] if x.ndim == 2 else x


def im2col(x, kh, kw, padH, padW, KPadded):
    """col[p][k] = x[y + ky - padH][x + kx - padW][c] (zero outside the image)."""
    H, W, C = x.shape
    Hc, Wc = conv_size(H, W, kh, kw, padH, padW)
    xp = np.zeros((H + 2 * padH, W + 2 * padW, C))
    xp[padH:padH + H, padW:padW + W] = x
    col = np.zeros((Hc * Wc, KPadded))
    for ky in range(kh):
        for kx in range(kw):
            k = (ky * kw + kx) * C
            col[:, k:k + C] = xp[ky:ky + Hc, kx:kx + Wc].reshape(Hc * Wc, C)
    return col


def relu_maxpool(conv, Hc, Wc, poolH, poolW):
    """The spec's pool rule (docs/numerics.md) on conv[P][Out]: running max from 0, window
    rows then columns, strictly greater replaces; winner p*Out + o or -1; partial windows
    dropped."""
    Out = conv.shape[1]
    Hp, Wp = Hc // poolH, Wc // poolW
    grid = conv.reshape(Hc, Wc, Out)
    pooled = np.zeros((Hp, Wp, Out))
    winners = np.full((Hp, Wp, Out), -1, np.int64)
    oy = np.arange(Hp)[:, None, None]
    ox = np.arange(Wp)[None, :, None]
    o = np.arange(Out)[None, None, :]
    for dy in range(poolH):
        for dx in range(poolW):
            v = grid[dy:Hp * poolH:poolH, dx:Wp * poolW:poolW]
            p = (oy * poolH + dy) * Wc + (ox * poolW + dx)
            gt = v > pooled  # NaN never wins
            pooled = np.where(gt, v, pooled)
            winners = np.where(gt, p * Out + o, winners)
    return pooled, winners.astype(np.int32)


def forward(x, W, b, kh, kw, padH, padW, poolH, poolW):
    """-> (conv[P][Out], pooled[Hp][Wp][Out], winners int32 [Hp][Wp][Out])."""
    x = _as_hwc(x)
    W, b = np.asarray(W, np.float64), np.asarray(b, np.float64)
    H, Wd, _ = x.shape
    Hc, Wc = conv_size(H, Wd, kh, kw, padH, padW)
    col = im2col(x, kh, kw, padH, padW, W.shape[1])
    conv = xs.affine(col, W, b)
    pooled, winners = relu_maxpool(conv, Hc, Wc, poolH, poolW)
    return conv, pooled, winners


def backward(x, W, kh, kw, padH, padW, poolH, poolW, dPooled, winners, want_dx=True):
    """-> (dW[Out][KPadded], db[Out], dx[H][W][C] or None).

    dC[p][o] receives dPooled at each window's winner (nothing for -1);
    db = sum_p dC, dW = dC^T col, dcol = dC W, dx = col2im(dcol)."""
    x = _as_hwc(x)
    W = np.asarray(W, np.float64)
    H, Wd, C = x.shape
    Out, KPadded = W.shape
    Hc, Wc = conv_size(H, Wd, kh, kw, padH, padW)
    winners = np.asarray(winners).ravel()
    dPooled = np.asarray(dPooled, np.float64).ravel()
    live = winners >= 0
    dC = np.zeros(Hc * Wc * Out)
    np.add.at(dC, winners[live], dPooled[live])
    dC = dC.reshape(Hc * Wc, Out)

    col = im2col(x, kh, kw, padH, padW, KPadded)
    db = xs.total(dC, axis=0)
    dW = xs.matmul(dC.T, col)
    if not want_dx:
        return dW, db, None
    dcol = xs.matmul(dC, W)
    dxp = np.zeros((H + 2 * padH, Wd + 2 * padW, C))
    for ky in range(kh):
        for kx in range(kw):
            k = (ky * kw + kx) * C
            dxp[ky:ky + Hc, kx:kx + Wc] += dcol[:, k:k + C].reshape(Hc, Wc, C)
    dx = dxp[padH:padH + H, padW:padW + Wd]
    return dW, db, dx
