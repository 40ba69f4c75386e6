"""The conv block's error model: conv (+ bias) as one sum per output, the pool's selection (no
rounding), db, dW over the conv positions, dx as one sum over every (tap, output channel) term
(docs/tolerances.md, "Conv block").

Pool decisions: the winners are the float64 reference's, and a window whose decision rounding
could change is a near-tie: another candidate (a cell, or the +0 start of a dead window) lies
within the two conv values' allowances of the winner. A port may pick it: the pooled value's
bound then includes the difference and the picked cell's allowance beyond the winner's, and
dC's bound includes the window's gradient at both cells (one may get it instead of the other),
with its own roundings in the sums it joins; everything computed from dC carries that. The
same candidates decide the float64 tier's winners verdict (harness/layers/conv.py, `legal`):
a port's winner other than the reference's passes when it is one of them. (The conv fixtures
keep every window 2e-5 from a near-tie of distinct values; their near-ties are the exact ties
between twin cells of the `b*_ties_*` cases, which a port's own rounding may order either way.)
"""
from __future__ import annotations

import numpy as np
from ...generators.float64 import conv as conv64
from ...generators.geometry import conv_size

from . import params
from .errors import ULP, Err, where
from .sums import STATS, add_term, products, rounded, terms


def im2col(x: Err, kh, kw, padH, padW, KPadded) -> Err:
    return x.map(lambda a: conv64.im2col(a, kh, kw, padH, padW, KPadded))


def forward(x: Err, W: Err, b: Err, kh, kw, padH, padW, poolH, poolW):
    """-> (col, conv [P][Out], pooled [Hp][Wp][Out], winners): conv[p][o] is one sum of the
    KPadded terms col[p][k]*W[o][k] and the bias; pooled is the winner's conv value."""
    H, Wd, _ = x.shape
    Hc, Wc = conv_size(H, Wd, kh, kw, padH, padW)
    col = im2col(x, kh, kw, padH, padW, W.shape[1])
    conv = rounded(add_term(products(col, W.T, mixing=True), b))
    _, winners = conv64.relu_maxpool(conv.v, Hc, Wc, poolH, poolW)
    flat = conv.reshape(-1)
    live = winners >= 0
    pooled = where(live, flat[np.maximum(winners, 0)], Err.exact(np.zeros(winners.shape)))
    dec = near_ties(conv, winners, Hc, Wc, poolH, poolW)
    return col, conv, pooled.plus_systematic(dec.pooled_bound), dec


class Decisions:
    """The pool decisions of one block: winners [Hp][Wp][Out] (-1: none) and, for each window,
    the cells a port could pick instead (`bump`, [P*Out]: the flat conv cells whose dC may
    hold the window's gradient or lose it), the windows whose +0 start ('none', -1) a port may
    end with instead of the winner (`none_windows`) and the pooled value's extra bound."""

    def __init__(self, winners, bump_cells, bump_windows, pooled_bound, none_windows=None):
        self.winners = winners
        self.bump_cells = bump_cells          # flat conv indices
        self.bump_windows = bump_windows      # the window (flat pooled index) of each
        self.pooled_bound = pooled_bound
        self.none_windows = (np.zeros(0, np.int64) if none_windows is None
                             else none_windows)   # flat pooled indices

    @property
    def near_ties(self) -> int:
        return int(np.unique(self.bump_windows).size)

    def arrays(self) -> dict:
        """The legal decisions as arrays (kept with the case's allowances, read by `legal`)."""
        return {"winners.windows": np.asarray(self.bump_windows, np.int64),
                "winners.cells": np.asarray(self.bump_cells, np.int64),
                "winners.none": np.asarray(self.none_windows, np.int64)}


def legal(arrays: dict, windows, winners, n_cells: int) -> np.ndarray:
    """Per (flat pooled window, winner) pair: whether Decisions.arrays() allow that winner (a
    flat conv cell below n_cells, or -1: none) in that window. A window that is no near-tie
    lists nothing: only the reference's own winner is legal there (the caller's equality)."""
    def key(w, c):
        return np.asarray(w, np.int64) * (n_cells + 1) + (np.asarray(c, np.int64) + 1)
    allowed = np.concatenate([key(arrays["winners.windows"], arrays["winners.cells"]),
                              key(arrays["winners.none"], -1)])
    return np.isin(key(windows, winners), allowed)


