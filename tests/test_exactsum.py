"""generators/float64/exactsum.py and elementary.py: as accurate as documented, and their bits
a function of the values alone (not of chunking, memory layout or the path through NumPy)."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from crnn_conformance.generators.float64 import elementary as E
from crnn_conformance.generators.float64 import exactsum as xs

U = 2.0 ** -53


def _exact_dot(a, b) -> Fraction:
    return sum((Fraction(float(x)) * Fraction(float(y)) for x, y in zip(a, b)), Fraction(0))


def _bound(a, b) -> float:
    """The documented error bound beyond the final rounding: 2 L (L + 1) u^2 sum|terms|."""
    L = max(1, math.ceil(math.log2(max(2, len(a)))))
    return 2 * L * (L + 1) * U * U * float(np.sum(np.abs(np.asarray(a) * np.asarray(b))))


def _ill_conditioned(rng, n):
    """Terms over 2^-40..2^40, cancelling pairs, and +-2^70 at both ends: a plain float64 sum
    loses every bit below 2^17."""
    a = rng.normal(size=n) * np.ldexp(1.0, rng.integers(-40, 41, n))
    b = rng.normal(size=n)
    if n >= 4:
        k = rng.integers(0, n - 1, n // 3)
        a[k + 1], b[k + 1] = -a[k], b[k]
        a[0], a[-1], b[0], b[-1] = 2.0 ** 70, -(2.0 ** 70), 1.0, 1.0
    return a, b


@pytest.mark.parametrize("n", [1, 2, 3, 7, 16, 17, 100, 257, 1000])
def test_dot_within_its_bound_of_the_exact_value(n):
    rng = np.random.default_rng(n)
    for _ in range(5):
        a, b = _ill_conditioned(rng, n)
        exact = _exact_dot(a, b)
        got = xs.dot(a, b)
        # the result is the exact value rounded once, up to the bound
        err = abs(Fraction(float(got)) - exact)
        assert err <= U * abs(exact) + Fraction(_bound(a, b)), (n, float(err))
        naive = sum(float(x) * float(y) for x, y in zip(a, b))
        if n >= 100:     # the data is hard: a plain sum is far off
            assert abs(Fraction(naive) - exact) > 1000 * err


def test_float32_products_are_summed_correctly_rounded():
    rng = np.random.default_rng(7)
    for n in (5, 64, 300, 4097):
        a = rng.normal(size=n).astype(np.float32).astype(np.float64) * np.ldexp(1.0, rng.integers(-20, 21, n))
        b = rng.normal(size=n).astype(np.float32).astype(np.float64)
        assert xs.dot(a, b) == math.fsum(a * b)          # exact products: fsum is the truth
        assert xs.total(a) == math.fsum(a)


def test_matmul_affine_total_agree_with_dot():
    rng = np.random.default_rng(8)
    A, B, b = rng.normal(size=(13, 70)), rng.normal(size=(70, 9)), rng.normal(size=9)
    C = xs.matmul(A, B)
    assert all(C[i, j] == xs.dot(A[i], B[:, j]) for i in range(13) for j in range(9))
    assert np.array_equal(xs.matmul(A[3], B), C[3]) and np.array_equal(xs.matmul(A, B[:, 2]), C[:, 2])
    Y = xs.affine(A, B.T, b)
    assert all(Y[i, j] == xs.dot(np.append(A[i], 1.0), np.append(B[:, j], b[j]))
               for i in range(13) for j in range(9))
    assert np.array_equal(xs.total(A, axis=0), [xs.dot(A[:, j], np.ones(13)) for j in range(70)])


def test_bits_do_not_depend_on_chunking_or_layout(monkeypatch):
    rng = np.random.default_rng(9)
    A, B = rng.normal(size=(37, 300)), rng.normal(size=(300, 41))
    ref = xs.matmul(A, B)
    for chunk in (1, 300, 5000, 1 << 22):
        monkeypatch.setattr(xs, "_CHUNK", chunk)
        assert np.array_equal(xs.matmul(A, B), ref)
        assert np.array_equal(xs.matmul(np.asfortranarray(A), B[:, ::-1])[:, ::-1], ref)
    assert np.array_equal(xs.matmul(B.T.copy(), A.T.copy()), ref.T)   # the same dots, transposed


def test_empty_and_non_finite():
    assert xs.dot(np.zeros(0), np.zeros(0)) == 0.0
    assert np.array_equal(xs.matmul(np.zeros((3, 0)), np.zeros((0, 2))), np.zeros((3, 2)))
    assert xs.total([1.0, np.inf, 2.0]) == np.inf
    assert np.isnan(xs.total([1.0, np.nan])) and np.isnan(xs.total([np.inf, -np.inf]))
    assert xs.dot([1e300, 1.0], [1e300, 1.0]) == np.inf


def test_plain_sums_keep_the_order_but_not_the_accuracy():
    a = np.array([1.0, 1.0, 1e100, -1e100])             # the tree adds 1 + 1e100 and 1 - 1e100
    assert xs.total(a) == 2.0
    assert xs.total(a, compensated=False) == 0.0


# ---------------------------------------------------------------- elementary functions

mpmath = pytest.importorskip("mpmath")


def _ulps(got, exact):
    exact = np.array([float(v) for v in exact])
    spacing = np.spacing(np.abs(exact))
    spacing[spacing == 0] = np.spacing(0.0)
    return float(np.max(np.abs(np.asarray(got) - exact) / spacing))


def _args(rng):
    tiny = np.ldexp(1.0, -rng.integers(1, 1000, 2000)) * rng.uniform(1, 2, 2000)
    return np.concatenate([rng.normal(0, 4, 3000), tiny, -tiny, [0.0, 19.0, 20.0, 40.0, 700.0]])


def test_elementary_functions_within_a_few_ulp():
    mpmath.mp.prec = 130
    rng = np.random.default_rng(10)
    z = _args(rng)
    m = [mpmath.mpf(float(v)) for v in z]
    assert _ulps(E.tanh(z), [mpmath.tanh(v) for v in m]) <= 4
    assert _ulps(E.sigmoid(z), [1 / (1 + mpmath.exp(-v)) for v in m]) <= 3
    assert _ulps(E.expm1(z), [mpmath.expm1(v) for v in m]) <= 3
    p = np.abs(z)
    assert _ulps(E.log1p(p), [mpmath.log1p(mpmath.mpf(float(v))) for v in p]) <= 3
    a, b = rng.normal(0, 30, 2000), rng.normal(0, 30, 2000)
    exact = [mpmath.log(mpmath.exp(mpmath.mpf(x)) + mpmath.exp(mpmath.mpf(y))) for x, y in zip(a, b)]
    assert _ulps(E.logaddexp(a, b), exact) <= 3


def test_tiny_arguments_keep_their_relative_accuracy():
    """tanh, expm1 and log1p near 0: a few ulp of the tiny result, not of 1 (a formula
    through exp(x) - 1 or (1 - e)/(1 + e) would lose all digits there)."""
    mpmath.mp.prec = 130
    z = np.ldexp(1.37, -np.arange(1, 1060, dtype=np.int64))
    m = [mpmath.mpf(float(v)) for v in z]
    assert _ulps(E.tanh(z), [mpmath.tanh(v) for v in m]) <= 4
    assert _ulps(E.tanh(-z), [-mpmath.tanh(v) for v in m]) <= 4
    assert _ulps(E.expm1(-z), [mpmath.expm1(-v) for v in m]) <= 3
    assert _ulps(E.log1p(z), [mpmath.log1p(v) for v in m]) <= 3
    t = z[z < 2.0 ** -60]                           # below that the functions are x itself
    assert np.array_equal(E.tanh(t), t) and np.array_equal(E.expm1(t), t)


def test_special_values():
    ninf = -np.inf
    assert E.logaddexp(ninf, ninf) == ninf and E.logaddexp(ninf, 3.0) == 3.0
    assert E.logaddexp(np.inf, 3.0) == np.inf
    assert E.logaddexp(2.0, 2.0) == 2.0 + math.log(2.0)
    assert E.tanh(np.inf) == 1.0 and E.tanh(-np.inf) == -1.0 and np.signbit(E.tanh(-0.0))
    assert E.sigmoid(800.0) == 1.0 and E.sigmoid(-800.0) == 0.0 and E.sigmoid(0.0) == 0.5
    assert all(np.isnan(f(np.nan)) for f in (E.tanh, E.sigmoid, E.expm1, E.log1p))
    assert E.expm1(-800.0) == -1.0 and E.expm1(800.0) == np.inf
