"""The bidirectional LSTM layer's error model, step by step through the recurrence, forward
and backward (docs/tolerances.md, "LSTM layer").

Both directions run together (a leading axis of 2): at step j the forward direction visits
t = j and the reverse t = T-1-j. Per step:

    z  = one sum of the I + H + 1 terms x[t]*W_ih, h*W_hh and b   (any grouping)
    i, f, o = sigmoid(z), g = tanh(z)     each within its bound of the exact function
                                          (params.act_bound; all of it systematic)
    c  = (f*cPrev) + (i*g);  tc = tanh(c);  h = o*tc    every operation rounded once

and the backward of docs/backward.md with the saved values' errors carried in (the port's
backward reads its own saved states). dW_ih, dW_hh, db are sums over t; dx a sum over the 8H
gates of both directions.

The values are the float64 reference's, computed first; the sums' own rounding statistics
depend on values only and are computed for every step at once; the recurrence then carries
the errors (the inputs' errors reach z through W_hh and W_ih as through any weighted sum of
different units: sums.products' `mixing`).
"""
from __future__ import annotations

import numpy as np

from . import params
from .errors import Err, concat, stack
from .sums import add_term, merge, model, products, rounded, terms


def _sigmoid(z):
    """The exact logistic function, without overflow."""
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _values(x, W_ih, W_hh, b) -> dict:
    """The layer's float64 forward values (the reference's to far below binary32 rounding;
    generators/float64/lstm.py is the bit-reproducible one, slower)."""
    T = x.shape[0]
    H = W_hh.shape[2]
    out = np.zeros((T, 2 * H))
    st = {k: np.zeros((2, T, n)) for k, n in (("gates", 4 * H), ("c", H), ("tc", H), ("hPrev", H))}
    for d in (0, 1):
        h, c = np.zeros(H), np.zeros(H)
        xw = x @ W_ih[d].T + b[d]
        for t in (range(T) if d == 0 else range(T - 1, -1, -1)):
            st["hPrev"][d, t] = h
            z = xw[t] + W_hh[d] @ h
            i, f, o = _sigmoid(z[:H]), _sigmoid(z[H:2 * H]), _sigmoid(z[3 * H:])
            g = np.tanh(z[2 * H:3 * H])
            c = f * c + i * g
            tc = np.tanh(c)
            h = o * tc
            st["gates"][d, t] = np.concatenate([i, f, g, o])
            st["c"][d, t], st["tc"][d, t] = c, tc
            out[t, d * H:(d + 1) * H] = h
    st["out"] = out
    return st


def _sig(z: Err) -> Err:
    y = _sigmoid(z.v)
    return z.through(y, y * (1.0 - y), coherent=params.act_bound(y, "sigmoid"))


def _tanh(z: Err) -> Err:
    y = np.tanh(z.v)
    return z.through(y, 1.0 - y * y, coherent=params.act_bound(y, "tanh"))


def _base(parts: dict) -> Err:
    """The sums of `parts` with their own rounding and the errors already in parts (not yet
    those of the recurrent input, added step by step)."""
    S = parts["S"]
    lg, lw = model(S, parts["Q"], parts["n"], parts["Aabs"])
    full = lambda a: np.broadcast_to(a, S.shape)
    return Err(S, full(parts["g"] + lg), full(parts["s"]), full(parts["w"] + lw))


class _Mixer:
    """The errors an input vector e carries into W @ e, W [2][n][m] (a weighted sum of
    different units: systematic input errors add up as independent bounded ones)."""

    def __init__(self, W: np.ndarray):
        self.W2 = W * W
        self.Wa = np.abs(W)

    def __call__(self, e: Err):
        mv = lambda M, a: np.einsum("dnm,dm->dn", M, a)
        return mv(self.W2, e.g + e.s * e.s), mv(self.Wa, e.w + e.s)


def _at(E: Err, idx) -> Err:
    """Step idx = [t of direction 0, t of direction 1] of a [2][T][n] Err."""
    return E.map(lambda a: a[[0, 1], idx])


def forward(x: Err, W_ih: Err, W_hh: Err, b: Err) -> dict:
    """-> {"out": [T][2H], "gates": [2][T][4H], "c", "tc", "hPrev": [2][T][H]} as Err."""
    T = x.shape[0]
    H = W_hh.shape[2]
    vals = _values(x.v, W_ih.v, W_hh.v, b.v)
    xb = x.map(lambda a: np.broadcast_to(a, (2,) + a.shape))
    px = products(xb, W_ih.map(lambda a: np.swapaxes(a, 1, 2)), mixing=True)
    ph = products(Err.exact(vals["hPrev"]), W_hh.map(lambda a: np.swapaxes(a, 1, 2)), mixing=True)
    z0 = _base(add_term(merge(px, ph), b.map(lambda a: a[:, None, :])))     # [2][T][4H]
    mix = _Mixer(W_hh.v)
    h = c = Err.exact(np.zeros((2, H)))
    saved = {k: [None] * T for k in ("gates", "c", "tc", "hPrev", "h")}
    for j in range(T):
        idx = [j, T - 1 - j]
        zg, zw = mix(h)
        z = _at(z0, idx)
        z = Err(z.v, z.g + zg, z.s, z.w + zw)
        i, f, g, o = (z[:, k * H:(k + 1) * H] for k in range(4))
        i, f, o, g = _sig(i), _sig(f), _sig(o), _tanh(g)
        c = (f * c) + (i * g)
        tc = _tanh(c)
        hp, h = h, o * tc
        gates = concat([i, f, g, o], -1)
        for k, e in (("gates", gates), ("c", c), ("tc", tc), ("hPrev", hp), ("h", h)):
            saved[k][j] = e
    st = {}
    for k, per_step in saved.items():                  # [step][2][n] -> [2][T][n] by time
        e = stack(per_step, 1)
        rev = e.map(lambda a: a[1, ::-1])
        st[k] = stack([e.map(lambda a: a[0]), rev])
    h = st.pop("h")
    st["out"] = concat([h[0], h[1]], -1)                         # out[t][d*H + j]
    st["values"] = vals
    return st


