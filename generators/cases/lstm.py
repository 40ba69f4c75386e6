"""Bidirectional LSTM fixture cases at crnn-v0's sizes on random weights.

Both layers of crnn-v0 (input I = 256, then I = 128 = 2H; hidden H = 64 per direction), with
PyTorch's default init range U(-1/sqrt(H), 1/sqrt(H)) for W_ih, W_hh and b, T in {16, 25, 64}
(a multiple of 16 and two with 16-tails: the dots over t have tails too). x and dOut are
U(-1, 1). The 'saturated' case scales x by 8: the gate pre-activations then have a standard
deviation of about 5, so most gates sit in the flat parts of sigmoid and tanh.

Tiers: exact (the spec, generators/spec/lstm.py) and float64 (generators/float64/lstm.py,
exact sigmoid and tanh: its allowance covers the approximations' error too).
"""
from __future__ import annotations

import numpy as np

from .. import draw
from ..float64 import lstm as ref
from ..h5io import Case
from ..spec import lstm as spec

NAME = "lstm"
LAYER = "lstm"
SEED = 4004
H = 64
TENSORS = ("out", "gates", "c", "tc", "hPrev", "dW_ih", "dW_hh", "db", "dx")


def make_inputs(rng, T: int, I: int, H: int, x_scale: float = 1.0) -> dict:
    bound = 1.0 / np.sqrt(H)
    u = lambda lo, hi, shape: rng.uniform(lo, hi, shape).astype(np.float32)
    return {"x": (u(-1, 1, (T, I)) * np.float32(x_scale)).astype(np.float32),
            "W_ih": u(-bound, bound, (2, 4 * H, I)),
            "W_hh": u(-bound, bound, (2, 4 * H, H)),
            "b": u(-bound, bound, (2, 4 * H)),
            "dOut": u(-1, 1, (T, 2 * H))}


def expected(inputs: dict) -> dict:
    args = [inputs[k] for k in ("x", "W_ih", "W_hh", "b")]
    s = spec.forward(*args)
    s.update(spec.backward(args[0], args[1], args[2], s, inputs["dOut"]))
    r = ref.forward(*args)
    r.update(ref.backward(args[0], args[1], args[2], r, inputs["dOut"]))
    return {"exact": {k: s[k] for k in TENSORS}, "float64": {k: r[k] for k in TENSORS}}


def build() -> list[Case]:
    rng = draw.rng(SEED)
    cases = []
    for layer, I in ((1, 256), (2, 2 * H)):
        for T in (16, 25, 64):
            inputs = make_inputs(rng, T, I, H)
            cases.append(Case(f"layer{layer}_T{T}", {"T": T, "I": I, "H": H, "layer": layer},
                              inputs, expected(inputs)))
    inputs = make_inputs(rng, 25, 256, H, x_scale=8.0)
    cases.append(Case("layer1_T25_saturated", {"T": 25, "I": 256, "H": H, "layer": 1,
                                               "x_scale": 8.0}, inputs, expected(inputs)))
    return cases
