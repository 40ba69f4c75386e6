"""dot16 fixture cases for the signed zero of a tail (fixtures/dot16_zeros.h5; docs/mutants.md).

Every product underflows: |a|, |b| ~ 2^-80, so a*b ~ 2^-160 is below half the smallest
subnormal and the fma that adds it to a +0 or -0 lane rounds to a zero carrying the product's
sign. A lane therefore ends at -0 when its last term is negative, and the dot is -0 exactly when
all 16 lanes are -0 (the tree's +0 + -0 is +0). A port that pads a tail with zero terms turns
every padded -0 lane into +0 (fma(0, 0, -0) = +0) and returns +0 where the spec returns -0
(docs/numerics.md, "Exactly n terms"); one that drops or adds terms changes lanes' signs too.
These cases expose it; the other dot16 cases cannot, since a lane only reaches -0 by underflow.

  all_negative_n0_64   every product negative, lengths 0..64: -0 for n >= 16, +0 below
  mixed_sign_n16_80    each product negative with probability 0.9, lengths 16..80: -0 only
                       when every lane's last term is negative

Exact expectations only: every float64 value is 0.
"""
from __future__ import annotations

import math

import numpy as np

from .. import draw
from ..h5io import Case
from ..spec.dot16 import dot16

NAME = "dot16_zeros"
LAYER = "dot16"
SEED = 1616


def _tiny(rng, n, p_negative):
    a = (math.ldexp(1.0, -80) * rng.uniform(1, 2, n)).astype(np.float32)
    b = (math.ldexp(1.0, -80) * rng.uniform(1, 2, n)).astype(np.float32)
    a[rng.random(n) < p_negative] *= np.float32(-1)
    return a, b


def _case(name, lengths, make) -> Case:
    parts = [make(n) for n in lengths]
    a = np.concatenate([p[0] for p in parts] or [np.zeros(0, np.float32)]).astype(np.float32)
    b = np.concatenate([p[1] for p in parts] or [np.zeros(0, np.float32)]).astype(np.float32)
    exact, at = [], 0
    for n in lengths:
        exact.append(dot16(a[at:at + n], b[at:at + n]))
        at += n
    dots = np.array(exact, np.float32)
    negative_zero = int(np.sum(np.signbit(dots) & (dots == 0)))
    return Case(name, {"count": len(lengths), "negative_zero": negative_zero},
                {"a": a, "b": b, "lengths": np.asarray(lengths, np.int64)},
                {"exact": {"dot": dots}})


def build() -> list[Case]:
    rng = draw.rng(SEED)
    return [
        _case("all_negative_n0_64", list(range(65)), lambda n: _tiny(rng, n, 1.0)),
        _case("mixed_sign_n16_80", list(range(16, 81)), lambda n: _tiny(rng, n, 0.9)),
    ]
