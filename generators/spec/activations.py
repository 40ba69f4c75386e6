"""sigmoid and tanh: the project's float32 approximations, in exact NumPy emulation.

Bit for bit the same as ctypes_kernels/src/activations.c (the scalar definition) and every
vector path (src/isa/act_impl.h). Only these operations are used, each one IEEE binary32
rounded to nearest even, in the order written: + - * /, fma (crnn_conformance.generators.spec.fma, one
rounding), comparisons and selects (np.where), negation, and building a power of two from
its exponent bits. Branches are selects: an element takes its branch's value, whatever the
others compute (tanh skips a branch that no element takes).

    exp_neg(v), v in [-104, 0]:      (the shared kernel; v is clamped by the callers)
        n  = fma(v, LOG2E, SHIFT) - SHIFT              round-to-nearest integer of v*log2(e)
        r  = fma(n, -LN2_HI, v);  r = fma(n, -LN2_LO, r)          |r| <= ln2/2 (+ a hair)
        P  = fma(fma(fma(fma(E6, r, E5), r, E4), r, E3), r, E2)
        p  = fma(P, r*r, r) + 1                                   e^r
        e  = (p * 2^(n+64)) * 2^-64                 exact scaling; one rounding if subnormal
    sigmoid(x):
        v = -|x| clamped to >= -104, or -32 for x >= 0 (NaN -> -104);  e = exp_neg(v);  d = 1 + e
        y = 1/d if x >= 0 else e/d;   NaN -> x + x
    tanh(x):
        a = |x|;  v = -(a + a) clamped to >= -32 (NaN -> -32);  e = exp_neg(v)
        large = 1 - (e + e)/(1 + e), negated when x < 0
        s = x*x;  small = fma(x*s, T2 + s*(...T10), x)           odd polynomial
        y = small if a < 0.55 else large;  y = x if a < 2^-12;  NaN -> x + x

docs/numerics.md ("sigmoid and tanh") has the derivation, the constants and the measured
error over all 2^32 inputs.
"""
from __future__ import annotations

import numpy as np

from .fma import fma

F32 = np.float32


def _h(s: str) -> np.float32:
    v = F32(float.fromhex(s))
    assert float(v) == float.fromhex(s), s   # every constant is exactly a float32
    return v


# ---- constants (hex floats; identical in activations.c) -------------------------------
LOG2E = _h("0x1.715476p+0")       # float32(1/ln 2)
SHIFT = _h("0x1.8p+23")           # 1.5*2^23: adding it rounds to an integer
NEG_LN2_HI = _h("-0x1.62e430p-1")  # -float32(ln 2)
NEG_LN2_LO = _h("0x1.05c610p-29")  # -(ln 2 - LN2_HI), rounded to float32
E2 = _h("0x1.fffffcp-2")          # e^r = 1 + r + r^2 (E2 + E3 r + E4 r^2 + E5 r^3 + E6 r^4)
E3 = _h("0x1.555492p-3")
E4 = _h("0x1.5558f2p-5")
E5 = _h("0x1.123a20p-7")
E6 = _h("0x1.6a23d0p-10")
EXP_MIN = _h("-0x1.ap+6")         # -104: e^-104 rounds to +0 in float32
SAT_MIN = _h("-0x1p+5")           # -32: tanh, and sigmoid of x >= 0, are +-1 below it whatever e is
TWO_M64 = _h("0x1p-64")
SIXTY_FOUR = F32(64.0)

T2 = _h("-0x1.55554ap-2")         # tanh(x) = x + x^3 (T2 + T4 s + T6 s^2 + T8 s^3 + T10 s^4)
T4 = _h("0x1.110d1ep-3")
T6 = _h("-0x1.b92728p-5")
T8 = _h("0x1.593152p-6")
T10 = _h("-0x1.9ae9e8p-8")
TANH_SMALL = _h("0x1.19999ap-1")  # 0.55: below it the odd polynomial, above it the exp form
TANH_TINY = _h("0x1p-12")         # below it tanh(x) = x (x^3/3 is under half an ulp)

ONE = F32(1.0)
ZERO = F32(0.0)


def _f32(x) -> np.ndarray:
    return np.asarray(x, np.float32)


def pow2(k: np.ndarray) -> np.ndarray:
    """2^k for integral float32 k in [-126, 127], built from its exponent bits (exact)."""
    bits = (k.astype(np.int32) + np.int32(127)) << np.int32(23)
    return bits.astype(np.int32).view(np.float32)


def exp_neg(v) -> np.ndarray:
    """e^v for float32 v in [-104, 0] (callers clamp)."""
    v = _f32(v)
    with np.errstate(all="ignore"):
        n = fma(v, LOG2E, SHIFT) - SHIFT
        r = fma(n, NEG_LN2_HI, v)
        r = fma(n, NEG_LN2_LO, r)
        P = fma(E6, r, E5)
        P = fma(P, r, E4)
        P = fma(P, r, E3)
        P = fma(P, r, E2)
        p = fma(P, r * r, r) + ONE
        return (p * pow2(n + SIXTY_FOUR)) * TWO_M64


def sigmoid(x) -> np.ndarray:
    x = _f32(x)
    with np.errstate(all="ignore"):
        a = np.where(x < ZERO, x, -x)                 # -|x|
        lo = np.where(x >= ZERO, SAT_MIN, EXP_MIN)
        v = np.where(a >= lo, a, lo)                 # clamp; NaN becomes -104 too
        e = exp_neg(v)
        d = ONE + e
        y = np.where(x >= ZERO, ONE / d, e / d)
        y = np.where(x != x, x + x, y)
    return _f32(y)


def tanh(x) -> np.ndarray:
    x = _f32(x)
    with np.errstate(all="ignore"):
        a = np.where(x < ZERO, -x, x)                 # |x|
        small = a < TANH_SMALL
        y = x
        if np.count_nonzero(~small):
            y = np.where(small, y, _tanh_large(x, a))
        poly = small & (a >= TANH_TINY)
        if np.count_nonzero(poly):
            y = np.where(poly, _tanh_small(x), y)
        y = np.where(x != x, x + x, y)
    return _f32(y)


def _tanh_large(x, a):
    """1 - 2e/(1 + e), e = e^(-2|x|), with x's sign (|x| >= 0.55)."""
    v = -(a + a)
    v = np.where(v >= SAT_MIN, v, SAT_MIN)       # clamp; NaN becomes -32 too
    e = exp_neg(v)
    t = (e + e) / (ONE + e)
    large = ONE - t
    return np.where(x < ZERO, -large, large)


def _tanh_small(x):
    """The odd polynomial x + x^3 P(x^2) (2^-12 <= |x| < 0.55)."""
    s = x * x
    P = fma(T10, s, T8)
    P = fma(P, s, T6)
    P = fma(P, s, T4)
    P = fma(P, s, T2)
    return fma(x * s, P, x)
