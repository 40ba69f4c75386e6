"""dot16 fixture cases: every length 0..100 and random lengths up to 5000.

The 'order' cases use data that makes the summation order visible: magnitudes spread over
2^-30..2^30 with random signs, and pairs that cancel, so a different lane assignment or tree
changes the bits. They have exact expectations only (no float64 allowance can be stated for a
sum of cancelling terms). The 'uniform' cases are U(-1, 1) data with both tiers; their float64
value is the exactly rounded dot (products of float32 values are exact in float64, math.fsum
rounds their sum once), the same on every machine.
"""
from __future__ import annotations

import math

import numpy as np

from .. import draw
from ..h5io import Case
from ..spec.dot16 import dot16

NAME = "dot16"
LAYER = "dot16"
SEED = 1601


def _order_data(rng, n):
    mag = np.ldexp(1.0, rng.integers(-30, 31, n)).astype(np.float32)   # exact powers of 2
    a = (rng.choice([-1.0, 1.0], n) * mag * rng.uniform(1, 2, n)).astype(np.float32)
    b = rng.uniform(-2, 2, n).astype(np.float32)
    if n >= 4:   # cancelling pairs across lanes
        k = rng.integers(0, n - 1, n // 4)
        a[k + 1] = -a[k]
        b[k + 1] = b[k]
    return a, b


def _case(name, lengths, make, with_float64):
    a_parts, b_parts = zip(*(make(n) for n in lengths)) if lengths else ((), ())
    a = np.concatenate(a_parts).astype(np.float32)
    b = np.concatenate(b_parts).astype(np.float32)
    exact, ref, at = [], [], 0
    for n in lengths:
        exact.append(dot16(a[at:at + n], b[at:at + n]))
        ref.append(math.fsum(a[at:at + n].astype(np.float64) * b[at:at + n].astype(np.float64)))
        at += n
    expected = {"exact": {"dot": np.array(exact, np.float32)}}
    if with_float64:
        expected["float64"] = {"dot": np.array(ref, np.float64)}
    return Case(name, {"count": len(lengths)},
                {"a": a, "b": b, "lengths": np.asarray(lengths, np.int64)}, expected)


def build() -> list[Case]:
    rng = draw.rng(SEED)
    uniform = lambda n: (rng.uniform(-1, 1, n).astype(np.float32), rng.uniform(-1, 1, n).astype(np.float32))
    order = lambda n: _order_data(rng, n)
    long_lengths = [int(v) for v in rng.integers(101, 5001, 24)]
    return [
        _case("order_n0_100", list(range(101)), order, False),
        _case("order_long", long_lengths, order, False),
        _case("uniform_n0_100", list(range(101)), uniform, True),
    ]
