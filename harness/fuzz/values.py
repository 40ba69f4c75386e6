"""Value strategies: arrays drawn as a short recipe that Hypothesis shrinks towards plain values.

An array is not drawn element by element (slow to generate, slow to shrink) but as

    kind     zero, one, int, uniform, normal, pow2, tiny, subnormal, huge, wide   (shrinks to zero)
    sign     mixed, positive, negative                                           (to mixed)
    scale    2^e, e in [-8, 8]                                                   (to 2^0)
    seed     the NumPy generator's seed for the kind's random part               (to 0)
    specials up to a few (index, value) overrides from a list of special values  (to none)

so a shrunk failure reads like "x all zero except x[0] = NaN" or "W = 1 everywhere". `tiny`
values (2^-80 * [1, 2)) make products underflow to a zero of the product's sign, `subnormal`
ones live below 2^-126, `huge` ones overflow products (where the layer's NaN rules allow it,
see generators/edge_values.py: input NaNs and NaNs made by an operation are never mixed).

The recipe takes few of Hypothesis's choices (each costs about as much as making a small
array): the kind; sign, scale and seed as one integer (look()); the number of overrides; one
integer per override.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from hypothesis import strategies as st

F32, F64 = np.float32, np.float64
KINDS = ("zero", "one", "int", "uniform", "normal", "pow2", "tiny", "subnormal", "huge", "wide")
PLAIN = ("zero", "one", "int", "uniform", "normal", "pow2")


def _base(kind: str, n: int, rng, huge_exp: int) -> np.ndarray:
    if kind == "zero":
        return np.zeros(n)
    if kind == "one":
        return np.ones(n)
    if kind == "int":
        return rng.integers(-3, 4, n).astype(float)
    if kind == "uniform":
        return rng.uniform(-1, 1, n)
    if kind == "normal":
        return rng.normal(0, 1, n)
    if kind == "pow2":
        return np.ldexp(rng.choice([-1.0, 1.0], n), rng.integers(-3, 4, n))
    if kind == "tiny":
        return np.ldexp(rng.uniform(1, 2, n), -80) * rng.choice([-1.0, 1.0], n)
    if kind == "subnormal":
        return np.ldexp(rng.uniform(1, 2, n), rng.integers(-149, -126, n)) * rng.choice([-1.0, 1.0], n)
    if kind == "huge":
        return np.ldexp(rng.uniform(1, 2, n), rng.integers(huge_exp - 20, huge_exp, n)) * \
            rng.choice([-1.0, 1.0], n)
    return np.ldexp(rng.uniform(1, 2, n), rng.integers(-149, huge_exp, n)) * rng.choice([-1.0, 1.0], n)


def sampled(options: tuple):
    """st.sampled_from(options), made once per options (the strategies below and in
    strategies/ are drawn thousands of times a second, and Hypothesis validates each new
    strategy object on its first draw, which costs more than the draw). The key tells -0.0
    from 0.0, which compare equal."""
    return _sampled(options, _zero_signs(options))


@lru_cache(maxsize=None)
def _sampled(options: tuple, zero_signs: tuple):
    return st.sampled_from(options)


@lru_cache(maxsize=None)
def ints(lo: int, hi: int):
    """st.integers(lo, hi), made once per bounds (see sampled)."""
    return st.integers(int(lo), int(hi))


BOOLEANS = st.booleans()


def array(shape, dtype=F32, kinds=KINDS, specials=(), max_specials=3, huge_exp=50,
          scales=True):
    """A float array of `shape`; `specials` are values that may replace a few elements.
    (The strategy objects are cached: building and validating one per draw costs more than
    the draw.)"""
    shape = tuple(int(s) for s in np.atleast_1d(shape)) if np.ndim(shape) else (int(shape),)
    specials = tuple(specials)
    return _array(shape, np.dtype(dtype), tuple(kinds), specials, _zero_signs(specials),
                  max_specials, huge_exp, scales)


def _zero_signs(values: tuple) -> tuple:
    """The signs of the zeros among `values`: part of a cache key, as -0.0 == 0.0."""
    return tuple(math.copysign(1.0, x) for x in values
                 if isinstance(x, (float, np.floating)) and x == 0)


@lru_cache(maxsize=8192)
def _array(shape, dtype, kinds, specials, zero_signs, max_specials, huge_exp, scales):
    return _draw_array(shape, dtype, kinds, specials, max_specials, huge_exp, scales)


SIGNS = ("mixed", "positive", "negative")
SEEDS = 1 << 16
SCALES = 17                       # e in [-8, 8], as 0, 1, -1, 2, -2, ... (shrinks to 2^0)
LOOKS = len(SIGNS) * SCALES * SEEDS


def look(v: int) -> tuple:
    """One choice in [0, LOOKS) -> (sign, e, seed): Hypothesis costs about as much per
    choice as a small array costs to make, so the three are one integer, the sign its
    highest digit and the seed its lowest: shrinking it lowers the sign to "mixed" first,
    then the scale to 2^0, then the seed to 0."""
    seed, v = v % SEEDS, v // SEEDS
    i, sign = v % SCALES, SIGNS[v // SCALES]
    return sign, (i + 1) // 2 * (1 if i % 2 else -1), seed


@st.composite
def _draw_array(draw, shape, dtype, kinds, specials, max_specials, huge_exp, scales):
    n = int(np.prod(shape))
    kind = draw(sampled(kinds))
    sign, e, seed = look(draw(ints(0, LOOKS - 1)))
    if not scales or kind in ("zero", "tiny", "subnormal"):
        e = 0
    with np.errstate(over="ignore"):   # "huge" beyond the dtype's range is +-inf
        v = (_base(kind, n, np.random.default_rng(seed), huge_exp) * np.ldexp(1.0, e)).astype(dtype)
    if sign == "positive":
        v = np.abs(v)
    elif sign == "negative":
        v = -np.abs(v)
    if specials and n:                 # a count, then one choice per (index, value)
        m = len(specials)
        for _ in range(draw(ints(0, max_specials))):
            k = draw(ints(0, n * m - 1))
            v[k // m] = specials[k % m]
    return v.reshape(shape)


def picks(draw, table: tuple, lo: int, hi: int) -> list:
    """lo..hi values from `table` in at most three choices (a list of sampled values costs
    two a value): how many, the first one's index, and a seed for the others; shrinking
    leaves one value, the table's first."""
    k = draw(ints(lo, hi))
    if k == 0:
        return []
    first = draw(ints(0, len(table) - 1))
    rest = (np.random.default_rng(draw(ints(0, SEEDS - 1))).integers(0, len(table), k - 1)
            if k > 1 else ())
    return [table[first]] + [table[int(i)] for i in rest]


def f32_specials(nan=False, inf=False, extra=()) -> tuple:
    """Special float32 values: signed zeros, subnormal and normal extremes, values whose
    products underflow; NaN (the canonical quiet NaN) and infinities on request."""
    info = np.finfo(F32)
    v = [0.0, -0.0, 1.0, -1.0, float(info.smallest_subnormal), -float(info.smallest_subnormal),
         float(info.tiny), float(np.nextafter(F32(info.tiny), F32(0))), 2.0 ** -80, -2.0 ** -80,
         float(info.max) / 4]
    if inf:
        v += [float("inf"), float("-inf")]
    if nan:
        v += [float(np.array([0x7FC00000], np.uint32).view(F32)[0])]
    return tuple(F32(x) for x in list(v) + list(extra))


def shape_int(lo: int, hi: int):
    """A size in [lo, hi] that shrinks towards lo."""
    return st.integers(lo, hi)
