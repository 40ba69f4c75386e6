"""Sums: every sum of many terms (a dot, a bias added to it, a gradient over positions or
time, a tap sum) is modelled as one binary32 sum of all its terms in an unknown order
(docs/tolerances.md, "A sum in any order").

The statistics of a sum are kept per block of BLOCK consecutive terms in the sum's natural
index order (the spec's order: k for a dot, p for a conv gradient, t for a gradient over
time; an extra term such as a bias is a block of its own at the end):

    R_b = sum of the block's terms,  Q_b = sum of their squares,  n_b = nonzero terms,
    plus S, Q, n, sum |t| of the whole sum.

The partial sums of an order that visits the blocks forward (or backward) are the block
prefixes P_b plus a partial sum inside the block; taking the order inside a block as a random
permutation, the expected sum of squared partial sums of block b is

    T_b = n_b P_b^2 + (n_b + 1) P_b R_b + (n_b + 1) R_b^2 (1/3 + 1/(6 n_b))   (profile)
          + (n_b + 1) Qc_b / 6                                              (fluctuation)

with Qc_b = Q_b - R_b^2 / n_b. The model of a sum's rounding variance (units u^2/3):

    G = max over the two directions of sum_b profile_b  (+ Q for the products' roundings)
    F = max(sum_b (n_b + 1) Qc_b / 6,  (n + 1) Qc / 6)   the second: any order, the whole
                                                          sum as one random permutation
    V = G + F, capped by (n - 1) M^2 + Q  (M = (sum|t| + |S|)/2 bounds every partial sum
                                           of every order; a capped sum has F = 0)
    w = 2u ((n - 1) M + sum|t|)           the deterministic worst case of every order (each
                                          rounding under one ulp, errors.py)
"""
from __future__ import annotations

import numpy as np

from .errors import TINY2, U2, ULP, ULP_TINY, Err, _err

BLOCK = 16


