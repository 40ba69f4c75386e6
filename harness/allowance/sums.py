"""Sums: every sum of many terms (a dot, a bias added to it, a gradient over positions or
time, a tap sum) is modelled as one binary32 sum of all its terms in any order and grouping
(docs/tolerances.md, "A sum in any order").

A sum is described by S (its exact value), Q (the sum of its terms' squares), n (its nonzero
terms; a zero term adds no rounding) and sum|t|. M = (sum|t| + |S|)/2, the larger of the
positive and the negative mass, bounds every partial sum of every order: a lane, a node of a
tree, a thread's block, a prefix of an order sorted by value or grouped by sign. The sum's
n - 1 additions each round one such partial sum, and with separately rounded products each
of its n products rounds once, so its rounding variance is at most (units u^2/3)

    V = (n - 1) M^2 + Q          (Q only when the products are rounded)

whatever the order, and every order stays within the deterministic bound

    w = 2u ((n - 1) M + sum|t|)  (each rounding under one ulp, errors.py).
"""
from __future__ import annotations

import numpy as np

from .errors import TINY2, U2, ULP, ULP_TINY, Err, _err

STATS = ("S", "Q", "n", "Aabs")           # a sum's description; additive over its terms


def _mm(a, b):
    """a @ b, skipped (0, broadcast by the caller) when either side is identically zero."""
    if np.ndim(a) == 0 or np.ndim(b) == 0 or not a.any() or not b.any():
        return 0.0
    return a @ b


def products(A, B, mixing=False) -> dict:
    """The statistics of the sums C = A @ B before they are rounded (S, Q, n, sum|t|: STATS)
    and the errors A and B carry in (g, s, w).

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
    return {"S": A.v @ B.v, "Q": a2 @ b2, "n": nz(A.v) @ nz(B.v), "Aabs": aa @ ab,
            "g": g, "s": s, "w": w}


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
    """parts with one more term per sum (a bias)."""
    e = _err(extra)
    shape = np.shape(parts["S"])
    full = lambda a: np.broadcast_to(a, shape)
    ev = full(e.v)
    return {"S": parts["S"] + ev, "Q": parts["Q"] + ev * ev,
            "n": parts["n"] + (ev != 0), "Aabs": parts["Aabs"] + np.abs(ev),
            "g": parts["g"] + full(e.g), "s": parts["s"] + full(e.s), "w": parts["w"] + full(e.w)}


def merge(a: dict, b: dict) -> dict:
    """The statistics of sums made of a's terms and b's (x*W_ih and h*W_hh)."""
    return {k: a[k] + b[k] for k in (*STATS, "g", "s", "w")}


def model(S, Q, n, Aabs, products_rounded=True):
    """(g, w) of the sums described by S, Q, n, sum|t| (module docstring): the variance of
    their rounding errors in the worst order, and the deterministic bound of every order."""
    m1 = np.maximum(n - 1.0, 0.0)
    M = 0.5 * (Aabs + np.abs(S))
    V = m1 * M * M + (Q if products_rounded else 0.0)
    w = ULP * (m1 * M + (Aabs if products_rounded else 0.0)) + ULP_TINY * np.maximum(n, 1.0)
    return U2 * V + TINY2 * n, w


def rounded(parts: dict, products_rounded=True) -> Err:
    """The sums described by `parts`, each one binary32 sum of its terms in any order."""
    S = np.asarray(parts["S"], np.float64)
    lg, lw = model(S, parts["Q"], parts["n"], parts["Aabs"], products_rounded)
    full = lambda a: np.broadcast_to(a, S.shape).copy()
    return Err(S, full(parts["g"] + lg), full(parts["s"]), full(parts["w"] + lw))


def matmul(A, B, extra=None, products_rounded=True, mixing=False) -> Err:
    """C = A @ B (+ extra, one more term of each sum), each output one binary32 sum."""
    parts = products(A, B, mixing)
    if extra is not None:
        parts = add_term(parts, extra)
    return rounded(parts, products_rounded)


def total(X: Err, axis) -> Err:
    """The sum of X over `axis` as one binary32 sum (a dot with ones: products exact)."""
    return rounded(terms(X, axis), products_rounded=False)
