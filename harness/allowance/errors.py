"""First-order error statistics of binary32 computations, carried alongside their float64
values (docs/tolerances.md, "The per-element model").

An `Err` holds, per element of an array:

    v   the exact value (float64, from the layer's inputs)
    g   variance of the random rounding error (elementwise roundings, products, a sum's
        partial sums in the worst order: sums.py)
    s   a bound on the systematic error: the sigmoid/tanh approximations' errors and rounded
        scalars shared by many elements, which can add up coherently; propagated with |J|
    w   a deterministic bound on the rounding error (every rounding at its maximum, the worst
        signs), propagated with |J|

Every local rounding of a value y is an independent, symmetric error uniform within
[-u|y|, u|y|] (u = 2^-24, plus 2^-150 absolute for the subnormal range): variance
(u^2/3) y^2 and a sub-Gaussian tail with that variance. The deterministic bound w is wider: a
rounding errs by less than one ulp, at most 2u|y| (plus 2^-149), so that an operation that is
only faithfully rounded (a vectorized division or square root refined from a reciprocal
estimate) stays inside it too. Errors reaching an operation through
several inputs are combined as if independent (the diagonal of the covariance; docs say where
that is checked). The allowance of an element is

    s + min(w, lambda * sqrt(g)),     lambda = sqrt(2 ln(2/p)) (the Gaussian tail at the
                                      per-element probability p of a false failure).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

U = 2.0 ** -24
TINY = 2.0 ** -150              # half the smallest subnormal: a rounding's absolute floor
U2 = U * U / 3.0                # variance of a rounding error, per unit value squared
TINY2 = TINY * TINY / 3.0
ULP = 2.0 * U                   # the deterministic bound of one rounding: under one ulp
ULP_TINY = 2.0 * TINY


def _local(y):
    """(variance, worst-case bound) of one rounding of the values y."""
    a = np.abs(y)
    return U2 * a * a + TINY2, ULP * a + ULP_TINY


@dataclass
class Err:
    v: np.ndarray
    g: np.ndarray
    s: np.ndarray
    w: np.ndarray

    # ---- construction and shape
    @staticmethod
    def exact(v) -> Err:
        v = np.asarray(v, np.float64)
        z = np.zeros(v.shape)
        return Err(v, z, z, z)

    @property
    def shape(self):
        return self.v.shape

    def map(self, fn) -> Err:
        """The same function of every field: reshape, transpose, slicing, copies."""
        return Err(fn(self.v), fn(self.g), fn(self.s), fn(self.w))

    def __getitem__(self, idx) -> Err:
        return self.map(lambda a: a[idx])

    def reshape(self, *shape) -> Err:
        return self.map(lambda a: a.reshape(*shape))

    @property
    def T(self) -> Err:
        return self.map(lambda a: a.T)

    def rounded(self) -> Err:
        """This value after one more binary32 rounding."""
        g, w = _local(self.v)
        return Err(self.v, self.g + g, self.s, self.w + w)

    # ---- elementwise arithmetic: each result rounded once
    def __add__(self, o) -> Err:
        o = _err(o)
        return Err(self.v + o.v, self.g + o.g, self.s + o.s, self.w + o.w).rounded()

    def __sub__(self, o) -> Err:
        o = _err(o)
        return Err(self.v - o.v, self.g + o.g, self.s + o.s, self.w + o.w).rounded()

    def __rsub__(self, c) -> Err:
        return _err(c) - self

    def __radd__(self, c) -> Err:
        return _err(c) + self

    def __mul__(self, o) -> Err:
        o = _err(o)
        a2, b2 = self.v * self.v, o.v * o.v
        aa, ab = np.abs(self.v), np.abs(o.v)
        return Err(self.v * o.v, b2 * self.g + a2 * o.g, ab * self.s + aa * o.s,
                   ab * self.w + aa * o.w).rounded()

    __rmul__ = __mul__

    def __truediv__(self, o) -> Err:
        o = _err(o)
        q = self.v / o.v
        d2 = o.v * o.v
        j2 = q * q / d2                      # (d q / d o)^2
        return Err(q, self.g / d2 + j2 * o.g,
                   self.s / np.abs(o.v) + np.abs(q / o.v) * o.s,
                   self.w / np.abs(o.v) + np.abs(q / o.v) * o.w).rounded()

    def __neg__(self) -> Err:
        return Err(-self.v, self.g, self.s, self.w)

    def square(self) -> Err:
        """self * self, rounded once (the two factors are the same value: fully correlated)."""
        a = np.abs(self.v)
        return Err(self.v * self.v, 4 * a * a * self.g, 2 * a * self.s, 2 * a * self.w).rounded()

    def plus(self, o) -> Err:
        """self + o with no binary32 rounding (a binary64 addition, exact at this scale)."""
        o = _err(o)
        return Err(self.v + o.v, self.g + o.g, self.s + o.s, self.w + o.w)

    def sqrt(self) -> Err:
        r = np.sqrt(self.v)
        with np.errstate(divide="ignore", invalid="ignore"):
            j = np.where(r > 0, 0.5 / r, 0.0)
        return Err(r, j * j * self.g, j * self.s, j * self.w).rounded()

    def sqrt_exact(self) -> Err:
        """sqrt in binary64 (no binary32 rounding)."""
        r = np.sqrt(self.v)
        with np.errstate(divide="ignore", invalid="ignore"):
            j = np.where(r > 0, 0.5 / r, 0.0)
        return Err(r, j * j * self.g, j * self.s, j * self.w)

    def scaled(self, c) -> Err:
        """c * self with c an exact scalar or array and no rounding (e.g. a power of two)."""
        c = np.asarray(c, np.float64)
        return Err(c * self.v, c * c * self.g, np.abs(c) * self.s, np.abs(c) * self.w)

    def through(self, value, slope, bound=0.0, coherent=0.0) -> Err:
        """A function of this value with the given exact result and derivative, evaluated by
        an approximation that errs by at most `bound`, of which up to `coherent` may keep its
        sign over many evaluations (systematic, s); the rest is bounded and independent
        from one evaluation to the next (variance bound^2 / 3, worst case bound)."""
        j2 = slope * slope
        aj = np.abs(slope)
        return Err(np.asarray(value, np.float64), j2 * self.g + bound * bound / 3.0,
                   aj * self.s + coherent, aj * self.w + bound)

    def plus_systematic(self, bound) -> Err:
        return Err(self.v, self.g, self.s + bound, self.w)

    # ---- the allowance
    def allowance(self, lam: float) -> np.ndarray:
        """s + min(w, lambda * sqrt(g)) per element."""
        return self.s + np.minimum(self.w, lam * np.sqrt(self.g))


def _err(x) -> Err:
    return x if isinstance(x, Err) else Err.exact(x)


def concat(parts, axis=0) -> Err:
    return Err(*(np.concatenate([getattr(p, k) for p in parts], axis=axis)
                 for k in ("v", "g", "s", "w")))


def where(cond, a: Err, b: Err) -> Err:
    a, b = _err(a), _err(b)
    return Err(*(np.where(cond, getattr(a, k), getattr(b, k)) for k in ("v", "g", "s", "w")))


def stack(parts, axis=0) -> Err:
    return Err(*(np.stack([getattr(p, k) for p in parts], axis=axis)
                 for k in ("v", "g", "s", "w")))


def zeros(shape) -> Err:
    return Err.exact(np.zeros(shape))
