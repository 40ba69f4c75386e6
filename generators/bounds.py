"""The first-order rounding-error model the float64 tier's tolerances are derived from.

A layer is rerun in float64 with every local binary32 error at its bound and of one sign s
(then the other); the bound on a tensor is the deviation this causes from the plain float64
result. The local bounds:
  - a dot16 of n terms moves by m(n)*u*sum|terms|, m(n) = ceil(n/16) + 4 (the fma chain of one
    lane, then the 4-level tree);
  - sigmoid / tanh move by their approximation's max abs error over all 2^32 inputs
    (docs/numerics.md);
  - every other binary32 operation moves by u*|result|.
Used by generators/cases/step.py's propagated_error, which defines train3's comparison mask
(the gate's allowances are the per-element model of harness/allowance/, docs/tolerances.md).
"""
from __future__ import annotations

import numpy as np

from .float64 import exactsum as xs
from .float64.elementary import tanh
from .float64.lstm import sigmoid as _sig
from .geometry import conv_size

U = 2.0 ** -24            # binary32 unit roundoff
EPS_SIGMOID = 9.0e-8      # max abs error of the sigmoid approximation, all 2^32 inputs (8.93e-8)
EPS_TANH = 9.1e-8         # max abs error of the tanh approximation, all 2^32 inputs (9.03e-8)


def mm(a, b):
    """a @ b with plain sums in exactsum's fixed order: the same bits on every machine (the
    bounds are written into fixtures: conv params, train3's mask)."""
    return xs.matmul(a, b, compensated=False)


def colsum(a):
    """a.sum(0) in exactsum's fixed order (plain sums)."""
    return xs.total(a, 0, compensated=False)


def m_of(n: int) -> int:
    """Roundings along one dot16 of n terms: ceil(n/16) fmas in a lane, then the 4-level tree."""
    return -(-int(n) // 16) + 4


def col2im(dcol, H, W, C, kh, kw, padH, padW):
    Hc, Wc = conv_size(H, W, kh, kw, padH, padW)
    dxp = np.zeros((H + 2 * padH, W + 2 * padW, C))
    for ky in range(kh):
        for kx in range(kw):
            k = (ky * kw + kx) * C
            dxp[ky:ky + Hc, kx:kx + Wc] += dcol[:, k:k + C].reshape(Hc, Wc, C)
    return dxp[padH:padH + H, padW:padW + W]


def lstm_forward(x, W_ih, W_hh, b, s):
    r = lambda v: v + s * U * np.abs(v)
    T, I = x.shape
    H = W_hh.shape[2]
    G = 4 * H
    out = np.zeros((T, 2 * H))
    st = {"gates": np.zeros((2, T, G)), "c": np.zeros((2, T, H)), "tc": np.zeros((2, T, H)),
          "hPrev": np.zeros((2, T, H))}
    for d in (0, 1):
        h, c = np.zeros(H), np.zeros(H)
        for t in (range(T) if d == 0 else range(T - 1, -1, -1)):
            st["hPrev"][d, t] = h
            xw = mm(W_ih[d], x[t]) + s * m_of(I) * U * mm(np.abs(W_ih[d]), np.abs(x[t]))
            hw = mm(W_hh[d], h) + s * m_of(H) * U * mm(np.abs(W_hh[d]), np.abs(h))
            z = r(r(xw + hw) + b[d])
            a = np.concatenate([_sig(z[:2 * H]) + s * EPS_SIGMOID,
                                tanh(z[2 * H:3 * H]) + s * EPS_TANH,
                                _sig(z[3 * H:]) + s * EPS_SIGMOID])
            i, f, g, o = np.split(a, 4)
            c = r(r(f * c) + r(i * g))
            tc = tanh(c) + s * EPS_TANH
            h = r(o * tc)
            st["gates"][d, t], st["c"][d, t], st["tc"][d, t] = a, c, tc
            out[t, d * H:(d + 1) * H] = h
    return out, st


def lstm_backward(x, W_ih, W_hh, st, dOut, s):
    r = lambda v: v + s * U * np.abs(v)
    T, I = x.shape
    H = W_hh.shape[2]
    G = 4 * H
    dz = np.zeros((T, 2 * G))
    for d in (0, 1):
        dhRec, dcNext = np.zeros(H), np.zeros(H)
        for t in (range(T - 1, -1, -1) if d == 0 else range(T)):
            prev = t - 1 if d == 0 else t + 1
            cP = st["c"][d, prev] if 0 <= prev < T else np.zeros(H)
            i, f, g, o = np.split(st["gates"][d, t], 4)
            tc = st["tc"][d, t]
            dh = r(dOut[t, d * H:(d + 1) * H] + dhRec)
            dtc, do = r(dh * o), r(dh * tc)
            dc = r(dcNext + r(dtc * r(1 - r(tc * tc))))
            di, dg, df = r(dc * g), r(dc * i), r(dc * cP)
            dcNext = r(dc * f)
            dzt = np.concatenate([r(di * r(i * r(1 - i))), r(df * r(f * r(1 - f))),
                                  r(dg * r(1 - r(g * g))), r(do * r(o * r(1 - o)))])
            dz[t, d * G:(d + 1) * G] = dzt
            dhRec = mm(W_hh[d].T, dzt) + s * m_of(G) * U * mm(np.abs(W_hh[d]).T, np.abs(dzt))
    adz = np.abs(dz)
    mT = m_of(T)
    dW_ih = (mm(dz.T, x) + s * mT * U * mm(adz.T, np.abs(x))).reshape(2, G, I)
    dW_hh = np.stack([mm(dz[:, d * G:(d + 1) * G].T, st["hPrev"][d]) + s * mT * U *
                      mm(adz[:, d * G:(d + 1) * G].T, np.abs(st["hPrev"][d])) for d in (0, 1)])
    db = (colsum(dz) + s * mT * U * colsum(adz)).reshape(2, G)
    Wc = W_ih.reshape(2 * G, I)
    dx = mm(dz, Wc) + s * m_of(2 * G) * U * mm(adz, np.abs(Wc))
    return dW_ih, dW_hh, db, dx


def round_up(x: float, digits: int = 2) -> float:
    """x rounded up to `digits` significant digits (0 stays 0)."""
    if x <= 0:
        return 0.0
    e = int(np.floor(np.log10(x))) - digits + 1
    v = np.ceil(x / 10.0 ** e - 1e-9) * 10.0 ** e
    return float(f"{v:.{digits}g}")