def near_ties(conv: Err, winners, Hc, Wc, poolH, poolW) -> Decisions:
    """Candidates within rounding of each window's winner (module docstring)."""
    _, Out = conv.shape
    Hp, Wp = Hc // poolH, Wc // poolW
    A = conv.allowance(params.lam())
    oy, ox, o = np.meshgrid(np.arange(Hp), np.arange(Wp), np.arange(Out), indexing="ij")
    cells = np.stack([((oy * poolH + dy) * Wc + ox * poolW + dx) * Out + o
                      for dy in range(poolH) for dx in range(poolW)], -1)   # [Hp][Wp][Out][n]
    v = conv.v.ravel()[cells]
    a = A.ravel()[cells]
    win = winners
    vb = np.where(win >= 0, conv.v.ravel()[np.maximum(win, 0)], 0.0)
    ab = np.where(win >= 0, A.ravel()[np.maximum(win, 0)], 0.0)
    low = vb - ab
    alt = (v + a >= low[..., None]) & (cells != win[..., None])
    alt_zero = (win >= 0) & (low <= 0.0)               # the +0 start (nothing positive)
    # the port's pooled value is its conv value of the cell it picks: within that cell's
    # allowance of v, which may exceed the winner's (a dead window's winner is the exact +0)
    other = np.abs(vb[..., None] - v) + np.maximum(a - ab[..., None], 0.0)
    pooled_bound = np.maximum(np.max(np.where(alt, other, 0.0), -1),
                              np.where(alt_zero, np.abs(vb), 0.0))
    uncertain = alt.any(-1) | alt_zero
    pool_flat = np.arange(win.size).reshape(win.shape)
    bc, bw = [cells[alt]], [np.broadcast_to(pool_flat[..., None], alt.shape)[alt]]
    keep = uncertain & (win >= 0)
    bc.append(win[keep])
    bw.append(pool_flat[keep])
    return Decisions(winners, np.concatenate(bc), np.concatenate(bw), pooled_bound,
                     pool_flat[alt_zero])


def backward(x: Err, col: Err, W: Err, dec, dPooled: Err, kh, kw, padH, padW, want_dx=True):
    """-> (dW, db, dx or None)."""
    dW, db, dx = backward_parts(x, col, W, dec, dPooled, kh, kw, padH, padW, want_dx)
    return rounded(dW), rounded(db, products_rounded=False), dx


def backward_parts(x: Err, col: Err, W: Err, dec, dPooled: Err, kh, kw, padH, padW,
                   want_dx=True):
    """-> (dW and db as the statistics of their sums over positions, dx as Err or None).
    dC[p][o] is dPooled at the window's winner, exact 0 elsewhere (no rounding: zero terms
    add nothing to any sum); near-tie cells carry the window's gradient as a bound."""
    winners = dec.winners
    H, Wd, C = x.shape
    Out = W.shape[0]
    Hc, Wc = conv_size(H, Wd, kh, kw, padH, padW)
    P = Hc * Wc
    live = winners.ravel() >= 0
    idx = winners.ravel()[live]
    dP = dPooled.reshape(-1)

    def scatter(a):
        out = np.zeros(P * Out)
        out[idx] = a[live]
        return out.reshape(P, Out)

    dC = dP.map(scatter)
    if dec.bump_cells.size:
        bump = np.zeros(P * Out)
        np.add.at(bump, dec.bump_cells, np.abs(dP.v)[dec.bump_windows])
        # a moved gradient is a term of the port's sums the reference's lack (dW, db over the P
        # positions, dx over the kh*kw*Out (tap, channel) terms): its roundings there add at
        # most ULP*n times it to the deterministic bound 2u((n-1)M + sum|t|)
        n = max(P, kh * kw * Out)
        dC = dC.plus_systematic(bump.reshape(P, Out) * (1.0 + ULP * n))
    db, dW = terms(dC, 0), products(dC.T, col)
    if not want_dx:
        return dW, db, None
    return dW, db, rounded(tap_sums(products(dC, W, mixing=True), H, Wd, C, kh, kw, padH, padW))


def tap_sums(parts: dict, H, W, C, kh, kw, padH, padW) -> dict:
    """The statistics of dx[i] = sum over the taps covering input element i of dcol, as one
    sum of every (tap, output channel) term: from dcol's statistics [P][KPadded]."""
    Hc, Wc = conv_size(H, W, kh, kw, padH, padW)
    KP = np.shape(parts["S"])[-1]

    def gather(a):
        a = np.broadcast_to(a, (Hc * Wc, KP)).reshape(Hc, Wc, KP)
        out = np.zeros((kh * kw, H + 2 * padH, W + 2 * padW, C))
        for ky in range(kh):
            for kx in range(kw):
                t = ky * kw + kx
                out[t, ky:ky + Hc, kx:kx + Wc] = a[:, :, t * C:(t + 1) * C]
        return out[:, padH:padH + H, padW:padW + W]

    return {k: gather(parts[k]).sum(0) for k in (*STATS, "g", "s", "w")}


def case_errors(case) -> dict:
    """{tensor: Err} of a conv fixture case (its inputs are exact binary32 values), and the
    pool's legal decisions (Decisions.arrays)."""
    p = case.params
    geo = [int(p[k]) for k in ("kh", "kw", "padH", "padW", "poolH", "poolW")]
    x = np.asarray(case.inputs["x"], np.float64)
    x = Err.exact(x[:, :, None] if x.ndim == 2 else x)
    W, b = Err.exact(case.inputs["W"]), Err.exact(case.inputs["b"])
    col, conv, pooled, winners = forward(x, W, b, *geo)
    dW, db, dx = backward(x, col, W, winners, Err.exact(case.inputs["dPooled"]), *geo[:4],
                          want_dx=bool(p.get("dx", True)))
    out = {"conv": conv, "pooled": pooled, "dW": dW, "db": db, **winners.arrays()}
    if dx is not None:
        out["dx"] = dx
    return out