def _blocked(a, b):
    """[nb][..., M][N]: a[..., :, block] @ b[..., block, :] per block of BLOCK k's (a is
    [..., M][K], b is [K][N] or [..., K][N])."""
    K = a.shape[-1]
    nb = -(-K // BLOCK)
    pad = nb * BLOCK - K
    if pad:
        a = np.concatenate([a, np.zeros(a.shape[:-1] + (pad,))], -1)
        b = np.concatenate([b, np.zeros(b.shape[:-2] + (pad, b.shape[-1]))], -2)
    a = np.moveaxis(a.reshape(a.shape[:-1] + (nb, BLOCK)), -2, 0)          # [nb][..., M][BLOCK]
    b = np.moveaxis(b.reshape(b.shape[:-2] + (nb, BLOCK, b.shape[-1])), -3, 0)  # [nb][..., BLOCK][N]
    if b.ndim < a.ndim:
        b = b.reshape(b.shape[:1] + (1,) * (a.ndim - b.ndim) + b.shape[1:])
    return a @ b


def _mm(a, b):
    """a @ b, skipped (0, broadcast by the caller) when either side is identically zero."""
    if np.ndim(a) == 0 or np.ndim(b) == 0 or not a.any() or not b.any():
        return 0.0
    return a @ b


def products(A, B, mixing=False) -> dict:
    """The statistics of the sums C = A @ B before they are rounded: per block of BLOCK
    terms R, Qb, nb ([nb][..., M][N]), sum |t|, and the errors A and B carry in (g, f, s, w).

    mixing: the sum runs over different units with weights of either sign (a layer's
    weights: W*x, W_hh*h, W^T*dz), so the systematic errors of its inputs, bounded but of
    signs that have nothing to do with the weights', add up as independent bounded errors
    (variance <= bound^2) instead of coherently; a sum over time or positions of the same
    unit (dW, db) keeps them systematic."""
    A, B = _err(A), _err(B)
    a2, b2 = A.v * A.v, B.v * B.v
    aa, ab = np.abs(A.v), np.abs(B.v)
    nz = lambda a: (a != 0).astype(np.float64)
    s = _mm(aa, B.s) + _mm(A.s, ab)
    g = _mm(a2, B.g) + _mm(A.g, b2)
    w = _mm(aa, B.w) + _mm(A.w, ab)
    if mixing:
        g = g + _mm(a2, B.s * B.s) + _mm(A.s * A.s, b2)
        w, s = w + s, 0.0
    return {"R": _blocked(A.v, B.v), "Qb": _blocked(a2, b2), "nb": _blocked(nz(A.v), nz(B.v)),
            "Aabs": aa @ ab, "g": g, "f": _mm(a2, B.f) + _mm(A.f, b2), "s": s, "w": w}


def terms(X: Err, axis) -> dict:
    """The statistics of the sums of X over `axis` (products exact: a dot with ones)."""
    X = X.map(lambda a: np.moveaxis(a, axis, -1))
    if X.v.ndim == 1:
        X = X.map(lambda a: a[None])
        parts = terms(X, -1)
        return {k: (v[..., 0] if np.ndim(v) else v) for k, v in parts.items()}
    ones = Err.exact(np.ones((X.shape[-1], 1)))
    parts = products(X, ones)
    return {k: (v[..., 0] if np.ndim(v) else v) for k, v in parts.items()}


def add_term(parts: dict, extra) -> dict:
    """parts with one more term per sum (a bias), as a block of its own at the end."""
    e = _err(extra)
    shape = parts["R"].shape[1:]
    ev = np.broadcast_to(e.v, shape)
    full = lambda a: np.broadcast_to(a, shape)
    return {"R": np.concatenate([parts["R"], ev[None]]),
            "Qb": np.concatenate([parts["Qb"], (ev * ev)[None]]),
            "nb": np.concatenate([parts["nb"], (ev != 0)[None].astype(np.float64)]),
            "Aabs": parts["Aabs"] + np.abs(ev), "g": parts["g"] + full(e.g),
            "f": parts["f"] + full(e.f), "s": parts["s"] + full(e.s), "w": parts["w"] + full(e.w)}


def merge(a: dict, b: dict) -> dict:
    """The statistics of sums made of a's terms followed by b's (x*W_ih and h*W_hh)."""
    out = {k: a[k] + b[k] for k in ("Aabs", "g", "f", "s", "w")}
    for k in ("R", "Qb", "nb"):
        out[k] = np.concatenate([np.broadcast_to(a[k], a[k].shape), b[k]])
    return out


def model(R, Qb, nb, Aabs, products_rounded=True):
    """(S, g, f, w) of sums described by block statistics (module docstring)."""
    S, Q, n = R.sum(0), Qb.sum(0), nb.sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        inv = np.where(nb > 0, 1.0 / np.maximum(nb, 1.0), 0.0)
        Qc_b = np.maximum(Qb - R * R * inv, 0.0)
        Qc = np.where(n > 0, np.maximum(Q - S * S / np.maximum(n, 1.0), 0.0), 0.0)
    inner = (nb + 1.0) * R * R * (1.0 / 3.0 + inv / 6.0)
    before = np.cumsum(R, 0) - R
    after = S - np.cumsum(R, 0)

    def profile(P):
        return np.sum(nb * P * P + (nb + 1.0) * P * R + inner, axis=0)

    prod = Q if products_rounded else 0.0
    G = np.maximum(profile(before), profile(after)) + prod
    F = np.maximum(np.sum((nb + 1.0) * Qc_b, axis=0), (n + 1.0) * Qc) / 6.0
    m1 = np.maximum(n - 1.0, 0.0)
    M = 0.5 * (Aabs + np.abs(S))
    cap = m1 * M * M + prod
    over = G + F > cap
    G = np.where(over, cap, G)
    F = np.where(over | (n < 2), 0.0, F)
    w = ULP * (m1 * M + (Aabs if products_rounded else 0.0)) + ULP_TINY * np.maximum(n, 1.0)
    return S, U2 * G + TINY2 * n, U2 * F, w


def rounded(parts: dict, products_rounded=True) -> Err:
    """The sums described by `parts`, each one binary32 sum of its terms in any order."""
    S, lg, lf, lw = model(parts["R"], parts["Qb"], parts["nb"], parts["Aabs"], products_rounded)
    full = lambda a: np.broadcast_to(a, S.shape).copy()
    return Err(S, full(parts["g"] + lg), full(parts["f"] + lf), full(parts["s"]),
               full(parts["w"] + lw))


def matmul(A, B, extra=None, products_rounded=True, mixing=False) -> Err:
    """C = A @ B (+ extra, one more term of each sum), each output one binary32 sum."""
    parts = products(A, B, mixing)
    if extra is not None:
        parts = add_term(parts, extra)
    return rounded(parts, products_rounded)


def total(X: Err, axis) -> Err:
    """The sum of X over `axis` as one binary32 sum (a dot with ones: products exact)."""
    return rounded(terms(X, axis), products_rounded=False)
