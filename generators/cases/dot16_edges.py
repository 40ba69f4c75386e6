"""dot16 edge cases (fixtures/dot16_edges.h5): exact tier only (docs/edge-cases.md).

  subnormal_terms_n1_40    products in the subnormal range, and subnormal inputs with normal
                           products: a port with flush-to-zero or denormals-are-zero loses them
  neg_zero_first_n1_48     every a is -0: each lane starts at +0 and fma(-0, b, +0) = +0, so the
                           dot is +0; a port that starts a lane with its first product has -0
  underflow_cancel_n16_64  exact cancellations inside lanes, then products that underflow:
                           lanes at +0 and -0 meeting in the tree (-0 only from -0 + -0)
  overflow_n1_40           positive products past the largest float (inf) and lane sums that
                           overflow only in the tree's additions (lanes 0 + 8, ...)
  wide_range_n1_80         magnitudes 2^-149 .. 2^100 with random signs: every rounding visible
  nan_times_zero_n1_40     half of a is ±0, and one b is NaN where a is ±0: ±0 * NaN is NaN, a
                           term like any other, so every dot is NaN; a port that leaves out
                           the zero terms returns a finite dot
"""
from __future__ import annotations

import numpy as np

from .. import draw, exact
from ..edge_values import qnan32, tiny

NAME = "dot16_edges"
LAYER = "dot16"
SEED = 1617
F32 = np.float32


def _case(name, lengths, make, note):
    parts = [make(n) for n in lengths]
    a = np.concatenate([p[0] for p in parts] + [np.zeros(0, F32)]).astype(F32)
    b = np.concatenate([p[1] for p in parts] + [np.zeros(0, F32)]).astype(F32)
    inputs = {"a": a, "b": b, "lengths": np.asarray(lengths, np.int64)}
    c = exact.case(LAYER, name, {"count": len(lengths), "note": note}, inputs)
    d = c.expected["exact"]["dot"]
    c.params["negative_zero"] = int(np.sum((d == 0) & np.signbit(d)))
    return c


def build():
    rng = draw.rng(SEED)

    def subnormal(n):
        a = np.ldexp(rng.uniform(1, 2, n), rng.integers(-149, -120, n)).astype(F32)
        b = np.ldexp(rng.uniform(1, 2, n), rng.integers(-10, 30, n)).astype(F32)
        return a * rng.choice([-1, 1], n).astype(F32), b

    def neg_zero(n):
        return np.full(n, -0.0, F32), rng.uniform(0.5, 2.0, n).astype(F32)

    def cancel(n):
        """Pairs that cancel inside a lane (k and k + 16), then one underflowing product per
        lane, negative with probability 0.95: a lane ends at -0 when its last one is."""
        a = (rng.integers(-256, 257, n) / 256.0).astype(F32)    # short significands:
        b = (rng.integers(128, 257, n) / 128.0).astype(F32)     # every product exact
        head = (n - 16) // 32 * 32
        for k0 in range(0, head, 32):
            a[k0 + 16:k0 + 32] = -a[k0:k0 + 16]
            b[k0 + 16:k0 + 32] = b[k0:k0 + 16]
        sign = np.where(rng.random(n - head) < 0.95, -1.0, 1.0)
        a[head:] = tiny(rng, n - head, -80) * sign.astype(F32)
        b[head:] = tiny(rng, n - head, -80)
        return a, b

    def overflow(n):
        a = np.ldexp(rng.uniform(1, 2, n), rng.integers(100, 128, n)).astype(F32)
        b = np.ldexp(rng.uniform(1, 2, n), rng.integers(-30, 28, n)).astype(F32)
        return a, b

    def wide(n):
        a = np.ldexp(rng.uniform(1, 2, n), rng.integers(-149, 60, n)).astype(F32)
        b = np.ldexp(rng.uniform(1, 2, n), rng.integers(-60, 40, n)).astype(F32)
        return a * rng.choice([-1, 1], n).astype(F32), b

    return [
        _case("subnormal_terms_n1_40", list(range(1, 41)), subnormal,
              "subnormal products and inputs: no flush-to-zero, no denormals-are-zero"),
        _case("neg_zero_first_n1_48", list(range(1, 49)), neg_zero,
              "a = -0: lanes start at +0, fma(-0, b, +0) = +0"),
        _case("underflow_cancel_n16_64", [16, 17, 32, 33, 48, 64, 65, 80] * 6, cancel,
              "exact cancellations, then underflowing products"),
        _case("overflow_n1_40", list(range(1, 41)), overflow,
              "products and lane sums past the largest float: +inf"),
        _case("wide_range_n1_80", list(range(1, 81)), wide, "magnitudes 2^-149 .. 2^100"),
        nan_times_zero(draw.rng(SEED + 1)),
    ]


def nan_times_zero(rng):
    def make(n):
        a = rng.uniform(-1, 1, n).astype(F32)
        a[rng.random(n) < 0.5] = 0.0
        k = int(rng.integers(n))
        a[k] = rng.choice([0.0, -0.0])
        b = rng.uniform(-1, 1, n).astype(F32)
        b[k] = qnan32()
        return a, b
    return _case("nan_times_zero_n1_40", list(range(1, 41)), make,
                 "a NaN b against a zero a: +-0 * NaN is NaN, every dot NaN")
