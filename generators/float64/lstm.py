"""Float64 reference: one bidirectional LSTM layer (gates i, f, g, o; one bias b).

Layouts (docs/architecture.md): x[T][I], W_ih[2][4H][I], W_hh[2][4H][H], b[2][4H]
(direction 0 forward); out[T][2H]; saved gates[2][T][4H] (activated), c, tc, hPrev
[2][T][H], all indexed by time t. For the reverse direction hPrev[t] is the state
after step t+1 (zeros at t = T-1).

Every sum is a compensated dot (exactsum) and sigmoid / tanh are the few-ulp ones of
elementary.py, so the bits do not depend on the machine. The gate pre-activation is one dot
over [x_t | h_prev | 1] and [W_ih | W_hh | b], rounded once; dx is one dot over the 8H
gate gradients of both directions.
"""
from __future__ import annotations

import numpy as np

from . import exactsum as xs
from .elementary import sigmoid, tanh

__all__ = ["sigmoid", "tanh", "forward", "backward"]


def _order(d, T):
    return range(T) if d == 0 else range(T - 1, -1, -1)


def forward(x, W_ih, W_hh, b):
    """-> dict(out[T][2H], gates[2][T][4H], c[2][T][H], tc[2][T][H], hPrev[2][T][H])."""
    x, W_ih, W_hh, b = (np.asarray(a, np.float64) for a in (x, W_ih, W_hh, b))
    T = x.shape[0]
    H = W_hh.shape[2]
    out = np.zeros((T, 2 * H))
    gates = np.zeros((2, T, 4 * H))
    c_all, tc_all, hPrev = (np.zeros((2, T, H)) for _ in range(3))
    for d in (0, 1):
        Wd = np.concatenate([W_ih[d], W_hh[d], b[d][:, None]], axis=1)   # [4H][I + H + 1]
        h, c = np.zeros(H), np.zeros(H)
        for t in _order(d, T):
            hPrev[d, t] = h
            z = xs.dot(Wd, np.concatenate([x[t], h, [1.0]]))
            i, f, o = sigmoid(z[:H]), sigmoid(z[H:2 * H]), sigmoid(z[3 * H:])
            g = tanh(z[2 * H:3 * H])
            c = f * c + i * g
            tc = tanh(c)
            h = o * tc
            gates[d, t] = np.concatenate([i, f, g, o])
            c_all[d, t], tc_all[d, t] = c, tc
            out[t, d * H:(d + 1) * H] = h
    return {"out": out, "gates": gates, "c": c_all, "tc": tc_all, "hPrev": hPrev}


def backward(x, W_ih, W_hh, saved, dOut):
    """Backpropagation through time. -> dict(dW_ih, dW_hh, db, dx)."""
    x, W_ih, W_hh, dOut = (np.asarray(a, np.float64) for a in (x, W_ih, W_hh, dOut))
    gates, c_all, tc_all, hPrev = (np.asarray(saved[k], np.float64)
                                   for k in ("gates", "c", "tc", "hPrev"))
    T = x.shape[0]
    H = W_hh.shape[2]
    dz = np.zeros((2, T, 4 * H))
    for d in (0, 1):
        dhRec, dcNext = np.zeros(H), np.zeros(H)
        for t in reversed(list(_order(d, T))):
            prev = t - 1 if d == 0 else t + 1
            cPrev = c_all[d, prev] if 0 <= prev < T else np.zeros(H)
            i, f, g, o = np.split(gates[d, t], 4)
            tc = tc_all[d, t]
            dh = dOut[t, d * H:(d + 1) * H] + dhRec
            dtc, do = dh * o, dh * tc
            dc = dcNext + dtc * (1 - tc * tc)
            di, dg, df = dc * g, dc * i, dc * cPrev
            dcNext = dc * f
            dz[d, t] = np.concatenate([di * i * (1 - i), df * f * (1 - f),
                                       dg * (1 - g * g), do * o * (1 - o)])
            dhRec = xs.matmul(dz[d, t], W_hh[d])
    dW_ih = np.stack([xs.matmul(dz[d].T, x) for d in (0, 1)])
    dW_hh = np.stack([xs.matmul(dz[d].T, hPrev[d]) for d in (0, 1)])
    db = xs.total(dz, axis=1)
    dx = xs.matmul(np.concatenate([dz[0], dz[1]], axis=1), W_ih.reshape(-1, W_ih.shape[2]))
    return {"dW_ih": dW_ih, "dW_hh": dW_hh, "db": db, "dx": dx}
