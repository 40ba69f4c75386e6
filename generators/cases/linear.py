"""Linear-layer fixture cases on random weights, shapes with and without 16-tails."""
from __future__ import annotations

import itertools

import numpy as np

from .. import draw
from ..float64 import linear as ref
from ..h5io import Case
from ..spec import linear as spec

NAME = "linear"
LAYER = "linear"
SEED = 2024


def build() -> list[Case]:
    rng = draw.rng(SEED)
    cases = []
    for T, I, O in itertools.product((16, 25), (128, 37), (37, 48)):
        bound = 1.0 / np.sqrt(I)
        x = rng.uniform(-1, 1, (T, I)).astype(np.float32)
        W = rng.uniform(-bound, bound, (O, I)).astype(np.float32)
        b = rng.uniform(-bound, bound, O).astype(np.float32)
        dY = rng.uniform(-1, 1, (T, O)).astype(np.float32)
        y = spec.forward(x, W, b)
        dx, dW, db = spec.backward(x, W, dY)
        y64 = ref.forward(x, W, b)
        dx64, dW64, db64 = ref.backward(x, W, dY)
        cases.append(Case(f"T{T}_I{I}_O{O}", {"T": T, "I": I, "O": O},
                          {"x": x, "W": W, "b": b, "dY": dY},
                          {"exact": {"y": y, "dx": dx, "dW": dW, "db": db},
                           "float64": {"y": y64, "dx": dx64, "dW": dW64, "db": db64}}))
    return cases
