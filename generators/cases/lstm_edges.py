"""LSTM edge cases (fixtures/lstm_edges.h5): exact tier only (docs/edge-cases.md).

  neg_zero_dW_ih_dx_T17   x < 0 and W_ih < 0 tiny (2^-80), W_hh = 0, b = 1: the gates are the
                          bias's; dOut > 0 tiny makes dz > 0 tiny, so every product of dW_ih's
                          dots over t (17 terms: a tail of one) and of dx's over 8H underflows
                          to -0 and those dots are -0
  saturated_b60           biases of ±60: gates at exactly 0 and 1, so 1 - i, 1 - f, 1 - o and
                          1 - g*g are exact zeros and dz holds zeros of both signs
  H1_T1_I1, T2_I3_H1, T1_I17_H3, T3_I5_H5   the smallest shapes: one step, one unit, tails
  first_step_neg_zero_ig  i = +0 and g < 0 at the first step: c = +0 + -0 = +0
  nan_W_ih_zero_x_T6      x >= 0 with 40 % of it +0, as after a ReLU and pool; one NaN in
                          W_ih per direction, in a column x holds +0 at the first two steps
                          each direction visits: +0 * NaN is NaN, a term of every dot, so the
                          direction is NaN from its first step. A port that leaves out x's +0
                          terms without checking that W_ih is finite is finite there.
"""
from __future__ import annotations

import numpy as np

from .. import draw, exact
from ..edge_values import qnan32, tiny

NAME = "lstm_edges"
LAYER = "lstm"
SEED = 4006
F32 = np.float32


def _case(name, x, W_ih, W_hh, b, dOut, note):
    inputs = {k: np.ascontiguousarray(v, F32) for k, v in
              (("x", x), ("W_ih", W_ih), ("W_hh", W_hh), ("b", b), ("dOut", dOut))}
    T, I = inputs["x"].shape
    H = inputs["W_hh"].shape[2]
    c = exact.case(LAYER, name, {"T": T, "I": I, "H": H, "note": note}, inputs)
    c.params["negative_zero"] = {k: int(np.sum((v == 0) & np.signbit(v)))
                                 for k, v in c.expected["exact"].items()}
    return c


def random_layer(rng, T, I, H, b_scale=None):
    u = lambda shape, s=1.0: (rng.uniform(-1, 1, shape) * s).astype(F32)
    bound = 1.0 / np.sqrt(H)
    return (u((T, I)), u((2, 4 * H, I), bound), u((2, 4 * H, H), bound),
            u((2, 4 * H), b_scale or bound), u((T, 2 * H)))


def build():
    rng = draw.rng(SEED)
    T, I, H = 17, 16, 4
    cases = [_case("neg_zero_dW_ih_dx_T17", tiny(rng, T * I, -80, -1.0).reshape(T, I),
                   tiny(rng, 2 * 4 * H * I, -80, -1.0).reshape(2, 4 * H, I),
                   np.zeros((2, 4 * H, H)), np.ones((2, 4 * H)), tiny(rng, T * 2 * H).reshape(T, 2 * H),
                   "dW_ih and dx dots of underflowing negative products: -0")]
    x, W_ih, W_hh, _, dOut = random_layer(rng, 9, 7, 3)
    b = (rng.choice([-60.0, 60.0], (2, 12))).astype(F32)
    cases.append(_case("saturated_b60", x, W_ih, W_hh, b, dOut, "gates exactly 0 or 1"))
    for T, I, H in ((1, 1, 1), (2, 3, 1), (1, 17, 3), (3, 5, 5)):
        cases.append(_case(f"T{T}_I{I}_H{H}", *random_layer(rng, T, I, H), "small shapes"))
    cases.append(first_step_neg_zero())
    cases.append(nan_meets_zeros(draw.rng(SEED + 1)))
    return cases


def nan_meets_zeros(rng):
    """One NaN weight per direction where x is +0 at the steps the direction visits first."""
    T, I, H = 6, 20, 3
    x, W_ih, W_hh, b, dOut = random_layer(rng, T, I, H)
    x = np.abs(x)
    x[rng.random((T, I)) < 0.4] = 0.0
    x[[0, 1, T - 2, T - 1], 4] = 0.0
    W_ih[0, H + 1, 4] = qnan32()            # forward: a row of f
    W_ih[1, 2 * H + 2, 4] = qnan32()        # reverse: a row of g
    return _case("nan_W_ih_zero_x_T6", x, W_ih, W_hh, b, dOut,
                 "a NaN in W_ih meets +0 in x: +0 * NaN is NaN from the first step")


def first_step_neg_zero():
    """x = 0, weights 0, biases i = -200, f = 0, g = -1, o = 1: i = sigmoid(-200) underflows to
    +0 and i*g = -0, so the first step's c = (f*cPrev) + (i*g) = +0 + -0 = +0 (and tc, h +0); a
    port that starts c from i*g alone (cPrev is zero) returns -0."""
    T, I, H = 2, 1, 2
    b = np.repeat(np.array([-200.0, 0.0, -1.0, 1.0]), H)
    return _case("first_step_neg_zero_ig", np.zeros((T, I)), np.zeros((2, 4 * H, I)),
                 np.zeros((2, 4 * H, H)), np.stack([b, b]), np.full((T, 2 * H), 0.5),
                 "i = +0, g < 0: the first step's c is +0 + -0 = +0")
