"""Exact binary32 fused multiply-add, emulated with NumPy float64.

fma(a, b, c) = round32(a*b + c), rounded once. The steps:
  1. p = a*b in float64 is exact: two 24-bit significands give at most 48 bits.
  2. s = p + c in float64 with its rounding error e (TwoSum), so p + c = s + e exactly.
  3. Round to odd: when e != 0 and s has an even last bit, step s one ulp towards e.
     A 53-bit round-to-odd result rounds to 24 bits exactly as the infinitely precise sum
     would (53 >= 2*24 + 2), so the double rounding of step 4 is harmless.
  4. Round that to float32 (nearest even). Subnormal float32 results are normal doubles,
     so they round correctly too; overflow becomes inf as IEEE demands.
"""
from __future__ import annotations

import numpy as np

_ONE_BIT = np.uint64(1)


def fma(a, b, c) -> np.ndarray:
    a = np.asarray(a, np.float32)
    b = np.asarray(b, np.float32)
    c = np.asarray(c, np.float32)
    with np.errstate(all="ignore"):
        p = np.multiply(a, b, dtype=np.float64)
        s = np.add(p, c, dtype=np.float64)
        bb = s - p
        e = (p - (s - bb)) + (c - bb)
        bump = np.isfinite(s) & (e != 0)
        bump &= (np.atleast_1d(s).view(np.uint64) & _ONE_BIT).reshape(np.shape(s)) == 0
        if np.count_nonzero(bump):
            towards = np.where(e > 0, np.inf, -np.inf)
            s = np.where(bump, np.nextafter(s, towards), s)
        return np.asarray(s).astype(np.float32)
