"""Exact binary32 fused multiply-add, emulated with NumPy float64.

fma(a, b, c) = round32(a*b + c), rounded once. The steps:
  1. p = a*b in float64 is exact: two 24-bit significands give at most 48 bits.
  2. s = p + c in float64, rounded once (to 53 bits).
  3. Rounding s to float32 gives round32(p + c) unless s is a float32 rounding midpoint:
     midpoints are doubles, and rounding to 53 bits is monotonic, so p + c and s lie on the
     same side of every midpoint except when s is one. A midpoint (a float32 value plus half
     its spacing, subnormal spacing included) has its 28 low bits zero as a double; only for
     such an s (which includes every s that is itself a float32) is step 4 needed.
  4. Round to odd: with p + c = s + e exactly (TwoSum), when e != 0 and s has an even last
     bit, step s one ulp towards e. A 53-bit round-to-odd result rounds to 24 bits exactly
     as the infinitely precise sum would (53 >= 2*24 + 2).
  5. Round that to float32 (nearest even). Subnormal float32 results are normal doubles,
     so they round correctly too; overflow becomes inf as IEEE demands.
"""
from __future__ import annotations

import numpy as np

_ONE_BIT = np.uint64(1)
_LOW28 = np.uint64((1 << 28) - 1)


def fma(a, b, c) -> np.ndarray:
    a = np.asarray(a, np.float32)
    b = np.asarray(b, np.float32)
    c = np.asarray(c, np.float32)
    with np.errstate(all="ignore"):
        p = np.multiply(a, b, dtype=np.float64)
        s = np.add(p, c, dtype=np.float64)
        if np.count_nonzero((np.atleast_1d(s).view(np.uint64) & _LOW28) == 0):
            s = _round_to_odd(p, c, s)
        return np.asarray(s).astype(np.float32)


def _round_to_odd(p, c, s) -> np.ndarray:
    bb = s - p
    e = (p - (s - bb)) + (c - bb)
    bump = np.isfinite(s) & (e != 0)
    bump &= (np.atleast_1d(s).view(np.uint64) & _ONE_BIT).reshape(np.shape(s)) == 0
    if np.count_nonzero(bump):
        s = np.where(bump, np.nextafter(s, np.where(e > 0, np.inf, -np.inf)), s)
    return s
