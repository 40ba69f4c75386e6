"""PyTorch-tier classifier cases: crnn-v0's Linear 128 -> 37 on real inputs.

For two real lines (crnn_conformance.generators.pytorch_ref.LAYER_LINES): x is the top LSTM output of the
whole-model fp32 run, dY the real gradient of the logits (CTC, scale 1/B with B = 4). The
layer is rerun alone (F.linear) in fp32 and float64 on the same fp32 inputs.
Expected (pytorch tier): y, dx, dW, db; Floor = max |fp32 - float64| per tensor.
"""
from __future__ import annotations

import numpy as np

from crnn_conformance.generators import pytorch_ref as R
from crnn_conformance.generators.h5io import Case

NAME = "pytorch_linear"
LAYER = "linear"
SEED = R.BATCH_SEED
EXTRA_ATTRS: dict | None = None


def build() -> list[Case]:
    global EXTRA_ATTRS
    EXTRA_ATTRS = R.provenance()
    d = R.batch_data()
    params = d["params"]
    W, b = params["fc.W"], params["fc.b"]
    cases = []
    with R.deterministic():
        for line in R.LAYER_LINES:
            t32, t64 = d["fp32"]["traces"][line], d["f64"]["traces"][line]
            x = np.ascontiguousarray(t32["lstm_out"][-1], np.float32)
            dY = np.ascontiguousarray(t32["dlogits"], np.float32)
            e32 = R.linear_layer(x, W, b, dY, "fp32")
            e64 = R.linear_layer(x.astype(np.float64), W.astype(np.float64), b.astype(np.float64),
                                 dY.astype(np.float64), "f64")
            fl = R.floors(e32, e64)
            fl["inputs/x"] = R.floor(x, t64["lstm_out"][-1])
            fl["inputs/dY"] = R.floor(dY, t64["dlogits"])
            T, I = x.shape
            cases.append(Case(f"classifier_line{line}_T{T}",
                              {"T": T, "I": I, "O": int(W.shape[0]), "line": line,
                               "tier": "pytorch", "note": "trained crnn-v0 classifier, real input"},
                              {"x": x, "W": W, "b": b, "dY": dY}, {"pytorch": e32}, fl))
    return cases
