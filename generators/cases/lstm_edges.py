"""LSTM edge cases (fixtures/lstm_edges.h5): exact tier only (docs/edge-cases.md).

  neg_zero_dW_ih_dx_T17   x < 0 and W_ih < 0 tiny (2^-80), W_hh = 0, b = 1: the gates are the
                          bias's; dOut > 0 tiny makes dz > 0 tiny, so every product of dW_ih's
                          dots over t (17 terms: a tail of one) and of dx's over 8H underflows
                          to -0 and those dots are -0
  saturated_b60           biases of ±60: gates at exactly 0 and 1, so 1 - i, 1 - f, 1 - o and
                          1 - g*g are exact zeros and dz holds zeros of both signs
  H1_T1_I1, T2_I3_H1, T1_I17_H3, T3_I5_H5   the smallest shapes: one step, one unit, tails
"""
from __future__ import annotations

import numpy as np

from .. import draw, exact
from ..edge_values import tiny

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
    return cases


def first_step_neg_zero():
    """x = 0, weights 0, biases i = -200, f = 0, g = -1, o = 1: i = sigmoid(-200) underflows to
    +0 and i*g = -0, so the first step's c = (f*cPrev) + (i*g) = +0 + -0 = +0 (and tc, h +0); a
    port that starts c from i*g alone (cPrev is zero) returns -0."""
    T, I, H = 2, 1, 2
    b = np.repeat(np.array([-200.0, 0.0, -1.0, 1.0]), H)
    return _case("first_step_neg_zero_ig", np.zeros((T, I)), np.zeros((2, 4 * H, I)),
                 np.zeros((2, 4 * H, H)), np.stack([b, b]), np.full((T, 2 * H), 0.5),
                 "i = +0, g < 0: the first step's c is +0 + -0 = +0")
