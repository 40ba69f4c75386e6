"""Linear-layer edge cases (fixtures/linear_edges.h5): exact tier only (docs/edge-cases.md).

  neg_zero_y_dx_T17_I32_O17   x > 0 and W < 0 tiny (|x|, |W| ~ 2^-80), dY > 0 tiny: every
                              product of y's and dx's dots underflows to -0, so those dots are
                              -0; y = -0 + b keeps it where b = -0 and loses it where b = +0
  neg_zero_dW_dx_T33_I17_O16  x < 0, W < 0, dY > 0 tiny: dW's dots over t (33 terms, a tail of
                              one) and dx's over o (16) are -0, y's are +0
  subnormal_T5_I19_O3         subnormal inputs and products (no flush-to-zero)
  T1_I1_O1, T1_I17_O2, T2_I1_O33, T16_I16_O16   the smallest shapes, tails of 1
  nan_W_zero_x_dY_T6_I20_O3   W[1][7] NaN where x[.][7] and some of dY[.][1] are +0: y[.][1]
                              and dx[.][7] are NaN at every t (+0 * NaN is a term of the dot)
  nan_x_zero_dY_T6_I20_O3     x[2][5] NaN where some of dY[2] is +0: y[2] and dW[.][5] are NaN
                              A port that leaves out +0 terms (of x, or of dY) without checking
                              the other factor is finite gets finite values there.
"""
from __future__ import annotations

import numpy as np

from .. import draw, exact
from ..edge_values import qnan32, tiny

NAME = "linear_edges"
LAYER = "linear"
SEED = 2025
F32 = np.float32


def _case(name, x, W, b, dY, note):
    inputs = {"x": x, "W": W, "b": b, "dY": dY}
    T, I = x.shape
    c = exact.case(LAYER, name, {"T": T, "I": I, "O": W.shape[0], "note": note}, inputs)
    c.params["negative_zero"] = {k: int(np.sum((v == 0) & np.signbit(v)))
                                 for k, v in c.expected["exact"].items()}
    return c


def _signed_zeros(rng, n):
    return np.where(rng.random(n) < 0.5, F32(-0.0), F32(0.0)).astype(F32)


def build():
    rng = draw.rng(SEED)
    T, I, O = 17, 32, 17
    cases = [_case("neg_zero_y_dx_T17_I32_O17", tiny(rng, T * I).reshape(T, I),
                   tiny(rng, O * I, -80, -1.0).reshape(O, I), _signed_zeros(rng, O),
                   tiny(rng, T * O).reshape(T, O), "y and dx dots -0; b = +-0")]
    T, I, O = 33, 17, 16
    cases.append(_case("neg_zero_dW_dx_T33_I17_O16", tiny(rng, T * I, -80, -1.0).reshape(T, I),
                       tiny(rng, O * I, -80, -1.0).reshape(O, I), _signed_zeros(rng, O),
                       tiny(rng, T * O).reshape(T, O), "dW and dx dots -0"))
    sub = lambda shape: (np.ldexp(rng.uniform(1, 2, shape), rng.integers(-149, -100, shape))
                         * rng.choice([-1, 1], shape)).astype(F32)
    big = lambda shape: np.ldexp(rng.uniform(-2, 2, shape), rng.integers(-20, 20, shape)).astype(F32)
    cases.append(_case("subnormal_T5_I19_O3", sub((5, 19)), big((3, 19)), sub(3), big((5, 3)),
                       "subnormal inputs and products"))
    for T, I, O in ((1, 1, 1), (1, 17, 2), (2, 1, 33), (16, 16, 16)):
        u = lambda shape: rng.uniform(-1, 1, shape).astype(F32)
        cases.append(_case(f"T{T}_I{I}_O{O}", u((T, I)), u((O, I)), u(O), u((T, O)),
                           "small shapes"))
    return cases + nan_meets_zeros(draw.rng(SEED + 1))


def nan_meets_zeros(rng) -> list:
    """A NaN factor against +0 terms: in W (y's dots over i, dx's over o) and in x (dW's over t)."""
    T, I, O = 6, 20, 3
    u = lambda shape: rng.uniform(-1, 1, shape).astype(F32)
    cases = []
    for name in ("nan_W_zero_x_dY_T6_I20_O3", "nan_x_zero_dY_T6_I20_O3"):
        x, W, b, dY = u((T, I)), u((O, I)), u(O), u((T, O))
        x[rng.random((T, I)) < 0.4] = 0.0
        dY[rng.random((T, O)) < 0.4] = 0.0
        if name.startswith("nan_W"):
            x[[0, 2, 4], 7] = 0.0
            dY[[1, 3], 1] = 0.0
            W[1, 7] = qnan32()
        else:
            dY[2, [0, 2]] = 0.0
            x[2, 5] = qnan32()
        cases.append(_case(name, x, W, b, dY, "a NaN meets +0 terms: +0 * NaN is NaN"))
    return cases
