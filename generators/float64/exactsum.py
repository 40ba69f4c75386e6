"""Sums and dots for the float64 reference that give the same bits on every machine.

NumPy's reductions and BLAS (`@`, einsum, np.dot, np.sum) pick their summation order by CPU,
kernel, thread count and NumPy version, so their last bits move from machine to machine.
Everything here is built from element-wise IEEE 754 operations (+ - * on float64 arrays, each
correctly rounded), applied in one fixed order that depends only on the shapes:

- the terms of one sum are combined by a fixed halving tree along the summed axis: with m
  terms left, term k (k < m // 2) is added to term k + ceil(m / 2); the middle term of an odd
  m passes through unchanged. (A different order from the spec's dot16 lanes, on purpose.)
- every addition of the tree is Knuth's TwoSum (s + e equals the exact sum), and every product
  of a dot is Dekker's TwoProduct with Veltkamp's split (p + e equals the exact product; when
  both operands are float32 values the product is exact and e is not computed). The errors are
  carried along the same tree: a node holds (s, c) and combines as
  s = s1 + s2 (error e), c = (c1 + c2) + e; the result is s + c, rounded once.

Accuracy (n terms, tree depth L = ceil(log2 n), u = 2^-53): the errors are summed exactly up to
the roundings of the c chain, so |result - exact| <= u*|exact| + 2*L*(L + 1)*u^2 * sum|terms|:
the result of a sum computed in twice the working precision and rounded once. A term that is
inf or NaN gives the plain sum's inf or NaN.

compensated=False: the same tree with plain additions of the rounded products, for values
whose last bits do not matter as long as they are the same everywhere (error bounds, screens).

Chunking over the output elements (to bound memory) does not change any bit: each output is
its own tree over its own terms.
"""
from __future__ import annotations

import numpy as np

_SPLIT = 134217729.0          # 2^27 + 1, Veltkamp's splitter for binary64
_CHUNK = 1 << 16              # products held at once by matmul (cache-sized; no effect on bits)


def split(a):
    """(hi, lo) with hi + lo = a, each with at most 26 significant bits (Veltkamp)."""
    with np.errstate(over="ignore", invalid="ignore"):
        t = a * _SPLIT
        hi = t - (t - a)
        return hi, a - hi


def _product_error(p, ah, al, bh, bl):
    """e with p + e = a*b exactly, for p = fl(a*b) and the splits of a and b (Dekker).
    (Operands beyond 2^996 overflow the split; a non-finite product makes e NaN, which the
    tree's last step ignores.)"""
    with np.errstate(over="ignore", invalid="ignore"):
        e = ah * bh - p
        e += ah * bl
        e += al * bh
        e += al * bl
    return e


def _float32_valued(a) -> bool:
    with np.errstate(all="ignore"):
        return bool(np.all(a.astype(np.float32).astype(np.float64) == a))


def _tree(s, c, compensated=True):
    """Reduces axis 0 of s by the halving tree; -> the sums, shape s.shape[1:].
    c: the terms' exact errors (None: none). compensated=False: plain additions only (the
    same order; for values whose last bits do not matter, such as error bounds)."""
    with np.errstate(invalid="ignore", over="ignore"):
        while s.shape[0] > 1:
            m = s.shape[0]
            k, h = m // 2, m - m // 2
            a, b = s[:k], s[h:]
            t = np.empty((h,) + s.shape[1:])
            np.add(a, b, out=t[:k])
            if h > k:                        # odd m: the middle term passes through
                t[k] = s[k]
            if compensated:
                e = np.empty_like(t)
                z = t[:k] - a
                err = (a - (t[:k] - z)) + (b - z)
                if c is None:
                    e[:k] = err
                else:
                    np.add(c[:k] + c[h:], err, out=e[:k])
                if h > k:
                    e[k] = 0.0 if c is None else c[k]
                c = e
            s = t
        if s.shape[0] == 0:
            return np.zeros(s.shape[1:])
        if c is None or not compensated:
            return s[0].copy()
        return np.where(np.isfinite(s[0]), s[0] + c[0], s[0])


def total(x, axis=-1, compensated=True):
    """The sum of x along axis (fixed tree; compensated unless told)."""
    x = np.moveaxis(np.asarray(x, np.float64), axis, 0)
    return _tree(x, None, compensated)


def dot(a, b, axis=-1, compensated=True):
    """sum(a*b) along axis, a and b broadcast against each other (fixed tree; compensated,
    with exact products, unless told)."""
    a, b = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64))
    a, b = np.moveaxis(a, axis, 0), np.moveaxis(b, axis, 0)
    with np.errstate(over="ignore"):
        p = a * b
    if not compensated or (_float32_valued(a) and _float32_valued(b)):
        return _tree(p, None, compensated)
    return _tree(p, _product_error(p, *split(a), *split(b)))


def matmul(a, b, compensated=True):
    """a @ b for a [M][K] (or [K]) and b [K][N] (or [K]): each output a dot of K terms, k in
    the fixed tree order (compensated, with exact products, unless told)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    A = a[None, :] if a.ndim == 1 else a
    B = b[:, None] if b.ndim == 1 else b
    (M, K), N = A.shape, B.shape[1]
    if B.shape[0] != K:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} do not match")
    At, Bk = A.T[:, :, None], B[:, None, :]              # [K][M][1], [K][1][N]
    exact = not compensated or (_float32_valued(A) and _float32_valued(B))
    if not exact:
        (ah, al), (bh, bl) = split(At), split(Bk)
    out = np.empty((M, N))
    cols = min(N, max(1, _CHUNK // max(1, K)))
    rows = max(1, _CHUNK // max(1, K * cols))
    for j in range(0, N, cols):
        c = slice(j, j + cols)
        for i in range(0, M, rows):
            r = slice(i, i + rows)
            with np.errstate(over="ignore"):
                p = At[:, r] * Bk[:, :, c]
            e = None if exact else _product_error(p, ah[:, r], al[:, r], bh[:, :, c], bl[:, :, c])
            out[r, c] = _tree(p, e, compensated)
    if a.ndim == 1:
        out = out[0]
    return out[..., 0] if b.ndim == 1 else out


def affine(x, W, b, compensated=True):
    """x @ W.T + b for x [M][K], W [N][K], b [N]: each output one dot over the K products and
    the bias, rounded once."""
    x, W, b = (np.asarray(a, np.float64) for a in (x, W, b))
    ones = np.ones((x.shape[0], 1))
    return matmul(np.concatenate([x, ones], axis=1), np.concatenate([W, b[:, None]], axis=1).T,
                  compensated)
