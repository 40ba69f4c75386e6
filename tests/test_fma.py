"""The exact fma emulation equals C's fmaf bit for bit."""
from __future__ import annotations

import ctypes
import subprocess

import numpy as np
import pytest

from crnn_conformance.generators.spec.fma import fma

HELPER = r"""
#include <math.h>
#include <stdint.h>
void fma_arrays(const float *a, const float *b, const float *c, float *out, int64_t n)
{ for (int64_t i = 0; i < n; i++) out[i] = fmaf(a[i], b[i], c[i]); }
"""


@pytest.fixture(scope="module")
def c_fma(tmp_path_factory):
    d = tmp_path_factory.mktemp("fma")
    (d / "fma.c").write_text(HELPER)
    so = d / "libfma.so"
    subprocess.run(["cc", "-O2", "-ffp-contract=off", "-fPIC", "-shared", str(d / "fma.c"),
                    "-o", str(so), "-lm"], check=True)
    lib = ctypes.CDLL(str(so))

    def run(a, b, c):
        a, b, c = (np.ascontiguousarray(v, np.float32) for v in (a, b, c))
        out = np.empty_like(a)
        lib.fma_arrays(*(v.ctypes.data_as(ctypes.c_void_p) for v in (a, b, c, out)),
                       ctypes.c_int64(a.size))
        return out
    return run


def bits(x):
    return np.asarray(x, np.float32).view(np.uint32)


def test_random_triples(c_fma):
    rng = np.random.default_rng(7)
    n = 1_000_000
    # mixed exponents so products and addends overlap, cancel and sit far apart
    def draw():
        return (rng.standard_normal(n) * np.exp2(rng.integers(-40, 40, n))).astype(np.float32)
    a, b, c = draw(), draw(), draw()
    np.testing.assert_array_equal(bits(fma(a, b, c)), bits(c_fma(a, b, c)))


def test_halfway_cases(c_fma):
    """Sums that lie exactly halfway between two floats (ties to even), and cases where the
    naive float64-then-float32 double rounding would be wrong."""
    rng = np.random.default_rng(11)
    n = 200_000
    i = rng.integers(1, 1 << 12, n)
    j = rng.integers(1, 1 << 12, n)
    a = (1.0 + i * 2.0 ** -12).astype(np.float32)
    b = (1.0 + j * 2.0 ** -12).astype(np.float32)
    # c cancels the leading part so the product's low bits decide the rounding
    c = (-(1.0 + rng.integers(0, 1 << 12, n) * 2.0 ** -12) * rng.choice([0.0, 1.0], n)).astype(np.float32)
    ours, ref = fma(a, b, c), c_fma(a, b, c)
    np.testing.assert_array_equal(bits(ours), bits(ref))
    exact = a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)
    ties = np.abs(exact - ref.astype(np.float64)) == np.abs(
        np.spacing(ref).astype(np.float64)) / 2
    assert ties.sum() > 1000, "the set must contain real ties"


def test_double_rounding_trap(c_fma):
    """a*b = 1 + 2^-11 + 2^-24 is a float32 tie; adding 2^-80 breaks the tie upwards. A float64
    sum loses the 2^-80 and then ties to even (down): only round-to-odd gets it right."""
    a = b = np.array([1 + 2.0 ** -12], np.float32)
    c = np.array([2.0 ** -80], np.float32)
    good = c_fma(a, b, c)
    naive = (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float32)
    assert bits(naive) != bits(good)
    assert bits(fma(a, b, c)) == bits(good)
    assert good[0] == np.float32(1 + 2.0 ** -11 + 2.0 ** -23)


def test_special_values(c_fma):
    specials = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45,
                         1.1754942e-38, 3.4028235e38, -3.4028235e38, 2.0 ** -75, 0.5],
                        np.float32)
    a, b, c = np.meshgrid(specials, specials, specials, indexing="ij")
    a, b, c = a.ravel(), b.ravel(), c.ravel()
    ours, ref = fma(a, b, c), c_fma(a, b, c)
    nan = np.isnan(ref)
    np.testing.assert_array_equal(np.isnan(ours), nan)
    np.testing.assert_array_equal(bits(ours)[~nan], bits(ref)[~nan])


def test_midpoints_in_every_binade_mixed_with_ordinary_sums(c_fma):
    """The emulation rounds through TwoSum only where s = a*b + c in float64 could be a float32
    midpoint (its 28 low bits zero): tie-making products of every binade, the subnormal
    range included, each with an addend that breaks or keeps the tie, in arrays that also
    hold ordinary sums (so both ways meet in one call)."""
    rng = np.random.default_rng(13)
    n = 400_000
    k = rng.integers(-75, 64, n)
    a = (1.0 + rng.integers(1, 1 << 12, n) * 2.0 ** -12) * np.exp2(k)
    b = (1.0 + rng.integers(1, 1 << 12, n) * 2.0 ** -12) * np.exp2(rng.integers(-75, 64, n))
    tiny = rng.choice([-1.0, 1.0, 0.0], n) * np.exp2(rng.integers(-149, -20, n)) * np.abs(a * b)
    c = np.where(rng.random(n) < 0.5, tiny, rng.standard_normal(n) * np.abs(a * b))
    with np.errstate(over="ignore"):
        a, b, c = (v.astype(np.float32) for v in (a, b, c))
    c = np.where(np.isfinite(c), c, np.float32(0))
    np.testing.assert_array_equal(bits(fma(a, b, c)), bits(c_fma(a, b, c)))
    sub = (rng.integers(0, 1 << 23, n).astype(np.uint32) | (rng.integers(0, 2, n).astype(np.uint32)
                                                          << 31)).view(np.float32)
    odd = ((2 * rng.integers(0, 1 << 10, n) + 1) * 2.0 ** -75).astype(np.float32)
    half = np.full(n, 2.0 ** -75, np.float32)        # odd * half: a subnormal midpoint
    np.testing.assert_array_equal(bits(fma(odd, half, sub)), bits(c_fma(odd, half, sub)))