def backward(x: Err, W_ih: Err, W_hh: Err, st: dict, dOut: Err) -> dict:
    """-> {"dW_ih", "dW_hh", "db", "dx"} as Err."""
    parts, dx = backward_parts(x, W_ih, W_hh, st, dOut)
    return {**{k: rounded(v) if k != "db" else rounded(v, products_rounded=False)
               for k, v in parts.items()}, "dx": dx}


def _dz_values(vals: dict, W_hh: np.ndarray, dOut: np.ndarray) -> np.ndarray:
    """dz [2][T][4H] of the float64 backward (generators/float64/lstm.py's recurrence)."""
    gates, c_all, tc_all = vals["gates"], vals["c"], vals["tc"]
    T = gates.shape[1]
    H = W_hh.shape[2]
    dz = np.zeros(gates.shape)
    for d in (0, 1):
        dhRec, dcNext = np.zeros(H), np.zeros(H)
        for t in (range(T - 1, -1, -1) if d == 0 else range(T)):
            prev = t - 1 if d == 0 else t + 1
            cPrev = c_all[d, prev] if 0 <= prev < T else np.zeros(H)
            i, f, g, o = np.split(gates[d, t], 4)
            tc = tc_all[d, t]
            dh = dOut[t, d * H:(d + 1) * H] + dhRec
            dc = dcNext + dh * o * (1 - tc * tc)
            dcNext = dc * f
            dz[d, t] = np.concatenate([dc * g * i * (1 - i), dc * cPrev * f * (1 - f),
                                       dc * i * (1 - g * g), dh * tc * o * (1 - o)])
            dhRec = W_hh[d].T @ dz[d, t]
    return dz


def backward_parts(x: Err, W_ih: Err, W_hh: Err, st: dict, dOut: Err):
    """-> ({"dW_ih", "dW_hh", "db"}: the statistics of those sums over time, before their
    rounding (the batch adds other lines' terms), dx as Err)."""
    T = x.shape[0]
    H = W_hh.shape[2]
    G = 4 * H
    dz_v = _dz_values(st["values"], W_hh.v, dOut.v)
    rec0 = _base(products(Err.exact(dz_v), W_hh, mixing=True))          # dhRec [2][T][H]
    mix = _Mixer(np.swapaxes(W_hh.v, 1, 2))
    dhRec = dcNext = Err.exact(np.zeros((2, H)))
    zero = Err.exact(np.zeros(H))
    dz_steps = []
    for j in range(T):
        idx = [T - 1 - j, j]                   # the reverse of each direction's visiting order
        prev = [idx[0] - 1, idx[1] + 1]
        gates = _at(st["gates"], idx)
        i, f, g, o = (gates[:, k * H:(k + 1) * H] for k in range(4))
        tc = _at(st["tc"], idx)
        cP = stack([st["c"][d, prev[d]] if 0 <= prev[d] < T else zero for d in (0, 1)])
        dh = stack([dOut[idx[d], d * H:(d + 1) * H] for d in (0, 1)]) + dhRec
        dtc, do = dh * o, dh * tc
        dc = dcNext + dtc * (1.0 - tc * tc)
        di, dg, df = dc * g, dc * i, dc * cP
        dcNext = dc * f
        dz = concat([di * (i * (1.0 - i)), df * (f * (1.0 - f)), dg * (1.0 - g * g),
                     do * (o * (1.0 - o))], -1)                  # [2][4H]
        rg, rw = mix(dz)
        r = _at(rec0, idx)
        dhRec = Err(r.v, r.g + rg, r.s, r.w + rw)      # sums over the 4H gates
        dz_steps.append(dz)
    e = stack(dz_steps, 1)                                       # [2][step][4H] -> by time
    dz = stack([e.map(lambda a: a[0, ::-1]), e.map(lambda a: a[1])])
    xb = x.map(lambda a: np.broadcast_to(a, (2,) + a.shape))
    dzT = dz.map(lambda a: np.swapaxes(a, 1, 2))
    parts = {"dW_ih": products(dzT, xb), "dW_hh": products(dzT, st["hPrev"]), "db": terms(dz, 1)}
    dz_cat = concat([dz[0], dz[1]], -1)                          # [T][8H]
    dx = rounded(products(dz_cat, W_ih.reshape(2 * G, -1), mixing=True))
    return parts, dx


def case_errors(case) -> dict:
    x, W_ih, W_hh, b, dOut = (Err.exact(case.inputs[k]) for k in ("x", "W_ih", "W_hh", "b", "dOut"))
    st = forward(x, W_ih, W_hh, b)
    out = {k: st[k] for k in ("out", "gates", "c", "tc", "hPrev")}
    out.update(backward(x, W_ih, W_hh, st, dOut))
    return out
