"""Special values, binades and boundary neighbourhoods, for the edge-case fixtures
(generators/cases/*_edges.py, activations.py, detmath.py) and the fuzzer's value strategies
(harness/fuzz/values.py).

NaN: the fixtures hold only NaNs that are inputs, or results propagated from a single input
NaN (IEEE 754 returns one of the input NaNs, quieted; x86 and AArch64 keep its payload). A NaN
made by an invalid operation (inf - inf, 0 * inf) has no portable bit pattern (x86 gives
0xffc00000, AArch64 0x7fc00000), so no case produces one where it can reach an output.
"""
from __future__ import annotations

import numpy as np

F32, F64 = np.float32, np.float64
QNAN32 = 0x7FC00000          # the canonical quiet NaN: every fixture NaN that can propagate


def f32_bits(*bits) -> np.ndarray:
    return np.array(bits, np.uint32).view(F32)


def f64_bits(*bits) -> np.ndarray:
    return np.array(bits, np.uint64).view(F64)


def qnan32() -> F32:
    return f32_bits(QNAN32)[0]


def neighbours(x, k: int, dtype) -> np.ndarray:
    """x and its k nearest representable neighbours on each side, in `dtype` (x rounded)."""
    x = np.asarray(x, dtype).ravel()
    out = [x]
    lo = hi = x
    for _ in range(k):
        lo = np.nextafter(lo, dtype(-np.inf))
        hi = np.nextafter(hi, dtype(np.inf))
        out += [lo, hi]
    return np.concatenate(out).astype(dtype)


def binades(dtype, rng, per: int = 3, signs=(1.0, -1.0)) -> np.ndarray:
    """For every binade of `dtype` (subnormal ones included: each power of two from the
    smallest subnormal to the largest normal), its first value, its last value and `per` - 2
    random values between, of each sign."""
    info = np.finfo(dtype)
    e_min = int(np.log2(float(info.smallest_subnormal)))
    e_max = int(info.maxexp) - 1
    e = np.arange(e_min, e_max + 1)
    first = np.ldexp(np.ones(e.size), e).astype(dtype)
    with np.errstate(over="ignore"):   # 2^(e_max + 1) is inf; its neighbour is set below
        last = np.nextafter(np.ldexp(np.ones(e.size), e + 1).astype(dtype), dtype(0))
    last[-1] = info.max
    mids = [np.ldexp(rng.uniform(1.0, 2.0, e.size), e).astype(dtype) for _ in range(per - 2)]
    mag = np.concatenate([first, last] + mids)
    return np.concatenate([s * mag for s in signs]).astype(dtype)


def float_specials(dtype) -> np.ndarray:
    """±0, ±inf, the extremes of each binade class, ±1."""
    info = np.finfo(dtype)
    v = [0.0, 1.0, info.smallest_subnormal, info.tiny,
         np.nextafter(dtype(info.tiny), dtype(0)), info.max, np.inf]
    v = np.array(v, dtype)
    return np.concatenate([v, -v]).astype(dtype)


def nan32_variants() -> np.ndarray:
    """Quiet NaNs of both signs with payloads, and a signalling NaN (the activations return
    any NaN input quiet with its sign and payload: x + x)."""
    return f32_bits(0x7FC00000, 0xFFC00000, 0x7FC12345, 0xFFD5A5A5, 0x7F800001, 0xFFBFFFFF)


def nan64_variants() -> np.ndarray:
    """Quiet NaNs of both signs with payloads, and a signalling NaN (DetMath returns a NaN
    input unchanged, bit for bit)."""
    return f64_bits(0x7FF8000000000000, 0xFFF8000000000000, 0x7FF8000000012345,
                    0xFFFA5A5A5A5A5A5A, 0x7FF0000000000001, 0xFFF7FFFFFFFFFFFF)


def tiny(rng, n, exponent=-80, sign=1.0) -> np.ndarray:
    """n float32 values of magnitude 2^exponent * [1, 2): products of two such values
    (exponent -80: about 2^-160) are below half the smallest subnormal and round to a zero
    with the product's sign."""
    return (sign * np.ldexp(rng.uniform(1.0, 2.0, n), exponent)).astype(F32)
