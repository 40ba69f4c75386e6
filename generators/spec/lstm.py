"""Bidirectional LSTM layer, forward and backward, bit-exact float32 (docs/numerics.md and
docs/backward.md, "LSTM layer").

Layouts (docs/architecture.md): x[T][I], W_ih[2][4H][I], W_hh[2][4H][H], b[2][4H]
(direction 0 forward), gate rows [i|f|g|o]; out[T][2H] with out[t][d*H + j]; saved
gates[2][T][4H] (activated), c[2][T][H], tc[2][T][H] = tanh(c), hPrev[2][T][H] (the h the
step started from), all indexed by time t for both directions.

Every sum is a dot16 (gemm16); every element-wise operation is one float32 rounding in the
order written, no fma. sigmoid and tanh are the project's approximations (spec.activations).
"""
from __future__ import annotations

import numpy as np

from .activations import sigmoid, tanh
from .dot16 import gemm16

F32 = np.float32
ONE = F32(1.0)
DIRS = np.array([0, 1])


def _shapes(x, W_ih, W_hh):
    T, I = x.shape
    H = W_hh.shape[2]
    assert W_ih.shape == (2, 4 * H, I) and W_hh.shape == (2, 4 * H, H), (W_ih.shape, W_hh.shape)
    return T, I, H


def _visits(T: int):
    """The k-th step each direction visits, for k = 0..T-1: (forward's t, reverse's t)."""
    return [(k, T - 1 - k) for k in range(T)]


def _per_direction(A: np.ndarray, W: np.ndarray) -> np.ndarray:
    """out[d][n] = dot16(A[d], W[d][n]) for both directions with one gemm16 (the products of
    one direction's row with the other direction's weights are computed and dropped)."""
    N = W.shape[1]
    both = gemm16(A, W.reshape(2 * N, W.shape[2])).reshape(2, 2, N)
    return both[DIRS, DIRS]


def forward(x, W_ih, W_hh, b) -> dict:
    """-> dict(out[T][2H], gates[2][T][4H], c[2][T][H], tc[2][T][H], hPrev[2][T][H]).

    Per direction and visited step t, with h, c the state of the step visited before (+0 for
    the first): z[g] = (dot16(x[t], W_ih[g]) + dot16(h, W_hh[g])) + b[g];
    i, f, o = sigmoid(z), g = tanh(z); c = (f*c) + (i*g); tc = tanh(c); h = o*tc.
    The two directions are independent: they run side by side (row d of every array), the
    forward one at t = k while the reverse one is at t = T-1-k."""
    x, W_ih, W_hh, b = (np.ascontiguousarray(a, F32) for a in (x, W_ih, W_hh, b))
    T, I, H = _shapes(x, W_ih, W_hh)
    G = 4 * H
    xw = gemm16(x, W_ih.reshape(2 * G, I)).reshape(T, 2, G)   # xw[t][d][g] = dot16(x[t], W_ih[d][g])
    sig = np.r_[0:2 * H, 3 * H:4 * H]                 # the sigmoid gates i, f, o
    out = np.zeros((T, 2 * H), F32)
    gates = np.zeros((2, T, G), F32)
    c_all, tc_all, hPrev = (np.zeros((2, T, H), F32) for _ in range(3))
    h = np.zeros((2, H), F32)
    c = np.zeros((2, H), F32)
    for ts in _visits(T):
        hPrev[DIRS, ts] = h
        z = (xw[ts, DIRS] + _per_direction(h, W_hh)) + b
        act = np.empty_like(z)
        act[:, sig] = sigmoid(z[:, sig])
        act[:, 2 * H:3 * H] = tanh(z[:, 2 * H:3 * H])
        i, f, g, o = act[:, :H], act[:, H:2 * H], act[:, 2 * H:3 * H], act[:, 3 * H:]
        c = (f * c) + (i * g)
        tc = tanh(c)
        h = o * tc
        gates[DIRS, ts], c_all[DIRS, ts], tc_all[DIRS, ts] = act, c, tc
        out[ts[0], :H], out[ts[1], H:] = h
    return {"out": out, "gates": gates, "c": c_all, "tc": tc_all, "hPrev": hPrev}


def backward(x, W_ih, W_hh, saved, dOut) -> dict:
    """Backpropagation through time, exactly as docs/backward.md. -> dict(dW_ih, dW_hh, db, dx).

    `saved` holds gates, c, tc, hPrev as the forward returned them. Per direction the steps
    are visited in the reverse of the forward's order (both directions side by side, as in
    the forward); dhRec and dcNext start at +0 and are always added. dz is kept as
    dz[t][d*4H + g]."""
    x, W_ih, W_hh, dOut = (np.ascontiguousarray(a, F32) for a in (x, W_ih, W_hh, dOut))
    gates, c_all, tc_all, hPrev = (np.ascontiguousarray(saved[k], F32)
                                   for k in ("gates", "c", "tc", "hPrev"))
    T, I, H = _shapes(x, W_ih, W_hh)
    G = 4 * H
    dz = np.zeros((T, 2, G), F32)
    # the c each step started from: the forward's c at t-1 (d = 0) or t+1 (d = 1), +0 first
    cPrev_all = np.zeros((2, T, H), F32)
    cPrev_all[0, 1:], cPrev_all[1, :-1] = c_all[0, :-1], c_all[1, 1:]
    dOut2 = dOut.reshape(T, 2, H)
    W_hhT = np.ascontiguousarray(W_hh.transpose(0, 2, 1))   # [2][H][4H]: dhRec's dot over 4H
    dhRec = np.zeros((2, H), F32)
    dcNext = np.zeros((2, H), F32)
    for ts in reversed(_visits(T)):
        act = gates[DIRS, ts]
        i, f, g, o = act[:, :H], act[:, H:2 * H], act[:, 2 * H:3 * H], act[:, 3 * H:]
        tc = tc_all[DIRS, ts]
        cPrev = cPrev_all[DIRS, ts]
        dh = dOut2[ts, DIRS] + dhRec
        dtc = dh * o
        do = dh * tc
        dc = dcNext + dtc * (ONE - tc * tc)
        di = dc * g
        dg = dc * i
        df = dc * cPrev
        dcNext = dc * f
        dzt = np.concatenate([di * (i * (ONE - i)), df * (f * (ONE - f)),
                              dg * (ONE - g * g), do * (o * (ONE - o))], axis=1)
        dz[ts, DIRS] = dzt
        dhRec = _per_direction(dzt, W_hhT)
    dz = dz.reshape(T, 2 * G)
    dzT = np.ascontiguousarray(dz.T)                 # [8H][T]: rows for the dots over t
    dW_ih = gemm16(dzT, x.T).reshape(2, G, I)
    dW_hh = np.stack([gemm16(dzT[d * G:(d + 1) * G], hPrev[d].T) for d in (0, 1)])
    db = gemm16(dzT, np.ones((1, T), F32))[:, 0].reshape(2, G)
    dx = gemm16(dz, W_ih.reshape(2 * G, I).T)        # over 8H: forward's 4H, then reverse's
    return {"dW_ih": dW_ih, "dW_hh": dW_hh, "db": db, "dx": dx}
